package node

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/forward"
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
	case "/metrics":
		if n.requireGet(ctx) {
			ctx.SetContentType("text/plain; version=0.0.4; charset=utf-8")
			n.met.write(ctx)
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
		if n.requireGet(ctx) {
			n.members(ctx)
		}
		return routeMembers
	case "/v1/hotkeys":
		if n.requireGet(ctx) {
			n.hotkeys(ctx)
		}
		return routeHotkeys
	case "/v1/stats":
		if n.requireGet(ctx) && n.adminGuard(ctx) {
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
		return routeOther
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
func (n *Node) table(ctx *fasthttp.RequestCtx) *ruleTable {
	t := n.rules.Load()
	if t == nil {
		n.writeError(ctx, ErrNotReady)
	}
	return t
}

func (n *Node) checkPost(ctx *fasthttp.RequestCtx) {
	st := n.getState()
	defer n.putState(st)
	if err := api.DecodeCheckView(ctx.PostBody(), &st.check, &st.unesc); err != nil {
		n.writeError(ctx, err)
		return
	}
	n.checkOne(ctx, st)
}

func (n *Node) checkGet(ctx *fasthttp.RequestCtx) {
	st := n.getState()
	defer n.putState(st)
	if err := api.ParseCheckQueryView(ctx.URI().QueryString(), &st.check, &st.unesc); err != nil {
		n.writeError(ctx, err)
		return
	}
	n.checkOne(ctx, st)
}

// checkOne decides st.check and answers it with a JSON body and headers.
func (n *Node) checkOne(ctx *fasthttp.RequestCtx, st *reqState) {
	t := n.table(ctx)
	if t == nil {
		return
	}
	if err := st.addCheck(t, &st.check); err != nil {
		n.writeError(ctx, err)
		return
	}
	timed, start := st.startTimer()
	v, err := n.decide(st.items, hitsOf(&st.check))
	if timed {
		n.met.checkDuration.UpdateDuration(start)
	}
	if err != nil {
		n.writeError(ctx, err)
		return
	}
	st.results = append(st.results[:0], api.CheckResult{})
	res := &st.results[0]
	result(res, st.items, v)
	n.writeCheck(ctx, st, v, res)
}

// writeCheck answers one decided check: status, headers, JSON body.
func (n *Node) writeCheck(ctx *fasthttp.RequestCtx, st *reqState, v verdict, res *api.CheckResult) {
	ctx.SetStatusCode(v.status)
	n.setHeaders(ctx, st, v)
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendCheckResult(st.buf[:0], res)
	ctx.SetBody(st.buf)
}

// setHeaders writes the rate-limit headers of the reported item.
func (n *Node) setHeaders(ctx *fasthttp.RequestCtx, st *reqState, v verdict) {
	if v.rep < 0 {
		return
	}
	it := &st.items[v.rep]
	st.scratch = setRateHeaders(&ctx.Response.Header, st.scratch, it.ri, it.p, &it.d, v.status != fasthttp.StatusOK)
}

func (n *Node) checks(ctx *fasthttp.RequestCtx) {
	st := n.getState()
	defer n.putState(st)
	if err := api.DecodeChecksView(ctx.PostBody(), &st.batch, &st.unesc); err != nil {
		n.writeError(ctx, err)
		return
	}
	t := n.table(ctx)
	if t == nil {
		return
	}
	checks := st.batch.Checks
	if cap(st.results) < len(checks) {
		st.results = make([]api.CheckResult, len(checks))
	}
	st.results = st.results[:len(checks)]
	if n.cl != nil {
		n.checksRouted(ctx, st, t, checks)
		return
	}
	start := time.Now()
	n.decideBatch(st, t, checks)
	if len(checks) > 0 { // one observation: the mean time per check
		n.met.checkDuration.Update(time.Since(start).Seconds() / float64(len(checks)))
	}
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendResults(st.buf[:0], st.results)
	ctx.SetBody(st.buf)
}

// decideBatch decides the checks of a batch on a single node and fills
// st.results. The checks of one item each (one rule, not a peek) are
// decided together by one Manager.TakeMany, their Store calls overlapped;
// the others (several rules: their refunds; peeks) one by one with decide,
// after it. The batch is decided as if in order: see batchTake.
func (n *Node) decideBatch(st *reqState, t *ruleTable, checks []api.CheckRequest) {
	st.items = st.items[:0]
	st.keys = st.keys[:0] // counter keys stay valid for the whole batch
	st.spans = grow(st.spans, len(checks))
	tk := &st.take
	tk.reset()
	for i := range checks {
		c := &checks[i]
		sp := &st.spans[i]
		*sp = span{lo: -1, take: -1}
		res := &st.results[i]
		if c.Err != nil {
			*res = api.CheckResult{Error: c.Err.Msg, Field: c.Err.Field}
			continue
		}
		lo := len(st.items)
		if err := st.addCheck(t, c); err != nil {
			st.items = st.items[:lo]
			_, msg, field := errorStatus(err)
			*res = api.CheckResult{Error: msg, Field: batchField(i, field)}
			continue
		}
		sp.lo, sp.hi = int32(lo), int32(len(st.items))
		alone := sp.hi-sp.lo == 1
		for j := lo; j < len(st.items); j++ {
			if tk.offer(st.items, j, hitsOf(c), alone) {
				sp.take = int32(len(tk.cs) - 1)
			}
		}
	}
	tk.run(n.mgr, st.items)
	for i := range checks {
		sp := &st.spans[i]
		if sp.lo < 0 {
			continue
		}
		res := &st.results[i]
		its := st.items[sp.lo:sp.hi]
		var v verdict
		var err error
		if sp.take >= 0 {
			// One item, decided by TakeMany: as decide would, with
			// nothing to refund.
			if err = tk.cs[sp.take].Err; err == nil {
				v = combine(its, !its[0].d.Allowed && !its[0].ri.rule.Shadow)
			}
		} else {
			v, err = n.decide(its, hitsOf(&checks[i]))
		}
		if err != nil {
			_, msg, field := errorStatus(err)
			*res = api.CheckResult{Error: msg, Field: batchField(i, field)}
			continue
		}
		result(res, its, v)
	}
}

// batchField names field inside item i of a batch: checks[i].field.
func batchField(i int, field string) string {
	s := "checks[" + strconv.Itoa(i) + "]"
	if field != "" {
		s += "." + field
	}
	return s
}

// auth is forward-auth: identity from the original request's headers, the
// answer in the status code and headers only.
func (n *Node) auth(ctx *fasthttp.RequestCtx) {
	t := n.rules.Load()
	if t == nil {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
		ctx.Response.Header.SetCanonical(hdrRetryAfter, one)
		return
	}
	st := n.getState()
	defer n.putState(st)
	st.matches = t.set.MatchAuth(&ctx.Request, ctx.RemoteIP(), st.matches[:0])
	st.addMatches(t)
	timed, start := st.startTimer()
	v, err := n.decide(st.items, 1)
	if timed {
		n.met.checkDuration.UpdateDuration(start)
	}
	if err != nil { // rules are validated: only a bug gets here
		n.log.Error("forward-auth decision failed", "err", err)
		ctx.SetStatusCode(fasthttp.StatusInternalServerError)
		return
	}
	ctx.SetStatusCode(v.status)
	n.setHeaders(ctx, st, v)
	if v.status == fasthttp.StatusServiceUnavailable && v.rep < 0 {
		ctx.Response.Header.SetCanonical(hdrRetryAfter, one)
	}
}

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
	ri := t.get(req.Rule)
	switch {
	case ri == nil:
		n.writeError(ctx, fieldError("rule", "unknown rule "+strconv.Quote(req.Rule)))
		return
	case ri.base.Algorithm != lease.Concurrency:
		n.writeError(ctx, fieldError("rule", "rule "+strconv.Quote(req.Rule)+" is not a concurrency rule: use /v1/check"))
		return
	}
	hits := req.Hits
	if !req.HitsSet {
		hits = 1
	}
	it := item{ri: ri, key: req.Key}
	it.p = ri.rule.PolicyFor(req.Key)
	it.ckey = st.counterKey(ri.prefix, req.Key)
	d, id, err := n.mgr.Acquire(it.ckey, it.p, hits)
	if err != nil {
		n.writeError(ctx, err)
		return
	}
	it.d, it.done = d, true
	ri.checks[decisionOf(d, ri.rule.Shadow, it.p.OnFailure)].Inc()
	st.items = append(st.items, it)
	// A shadow rule's denial is answered as allowed, without a lease_id.
	v := combine(st.items, !d.Allowed && !ri.rule.Shadow)
	st.results = append(st.results[:0], api.CheckResult{})
	res := &st.results[0]
	result(res, st.items, v)
	if d.Allowed && id != "" {
		lid, ok := encodeLeaseID(ri.name, req.Key, id)
		if !ok { // only a Manager making ids longer than maxIDInLeaseID
			_ = n.mgr.Release(it.ckey, it.p, id)
			n.writeError(ctx, fmt.Errorf("cannot make a lease_id: slot id of %d bytes", len(id)))
			return
		}
		res.LeaseID = lid
	}
	n.writeCheck(ctx, st, v, res)
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
	ri := t.get(rule)
	switch {
	case ri == nil:
		err = fieldError("lease_id", "rule "+strconv.Quote(rule)+" no longer exists (the slot expires at its TTL)")
	case ri.base.Algorithm != lease.Concurrency:
		err = fieldError("lease_id", "rule "+strconv.Quote(rule)+" is not a concurrency rule")
	}
	if err != nil {
		n.writeError(ctx, err)
		return
	}
	p := ri.rule.PolicyFor(key)
	ckey := st.counterKey(ri.prefix, key)
	if err := n.mgr.Release(ckey, p, id); err != nil {
		n.writeError(ctx, err)
		return
	}
	d, _, _ := n.mgr.Acquire(ckey, p, 0) // peek: what is free now
	st.results = append(st.results[:0], api.CheckResult{
		Allowed: true, Rule: rule, Key: key, Limit: p.Limit,
		Remaining: max(d.Remaining, 0), ResetMS: ceilMillis(d.Reset), Degraded: d.Degraded,
	})
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendCheckResult(st.buf[:0], &st.results[0])
	ctx.SetBody(st.buf)
}

// readyz answers 200 once a rule set is loaded (503 before), with the rule
// count and the last reload error, if any.
func (n *Node) readyz(ctx *fasthttp.RequestCtx) {
	t := n.rules.Load()
	var body struct {
		Ready           bool   `json:"ready"`
		Rules           int    `json:"rules"`
		Joined          bool   `json:"joined"`
		LastReloadError string `json:"last_reload_error,omitempty"`
		LastReload      string `json:"last_reload,omitempty"`
	}
	n.reload.Lock()
	if n.reload.err != nil {
		body.LastReloadError = n.reload.err.Error()
	}
	if !n.reload.when.IsZero() {
		body.LastReload = n.reload.when.UTC().Format(time.RFC3339)
	}
	n.reload.Unlock()
	body.Joined = n.clusterReady()
	body.Ready = t != nil && body.Joined
	if t != nil {
		body.Rules = len(t.byName)
	}
	if !body.Ready {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
	b, _ := json.Marshal(body)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(b)
}
