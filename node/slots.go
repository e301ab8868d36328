package node

import (
	"fmt"
	"strconv"

	"github.com/sluicehq/sluice/node/api"
	"github.com/valyala/fasthttp"
)

func (n *Node) acquire(ctx *fasthttp.RequestCtx) {
	st := n.getState()
	defer n.putState(st)
	req := &st.acquire
	if err := api.DecodeAcquire(ctx.PostBody(), req); err != nil {
		n.writeError(ctx, err)
		return
	}
	t := n.table(ctx)
	if t == nil {
		return
	}
	hits := req.Hits
	if !req.HitsSet {
		hits = 1
	}
	b := &st.b
	slot, err := n.eng.Acquire(t, b, req.Rule, req.Key, hits)
	if err != nil {
		n.writeError(ctx, err)
		return
	}
	// A shadow rule's denial is answered as allowed, without a lease_id.
	q := &b.Requests[0]
	st.results = append(st.results[:0], api.CheckResult{})
	res := &st.results[0]
	result(res, b, q)
	if it := &b.Items[0]; it.Decision.Allowed && slot != "" {
		lid, ok := encodeLeaseID(req.Rule, req.Key, slot)
		if !ok { // only a Manager making ids longer than maxIDInLeaseID
			_, _, _ = n.eng.Release(t, b, req.Rule, req.Key, slot)
			n.writeError(ctx, fmt.Errorf("cannot make a lease_id: slot id of %d bytes", len(slot)))
			return
		}
		res.LeaseID = lid
	}
	n.writeCheck(ctx, st, q, res)
}

func (n *Node) releaseLease(ctx *fasthttp.RequestCtx) {
	st := n.getState()
	defer n.putState(st)
	req := &st.release
	if err := api.DecodeRelease(ctx.PostBody(), req); err != nil {
		n.writeError(ctx, err)
		return
	}
	t := n.table(ctx)
	if t == nil {
		return
	}
	rule, key, id, err := decodeLeaseID(req.LeaseID)
	switch {
	case err != nil:
	case req.Rule != "" && req.Rule != rule:
		err = fieldError("rule", "does not match the lease_id's rule "+strconv.Quote(rule))
	case req.Key != "" && req.Key != key:
		err = fieldError("key", "does not match the lease_id's key")
	}
	if err != nil {
		n.writeError(ctx, err)
		return
	}
	d, p, err := n.eng.Release(t, &st.b, rule, key, id)
	if err != nil {
		n.writeError(ctx, err)
		return
	}
	st.results = append(st.results[:0], api.CheckResult{
		Allowed: true, Rule: rule, Key: key, Limit: p.Limit,
		Remaining: max(d.Remaining, 0), ResetMS: ceilMillis(d.Reset), Degraded: d.Degraded,
	})
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendCheckResult(st.buf[:0], &st.results[0])
	ctx.SetBody(st.buf)
}
