package node

import (
	"bytes"

	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/valyala/fasthttp"
)

// handle routes one request and counts it.
func (n *Node) handle(ctx *fasthttp.RequestCtx) {
	route := n.route(ctx)
	n.met.countHTTP(route, ctx.Response.StatusCode())
}

func (n *Node) route(ctx *fasthttp.RequestCtx) int {
	path := ctx.Path()
	switch string(path) {
	case "/v1/check":
		switch {
		case ctx.IsPost():
			n.checkPost(ctx)
		case ctx.IsGet():
			n.checkGet(ctx)
		default:
			n.writeError(ctx, ErrMethodNotAllowed)
		}
		return routeCheck
	case "/v1/checks":
		if n.requirePost(ctx) {
			n.checks(ctx)
		}
		return routeChecks
	case "/v1/auth":
		n.auth(ctx)
		return routeAuth
	case "/v1/acquire":
		if n.requirePost(ctx) {
			n.acquire(ctx)
		}
		return routeAcquire
	case "/v1/release":
		if n.requirePost(ctx) {
			n.releaseLease(ctx)
		}
		return routeRelease
	case LeasePath:
		if n.requirePost(ctx) {
			n.lease(ctx)
		}
		return routeLease
	case LeaseRulesPath:
		if n.requireGet(ctx) {
			n.leaseRules(ctx)
		}
		return routeLeaseRules
	case "/metrics":
		if n.requireGet(ctx) && n.requireMetrics(ctx) {
			ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
			n.writeMetrics(ctx)
		}
		return routeMetrics
	case "/healthz":
		if n.requireGet(ctx) {
			ctx.SetContentTypeBytes(contentTypeJSON)
			ctx.SetBodyString(`{"status":"ok"}`)
		}
		return routeHealthz
	case "/readyz":
		if n.requireGet(ctx) {
			n.readyz(ctx)
		}
		return routeReadyz
	case "/v1/members":
		// The client token reads the members too: a gateway sends each
		// key's lease calls to its owner (gateway.go).
		if n.requireGet(ctx) && (n.clientAllowed(ctx) || n.RequireAdmin(ctx)) {
			n.members(ctx)
		}
		return routeMembers
	case "/v1/hotkeys":
		if n.requireGet(ctx) && n.RequireAdmin(ctx) {
			n.hotkeys(ctx)
		}
		return routeHotkeys
	case "/v1/stats":
		if n.requireGet(ctx) && n.RequireAdmin(ctx) {
			n.stats(ctx)
		}
		return routeStats
	case "/ui":
		ctx.Redirect("/ui/", fasthttp.StatusMovedPermanently)
		return routeUI
	case forward.Path:
		if n.cl == nil {
			break
		}
		n.cl.handler(ctx)
		return routeForward
	}
	if isRulesPath(path) {
		n.rulesAdmin(ctx)
		return routeRulesAdmin
	}
	if len(path) >= len("/v1/auth/") && string(path[:len("/v1/auth/")]) == "/v1/auth/" {
		n.auth(ctx)
		return routeAuth
	}
	if name, ok := bytes.CutPrefix(path, []byte("/ui/")); ok {
		// The dashboard's static files are public: they hold no data; the
		// page asks for the admin token and sends it to the admin
		// endpoints it calls.
		if n.requireGet(ctx) && !n.ui.Serve(ctx, string(name)) {
			n.writeError(ctx, ErrNotFound)
		}
		return routeUI
	}
	n.writeError(ctx, ErrNotFound)
	return routeOther
}

func (n *Node) requirePost(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsPost() {
		return true
	}
	n.writeError(ctx, ErrMethodNotAllowed)
	return false
}

func (n *Node) requireGet(ctx *fasthttp.RequestCtx) bool {
	if ctx.IsGet() || ctx.IsHead() {
		return true
	}
	n.writeError(ctx, ErrMethodNotAllowed)
	return false
}

// table returns the current rules, or answers 503 and returns nil.
func (n *Node) table(ctx *fasthttp.RequestCtx) *engine.Table {
	t := n.eng.Table()
	if t == nil {
		n.writeError(ctx, ErrNotReady)
	}
	return t
}
