package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serveHost runs one admin request through n's handler from peer ip with
// Host host and Origin origin ("" for none), and returns the status and
// body.
func serveHost(t *testing.T, n *Node, method, path, body, ip, host, origin, auth string) (int, string) {
	t.Helper()
	ctx := newCtx(method, path, body, ip)
	if host != "" {
		ctx.Request.Header.SetHost(host)
	}
	if origin != "" {
		ctx.Request.Header.Set("Origin", origin)
	}
	if auth != "" {
		ctx.Request.Header.Set("Authorization", auth)
	}
	n.Handler()(ctx)
	return ctx.Response.StatusCode(), string(ctx.Response.Body())
}

const rebindRule = `{"algorithm":"token_bucket","limit":1,"period":"1h","key":"ip"}`

// TestAdminDNSRebinding: a page of rebind.attacker.example whose name is
// re-pointed at 127.0.0.1 reaches a tokenless node from its visitor's
// loopback, with its own name in Host and a matching Origin. The node
// refuses it (and writes nothing), and still admits the names it answers
// to (localhost, loopback addresses, no Host at all) and the dashboard's
// same-origin requests.
func TestAdminDNSRebinding(t *testing.T) {
	n := guardNode(t, Config{})
	const lo = "127.0.0.1"
	for _, c := range []struct {
		name, host, origin string
		want               int
		msg                string
	}{
		{"rebinding", "rebind.attacker.example:8080", "http://rebind.attacker.example:8080", 403, "Host"},
		{"rebinding, no Origin", "rebind.attacker.example:8080", "", 403, "Host"},
		{"a name that embeds a loopback address", "127.0.0.1.nip.io:8080", "", 403, "Host"},
		{"cross-origin page", "127.0.0.1:8080", "http://evil.example", 403, "Origin"},
		{"same host, other port", "localhost:8080", "http://localhost:9999", 403, "Origin"},
		{"sandboxed page", "localhost:8080", "null", 403, "Origin"},
	} {
		status, body := serveHost(t, n, "PUT", "/v1/rules/x", rebindRule, lo, c.host, c.origin, "")
		if status != c.want || !strings.Contains(body, c.msg) {
			t.Errorf("%s: %d %s, want %d naming %s", c.name, status, body, c.want, c.msg)
		}
	}
	if n.eng.Table().Set().Get("x") != nil {
		t.Fatal("a refused request installed its rule")
	}
	for i, c := range []struct{ host, origin string }{
		{"localhost:8080", ""},
		{"LOCALHOST", ""},
		{"127.0.0.1:8080", ""},
		{"127.8.9.10", ""},
		{"[::1]:8080", ""},
		{"", ""}, // HTTP/1.0
		{"127.0.0.1:8080", "http://127.0.0.1:8080"}, // the dashboard
		{"localhost:8080", "http://localhost:8080"},
	} {
		if status, body := serveHost(t, n, "GET", "/v1/rules", "", lo, c.host, c.origin, ""); status != 200 {
			t.Errorf("%d Host %q Origin %q: %d %s, want 200", i, c.host, c.origin, status, body)
		}
	}
	// With a token, the token admits a request whatever its Host (the
	// node is administered remotely by any name); a cross-origin page
	// is still refused.
	tok := guardNode(t, Config{AdminToken: "s3cret"})
	if status, body := serveHost(t, tok, "GET", "/v1/rules", "", "203.0.113.7", "sluice.example.com", "", "Bearer s3cret"); status != 200 {
		t.Errorf("with the token by another name: %d %s, want 200", status, body)
	}
	if status, body := serveHost(t, tok, "GET", "/v1/rules", "", "203.0.113.7", "sluice.example.com", "https://evil.example", "Bearer s3cret"); status != 403 {
		t.Errorf("with the token from another origin: %d %s, want 403", status, body)
	}
}

// TestAdminHosts: Config.AdminHosts adds names a tokenless node answers
// to, in Host and in Origin (a proxy's public name).
func TestAdminHosts(t *testing.T) {
	n := guardNode(t, Config{AdminHosts: []string{"Sluice.Internal", " admin.example "}})
	for _, c := range []struct {
		host, origin string
		want         int
	}{
		{"sluice.internal:8080", "", 200},
		{"SLUICE.INTERNAL", "http://sluice.internal", 200},
		{"127.0.0.1:8080", "https://admin.example", 200},
		{"other.internal", "", 403},
		{"127.0.0.1:8080", "https://other.example", 403},
	} {
		if status, body := serveHost(t, n, "GET", "/v1/rules", "", "127.0.0.1", c.host, c.origin, ""); status != c.want {
			t.Errorf("Host %q Origin %q: %d %s, want %d", c.host, c.origin, status, body, c.want)
		}
	}
}

// TestAdminHostOverHTTP: the Host check on a real connection: the address
// the connection reached is a name of the node, another name is not.
func TestAdminHostOverHTTP(t *testing.T) {
	n := guardNode(t, Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go n.Serve(ln)
	t.Cleanup(func() { n.Shutdown(context.Background()) })
	c := &fasthttp.Client{}
	get := func(host string) int {
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		req.SetRequestURI("http://" + ln.Addr().String() + "/v1/rules")
		req.UseHostHeader = true
		req.Header.SetHost(host)
		if err := c.DoTimeout(req, resp, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode()
	}
	if got := get(ln.Addr().String()); got != 200 {
		t.Errorf("Host %s: %d, want 200", ln.Addr(), got)
	}
	if got := get("rebind.attacker.example:8080"); got != 403 {
		t.Errorf("Host rebind.attacker.example: %d, want 403", got)
	}
}
