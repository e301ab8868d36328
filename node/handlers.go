package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/rules"
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
		if n.requireGet(ctx) && n.RequireAdmin(ctx) {
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
		if m.Rule.Policy.Algorithm == lease.Concurrency {
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

// readyz answers 200 once a rule set is loaded (503 before), with the rule
// count, whether the last reload failed, and the state of the Store's
// breaker. An open breaker does not make the node unready: checks are
// still answered (local rules enforce from memory). /readyz is public:
// the reload error itself (it may name the rule file and rules) is shown
// to admin callers only, others get readyzReloadFailed.
func (n *Node) readyz(ctx *fasthttp.RequestCtx) {
	t := n.eng.Table()
	var body struct {
		Ready           bool   `json:"ready"`
		Rules           int    `json:"rules"`
		Joined          bool   `json:"joined"`
		LastReloadError string `json:"last_reload_error,omitempty"`
		LastReload      string `json:"last_reload,omitempty"`
		Store           struct {
			// State is the breaker's: closed (healthy), open (failing:
			// rules follow on_store_failure) or half-open (probing).
			State string `json:"state"`
		} `json:"store"`
	}
	body.Store.State = n.mgr.Stats().Breaker.String()
	n.reload.Lock()
	if n.reload.err != nil {
		body.LastReloadError = readyzReloadFailed
		if n.adminAllowed(ctx) {
			body.LastReloadError = n.reload.err.Error()
		}
	}
	if !n.reload.when.IsZero() {
		body.LastReload = n.reload.when.UTC().Format(time.RFC3339)
	}
	n.reload.Unlock()
	body.Joined = n.clusterReady()
	body.Ready = t != nil && body.Joined
	if t != nil {
		body.Rules = t.Len()
	}
	if !body.Ready {
		ctx.SetStatusCode(fasthttp.StatusServiceUnavailable)
	}
	b, _ := json.Marshal(body)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(b)
}

// readyzReloadFailed is /readyz's last_reload_error for a caller that is
// not admin.
const readyzReloadFailed = "the last reload failed (the reason is shown to admin callers)"

// reqState is the per-request scratch space of the HTTP front ends,
// pooled so that the hot path allocates nothing after warm-up.
type reqState struct {
	n *Node
	// check and batch are decoded with api.DecodeCheckView and
	// DecodeChecksView: their strings are views of the request body (or of
	// unesc) and die with the request. Copy any that must be kept.
	check   api.CheckRequest
	batch   api.ChecksRequest
	unesc   []byte // the decoders' scratch for escaped strings
	acquire api.AcquireRequest
	release api.ReleaseRequest
	b       engine.Batch // the request's items, for the engine
	matches []rules.Match
	results []api.CheckResult
	reqOf   []int32 // per check of a batch: its request in b, -1 if none
	buf     []byte  // the response body
	scratch []byte  // header values
	ticks   uint32  // checks served with this state, for startTimer
}

func (n *Node) getState() *reqState { return n.states.Get().(*reqState) }

func (n *Node) putState(st *reqState) {
	st.b.Reset()
	clear(st.matches)
	st.matches = st.matches[:0]
	clear(st.results)
	st.results = st.results[:0]
	n.states.Put(st)
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
