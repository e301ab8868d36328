package node

import (
	"context"

	"github.com/valyala/fasthttp"
)

// auth is forward-auth: identity from the original request's headers, the
// answer in the status code and headers only.
func (n *Node) auth(ctx *fasthttp.RequestCtx) {
	t := n.eng.Table()
	if t == nil {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.Response.Header.SetCanonical(hdrRetryAfter, one)
		return
	}
	st := n.getState()
	defer n.putState(st)
	b := &st.b
	st.matches = t.Set().MatchAuth(&ctx.Request.Header, ctx.RemoteIP(), st.matches[:0])
	if ri := st.addMatches(t, 1); ri != nil {
		// on_missing_key: deny. Nothing is decided (nothing to refund);
		// waiting does not help, so no Retry-After.
		ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
		rh := headersOf(ri)
		ctx.Response.Header.SetCanonical(hdrRateLimitPolicy, rh.policy)
		ctx.Response.Header.SetCanonical(hdrMissingKey, rh.missingKeyHint)
		return
	}
	qi := b.End()
	timed, start := st.startTimer()
	n.eng.DecideWith(context.Background(), t, b)
	if timed {
		n.met.checkDuration.UpdateDuration(start)
	}
	q := &b.Requests[qi]
	if q.Err != nil {
		// A key the engine refuses (made of header bytes that are not
		// UTF-8, say) is a bad request; rules are validated, so anything
		// else is a bug.
		if status, _, _ := errorStatus(q.Err); status == fasthttp.StatusBadRequest {
			n.writeError(ctx, q.Err)
			return
		}
		n.log.Error("forward-auth decision failed", "err", q.Err)
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetStatusCode(q.Status)
	n.setHeaders(ctx, st, q)
	if q.Status == fasthttp.StatusServiceUnavailable && q.Rep < 0 {
		ctx.Response.Header.SetCanonical(hdrRetryAfter, one)
	}
}
