package node

import (
	"encoding/json"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
)

// adminPaths are the admin endpoints: each must answer 401/403 to a
// request without the admin token from a non-loopback peer. Add every new
// admin endpoint here.
var adminPaths = []string{"/v1/members", "/v1/hotkeys", "/v1/rules", "/v1/rules/per-key", "/v1/stats"}

// openPaths are never guarded.
var openPaths = []struct{ method, path, body string }{
	{"GET", "/healthz", ""},
	{"GET", "/readyz", ""},
	{"POST", "/v1/check", `{"rule":"per-key","key":"a"}`},
	{"GET", "/v1/check?rule=per-key&key=a", ""},
	{"POST", "/v1/checks", `{"checks":[{"rule":"per-key","key":"a"}]}`},
	{"GET", "/v1/auth", ""},
	// The dashboard's static files hold no data, and a browser cannot
	// send a bearer token when it opens a page: the page asks for the
	// token and sends it to the admin endpoints above.
	{"GET", "/ui/", ""},
	{"GET", "/ui/app.js", ""},
}

// guardNode is a single node with testRules, called through its handler
// only.
func guardNode(t *testing.T, cfg Config) *Node {
	t.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	mgr := lease.NewManager(store, lease.DefaultConfig())
	t.Cleanup(func() { mgr.Close(); store.Close() })
	n := New(cfg, mgr)
	n.SetRules(mustParse(t, testRules))
	return n
}

// serveGuard runs one request through n's handler from peer ip with an
// optional Authorization header; it returns the status and the JSON
// error's field ("" when none).
func serveGuard(t *testing.T, n *Node, method, path, body, ip, auth string) (int, string, *fasthttp.RequestCtx) {
	t.Helper()
	ctx := newCtx(method, path, body, ip)
	if auth != "" {
		ctx.Request.Header.Set("Authorization", auth)
	}
	n.Handler()(ctx)
	var e struct{ Error, Field string }
	if ctx.Response.StatusCode() >= 400 {
		if err := json.Unmarshal(ctx.Response.Body(), &e); err != nil || e.Error == "" {
			t.Errorf("%s %s: status %d with body %q, want a JSON error", method, path, ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	return ctx.Response.StatusCode(), e.Field, ctx
}

// TestAdminGuard: admin endpoints answer 403 to a non-loopback peer when
// no token is configured, 401 without (or with a wrong) token when one
// is (403 with a wrong one), and 200 with it; checks, /healthz and /readyz stay open.
func TestAdminGuard(t *testing.T) {
	open := guardNode(t, Config{})
	guarded := guardNode(t, Config{AdminToken: "s3cret"})
	const remote, local = "203.0.113.7", "127.0.0.1"
	for _, p := range adminPaths {
		cases := []struct {
			n          *Node
			ip, auth   string
			want       int
			wantHeader bool // WWW-Authenticate
		}{
			{open, remote, "", 403, false},
			{open, remote, "Bearer anything", 403, false},
			{open, "::1", "", 200, false},
			{open, local, "", 200, false},
			{open, "127.8.9.10", "", 200, false}, // all of 127/8 is loopback
			{guarded, remote, "", 401, true},
			{guarded, remote, "Bearer s3cre", 403, false},
			{guarded, remote, "Bearer s3cret2", 403, false},
			{guarded, remote, "bearer s3cret", 403, false},
			{guarded, local, "", 401, true}, // a token binds loopback too
			{guarded, remote, "Bearer s3cret", 200, false},
			{guarded, local, "Bearer s3cret", 200, false},
		}
		for _, c := range cases {
			got, _, ctx := serveGuard(t, c.n, "GET", p, "", c.ip, c.auth)
			hasHdr := len(ctx.Response.Header.Peek("WWW-Authenticate")) > 0
			if got != c.want || hasHdr != c.wantHeader {
				t.Errorf("GET %s from %s auth %q (token %v): %d WWW-Authenticate %v, want %d %v",
					p, c.ip, c.auth, c.n == guarded, got, hasHdr, c.want, c.wantHeader)
			}
		}
	}
	for _, o := range openPaths {
		for _, n := range []*Node{open, guarded} {
			if got, _, _ := serveGuard(t, n, o.method, o.path, o.body, remote, ""); got == 401 || got == 403 {
				t.Errorf("%s %s from a remote peer: %d, want it open", o.method, o.path, got)
			}
		}
	}
}

// TestMetricsToken: /metrics is open without a metrics token (even with
// an admin token) and needs its own bearer token when one is set.
func TestMetricsToken(t *testing.T) {
	plain := guardNode(t, Config{AdminToken: "admin"})
	if got, _, _ := serveGuard(t, plain, "GET", "/metrics", "", "203.0.113.7", ""); got != 200 {
		t.Errorf("/metrics without a metrics token: %d, want 200", got)
	}
	tok := guardNode(t, Config{AdminToken: "admin", MetricsToken: "scrape"})
	for _, c := range []struct {
		ip, auth string
		want     int
	}{
		{"203.0.113.7", "", 401},
		{"127.0.0.1", "", 401},
		{"203.0.113.7", "Bearer admin", 403}, // the admin token is not the metrics token
		{"203.0.113.7", "Bearer scrape", 200},
	} {
		if got, _, _ := serveGuard(t, tok, "GET", "/metrics", "", c.ip, c.auth); got != c.want {
			t.Errorf("/metrics from %s auth %q: %d, want %d", c.ip, c.auth, got, c.want)
		}
	}
}

// TestAdminAllowed is the guard's decision alone.
func TestAdminAllowed(t *testing.T) {
	cases := []struct {
		token, auth, ip string
		want            bool
	}{
		{"", "", "127.0.0.1", true},
		{"", "", "::1", true},
		{"", "", "10.1.2.3", false},
		{"", "", "::ffff:10.1.2.3", false},
		{"", "", "::ffff:127.0.0.1", true},
		{"s3cret", "", "127.0.0.1", false},
		{"s3cret", "Bearer s3cret", "10.1.2.3", true},
		{"s3cret", "Bearer s3cre", "10.1.2.3", false},
		{"s3cret", "Basic s3cret", "127.0.0.1", false},
		{"s3cret", "Bearer ", "127.0.0.1", false},
	}
	for _, c := range cases {
		n := New(Config{AdminToken: c.token}, nil)
		ctx := newCtx("GET", "/v1/rules", "", c.ip)
		if c.auth != "" {
			ctx.Request.Header.Set("Authorization", c.auth)
		}
		if got := n.adminAllowed(ctx); got != c.want {
			t.Errorf("token %q auth %q ip %s: %v, want %v", c.token, c.auth, c.ip, got, c.want)
		}
	}
}
