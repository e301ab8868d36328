package node

import (
	"strings"
	"testing"
)

const missingKeyRules = `
rules:
  - name: strict
    algorithm: token_bucket
    limit: 100
    period: 1h
    key: header:X-Tenant
    match: {path_prefix: /strict/}
    on_missing_key: deny
  - name: loose
    algorithm: token_bucket
    limit: 100
    period: 1h
    key: header:X-User
    match: {path_prefix: /loose/}
  - name: by-key-or-ip
    algorithm: fixed_window
    limit: 2
    period: 1h
    key: header:X-Key
    match: {path_prefix: /fallback/}
    on_missing_key: ip
  - name: watch
    algorithm: token_bucket
    limit: 100
    period: 1h
    key: header:X-Watch
    match: {path_prefix: /watch/}
    shadow: true
    on_missing_key: deny
`

// TestOnMissingKey: a forward-auth request without the rule's key follows
// the rule's on_missing_key (finding 5 of issue 9): skip lets it through
// and counts the skip per rule, deny answers 429 (and never charges the
// other rules), a fallback source counts it under the fallback key, and a
// shadow rule's deny is counted but never denies.
func TestOnMissingKey(t *testing.T) {
	tn := newTestNode(t, missingKeyRules)
	auth := func(path string, hdrs ...string) resp {
		t.Helper()
		return tn.do("GET", "/v1/auth", "", append([]string{"X-Forwarded-Uri: " + path, "X-Forwarded-Method: GET"}, hdrs...)...)
	}
	// deny
	r := auth("/strict/a", "X-Forwarded-For: 10.0.0.1")
	if r.status != 429 || r.hdr["Retry-After"] != "" || r.hdr["Ratelimit-Policy"] != `"strict";q=100;w=3600` || r.hdr["X-Sluice-Missing-Key"] != "header:X-Tenant" {
		t.Errorf("strict without X-Tenant: %d %v, want 429 naming the rule and its key, no Retry-After", r.status, r.hdr)
	}
	if r := auth("/strict/a", "X-Tenant: t1"); r.status != 200 {
		t.Errorf("strict with X-Tenant: %d", r.status)
	}
	// skip
	for range 3 {
		if r := auth("/loose/a"); r.status != 200 || r.hdr["Ratelimit"] != "" {
			t.Errorf("loose without X-User: %d %v, want 200 and no rule applied", r.status, r.hdr)
		}
	}
	// fallback: two per IP without X-Key; a key of its own is counted apart
	for i, want := range []int{200, 200, 429} {
		if r := auth("/fallback/a", "X-Forwarded-For: 10.0.0.7"); r.status != want {
			t.Errorf("fallback request %d from 10.0.0.7: %d, want %d", i, r.status, want)
		}
	}
	if r := auth("/fallback/a", "X-Forwarded-For: 10.0.0.8"); r.status != 200 {
		t.Errorf("fallback from another IP: %d, want 200", r.status)
	}
	if r := auth("/fallback/a", "X-Forwarded-For: 10.0.0.7", "X-Key: 10.0.0.7"); r.status != 200 {
		t.Errorf("a key equal to the fallback IP: %d, want 200 (counted apart)", r.status)
	}
	// shadow deny: allowed, counted
	if r := auth("/watch/a"); r.status != 200 {
		t.Errorf("shadow rule without its key: %d, want 200", r.status)
	}
	m := tn.do("GET", "/metrics", "").body
	for _, want := range []string{
		`sluice_checks_skipped_total{rule="loose",reason="missing_key"} 3`,
		`sluice_checks_skipped_total{rule="strict",reason="missing_key"} 0`,
		`sluice_checks_total{rule="strict",decision="denied"} 1`,
		`sluice_checks_total{rule="strict",decision="allowed"} 1`,
		`sluice_checks_total{rule="watch",decision="shadow_denied"} 1`,
		`sluice_checks_total{rule="by-key-or-ip",decision="denied"} 1`,
	} {
		if !strings.Contains(m, want+"\n") {
			t.Errorf("metrics lack %s", want)
		}
	}
}
