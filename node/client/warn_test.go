package client_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/node/client"
)

// A token sent over plain http:// to a node that is not on loopback is
// logged as a warning, once per node address, through the Logger the
// config gives; never the token itself. (The other host is a member the
// list names: the test sends it nothing.)
func TestPlainTokenWarning(t *testing.T) {
	tc := newCluster(t, "a")
	const far = "192.0.2.7:8080" // TEST-NET-1: never dialled here
	tc.setMemberList([]client.Member{{Name: "a", HTTPAddr: tc.nodes[0].addr, State: "alive"}, {Name: "z", HTTPAddr: far, State: "alive"}})
	var logs bytes.Buffer
	c := newClient(t, tc, func(cfg *client.Config) {
		cfg.AdminToken = "admin-secret"
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		cfg.RefreshInterval = time.Hour
	})
	if err := c.Refresh(testCtx(t)); err != nil { // asks node a again: no second warning
		t.Fatal(err)
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 1 || !strings.Contains(out, "node="+far) || !strings.Contains(out, "admin token") {
		t.Fatalf("%d warnings, want one naming the admin token and %s (not the loopback node):\n%s", n, far, out)
	}
	if strings.Contains(out, "admin-secret") {
		t.Fatalf("the token is in the log:\n%s", out)
	}

	// Without a token, nothing to warn of.
	logs.Reset()
	c2, err := client.New(client.Config{Nodes: []string{tc.nodes[0].addr}, Logger: slog.New(slog.NewTextHandler(&logs, nil)), Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c2.Close()
	if logs.Len() != 0 {
		t.Errorf("no token: %s", logs.String())
	}
}

// An Admin warns of its token sent over plain http:// off loopback.
func TestAdminPlainTokenWarning(t *testing.T) {
	for _, tt := range []struct {
		addr, token string
		warn        bool
	}{
		{"http://192.0.2.7:8080", "admin-secret", true},
		{"192.0.2.7:8080", "admin-secret", true},
		{"https://192.0.2.7:8080", "admin-secret", false},
		{"http://127.0.0.1:8080", "admin-secret", false},
		{"http://localhost:8080", "admin-secret", false},
		{"http://[::1]:8080", "admin-secret", false},
		{"http://192.0.2.7:8080", "", false},
	} {
		var logs bytes.Buffer
		if _, err := client.NewAdmin(client.AdminConfig{Addr: tt.addr, Token: tt.token, Logger: slog.New(slog.NewTextHandler(&logs, nil))}); err != nil {
			t.Fatal(err)
		}
		out := logs.String()
		if got := strings.Contains(out, "level=WARN"); got != tt.warn || strings.Contains(out, "admin-secret") {
			t.Errorf("%s, token %q: warned %v, want %v (never the token):\n%s", tt.addr, tt.token, got, tt.warn, out)
		}
	}
}
