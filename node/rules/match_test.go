package rules

import (
	"encoding/base64"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/api"
)

const matchFile = `
rules:
  - {name: per-key, algorithm: token_bucket, limit: 5, period: 10s, key: header:X-API-Key}
  - {name: per-ip-api, algorithm: gcra, limit: 20, period: 1s, key: ip, match: {path_prefix: /api/}}
  - {name: login, algorithm: sliding_log, limit: 3, period: 1m, key: ip, match: {path_prefix: /login, methods: [POST]}}
  - {name: host-only, algorithm: gcra, limit: 1, period: 1s, key: host, match: {host: "*.example.com"}}
  - {name: tenant, algorithm: fixed_window, limit: 9, period: 1m, key: "jwt:tenant"}
  - {name: q, algorithm: fixed_window, limit: 9, period: 1m, key: "query:user, path"}
  - {name: explicit, algorithm: concurrency, limit: 2, period: 30s}
`

func mustParse(t testing.TB, f string) *Set {
	t.Helper()
	s, err := Parse([]byte(f))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// matches renders matches as "rule=key" pairs in order.
// applied drops the rules skipped for a missing key from ms.
func applied(ms []Match) []Match {
	var out []Match
	for _, m := range ms {
		if !m.KeyMissing || m.Missing != MissingSkip {
			out = append(out, m)
		}
	}
	return out
}

// matches renders ms as "rule=key ..."; a rule skipped for a missing key
// is left out, one that denies for it is "rule=!deny".
func matches(ms []Match) string {
	var parts []string
	for _, m := range ms {
		switch {
		case m.KeyMissing && m.Missing == MissingSkip:
		case m.KeyMissing && m.Missing == MissingDeny:
			parts = append(parts, m.Rule.Name+"=!deny")
		default:
			parts = append(parts, m.Rule.Name+"="+m.Key)
		}
	}
	return strings.Join(parts, " ")
}

func authReq(method, uri string, headers ...string) *fasthttp.Request {
	req := &fasthttp.Request{}
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	req.Header.SetHost("sluice:8080")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	return req
}

func jwt(payload string) string {
	enc := base64.RawURLEncoding
	return "Bearer " + enc.EncodeToString([]byte(`{"alg":"HS256"}`)) + "." + enc.EncodeToString([]byte(payload)) + ".c2ln"
}

func TestMatchAuthGateways(t *testing.T) {
	s := mustParse(t, matchFile)
	remote := net.ParseIP("192.0.2.9")
	tests := []struct {
		name string
		req  *fasthttp.Request
		want string
	}{
		{"nginx auth_request", authReq("GET", "/v1/auth",
			"X-Original-URI", "/login?next=/home", "X-Original-Method", "POST",
			"X-Real-IP", "198.51.100.7", "X-API-Key", "k1"),
			"per-key=k1 login=198.51.100.7"},
		{"nginx wrong method skips login", authReq("GET", "/v1/auth",
			"X-Original-URI", "/login", "X-Original-Method", "GET", "X-Real-IP", "198.51.100.7"),
			""},
		{"traefik forwardAuth", authReq("GET", "/v1/auth",
			"X-Forwarded-Method", "POST", "X-Forwarded-Proto", "https", "X-Forwarded-Host", "api.example.com",
			"X-Forwarded-Uri", "/api/items?user=u1", "X-Forwarded-For", "203.0.113.5, 10.0.0.1", "X-API-Key", "k2"),
			"per-key=k2 per-ip-api=203.0.113.5 host-only=api.example.com q=u1|/api/items"},
		{"envoy ext_authz (path appended)", authReq("POST", "/v1/auth/api/items?user=u2",
			"X-Forwarded-For", "2001:db8::1", "X-Api-Key", "k3"),
			"per-key=k3 per-ip-api=2001:db8::1 q=u2|/api/items"},
		{"envoy host header", authReq("GET", "/v1/auth/x", "Host", "WWW.Example.COM:443"),
			"host-only=www.example.com"},
		{"caddy forward_auth", authReq("GET", "/v1/auth",
			"X-Forwarded-Method", "POST", "X-Forwarded-Uri", "/login", "X-Forwarded-Host", "shop.example.com",
			"X-Forwarded-For", "198.51.100.20"),
			"login=198.51.100.20 host-only=shop.example.com"},
		{"remote address fallback", authReq("GET", "/v1/auth/api/", "X-API-Key", ""),
			"per-ip-api=192.0.2.9"},
		{"jwt claim", authReq("GET", "/v1/auth", "Authorization", jwt(`{"sub":"u","tenant":"acme"}`)),
			"tenant=acme"},
		{"jwt numeric claim", authReq("GET", "/v1/auth", "Authorization", jwt(`{"tenant":42}`)),
			"tenant=42"},
		{"jwt garbage", authReq("GET", "/v1/auth", "Authorization", "Bearer abc.!!!.def"), ""},
		{"jwt object claim", authReq("GET", "/v1/auth", "Authorization", jwt(`{"tenant":{"a":1}}`)), ""},
		{"not bearer", authReq("GET", "/v1/auth", "Authorization", "Basic dTpw"), ""},
		{"absolute forwarded uri", authReq("GET", "/v1/auth", "X-Forwarded-Uri", "https://h/api/v?user=z", "X-Real-IP", "1.1.1.1"),
			"per-ip-api=1.1.1.1 q=z|/api/v"},
		{"percent-encoded query", authReq("GET", "/v1/auth", "X-Original-URI", "/x?user=a%20b"),
			"q=a b|/x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := matches(s.MatchAuth(&tt.req.Header, remote, nil))
			if got != tt.want {
				t.Fatalf("MatchAuth = %q\nwant        %q", got, tt.want)
			}
		})
	}
}

func TestMatchAuthLongKey(t *testing.T) {
	s := mustParse(t, matchFile)
	long := strings.Repeat("k", 1000)
	a := applied(s.MatchAuth(&authReq("GET", "/v1/auth", "X-API-Key", long).Header, nil, nil))
	b := applied(s.MatchAuth(&authReq("GET", "/v1/auth", "X-API-Key", long[:999]+"j").Header, nil, nil))
	if len(a) != 1 || len(b) != 1 {
		t.Fatalf("matches %v %v", a, b)
	}
	if len(a[0].Key) != api.MaxKeyLen || a[0].Key == b[0].Key || !strings.HasPrefix(a[0].Key, long[:211]+api.LongKeyMark) {
		t.Fatalf("long keys: %q %q", a[0].Key, b[0].Key)
	}
}

func TestMatchDescriptors(t *testing.T) {
	s := mustParse(t, `
rules:
  - {name: by-key, algorithm: gcra, limit: 1, period: 1s, key: header:X-API-Key}
  - {name: key-path, algorithm: gcra, limit: 1, period: 1s, key: "header:X-API-Key, path", match: {path_prefix: /api}}
  - {name: by-ip, algorithm: gcra, limit: 1, period: 1s, key: ip, match: {methods: [POST], host: "*.example.com"}}
  - {name: named, algorithm: gcra, limit: 1, period: 1s, descriptor: "tenant,user"}
  - {name: weird-claim, algorithm: gcra, limit: 1, period: 1s, key: "jwt:https://x/t"}
  - {name: explicit, algorithm: gcra, limit: 1, period: 1s}
`)
	d := func(kv ...string) []api.Descriptor {
		var ds []api.Descriptor
		for i := 0; i+1 < len(kv); i += 2 {
			ds = append(ds, api.Descriptor{Name: kv[i], Value: kv[i+1]})
		}
		return ds
	}
	tests := []struct {
		name string
		d    []api.Descriptor
		want string
	}{
		{"one", d("x-api-key", "k1"), "by-key=k1"},
		{"key and path", d("path", "/api/a", "x-api-key", "k1"), "by-key=k1 key-path=k1|/api/a"},
		{"path outside prefix", d("x-api-key", "k1", "path", "/other"), "by-key=k1"},
		{"file order regardless of request order", d("ip", "1.2.3.4", "user", "u", "x-api-key", "k", "tenant", "t"), "by-key=k by-ip=1.2.3.4 named=t|u"},
		{"method mismatch", d("ip", "1.2.3.4", "method", "GET"), ""},
		{"method and host match", d("ip", "1.2.3.4", "method", "post", "host", "API.example.com"), "by-ip=1.2.3.4"},
		{"host mismatch", d("ip", "1.2.3.4", "host", "example.org"), ""},
		{"partial names", d("tenant", "t"), ""},
		{"empty value", d("x-api-key", ""), ""},
		{"none", nil, ""},
	}
	for _, tt := range tests {
		if got := matches(s.MatchDescriptors(tt.d, nil)); got != tt.want {
			t.Errorf("%s: MatchDescriptors = %q, want %q", tt.name, got, tt.want)
		}
	}
	var nilSet *Set
	if got := nilSet.MatchDescriptors(d("ip", "x"), nil); len(got) != 0 {
		t.Errorf("nil set matched %v", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = s.MatchDescriptors(d("x-api-key", "k1")[:1], make([]Match, 0, 4)) }); n > 2 {
		t.Errorf("single-descriptor match allocates %v times", n)
	}
}

func Example() {
	set, err := Parse([]byte(`
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 100
    period: 1m
    key: header:X-API-Key
    overrides:
      - {key: "ent-*", limit: 10000}
`))
	if err != nil {
		panic(err)
	}
	// Forward-auth: the gateway passes the original request's headers.
	var req fasthttp.Request
	req.SetRequestURI("/v1/auth")
	req.Header.Set("X-API-Key", "ent-acme")
	for _, m := range set.MatchAuth(&req.Header, nil, nil) {
		if m.KeyMissing {
			continue // on_missing_key: see the package doc
		}
		p := m.Rule.PolicyFor(m.Key)
		fmt.Println(m.Rule.Name, m.Key, p.Limit, p.Period)
	}
	// Descriptor check: the name defaults to the lower-cased header name.
	for _, m := range set.MatchDescriptors([]api.Descriptor{{Name: "x-api-key", Value: "k1"}}, nil) {
		fmt.Println(m.Rule.Name, m.Key, m.Rule.PolicyFor(m.Key).Limit)
	}
	// Invalid rules name the rule and the field.
	_, err = Parse([]byte("rules:\n  - {name: login, algorithm: sliding_log, limit: 3, period: 1m, burst: 5}\n"))
	fmt.Println(err)
	// Output:
	// per-key ent-acme 10000 1m0s
	// per-key k1 100
	// rule "login": burst: only token_bucket and gcra have a burst; sliding_log would ignore it (line 2)
}

func BenchmarkMatchAuth(b *testing.B) {
	s := mustParse(b, matchFile)
	req := authReq("GET", "/v1/auth", "X-Forwarded-Uri", "/api/items?user=u1", "X-Forwarded-For", "203.0.113.5",
		"X-API-Key", "k2", "X-Forwarded-Host", "api.example.com")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]Match, 0, 8)
		for pb.Next() {
			dst = s.MatchAuth(&req.Header, nil, dst[:0])
		}
	})
}

func BenchmarkMatchDescriptors(b *testing.B) {
	s := mustParse(b, matchFile)
	d := []api.Descriptor{{Name: "x-api-key", Value: "k1"}, {Name: "path", Value: "/api/x"}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]Match, 0, 8)
		for pb.Next() {
			dst = s.MatchDescriptors(d, dst[:0])
		}
	})
}

func BenchmarkPolicyFor(b *testing.B) {
	s := mustParse(b, fullFile)
	r := s.Get("per-key")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = r.PolicyFor("user-12345")
		}
	})
}

// TestConcurrentUse runs matching from several goroutines on one Set; run
// with -race.
func TestConcurrentUse(t *testing.T) {
	s := mustParse(t, matchFile)
	done := make(chan string, 4)
	for g := range 4 {
		go func() {
			var dst []Match
			got := ""
			for i := range 200 {
				req := authReq("GET", "/v1/auth/api/x?user=u", "X-API-Key", fmt.Sprint("k", g, i),
					"Authorization", jwt(`{"tenant":"t"}`))
				dst = s.MatchAuth(&req.Header, net.IPv4(10, 0, 0, byte(g)), dst[:0])
				dst = s.MatchDescriptors([]api.Descriptor{{Name: "ip", Value: "1.2.3.4"}}, dst)
				got = matches(dst)
			}
			done <- got
		}()
	}
	for g := range 4 {
		got := <-done
		if !strings.Contains(got, "per-ip-api=10.0.0.") || !strings.Contains(got, "tenant=t") || !strings.Contains(got, "q=u|/api/x") {
			t.Errorf("goroutine %d: %s", g, got)
		}
	}
}

func TestSourceString(t *testing.T) {
	for _, s := range []string{"header:X-API-Key", "ip", "query:q", "jwt:sub", "path", "method", "host"} {
		src, msg := parseSource(s)
		if msg != "" || src.String() != s {
			t.Errorf("parseSource(%q) = %v, %q", s, src, msg)
		}
	}
	if got := (Source{}).String(); got != "source(0)" {
		t.Errorf("zero Source = %q", got)
	}
}
