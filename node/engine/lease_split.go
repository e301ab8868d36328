package engine

import (
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// Regional holders (docs/regions.md): a region's node leasing the keys of
// global rules from this cluster (the global tier) names its region in the
// lease request. It is not bound by gateway_share (a region may need most
// of a key); instead, while the regional holders of a key together ask for
// more than its rate (the sum of the demands they report is above
// limit/period), the key is split among them in proportion to their
// demand (Doorman's proportional share): each regional holder earns
// credit at share × rate, up to share × capacity, and is granted at most
// its credit. A holder whose credit cannot cover the tokens it needs is
// answered with a wait until it can, the Store asked for no tokens (only
// to renew and settle its loan, as any call does). Below
// saturation nothing is clamped: the Store grants what it has.
const (
	// regionStale is how long a regional holder's demand counts after
	// its last lease call: a region that stopped calling (its key went
	// idle there: its Manager returns the tokens after its Idle) stops
	// taking a share.
	regionStale = 5 * time.Second
	// maxRegionHolders bounds the regional holders split per key; more
	// are bound by gateway_share.
	maxRegionHolders = 64
	// maxRegionKeys bounds the keys split at once; the holders of more
	// keys are bound by gateway_share.
	maxRegionKeys = 1 << 16
)

// regionSplit is the demand split of the keys regional holders lease.
type regionSplit struct {
	now  func() time.Time
	mu   sync.Mutex
	keys map[string]*splitKey // counter key → its regional holders
	next time.Time            // next sweep of stale holders
}

type splitKey struct {
	holders map[string]*splitHolder // holder id → its share
}

type splitHolder struct {
	demand float64   // checks per second, as last reported
	seen   time.Time // its last lease call
	credit float64   // tokens it may still be granted while saturated
	last   time.Time // when credit was last earned
}

func newRegionSplit(now func() time.Time) *regionSplit {
	if now == nil {
		now = time.Now
	}
	return &regionSplit{now: now, keys: map[string]*splitKey{}}
}

// clamp bounds a lease op of regional holder on ckey (policy p) by its
// share of the key: op is the op (its Demand, and its Held for a wait's
// answer), *want and *need what it asks. It reports false when the holder
// cannot be split (too many keys or holders: the caller bounds it by
// gateway_share). Otherwise res, when deny is true, is the answer to give,
// the Store only renewing the loan (the holder's credit cannot cover the
// tokens it needs); else *want (and *need) were lowered to its credit, if
// saturated.
func (s *regionSplit) clamp(ckey, holder string, p lease.Policy, op *LeaseOp, want, need *int64) (res lease.Grant, deny, ok bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep(now)
	k := s.keys[ckey]
	if k == nil {
		if len(s.keys) >= maxRegionKeys {
			return res, false, false
		}
		k = &splitKey{holders: map[string]*splitHolder{}}
		s.keys[ckey] = k
	}
	h := k.holders[holder]
	if h == nil {
		if len(k.holders) >= maxRegionHolders {
			return res, false, false
		}
		// A holder starts with its whole share of the capacity, as one
		// that was below saturation: the Store still bounds what all are
		// granted; credit only bounds each holder's part of it.
		h = &splitHolder{last: now, credit: math.Inf(1)}
		k.holders[holder] = h
	}
	switch {
	case op.Demand > 0:
		h.demand = float64(op.Demand)
	case h.demand == 0: // unknown (the region's first calls of the key): its lease size is all there is
		h.demand = float64(*want) / max(p.Period.Seconds(), 1e-3)
	}
	h.seen = now
	var total float64
	for _, o := range k.holders {
		total += o.demand
	}
	rate := float64(p.Limit) / p.Period.Seconds()
	share := h.demand / total
	earn := share * rate
	top := max(share*float64(p.Capacity()), 1)
	h.credit = min(h.credit+earn*now.Sub(h.last).Seconds(), top)
	h.last = now
	if total <= rate || len(k.holders) < 2 {
		h.credit = top // not saturated: no bound, and full credit once it is
		return res, false, true
	}
	n := max(*need, 1)
	// A check of more hits than the holder's share of the capacity waits
	// for a whole share, then goes to the Store.
	if goal := min(float64(n), top); h.credit < goal {
		wait := max(time.Duration((goal-h.credit)/earn*float64(time.Second)), time.Millisecond)
		return lease.Grant{
			// The Store's loan to the holder is unchanged: what it holds.
			Lent: op.To.Held,
			Wait: wait,
			// What the holder may be granted now (its credit; the caller
			// lowers it to the Store's), and the wait as the reset: a
			// holder projects the key's level from them (a sliding
			// window's refills at the key's rate from Remaining, faster
			// than its credit; a reset of a period would have it take
			// the key for empty until then), and asks once they cover
			// its need.
			Remaining: int64(math.Floor(h.credit)),
			Reset:     wait,
		}, true, true
	}
	*want = max(min(*want, int64(math.Floor(h.credit))), n)
	*need = min(*need, *want)
	return res, false, true
}

// granted charges holder's credit for a grant of n tokens of ckey.
func (s *regionSplit) granted(ckey, holder string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[ckey]; k != nil {
		if h := k.holders[holder]; h != nil {
			h.credit = max(h.credit-float64(n), 0)
		}
	}
}

// drop forgets holder's share of ckey (it returned its tokens: the key
// went idle in its region).
func (s *regionSplit) drop(ckey, holder string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[ckey]; k != nil {
		delete(k.holders, holder)
		if len(k.holders) == 0 {
			delete(s.keys, ckey)
		}
	}
}

// sweep drops the holders not seen for regionStale (at most once a
// second; s.mu held).
func (s *regionSplit) sweep(now time.Time) {
	if now.Before(s.next) {
		return
	}
	s.next = now.Add(time.Second)
	for ckey, k := range s.keys {
		for id, h := range k.holders {
			if now.Sub(h.seen) > regionStale {
				delete(k.holders, id)
			}
		}
		if len(k.holders) == 0 {
			delete(s.keys, ckey)
		}
	}
}
