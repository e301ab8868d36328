package node

import (
	"hash/maphash"
	"strconv"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/rules"
)

// item is one (rule, key) that a request is decided against.
type item struct {
	ri  *ruleInfo
	key string // the client's key, without the rule prefix
	// ckey is the counter key: rule name, ":", key. It is a view of the
	// request's reqState.keys buffer (see reqState.counterKey): valid only
	// while the request runs. Pass it to callees that do not keep it (the
	// lease Manager copies what it keeps); clone it to keep it.
	ckey string
	p    lease.Policy
	// peek marks a hits=0 look at a concurrency rule.
	peek bool
	// done: d holds the rule's decision; charged: hits were taken and must
	// be refunded if another rule denies.
	done, charged bool
	d             lease.Decision
}

// verdict is the combined answer of a request's items.
type verdict struct {
	status   int // 200, 429 or 503
	rep      int // index of the reported item; -1 when nothing matched
	degraded bool
}

// reqState is the per-request scratch space, pooled so that the hot path
// allocates nothing after warm-up.
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
	items   []item
	matches []rules.Match
	results []api.CheckResult
	buf     []byte    // the response body
	scratch []byte    // header values
	keys    []byte    // the counter keys of the items (see counterKey)
	ticks   uint32    // checks served with this state, for startTimer
	spans   []span    // per check of a batch: its items
	take    batchTake // a batch's single-item checks (see decideBatch)
}

// span is where a batch's check is in reqState.items: items[lo:hi]; take
// is its index in the batch's TakeMany, -1 when decided by Node.decide,
// and lo is -1 when the check is already answered (with an error).
type span struct{ lo, hi, take int32 }

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

func (n *Node) getState() *reqState { return n.states.Get().(*reqState) }

func (n *Node) putState(st *reqState) {
	clear(st.items)
	st.items = st.items[:0]
	clear(st.matches)
	st.matches = st.matches[:0]
	clear(st.results)
	st.results = st.results[:0]
	st.keys = st.keys[:0]
	st.spans = st.spans[:0]
	st.take.reset()
	n.states.Put(st)
}

// hitsOf returns a check's hits: 1 when the request did not say.
func hitsOf(c *api.CheckRequest) int64 {
	if !c.HitsSet {
		return 1
	}
	return c.Hits
}

// addCheck appends the items of one check request to st.items (from
// index start): either the named rule, or every rule its descriptors match.
func (st *reqState) addCheck(t *ruleTable, c *api.CheckRequest) error {
	if c.Rule != "" {
		ri := t.get(c.Rule)
		if ri == nil {
			return fieldError("rule", "unknown rule "+strconv.Quote(c.Rule))
		}
		it := item{ri: ri, key: c.Key}
		if ri.base.Algorithm == lease.Concurrency {
			if hitsOf(c) != 0 {
				return fieldError("rule", "rule "+strconv.Quote(c.Rule)+" is a concurrency rule: use /v1/acquire and /v1/release (or hits 0 to peek)")
			}
			it.peek = true
		}
		st.addItem(it)
		return nil
	}
	st.matches = t.set.MatchDescriptors(c.Descriptors, st.matches[:0])
	st.addMatches(t)
	return nil
}

// addMatches appends the items of st.matches, skipping concurrency rules
// (they are only reachable through /v1/acquire).
func (st *reqState) addMatches(t *ruleTable) {
	for i := range st.matches {
		m := &st.matches[i]
		ri := t.get(m.Rule.Name)
		if ri == nil || ri.base.Algorithm == lease.Concurrency {
			continue
		}
		st.addItem(item{ri: ri, key: m.Key})
	}
}

func (st *reqState) addItem(it item) {
	it.p = it.ri.rule.PolicyFor(it.key)
	it.ckey = st.counterKey(it.ri.prefix, it.key)
	st.items = append(st.items, it)
}

// counterKey returns prefix + key without allocating (after warm-up): a
// string view of bytes appended to st.keys, valid until st.keys is reset
// (the next check of a batch, or the end of the request). The lease
// Manager does not keep the keys it is given (it copies a key when it
// makes a new bucket), so the view is safe to pass to it.
//
// A view is never written again while it may be in use: st.keys is only
// appended to until it is reset, and when it is full a new array replaces
// it (earlier views keep the old one alive, unchanged).
func (st *reqState) counterKey(prefix, key string) string {
	n := len(prefix) + len(key)
	if cap(st.keys)-len(st.keys) < n {
		st.keys = make([]byte, 0, max(2*cap(st.keys), n, minKeysBuf))
	}
	start := len(st.keys)
	st.keys = append(st.keys, prefix...)
	st.keys = append(st.keys, key...)
	return unsafe.String(&st.keys[start], n)
}

// minKeysBuf is the first size of reqState.keys: the longest counter key
// (a 64-byte rule name, ':' and a 256-byte key) fits.
const minKeysBuf = 512

// decide decides items for hits and combines their decisions (see the
// package doc, "Several rules, one answer"). An error (a bad call the
// Manager refused) refunds what was charged.
func (n *Node) decide(items []item, hits int64) (verdict, error) {
	if c := n.cl; c != nil {
		return c.decide(items, hits)
	}
	denied := false
	var err error
	// Leased rules first: their hits can be refunded.
	for i := range items {
		it := &items[i]
		if !it.p.Algorithm.Leased() {
			continue
		}
		if err = n.decideOne(it, hits); err != nil {
			break
		}
		if !it.d.Allowed && !it.ri.rule.Shadow {
			denied = true
		}
	}
	// Then exact rules, only while nothing denied: each allowed exact
	// check records its hits for good.
	for i := range items {
		if denied || err != nil {
			break
		}
		it := &items[i]
		if it.p.Algorithm.Leased() {
			continue
		}
		if err = n.decideOne(it, hits); err != nil {
			break
		}
		if !it.d.Allowed && !it.ri.rule.Shadow {
			denied = true
		}
	}
	if denied || err != nil {
		for i := range items {
			if it := &items[i]; it.charged {
				n.mgr.Refund(it.ckey, it.p, hits)
				it.charged = false
			}
		}
	}
	if err != nil {
		return verdict{}, err
	}
	return combine(items, denied), nil
}

// decideOne asks the Manager about one item and counts the decision.
func (n *Node) decideOne(it *item, hits int64) error {
	var err error
	if it.peek {
		it.d, _, err = n.mgr.Acquire(it.ckey, it.p, 0)
	} else {
		it.d, err = n.mgr.Take(it.ckey, it.p, hits)
	}
	if err != nil {
		return err
	}
	it.record(hits)
	return nil
}

// record counts the decision it.d, made for hits, and marks it done.
func (it *item) record(hits int64) {
	it.done = true
	// A degraded decision (the Store was down: open or local failure mode)
	// took nothing from the leased bucket, so it must not be refunded there:
	// a refund would create tokens no Store granted.
	it.charged = it.d.Allowed && hits > 0 && !it.peek && !it.d.Degraded
	it.ri.checks[decisionOf(it.d, it.ri.rule.Shadow, it.p.OnFailure)].Inc()
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
// others are decided after TakeMany, in order. Items of one check that
// must be decided together (several rules, and their refunds) do not join
// either: see offer.
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

// offer adds item i of items, to be decided for hits, to the TakeMany if it
// can join (see batchTake): may says the caller allows it (an item that
// must be decided with others of its check may not), and peeks never join.
// It reports whether the item joined; one that did not must be decided
// after run, in the order of the batch.
func (b *batchTake) offer(items []item, i int, hits int64, may bool) bool {
	it := &items[i]
	if b.seen.add(it.ckey) || !may || it.peek {
		return false
	}
	b.cs = append(b.cs, lease.Check{Key: it.ckey, Policy: it.p, Hits: hits})
	b.idx = append(b.idx, int32(i))
	return true
}

// run decides the items offered with one TakeMany and records their
// decisions in items (as decideOne does). An item refused by the Manager
// keeps done false; its error is b.cs[j].Err.
func (b *batchTake) run(m *lease.Manager, items []item) {
	if len(b.cs) == 0 {
		return
	}
	m.TakeMany(b.cs)
	for j := range b.cs {
		if c := &b.cs[j]; c.Err == nil {
			it := &items[b.idx[j]]
			it.d = c.Decision
			it.record(c.Hits)
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
	}
	return decAllowed
}

// combine picks the answer: when denied, the non-shadow denial with the
// longest retry-after (429 if any rule denied on its limit, else 503); when
// allowed, the rule with the least remaining, preferring non-shadow rules.
func combine(items []item, denied bool) verdict {
	v := verdict{status: fasthttp.StatusOK, rep: -1}
	for i := range items {
		if it := &items[i]; it.done && it.d.Degraded {
			v.degraded = true
		}
	}
	if denied {
		limited := false
		for i := range items {
			it := &items[i]
			if it.done && !it.d.Allowed && !it.ri.rule.Shadow && !it.d.Unavailable {
				limited = true
			}
		}
		v.status = fasthttp.StatusServiceUnavailable
		if limited {
			v.status = fasthttp.StatusTooManyRequests
		}
		for i := range items {
			it := &items[i]
			if !it.done || it.d.Allowed || it.ri.rule.Shadow || it.d.Unavailable == limited {
				continue
			}
			if v.rep < 0 || it.d.RetryAfter > items[v.rep].d.RetryAfter {
				v.rep = i
			}
		}
		return v
	}
	for i := range items {
		it := &items[i]
		if !it.done {
			continue
		}
		if v.rep < 0 {
			v.rep = i
			continue
		}
		r := &items[v.rep]
		if r.ri.rule.Shadow != it.ri.rule.Shadow {
			if r.ri.rule.Shadow {
				v.rep = i
			}
			continue
		}
		if it.d.Remaining < r.d.Remaining {
			v.rep = i
		}
	}
	return v
}

// result fills dst with the answer of v for items.
func result(dst *api.CheckResult, items []item, v verdict) {
	*dst = api.CheckResult{Allowed: v.status == fasthttp.StatusOK, Degraded: v.degraded}
	if v.rep < 0 {
		return
	}
	it := &items[v.rep]
	dst.Rule = it.ri.name
	dst.Key = it.key
	dst.Limit = it.p.Limit
	dst.Remaining = max(it.d.Remaining, 0)
	dst.ResetMS = ceilMillis(it.d.Reset)
	if !dst.Allowed {
		dst.RetryAfterMS = max(ceilMillis(it.d.RetryAfter), 1)
	}
}
