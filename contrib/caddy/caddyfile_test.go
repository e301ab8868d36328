package sluicecaddy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

func TestUnmarshalCaddyfile(t *testing.T) {
	in := `sluice {
		nodes https://10.0.0.1:8443 https://sluice.internal:8443
		tls_ca /etc/sluice/ca.pem
		token {env.SLUICE_CLIENT_TOKEN}
		rule per-key
		key {http.request.header.X-API-Key}
		on_missing_key deny
	}`
	var h Handler
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(in)); err != nil {
		t.Fatal(err)
	}
	want := Handler{
		Nodes:        []string{"https://10.0.0.1:8443", "https://sluice.internal:8443"},
		TLSCA:        "/etc/sluice/ca.pem",
		Token:        "{env.SLUICE_CLIENT_TOKEN}",
		Rule:         "per-key",
		Key:          "{http.request.header.X-API-Key}",
		OnMissingKey: "deny",
	}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %+v, want %+v", h, want)
	}
}

// TestUnmarshalCaddyfileErrors: each bad input is refused with an error
// naming what is wrong (and, from the dispenser, the line).
func TestUnmarshalCaddyfileErrors(t *testing.T) {
	const (
		nodes = "nodes http://127.0.0.1:8080\n"
		rule  = "rule per-key\n"
		key   = "key {http.request.header.X-API-Key}\n"
	)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty block", "sluice {\n}", "nodes: at least one node URL is required"},
		{"argument on the line", "sluice http://127.0.0.1:8080 {\n" + rule + key + "}", `no arguments on its line, found "http://127.0.0.1:8080"`},
		{"no nodes", "sluice {\n" + rule + key + "}", "nodes: at least one node URL is required"},
		{"nodes without a value", "sluice {\nnodes\n" + rule + key + "}", "nodes: at least one node URL is required"},
		{"node not a URL", "sluice {\nnodes 127.0.0.1:8080\n" + rule + key + "}", `nodes: "127.0.0.1:8080" is not an http:// or https:// URL`},
		{"no rule", "sluice {\n" + nodes + key + "}", `rule: "" is not a rule name`},
		{"bad rule name", "sluice {\n" + nodes + "rule per/key\n" + key + "}", `rule: "per/key" is not a rule name`},
		{"long rule name", "sluice {\n" + nodes + "rule " + strings.Repeat("r", 65) + "\n" + key + "}", "is not a rule name (1-64 bytes"},
		{"no key", "sluice {\n" + nodes + rule + "}", "key: required"},
		{"two keys", "sluice {\n" + nodes + rule + "key a b\n}", "key takes exactly one argument, found 2"},
		{"token without a value", "sluice {\n" + nodes + rule + key + "token\n}", "token takes exactly one argument, found 0"},
		{"rule twice", "sluice {\n" + nodes + rule + rule + key + "}", "rule given twice"},
		{"unknown setting", "sluice {\n" + nodes + rule + key + "limit 10\n}", `unknown setting "limit"`},
		{"bad on_missing_key", "sluice {\n" + nodes + rule + key + "on_missing_key allow\n}", `on_missing_key: "allow" is neither skip nor deny`},
		{"two schemes", "sluice {\nnodes http://127.0.0.1:8080 https://127.0.0.1:8443\n" + rule + key + "}", `"https://127.0.0.1:8443" is https://, another node is http://`},
		{"tls_ca for http://", "sluice {\n" + nodes + rule + key + "tls_ca ca.pem\n}", "tls_ca: the nodes are http://"},
		{"tls_ca without a file", "sluice {\nnodes https://127.0.0.1:8443\n" + rule + key + "tls_ca\n}", "tls_ca takes exactly one argument, found 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !strings.Contains(err.Error(), "Testfile:") {
				t.Errorf("error %q does not name the file and line", err)
			}
		})
	}
}

// TestAdaptCaddyfile adapts a whole Caddyfile: the directive is known,
// placed before respond without an order option, and its settings reach
// the JSON config with the token's placeholder left for provisioning.
func TestAdaptCaddyfile(t *testing.T) {
	in := `:8000 {
	respond "ok"

	sluice {
		nodes http://127.0.0.1:8080
		token {env.SLUICE_CLIENT_TOKEN}
		rule per-key
		key {http.request.header.X-API-Key}
	}
}
`
	out, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(in), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings: %v", warnings)
	}
	var cfg any
	if err := json.Unmarshal(out, &cfg); err != nil {
		t.Fatal(err)
	}
	// The handlers, in the order Caddy runs them (depth first).
	var order []string
	var sl map[string]any
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if name, ok := v["handler"].(string); ok {
				order = append(order, name)
				if name == "sluice" {
					sl = v
				}
			}
			for _, k := range []string{"apps", "http", "servers", "srv0", "routes", "handle"} {
				walk(v[k])
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(cfg)
	if !reflect.DeepEqual(order, []string{"sluice", "static_response"}) {
		t.Fatalf("handlers in order %v, want sluice then static_response\n%s", order, out)
	}
	if sl["token"] != "{env.SLUICE_CLIENT_TOKEN}" || sl["rule"] != "per-key" || sl["key"] != "{http.request.header.X-API-Key}" {
		t.Errorf("sluice handler %v", sl)
	}
}
