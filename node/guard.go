package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"

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
//   - with Config.AdminToken set, the request must carry
//     "Authorization: Bearer <token>" (compared in constant time), from
//     any address, loopback included: 401 (with WWW-Authenticate) without
//     an Authorization header, 403 with a wrong one;
//   - without it, only loopback peers (127.0.0.0/8, ::1) are admitted;
//     others get 403.
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
	if n.adminToken == nil {
		ip := ctx.RemoteIP()
		if ip != nil && ip.IsLoopback() {
			return nil
		}
		return ErrForbidden
	}
	return bearerErr(ctx, n.adminToken)
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
