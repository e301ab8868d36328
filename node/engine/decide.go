package node

import (
	"context"
	"hash/maphash"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

// The decision engine. Every front end (the HTTP checks and forward-auth
// here, the Envoy RLS server, the dashboard) fills a Batch with requests of
// (rule, key, hits) items and calls Node.Decide. One path decides them all,
// on a single node as in a cluster: a single node is a cluster of one (a
// ring of itself, no peers), so routing is a step that sends nothing.
//
//  1. resolve: each item's rule, policy (overrides applied) and counter
//     key; a request with a bad item is not decided (Request.Err).
//  2. the leased phase: the leased items of every request, split by where
//     they are decided (route.go: this node's Manager, or the owner peer
//     in one forwarding call per peer, all peers at once);
//  3. the exact phase: the exact items (sliding_log) of the requests that
//     nothing denied, the same way;
//  4. refunds: the hits charged to the items of a denied (or failed)
//     request go back where they were charged;
//  5. the verdict of each request (combine).

// Item is one (rule, key, hits) of a request given to Node.Decide and,
// once decided, its result. The strings may be views of a request body:
// Decide does not keep them.
type Item struct {
	// Rule names the rule; Key is the client's key for it (without the
	// rule prefix).
	Rule, Key string
	// Hits is what the item takes. 0 is a peek: it takes nothing and only
	// a rule already over its limit denies it. On a concurrency rule only
	// 0 is allowed (slots are taken with /v1/acquire).
	Hits int64

	// Decided reports whether Decision holds the rule's decision: the exact
	// items of a request that a leased rule denied are not decided, nor the
	// items of a request that erred.
	Decided  bool
	Decision lease.Decision
	// Policy is the rule's policy for Key (its overrides applied); set
	// once the item is resolved.
	Policy lease.Policy

	// Set by Decide:
	ri   *ruleInfo
	ckey string // rule prefix + key: a view of Batch.keys (see counterKey)
	req  int32  // the index of the item's request in Batch.Requests
	// peek: hits=0 on a concurrency rule; charged: hits were taken and
	// must be refunded if the request is denied; alone: the only item of
	// its request; owner: the peer that charged them ("" here).
	peek, charged, alone bool
	owner                string
}

// Request is one request of a Batch: its items are decided together, and
// it is allowed only if every item's rule allows (shadow rules never deny).
// Decide sets its verdict.
type Request struct {
	// Status is 200 (allowed), 429 (a rule denied on its limit) or 503
	// (a rule whose on_store_failure is closed could not decide, and none
	// denied on its limit); 0 when Err is set.
	Status int
	// Rep is the index in Batch.Items of the item the answer reports (its
	// rule's headers and body): when denied, the denying rule with the
	// longest retry-after; when allowed, the rule with the least remaining
	// (non-shadow rules first). -1 when the request has no items (it
	// matched no rule: allowed) or erred.
	Rep int
	// Degraded: a rule was decided without the Store (on_store_failure
	// open or local).
	Degraded bool
	// Err is why the request was not decided (nothing it charged is kept):
	// a bad item (an error naming the field: an unknown rule, hits on a
	// concurrency rule), ErrNotReady before the first rule set, or an
	// error of the Manager. ErrItem is the index in Batch.Items of the item
	// it is about, -1 when none.
	Err     error
	ErrItem int

	lo, hi int32
	denied bool
	remote bool // in the current phase, some item went to a peer
}

// Allowed reports whether the request was allowed.
func (q *Request) Allowed() bool { return q.Status == fasthttp.StatusOK }

// Batch is one or more requests for Node.Decide, and their results. Fill
// it with Add and End, call Decide, read Requests and
// Items; Reset it to reuse it. The zero value is an empty Batch. A Batch
// is not safe for concurrent use, and must not be copied once used: keep
// it (for example in a sync.Pool) and Reset it, so that deciding
// allocates nothing once its buffers have grown.
type Batch struct {
	// Items holds every request's items, request after request; Requests
	// the requests, in the order they were ended. Read them and their
	// elements, but grow and shrink them only with Add, End and Reset:
	// their slots past len are kept zero (Reset clears what a batch used),
	// so that Add and End fill a slot in place.
	Items    []Item
	Requests []Request

	open  int32  // the first item of the request not yet ended
	exact int32  // resolved exact (not leased) items: 0 skips that phase
	keys  []byte // the counter keys of the items (see counterKey)
	local []int32
	// groups: per peer, the items of a phase (or the refunds) sent to it.
	groups []peerGroup
	wg     sync.WaitGroup
	take   batchTake
}

// Reset empties b for reuse (keeping its buffers, zeroed).
func (b *Batch) Reset() {
	clear(b.Items) // drop the views of the last requests; see Items
	b.Items = b.Items[:0]
	clear(b.Requests)
	b.Requests = b.Requests[:0]
	b.open, b.exact = 0, 0
	b.keys = b.keys[:0]
	b.local = b.local[:0]
	b.resetGroups()
	b.take.reset()
}

// Add appends an item to the request being built (ended by End).
func (b *Batch) Add(rule, key string, hits int64) {
	// Filled in place (see Batch: the slots past len are zero), not with
	// append(b.Items, Item{...}), which builds the 192-byte Item on the
	// stack and copies it: a tenth of the engine's work per item.
	n := len(b.Items)
	if n < cap(b.Items) {
		b.Items = b.Items[:n+1]
	} else {
		b.Items = append(b.Items, Item{})
	}
	it := &b.Items[n]
	it.Rule, it.Key, it.Hits = rule, key, hits
}

// End ends the request made of the items added since the last End (none:
// a request that matched no rule, allowed) and returns its index in
// Requests.
func (b *Batch) End() int {
	n := len(b.Requests)
	if n < cap(b.Requests) {
		b.Requests = b.Requests[:n+1]
	} else {
		b.Requests = append(b.Requests, Request{})
	}
	q := &b.Requests[n] // zero, as Items' slots
	q.lo, q.hi, q.Rep, q.ErrItem = b.open, int32(len(b.Items)), -1, -1
	b.open = int32(len(b.Items))
	return n
}

// ItemsOf returns the items of request i.
func (b *Batch) ItemsOf(i int) []Item {
	q := &b.Requests[i]
	return b.Items[q.lo:q.hi]
}

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
func (n *Node) Decide(ctx context.Context, b *Batch) {
	n.decide(ctx, n.rules.Load(), b)
}

// decide is Decide with the rule table t (the HTTP front ends pass the
// table they matched descriptors with).
func (n *Node) decide(ctx context.Context, t *ruleTable, b *Batch) {
	if int(b.open) < len(b.Items) {
		b.End()
	}
	var last *ruleInfo // see resolve
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
	r := n.routes.Load()
	if len(b.Requests) == 1 && n.decideSingle(r, b) {
		return
	}
	n.phase(ctx, r, b, true)
	if b.exact > 0 {
		n.phase(ctx, r, b, false)
	}
	n.refund(ctx, b)
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
func (n *Node) decideSingle(r *routes, b *Batch) bool {
	q := &b.Requests[0]
	if q.hi-q.lo != 1 || q.Err != nil {
		return false
	}
	it := &b.Items[q.lo]
	if !it.peek && n.peer(r, it.ckey) != "" {
		return false
	}
	if err := n.decideOne(it); err != nil {
		q.Err, q.ErrItem = err, int(q.lo)
		return true
	}
	n.servedHere(it)
	b.combine(q)
	return true
}

// servedHere counts an item decided by this node as its owner (or a
// holder of its split): in a cluster, a routed item decided by self, and
// an observation for the hot-key sketch.
func (n *Node) servedHere(it *Item) {
	if c := n.cl; c != nil {
		c.met.local.Inc()
		if !it.peek {
			c.hot.h.Observe(it.ckey) // a key this node owns or holds
		}
	}
}

// resolve fills in item i of b (of request qi, whose only item it is if
// alone): its rule, policy and counter key; an unknown rule, or hits on a
// concurrency rule, is an error naming the field "rule". *last is the rule
// of the item resolved before (nil at first): a batch's items mostly name
// one rule, and comparing the name costs less than the table's lookup.
func (b *Batch) resolve(t *ruleTable, i, qi int32, alone bool, last **ruleInfo) error {
	it := &b.Items[i] // as Add made it
	it.req, it.alone = qi, alone
	ri := *last
	if ri == nil || ri.name != it.Rule {
		if ri = t.get(it.Rule); ri == nil {
			return fieldError("rule", "unknown rule "+strconv.Quote(it.Rule))
		}
		*last = ri
	}
	if ri.base.Algorithm == lease.Concurrency {
		if it.Hits != 0 {
			return fieldError("rule", "rule "+strconv.Quote(it.Rule)+" is a concurrency rule: use /v1/acquire and /v1/release (or hits 0 to peek)")
		}
		it.peek = true
	}
	it.ri = ri
	it.Policy = ri.rule.PolicyFor(it.Key)
	if !it.Policy.Algorithm.Leased() {
		b.exact++
	}
	it.ckey = b.counterKey(ri.prefix, it.Key)
	return nil
}

// counterKey returns prefix + key without allocating (after warm-up): a
// string view of bytes appended to b.keys, valid until b.keys is reset
// (the next Reset). The lease Manager does not keep the keys it is given
// (it copies a key when it makes a new bucket), so the view is safe to
// pass to it.
//
// A view is never written again while it may be in use: b.keys is only
// appended to until it is reset, and when it is full a new array replaces
// it (earlier views keep the old one alive, unchanged).
func (b *Batch) counterKey(prefix, key string) string {
	n := len(prefix) + len(key)
	if n == 0 {
		return ""
	}
	if cap(b.keys)-len(b.keys) < n {
		b.keys = make([]byte, 0, max(2*cap(b.keys), n, minKeysBuf))
	}
	start := len(b.keys)
	b.keys = append(b.keys, prefix...)
	b.keys = append(b.keys, key...)
	return unsafe.String(&b.keys[start], n)
}

// minKeysBuf is the first size of Batch.keys: the longest counter key
// (a 64-byte rule name, ':' and a 256-byte key) fits.
const minKeysBuf = 512

// decideLocals decides the items b.local of a phase with this node's
// Manager: those that can (see batchTake) with one TakeMany, their Store
// calls overlapped, then the others in order. A request decided entirely
// here is refunded as soon as its last item of the phase is decided and it
// is denied, so that the requests after it see its hits given back, as if
// the requests were decided one by one.
func (n *Node) decideLocals(b *Batch) {
	if len(b.local) == 1 {
		i := b.local[0]
		n.decideLocal(b, i)
		n.refundEarly(b, i)
		return
	}
	tk := &b.take
	tk.reset()
	for _, i := range b.local {
		tk.offer(b.Items, int(i))
	}
	tk.run(n.mgr, b)
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
		n.decideLocal(b, i)
		if k+1 == len(b.local) || b.Items[b.local[k+1]].req != b.Items[i].req {
			n.refundEarly(b, i)
		}
	}
	tk.reset() // drop the key views
}

// refundEarly refunds the request of item i (its last local item of the
// phase) at once when it is denied or failed and all its items of the
// phase were decided here; others are refunded after both phases.
func (n *Node) refundEarly(b *Batch, i int32) {
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
			n.mgr.Refund(it.ckey, it.Policy, it.Hits)
			it.charged = false
		}
	}
}

// decideLocal decides item i with this node's Manager, unless its request
// already erred.
func (n *Node) decideLocal(b *Batch, i int32) {
	it := &b.Items[i]
	q := &b.Requests[it.req]
	if q.Err != nil {
		return
	}
	if err := n.decideOne(it); err != nil {
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
func (n *Node) decideOne(it *Item) error {
	var err error
	if it.peek {
		it.Decision, _, err = n.mgr.Acquire(it.ckey, it.Policy, 0)
	} else {
		it.Decision, err = n.mgr.Take(it.ckey, it.Policy, it.Hits)
	}
	if err != nil {
		return err
	}
	it.record()
	return nil
}

// record counts the decision of it and marks it decided.
func (it *Item) record() {
	it.Decided = true
	// A degraded decision (the Store was down: open or local failure mode)
	// took nothing from the leased bucket, so it must not be refunded there:
	// a refund would create tokens no Store granted.
	it.charged = it.Decision.Allowed && it.Hits > 0 && !it.peek && !it.Decision.Degraded
	it.ri.checks[decisionOf(it.Decision, it.ri.rule.Shadow, it.Policy.OnFailure)].Inc()
}

// batchTake gathers the items of a batch that one Manager.TakeMany
// decides, so that their Store calls overlap instead of running one after
// another (a batch of cold keys on Redis: one round trip per
// lease.Config.BatchWorkers keys, not one per key).
//
// TakeMany does not keep the order of several checks of one key, and the
// items it decides are decided before the others of the batch. So that a
// batch is still decided as if its items were decided one by one in order
// (two checks of a key with one token left: the first is allowed), an item
// joins only if no earlier item of the batch has its counter key; the
// others are decided after TakeMany, in order. Items of a request with
// several items (several rules, and their refunds) do not join either.
type batchTake struct {
	cs   []lease.Check // the Take calls; Key is a view (see counterKey)
	idx  []int32       // cs[j] decides items[idx[j]]
	seen keySet        // the counter keys of the batch so far
}

// reset empties b for the next batch (or phase).
func (b *batchTake) reset() {
	clear(b.cs) // drop the key views and errors
	b.cs = b.cs[:0]
	b.idx = b.idx[:0]
	b.seen.reset()
}

// offer adds item i of items to the TakeMany if it can join (see
// batchTake): the only item of its request, not a peek. It reports
// whether the item joined; one that did not must be decided after run, in
// the order of the batch.
func (b *batchTake) offer(items []Item, i int) bool {
	it := &items[i]
	if b.seen.add(it.ckey) || !it.alone || it.peek {
		return false
	}
	// In place, as Batch.Add: reset keeps the slots past len zero.
	n := len(b.cs)
	if n < cap(b.cs) {
		b.cs = b.cs[:n+1]
	} else {
		b.cs = append(b.cs, lease.Check{})
	}
	c := &b.cs[n]
	c.Key, c.Policy, c.Hits = it.ckey, it.Policy, it.Hits
	b.idx = append(b.idx, int32(i))
	return true
}

// run decides the items offered with one TakeMany and records their
// decisions in bt's items (as decideLocal does). An item refused by the
// Manager stays undecided; its error is b.cs[j].Err.
func (b *batchTake) run(m *lease.Manager, bt *Batch) {
	if len(b.cs) == 0 {
		return
	}
	m.TakeMany(b.cs)
	for j := range b.cs {
		if c := &b.cs[j]; c.Err == nil {
			it := &bt.Items[b.idx[j]]
			it.Decision = c.Decision
			it.record()
			bt.noteDenied(it)
		}
	}
}

// keySet is a set of keys, kept as their 64-bit hashes (open addressing,
// no allocation once grown). Two keys with one hash count as one: for
// batchTake that only keeps an item out of the TakeMany.
type keySet struct {
	slots []uint64 // 0 is empty; a hash is stored with its low bit set
	n     int
	seed  maphash.Seed
}

func (s *keySet) reset() {
	if s.n > 0 {
		clear(s.slots)
		s.n = 0
	}
}

// add adds key and reports whether it was already in the set.
func (s *keySet) add(key string) bool {
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	h := maphash.String(s.seed, key) | 1
	if s.insert(h) {
		return true
	}
	s.n++
	return false
}

// insert puts h in place, reporting whether it was there.
func (s *keySet) insert(h uint64) bool {
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			s.slots[i] = h
			return false
		}
	}
}

// grow doubles the table (64 slots at first) and puts the hashes back.
func (s *keySet) grow() {
	old := s.slots
	if old == nil {
		s.seed = maphash.MakeSeed()
	}
	s.slots = make([]uint64, max(64, 2*len(old)))
	for _, h := range old {
		if h != 0 {
			s.insert(h)
		}
	}
}

// decisionOf is the decision label of d.
func decisionOf(d lease.Decision, shadow bool, mode lease.FailureMode) int {
	switch {
	case d.Unavailable:
		return decUnavailable
	case !d.Allowed && shadow:
		return decShadowDenied
	case !d.Allowed:
		return decDenied
	case d.Degraded && mode == lease.FailOpen:
		return decDegraded
	case d.Degraded:
		return decLocal
	}
	return decAllowed
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
		return fasthttp.StatusOK, -1, false, false
	}
	d := &it.Decision
	if d.Allowed || it.ri.rule.Shadow {
		return fasthttp.StatusOK, 0, d.Degraded, false
	}
	if d.Unavailable {
		return fasthttp.StatusServiceUnavailable, 0, d.Degraded, true
	}
	return fasthttp.StatusTooManyRequests, 0, d.Degraded, true
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
		status = fasthttp.StatusServiceUnavailable
		if limited {
			status = fasthttp.StatusTooManyRequests
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
	return fasthttp.StatusOK, rep, degraded, false
}

// result fills dst with the answer of request q of b.
func (b *Batch) result(dst *api.CheckResult, q *Request) {
	*dst = api.CheckResult{Allowed: q.Allowed(), Degraded: q.Degraded}
	if q.Rep < 0 {
		return
	}
	it := &b.Items[q.Rep]
	dst.Rule = it.ri.name
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
