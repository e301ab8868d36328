package rules

import (
	"errors"
	"net"
	"testing"
)

// Gateways route on the normalized path (nginx locations, Traefik
// PathPrefix) but forward the raw request URI (nginx $request_uri,
// Traefik X-Forwarded-Uri). A rule's path_prefix and the path key source
// must see the same path the gateway routed on, or /%61pi/ escapes a limit
// on /api/, and //api/items gets a counter of its own.
func TestMatchAuthNormalizesPath(t *testing.T) {
	s := mustParse(t, matchFile)
	remote := net.ParseIP("192.0.2.9")
	const want = "per-ip-api=198.51.100.7 q=u|/api/items"
	for _, uri := range []string{
		"/api/items?user=u",
		"/%61pi/items?user=u",
		"//api/items?user=u",
		"/api//items?user=u",
		"/x/../api/items?user=u",
		"/./api/items?user=u",
	} {
		req := authReq("GET", "/v1/auth", "X-Original-URI", uri, "X-Real-IP", "198.51.100.7")
		if got := matches(s.MatchAuth(&req.Header, remote, nil)); got != want {
			t.Errorf("X-Original-URI %s: MatchAuth = %q, want %q", uri, got, want)
		}
	}
}

// sliding_log keeps one Store entry per admitted hit (a sorted-set member
// in Redis, written by one script per check): a limit in the billions
// parses as a valid policy but lets one check with hits in the billions
// block Redis. Such limits are refused.
func TestSlidingLogLimitBounded(t *testing.T) {
	for _, tt := range []struct{ file, field string }{
		{rule("algorithm: sliding_log", "limit: 1000000000", "period: 1h"), "limit"},
		{rule("algorithm: sliding_log", "limit: 10", "period: 1h", "overrides: [{key: 'a*', limit: 1000000000}]"), "overrides[0].limit"},
	} {
		_, err := Parse([]byte(tt.file))
		var e *Error
		if !errors.As(err, &e) || e.Field != tt.field {
			t.Errorf("Parse(%q) = %v, want an error on %s", tt.file, err, tt.field)
		}
	}
	if _, err := Parse([]byte(rule("algorithm: sliding_log", "limit: 10000", "period: 1h"))); err != nil {
		t.Errorf("limit 10000: %v", err)
	}
	// Leased algorithms keep counters, not entries: big limits are fine.
	if _, err := Parse([]byte(rule("algorithm: fixed_window", "limit: 1000000000", "period: 1h"))); err != nil {
		t.Errorf("fixed_window limit 1e9: %v", err)
	}
}

// A path_prefix is compared with the normalized path, so it is normalized
// the same way: "/a%20b/" still matches requests for /a%20b/x.
func TestPathPrefixNormalized(t *testing.T) {
	s := mustParse(t, "rules:\n  - {name: sp, algorithm: gcra, limit: 1, period: 1s, key: ip, match: {path_prefix: /a%20b//}}\n")
	req := authReq("GET", "/v1/auth", "X-Original-URI", "/a%20b/x", "X-Real-IP", "198.51.100.7")
	if got := matches(s.MatchAuth(&req.Header, net.ParseIP("192.0.2.9"), nil)); got != "sp=198.51.100.7" {
		t.Fatalf("MatchAuth = %q, want %q", got, "sp=198.51.100.7")
	}
}

// "api.example.com." is the same host as "api.example.com" (a fully
// qualified name; nginx strips the dot before choosing a server): it must
// not escape a host match or get a counter of its own.
func TestMatchAuthHostTrailingDot(t *testing.T) {
	s := mustParse(t, matchFile)
	req := authReq("GET", "/v1/auth", "X-Forwarded-Host", "API.example.com.:443")
	if got := matches(s.MatchAuth(&req.Header, net.ParseIP("192.0.2.9"), nil)); got != "host-only=api.example.com" {
		t.Fatalf("MatchAuth = %q, want %q", got, "host-only=api.example.com")
	}
}
