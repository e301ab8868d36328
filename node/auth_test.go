package node

import (
	"testing"
)

const authRules = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 2
    period: 1h
    key: header:X-API-Key
    match: {path_prefix: /api/}
  - name: posts-per-ip
    algorithm: fixed_window
    limit: 1
    period: 1h
    key: ip
    match: {methods: [POST]}
`

func TestForwardAuthGateways(t *testing.T) {
	tn := newTestNode(t, authRules)
	styles := []struct {
		name string
		path string // the auth request's path
		hdrs []string
	}{
		{"nginx auth_request", "/v1/auth", []string{"X-Original-URI: /api/users?page=2", "X-Original-Method: GET", "X-Real-IP: 10.0.0.1", "X-API-Key: k-nginx"}},
		{"traefik forwardAuth", "/v1/auth", []string{"X-Forwarded-Uri: /api/users", "X-Forwarded-Method: GET", "X-Forwarded-Host: example.com", "X-Forwarded-For: 10.0.0.2, 192.168.0.1", "X-API-Key: k-traefik"}},
		{"envoy ext_authz", "/v1/auth/api/users", []string{"X-Forwarded-For: 10.0.0.3", "X-API-Key: k-envoy"}},
		{"caddy forward_auth", "/v1/auth", []string{"X-Forwarded-Uri: /api/users", "X-Forwarded-Method: GET", "X-Forwarded-For: 10.0.0.4", "X-API-Key: k-caddy"}},
	}
	for _, s := range styles {
		t.Run(s.name, func(t *testing.T) {
			for i := range 2 {
				r := tn.do("GET", s.path, "", s.hdrs...)
				if r.status != 200 {
					t.Fatalf("request %d: status %d", i, r.status)
				}
				if r.body != "" {
					t.Errorf("forward-auth body %q, want none", r.body)
				}
				wantHeaders(t, r, `"api";q=2;w=3600`, "*", "2", []string{"1", "0"}[i], "*", "")
			}
			r := tn.do("GET", s.path, "", s.hdrs...)
			if r.status != 429 || r.hdr["Retry-After"] == "" || r.hdr["X-Ratelimit-Remaining"] != "0" {
				t.Errorf("3rd request: %d %v", r.status, r.hdr)
			}
		})
	}
	// A path no rule matches is allowed with no rate-limit headers.
	r := tn.do("GET", "/v1/auth", "", "X-Forwarded-Uri: /public", "X-Forwarded-Method: GET", "X-API-Key: k-traefik")
	if r.status != 200 || r.hdr["Ratelimit"] != "" {
		t.Errorf("unmatched path: %d %v", r.status, r.hdr)
	}
	// Missing source (no API key): the rule does not apply.
	if r := tn.do("GET", "/v1/auth", "", "X-Forwarded-Uri: /api/x", "X-Forwarded-Method: GET"); r.status != 200 {
		t.Errorf("no key: %d", r.status)
	}
	// Any method reaches forward-auth; the original method is matched.
	hdrs := []string{"X-Forwarded-Uri: /form", "X-Forwarded-Method: POST", "X-Forwarded-For: 1.2.3.4"}
	if r := tn.do("POST", "/v1/auth", "", hdrs...); r.status != 200 {
		t.Errorf("first POST: %d", r.status)
	}
	if r := tn.do("PUT", "/v1/auth/", "", hdrs...); r.status != 429 || r.hdr["Ratelimit-Policy"] != `"posts-per-ip";q=1;w=3600` {
		t.Errorf("second POST: %d %v", r.status, r.hdr)
	}
	if r := tn.do("GET", "/v1/auth", "", "X-Forwarded-Uri: /form", "X-Forwarded-Method: GET", "X-Forwarded-For: 1.2.3.4"); r.status != 200 {
		t.Errorf("GET from the same ip: %d", r.status)
	}
}

// TestForwardAuthIdentitiesApart: headers "X-Tenant: a|b, X-User: c" and
// "X-Tenant: a, X-User: b|c" are two identities with a counter each
// (finding 5 of issue 10: joined unescaped, they shared one).
func TestForwardAuthIdentitiesApart(t *testing.T) {
	tn := newTestNode(t, `
rules:
  - name: per-user
    algorithm: fixed_window
    limit: 1
    period: 1h
    key: header:X-Tenant,header:X-User
`)
	for i, id := range [][]string{{"X-Tenant: a|b", "X-User: c"}, {"X-Tenant: a", "X-User: b|c"}} {
		if r := tn.do("GET", "/v1/auth", "", id...); r.status != 200 {
			t.Errorf("identity %d %q: %d, want 200 (its own counter)", i, id, r.status)
		}
	}
	if r := tn.do("GET", "/v1/auth", "", "X-Tenant: a", "X-User: b|c"); r.status != 429 {
		t.Errorf("identity 1 again: %d, want 429", r.status)
	}
}
