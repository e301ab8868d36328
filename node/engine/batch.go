package engine

import (
	"sync"
	"unsafe"

	"github.com/sluicehq/sluice/lease"
)

// The verdicts of a Request (Request.Status), HTTP's status codes so that
// HTTP front ends answer them as they are.
const (
	StatusAllowed     = 200 // every rule allowed (shadow rules never deny)
	StatusDenied      = 429 // a rule denied on its limit
	StatusUnavailable = 503 // a rule could not decide (on_store_failure: closed, or shed) and none denied on its limit
)

// Item is one (rule, key, hits) of a request given to Engine.Decide and,
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
	ri   *Rule  // nil until resolved
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

// Info returns the item's rule once resolved (nil before, and for an
// unknown rule).
func (it *Item) Info() *Rule { return it.ri }

// Allowed reports whether the request was allowed.
func (q *Request) Allowed() bool { return q.Status == StatusAllowed }

// Batch is one or more requests for Engine.Decide, and their results. Fill
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
	owned  bool // decided by DecideOwned: count nothing
}

// Reset empties b for reuse (keeping its buffers, zeroed).
func (b *Batch) Reset() {
	clear(b.Items) // drop the views of the last requests; see Items
	b.Items = b.Items[:0]
	clear(b.Requests)
	b.Requests = b.Requests[:0]
	b.open, b.exact, b.owned = 0, 0, false
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
