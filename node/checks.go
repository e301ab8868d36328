package node

import (
	"context"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
	"github.com/valyala/fasthttp"
)

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

// addCheck adds one check request to st.b as one request: either the
// named rule, or every rule its descriptors match (concurrency rules are
// only reachable through /v1/acquire). It returns the request's index.
func (st *reqState) addCheck(t *engine.Table, c *api.CheckRequest) int {
	hits := hitsOf(c)
	if c.Rule != "" {
		st.b.Add(c.Rule, c.Key, hits)
		return st.b.End()
	}
	st.matches = t.Set().MatchDescriptors(c.Descriptors, st.matches[:0])
	st.addMatches(t, hits)
	return st.b.End()
}

// addMatches adds the items of st.matches to st.b, skipping concurrency
// rules (they are only reachable through /v1/acquire). A forward-auth match
// whose key is missing (rules.Match.KeyMissing) follows its rule's
// on_missing_key: skip adds nothing and counts the skip, deny adds nothing
// and counts a denial (shadow_denied for a shadow rule), a fallback key is
// added as any key. It returns the first non-shadow rule that denies the
// request for its missing key, or nil.
func (st *reqState) addMatches(t *engine.Table, hits int64) (deny *engine.Rule) {
	for i := range st.matches {
		m := &st.matches[i]
		if m.Rule.Policy.Algorithm.Acquired() {
			continue
		}
		if m.KeyMissing && m.Missing != rules.MissingFallback {
			ri := t.Get(m.Rule.Name)
			if ri == nil {
				continue
			}
			ri.CountMissingKey(m.Missing == rules.MissingSkip)
			if m.Missing != rules.MissingSkip && !m.Rule.Shadow && deny == nil {
				deny = ri
			}
			continue
		}
		st.b.Add(m.Rule.Name, m.Key, hits)
	}
	return deny
}

// checkOne decides st.check and answers it with a JSON body and headers.
func (n *Node) checkOne(ctx *fasthttp.RequestCtx, st *reqState) {
	t := n.table(ctx)
	if t == nil {
		return
	}
	b := &st.b
	qi := st.addCheck(t, &st.check)
	timed, start := st.startTimer()
	n.eng.DecideWith(context.Background(), t, b)
	if timed {
		n.met.checkDuration.UpdateDuration(start)
	}
	q := &b.Requests[qi]
	if q.Err != nil {
		n.writeError(ctx, q.Err)
		return
	}
	st.results = append(st.results[:0], api.CheckResult{})
	res := &st.results[0]
	result(res, b, q)
	n.writeCheck(ctx, st, q, res)
}

// writeCheck answers one decided check: status, headers, JSON body.
func (n *Node) writeCheck(ctx *fasthttp.RequestCtx, st *reqState, q *engine.Request, res *api.CheckResult) {
	ctx.SetStatusCode(q.Status)
	n.setHeaders(ctx, st, q)
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendCheckResult(st.buf[:0], res)
	ctx.SetBody(st.buf)
}

// setHeaders writes the rate-limit headers of the reported item.
func (n *Node) setHeaders(ctx *fasthttp.RequestCtx, st *reqState, q *engine.Request) {
	if q.Rep < 0 {
		return
	}
	it := &st.b.Items[q.Rep]
	st.scratch = setRateHeaders(&ctx.Response.Header, st.scratch, it.Info(), it.Policy, &it.Decision, !q.Allowed())
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
	start := time.Now()
	n.decideChecks(st, t, checks)
	if len(checks) > 0 { // one observation: the mean time per check
		n.met.checkDuration.Update(time.Since(start).Seconds() / float64(len(checks)))
	}
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendResults(st.buf[:0], st.results)
	ctx.SetBody(st.buf)
}

// decideChecks decides the checks of a batch, each one request of st.b,
// and fills st.results; a check that does not decode is answered with its
// error.
func (n *Node) decideChecks(st *reqState, t *engine.Table, checks []api.CheckRequest) {
	b := &st.b
	st.reqOf = grow(st.reqOf, len(checks))
	for i := range checks {
		c := &checks[i]
		st.reqOf[i] = -1
		if c.Err != nil {
			st.results[i] = api.CheckResult{Error: c.Err.Msg, Field: c.Err.Field}
			continue
		}
		st.reqOf[i] = int32(st.addCheck(t, c))
	}
	n.eng.DecideWith(context.Background(), t, b)
	for i := range checks {
		if st.reqOf[i] < 0 {
			continue
		}
		q := &b.Requests[st.reqOf[i]]
		res := &st.results[i]
		if q.Err != nil {
			_, msg, field := errorStatus(q.Err)
			*res = api.CheckResult{Error: msg, Field: batchField(i, field)}
			continue
		}
		result(res, b, q)
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

// hitsOf returns a check's hits: 1 when the request did not say.
func hitsOf(c *api.CheckRequest) int64 {
	if !c.HitsSet {
		return 1
	}
	return c.Hits
}

// result fills dst with the answer of request q of b.
func result(dst *api.CheckResult, b *engine.Batch, q *engine.Request) {
	*dst = api.CheckResult{Allowed: q.Allowed(), Degraded: q.Degraded}
	if q.Rep < 0 {
		return
	}
	it := &b.Items[q.Rep]
	dst.Rule = it.Rule
	dst.Key = it.Key
	dst.Limit = it.Policy.Limit
	dst.Remaining = max(it.Decision.Remaining, 0)
	dst.ResetMS = ceilMillis(it.Decision.Reset)
	if !dst.Allowed {
		dst.RetryAfterMS = max(ceilMillis(it.Decision.RetryAfter), 1)
	}
}

// timerSample: one check in timerSample is timed for
// sluice_check_duration_seconds (reading the clock costs more than 100ns
// on some virtual machines, a tenth of a check). Batches are always timed.
const timerSample = 16

// startTimer says whether to time this check and, if so, returns now.
func (st *reqState) startTimer() (bool, time.Time) {
	st.ticks++
	if st.ticks%timerSample != 0 {
		return false, time.Time{}
	}
	return true, time.Now()
}
