package main

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAdminHostsOption: a tokenless sluiced refuses admin requests whose
// Host is not one of its names (DNS rebinding), accepts the names given
// with -admin-hosts or SLUICE_ADMIN_HOSTS, and refuses malformed ones.
func TestAdminHostsOption(t *testing.T) {
	d, base := startLocal(t, "-admin-hosts", "sluice.internal, admin.example")
	defer d.stop(true)
	do := func(host, origin string) int {
		t.Helper()
		req, err := http.NewRequest("PUT", base+"/v1/rules/x", strings.NewReader(`{"algorithm":"gcra","limit":1,"period":"1h"}`))
		if err != nil {
			t.Fatal(err)
		}
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, c := range []struct {
		host, origin string
		want         int
	}{
		{"rebind.attacker.example:8080", "http://rebind.attacker.example:8080", 403},
		{"", "", 200}, // the listen address, as the CLI sends it
		{"localhost:1", "", 200},
		{"sluice.internal:8080", "", 200},
		{"127.0.0.1:1", "https://admin.example", 200},
	} {
		if got := do(c.host, c.origin); got != c.want {
			t.Errorf("Host %q Origin %q: %d, want %d", c.host, c.origin, got, c.want)
		}
	}

	o, err := parseOptions(nil, env(map[string]string{"SLUICE_ADMIN_HOSTS": " a.example,,b.example "}), io.Discard)
	if err != nil || len(o.adminHosts) != 2 || o.adminHosts[0] != "a.example" || o.adminHosts[1] != "b.example" {
		t.Errorf("SLUICE_ADMIN_HOSTS: %q, %v", o.adminHosts, err)
	}
	for _, bad := range []string{"a.example:8080", "http://a.example", "[::1]"} {
		var out bytes.Buffer
		if code := run([]string{"-admin-hosts", bad}, env(nil), &out); code != 2 || !strings.Contains(out.String(), "-admin-hosts") {
			t.Errorf("-admin-hosts %q: exit %d, %q; want 2 naming -admin-hosts", bad, code, out.String())
		}
	}
}
