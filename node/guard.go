package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/valyala/fasthttp"
)

// The admin guard. Every admin endpoint (rules, members, hot keys, stats)
// starts with
//
//	if !n.RequireAdmin(ctx) {
//		return
//	}
//
// so that one function decides who is an administrator. Checks, /healthz,
// /readyz and the dashboard's static files (/ui/: they hold no data; the
// page sends the token to the guarded endpoints) are never guarded; /metrics is guarded by its own token
// (Config.MetricsToken) when one is set.

// Errors of the guard (errorStatus maps them).
var (
	// ErrUnauthorized means an admin request (or a /metrics request on a
	// node with a metrics token) carried no Authorization header: 401.
	ErrUnauthorized = errors.New("unauthorized: send Authorization: Bearer <token>")
	// ErrForbidden means an admin request's credentials were refused (a
	// wrong token, or not a bearer token), or it came from a non-loopback
	// peer to a node without an admin token: 403 (set SLUICE_ADMIN_TOKEN
	// to administer the node remotely).
	ErrForbidden = errors.New("forbidden: a wrong token, or no admin token configured (SLUICE_ADMIN_TOKEN) and the request is not from loopback")
)

// RequireAdmin reports whether ctx may use an admin endpoint, and when it
// may not, answers it (401 or 403 with a JSON error) so that the caller
// just returns:
//
//   - a request with an Origin header (a browser's) is refused (403)
//     unless the origin is the request's own Host (the dashboard, served
//     by the node) or one of Config.AdminHosts: another site's page
//     cannot use the admin API through its visitor's browser;
//   - with Config.AdminToken set, the request must carry
//     "Authorization: Bearer <token>" (compared in constant time), from
//     any address, loopback included: 401 (with WWW-Authenticate) without
//     an Authorization header, 403 with a wrong one;
//   - without it, only loopback peers (127.0.0.0/8, ::1) are admitted,
//     and only with a Host the node answers to: localhost, a loopback
//     address, the address the connection reached, or one of
//     Config.AdminHosts (any port), or none (HTTP/1.0: browsers always
//     send one); others get 403. The Host check stops
//     DNS rebinding: a page of rebind.example whose name is re-pointed at
//     127.0.0.1 reaches the node from the visitor's loopback, but with
//     Host: rebind.example. With a token, the token is what admits a
//     request (such a page has none), and the node may be reached by any
//     name.
//
// The peer address is the TCP connection's: X-Forwarded-For and the like
// are never consulted (a reverse proxy on the same host makes every request
// loopback: set a token when one forwards admin paths).
func (n *Node) RequireAdmin(ctx *fasthttp.RequestCtx) bool {
	err := n.adminErr(ctx)
	if err == nil {
		return true
	}
	if errors.Is(err, ErrUnauthorized) {
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="sluice-admin"`)
	}
	n.writeError(ctx, err)
	return false
}

// adminAllowed reports whether ctx may use the admin endpoints, without
// answering it.
func (n *Node) adminAllowed(ctx *fasthttp.RequestCtx) bool { return n.adminErr(ctx) == nil }

// adminErr is RequireAdmin's decision: nil, ErrUnauthorized or
// ErrForbidden.
func (n *Node) adminErr(ctx *fasthttp.RequestCtx) error {
	if err := n.originErr(ctx); err != nil {
		return err
	}
	if n.adminToken == nil {
		ip := ctx.RemoteIP()
		if ip == nil || !ip.IsLoopback() {
			return ErrForbidden
		}
		return n.hostErr(ctx)
	}
	return bearerErr(ctx, n.adminToken)
}

// maxShownHost bounds a Host or Origin value quoted in an error.
const maxShownHost = 100

// shown is v quoted for an error message, cut to maxShownHost bytes.
func shown(v []byte) string {
	if len(v) > maxShownHost {
		v = v[:maxShownHost]
	}
	return strconv.QuoteToASCII(string(v))
}

// hostErr is nil when the request's Host names this node (see
// RequireAdmin), else an ErrForbidden naming it.
func (n *Node) hostErr(ctx *fasthttp.RequestCtx) error {
	h := ctx.Request.Header.Host()
	if len(h) == 0 || n.answersTo(ctx, hostOnly(string(h))) {
		// No Host (HTTP/1.0): not a browser's request, so not a page's.
		return nil
	}
	return forbidden("Host " + shown(h) + " is not a name of this node (localhost, a loopback address, " +
		"its own address, or one of -admin-hosts / SLUICE_ADMIN_HOSTS)")
}

// forbidden is an ErrForbidden (403) with its own message: a Host or
// Origin the node does not answer to.
type forbidden string

func (e forbidden) Error() string        { return "forbidden: " + string(e) }
func (e forbidden) Is(target error) bool { return target == ErrForbidden }

// answersTo reports whether host (without port) is a name or address of
// this node for the connection of ctx.
func (n *Node) answersTo(ctx *fasthttp.RequestCtx, host string) bool {
	host = strings.ToLower(host)
	if host == "localhost" {
		return true
	}
	if _, ok := n.adminHosts[host]; ok {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && (ip.IsLoopback() || ip.Equal(ctx.LocalIP()))
}

// originErr is nil when the request has no Origin header, or its origin
// is the request's Host or one of Config.AdminHosts; else an ErrForbidden
// naming it (a "null" origin included).
func (n *Node) originErr(ctx *fasthttp.RequestCtx) error {
	o := ctx.Request.Header.Peek("Origin")
	if len(o) == 0 {
		return nil
	}
	if u, err := url.Parse(string(o)); err == nil && u.Host != "" && u.Path == "" && u.User == nil {
		if strings.EqualFold(u.Host, string(ctx.Request.Header.Host())) {
			return nil
		}
		if _, ok := n.adminHosts[strings.ToLower(u.Hostname())]; ok {
			return nil
		}
	}
	return forbidden("cross-origin request from Origin " + shown(o) + " (the dashboard is served by the node itself; " +
		"a proxy's name goes in -admin-hosts / SLUICE_ADMIN_HOSTS)")
}

// hostOnly is the host of a Host header value, without port or IPv6
// brackets.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]")
}

// hostSet is Config.AdminHosts as a set of lower-cased names.
func hostSet(names []string) map[string]struct{} {
	m := make(map[string]struct{}, len(names))
	for _, h := range names {
		if h = strings.ToLower(strings.TrimSpace(h)); h != "" {
			m[h] = struct{}{}
		}
	}
	return m
}

// bearerErr is nil when ctx carries the token whose digest is want,
// ErrUnauthorized without an Authorization header, ErrForbidden with a
// wrong one.
func bearerErr(ctx *fasthttp.RequestCtx, want *[sha256.Size]byte) error {
	if len(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)) == 0 {
		return ErrUnauthorized
	}
	if !bearerMatches(ctx, want) {
		return ErrForbidden
	}
	return nil
}

// requireMetrics guards /metrics: open without Config.MetricsToken, else
// like an admin endpoint with that token (loopback included).
func (n *Node) requireMetrics(ctx *fasthttp.RequestCtx) bool {
	if n.metricsToken == nil {
		return true
	}
	err := bearerErr(ctx, n.metricsToken)
	if err == nil {
		return true
	}
	if errors.Is(err, ErrUnauthorized) {
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="sluice-metrics"`)
	}
	n.writeError(ctx, err)
	return false
}

// tokenDigest is what a configured token is compared as: its SHA-256, so
// that the comparison takes the same time whatever the length of the
// presented token (subtle.ConstantTimeCompare returns at once on a length
// mismatch, which would leak the token's length). Nil for no token.
func tokenDigest(token string) *[sha256.Size]byte {
	if token == "" {
		return nil
	}
	d := sha256.Sum256([]byte(token))
	return &d
}

// bearerMatches reports whether ctx carries "Authorization: Bearer <t>"
// with sha256(t) == want, in constant time.
func bearerMatches(ctx *fasthttp.RequestCtx, want *[sha256.Size]byte) bool {
	const prefix = "Bearer "
	h := ctx.Request.Header.Peek(fasthttp.HeaderAuthorization)
	if len(h) <= len(prefix) || string(h[:len(prefix)]) != prefix {
		return false
	}
	got := sha256.Sum256(h[len(prefix):])
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
}
