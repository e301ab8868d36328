package engine

import (
	"context"
	"strconv"

	"github.com/sluicehq/sluice/lease"
)

// Decide decides every request of b (items added after the last End form
// one more request) and sets each request's verdict and each item's
// decision. Decide a filled Batch once; Reset it before filling it again.
// Requests are decided as if one after another, in order, with the Store
// calls of the batch overlapped and, in a cluster, one forwarding call per
// peer and phase; within a request, every rule must allow, and when one
// denies, the hits charged to the others are refunded (see the package
// doc, "Several rules, one answer"). ctx bounds forwarding to peers (each
// phase also has the Forwarder's own budget). Decisions are counted in
// sluice_checks_total; timing them is the caller's part. Decide is safe
// for concurrent use with distinct Batches.
func (e *Engine) Decide(ctx context.Context, b *Batch) {
	e.decide(ctx, e.rules.Load(), b)
}

// DecideWith is Decide with the rule table t: a front end that matched
// descriptors against t passes it, so that a reload between matching
// and deciding does not leave the request's rules unknown.
func (e *Engine) DecideWith(ctx context.Context, t *Table, b *Batch) {
	e.decide(ctx, t, b)
}

func (e *Engine) decide(ctx context.Context, t *Table, b *Batch) {
	if int(b.open) < len(b.Items) {
		b.End()
	}
	var last *Rule // see resolve
	for qi := range b.Requests {
		q := &b.Requests[qi] // as End made it: Decide runs once per filled Batch
		if t == nil {
			q.Err = ErrNotReady
			continue
		}
		alone := q.hi-q.lo == 1
		for i := q.lo; i < q.hi; i++ {
			if err := b.resolve(t, i, int32(qi), alone, &last); err != nil {
				q.Err, q.ErrItem = err, int(i)
				break
			}
		}
	}
	r := e.routes.Load()
	if len(b.Requests) == 1 && e.decideSingle(r, b) {
		return
	}
	e.phase(ctx, r, b, true)
	if b.exact > 0 {
		e.phase(ctx, r, b, false)
	}
	e.refund(ctx, b)
	for qi := range b.Requests {
		if q := &b.Requests[qi]; q.Err == nil {
			b.combine(q)
		}
	}
}

// decideSingle is the engine's short path for the most common request: a
// batch of one request of one item decided here. It is what the phases do
// for it, without walking their lists: route it (here), decide it, combine
// (one item: nothing to refund). It reports false, having done nothing,
// when the batch is not such a request.
func (e *Engine) decideSingle(r *Routes, b *Batch) bool {
	q := &b.Requests[0]
	if q.hi-q.lo != 1 || q.Err != nil {
		return false
	}
	it := &b.Items[q.lo]
	if !it.peek && e.peer(r, it.ckey) != "" {
		return false
	}
	if capped, _ := e.cl.capping(); capped {
		return false // held to its share: the phase's path (unanswered.go)
	}
	if err := e.decideOne(b, it); err != nil {
		q.Err, q.ErrItem = err, int(q.lo)
		return true
	}
	e.servedHere(it)
	b.combine(q)
	return true
}

// servedHere counts an item decided by this node as its owner (or a
// holder of its split): in a cluster, a routed item decided by self, and
// an observation for the hot-key sketch.
func (e *Engine) servedHere(it *Item) {
	if c := e.cl; c != nil {
		c.met.local.Inc()
		if !it.peek {
			c.hot.Observe(it.ckey) // a key this node owns or holds
		}
	}
}

// resolve fills in item i of b (of request qi, whose only item it is if
// alone): its rule, policy and counter key; an unknown rule, or hits on a
// concurrency rule, is an error naming the field "rule", an invalid key
// (KeyProblem) one naming "key". *last is the rule
// of the item resolved before (nil at first): a batch's items mostly name
// one rule, and comparing the name costs less than the table's lookup.
func (b *Batch) resolve(t *Table, i, qi int32, alone bool, last **Rule) error {
	it := &b.Items[i] // as Add made it
	it.req, it.alone = qi, alone
	ri := *last
	if ri == nil || ri.name != it.Rule {
		if ri = t.Get(it.Rule); ri == nil {
			return fieldError("rule", "unknown rule "+strconv.Quote(it.Rule))
		}
		*last = ri
	}
	if ri.base.Algorithm.Acquired() {
		if it.Hits != 0 {
			return fieldError("rule", "rule "+strconv.Quote(it.Rule)+" is a "+ri.base.Algorithm.String()+" rule: use /v1/acquire and /v1/release (or hits 0 to peek)")
		}
		it.peek = true
	}
	if msg := KeyProblem(it.Key); msg != "" {
		return fieldError("key", msg)
	}
	it.ri = ri
	it.Policy = ri.rule.PolicyFor(it.Key)
	if !it.Policy.Algorithm.Leased() {
		b.exact++
	}
	it.ckey = b.counterKey(ri.prefix, it.Key)
	return nil
}

// decideLocals decides the items b.local of a phase with this node's
// Manager: those that can (see batchTake) with one TakeMany, their Store
// calls overlapped, then the others in order. A request decided entirely
// here is refunded as soon as its last item of the phase is decided and it
// is denied, so that the requests after it see its hits given back, as if
// the requests were decided one by one.
func (e *Engine) decideLocals(b *Batch) {
	if len(b.local) == 1 {
		i := b.local[0]
		e.decideLocal(b, i)
		e.refundEarly(b, i)
		return
	}
	tk := &b.take
	tk.reset()
	for _, i := range b.local {
		tk.offer(b.Items, int(i))
	}
	tk.run(e.mgr, b)
	j := 0 // tk.idx is in the order of b.local
	for k, i := range b.local {
		if j < len(tk.idx) && tk.idx[j] == i {
			if err := tk.cs[j].Err; err != nil {
				if q := &b.Requests[b.Items[i].req]; q.Err == nil {
					q.Err, q.ErrItem = err, int(i)
				}
			}
			j++
			continue
		}
		e.decideLocal(b, i)
		if k+1 == len(b.local) || b.Items[b.local[k+1]].req != b.Items[i].req {
			e.refundEarly(b, i)
		}
	}
	tk.reset() // drop the key views
}

// refundEarly refunds the request of item i (its last local item of the
// phase) at once when it is denied or failed and all its items of the
// phase were decided here; others are refunded after both phases.
func (e *Engine) refundEarly(b *Batch, i int32) {
	q := &b.Requests[b.Items[i].req]
	if q.remote {
		return
	}
	its := b.Items[q.lo:q.hi]
	if q.Err == nil && !q.denied {
		for k := range its {
			if it := &its[k]; it.Decided && !it.Decision.Allowed && !it.ri.rule.Shadow {
				q.denied = true
				break
			}
		}
	}
	if !q.denied && q.Err == nil {
		return
	}
	for k := range its {
		if it := &its[k]; it.charged && it.owner == "" {
			it.ri.mgr.Refund(it.ckey, it.Policy, it.Hits)
			it.charged = false
		}
	}
}

// decideLocal decides item i with this node's Manager, unless its request
// already erred.
func (e *Engine) decideLocal(b *Batch, i int32) {
	it := &b.Items[i]
	q := &b.Requests[it.req]
	if q.Err != nil {
		return
	}
	if err := e.decideOne(b, it); err != nil {
		q.Err, q.ErrItem = err, int(i)
		return
	}
	b.noteDenied(it)
}

// noteDenied marks the request of item it, just decided, denied when its
// rule denied it (a shadow rule never denies), so that the requests'
// denied flags are up to date for the exact phase and the refunds. Every
// place that decides an item in a phase calls it (decideLocal,
// batchTake.run, collect, shed).
func (b *Batch) noteDenied(it *Item) {
	if !it.Decision.Allowed && !it.ri.rule.Shadow {
		b.Requests[it.req].denied = true
	}
}

// decideOne asks the Manager about one item and counts the decision.
func (e *Engine) decideOne(b *Batch, it *Item) error {
	var err error
	m := it.ri.mgr
	if it.peek {
		it.Decision, _, err = m.Acquire(it.ckey, it.Policy, 0)
	} else {
		if it.ri.demand != nil {
			it.ri.demand(it.ckey)
		}
		it.Decision, err = m.Take(it.ckey, it.Policy, it.Hits)
	}
	if err != nil {
		return err
	}
	b.record(it)
	return nil
}

// record marks it decided (its Decision set) and counts the decision.
func (b *Batch) record(it *Item) {
	b.recordAs(it, decisionOf(it.Decision, it.ri.rule.Shadow, it.Policy.OnFailure))
}

// recordAs marks it decided (its Decision set), derives whether it
// charged hits a denial must give back (Charged), and counts it as
// decision dec in sluice_checks_total: the one place where decisions are
// counted. A batch of checks forwarded by peers (DecideOwned) counts
// nothing: the node that answered the client counts them.
func (b *Batch) recordAs(it *Item, dec int) {
	it.Decided = true
	it.charged = Charged(&it.Decision, it.Hits)
	if !b.owned {
		it.ri.checks[dec].Inc()
	}
}

// decisionOf is the decision label of d.
func decisionOf(d lease.Decision, shadow bool, mode lease.FailureMode) int {
	switch {
	case d.Unavailable:
		return DecUnavailable
	case !d.Allowed && shadow:
		return DecShadowDenied
	case !d.Allowed:
		return DecDenied
	case d.Degraded && mode == lease.FailOpen:
		return DecDegraded
	case d.Degraded:
		return DecLocal
	}
	return DecAllowed
}

// combine sets q's verdict (see combineItems).
func (b *Batch) combine(q *Request) {
	var rep int
	if q.hi-q.lo == 1 { // most requests: combineItems without its loops
		q.Status, rep, q.Degraded, q.denied = combineOne(&b.Items[q.lo])
	} else {
		q.Status, rep, q.Degraded, q.denied = combineItems(b.Items[q.lo:q.hi])
	}
	q.Rep = -1
	if rep >= 0 {
		q.Rep = int(q.lo) + rep
	}
}

// combineOne is combineItems of the one item it.
func combineOne(it *Item) (status, rep int, degraded, denied bool) {
	if !it.Decided {
		return StatusAllowed, -1, false, false
	}
	d := &it.Decision
	if d.Allowed || it.ri.rule.Shadow {
		return StatusAllowed, 0, d.Degraded, false
	}
	if d.Unavailable {
		return StatusUnavailable, 0, d.Degraded, true
	}
	return StatusDenied, 0, d.Degraded, true
}

// combineItems picks the answer of a request's items: when denied, the
// non-shadow denial with the longest retry-after (429 if any rule denied
// on its limit, else 503); when allowed, the rule with the least
// remaining, preferring non-shadow rules. rep is an index in items, -1
// when none was decided.
func combineItems(items []Item) (status, rep int, degraded, denied bool) {
	rep = -1
	for i := range items {
		it := &items[i]
		if !it.Decided {
			continue
		}
		if it.Decision.Degraded {
			degraded = true
		}
		if !it.Decision.Allowed && !it.ri.rule.Shadow {
			denied = true
		}
	}
	if denied {
		limited := false
		for i := range items {
			it := &items[i]
			if it.Decided && !it.Decision.Allowed && !it.ri.rule.Shadow && !it.Decision.Unavailable {
				limited = true
			}
		}
		status = StatusUnavailable
		if limited {
			status = StatusDenied
		}
		for i := range items {
			it := &items[i]
			if !it.Decided || it.Decision.Allowed || it.ri.rule.Shadow || it.Decision.Unavailable == limited {
				continue
			}
			if rep < 0 || it.Decision.RetryAfter > items[rep].Decision.RetryAfter {
				rep = i
			}
		}
		return status, rep, degraded, denied
	}
	for i := range items {
		it := &items[i]
		if !it.Decided {
			continue
		}
		if rep < 0 {
			rep = i
			continue
		}
		r := &items[rep]
		if r.ri.rule.Shadow != it.ri.rule.Shadow {
			if r.ri.rule.Shadow {
				rep = i
			}
			continue
		}
		if it.Decision.Remaining < r.Decision.Remaining {
			rep = i
		}
	}
	return StatusAllowed, rep, degraded, false
}
