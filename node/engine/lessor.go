package engine

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// The lessor: how the owner of a key applies a lease op of a holder
// outside the cluster, with one call of its Store (two when the holder
// asks more than it may hold, see check).
//
//   - A gateway holder never holds more than its rule's gateway_share of
//     the key's capacity (at least one token): a lease asks at most the
//     share less what the holder says it holds (Held; the Store keeps at
//     most that of its loan), and a check needing more than that room is
//     decided by the owner as a check: the loan is renewed and settled,
//     lending nothing, and the Need is a grant to no holder, spent at once
//     (LeaseResult.Checked). A holder's report of what it holds is its own
//     word: one that says it holds nothing when it still does is lent its
//     share again, which the Store counts as spent from the key, as
//     spending it would be (what it can take is what its checks could).
//   - A region's holder (Region) is not bound by the share: while the
//     regions together ask more than the key's rate, the key is split
//     among them by demand (lease_split.go).
//   - A key has at most its rule's max_holders holders (lease.Lessee's
//     MaxHolders): a new holder past it is answered as a check by the
//     Store (LeaseResult.Crowded).
//   - fixed_window shares ahead are bound by the share and by
//     MaxLeaseTTL (what a crashed gateway may strand).
//
// Every grant, return and report is counted per rule, and what the Store
// lends each holder is kept in the lessor's book (lease_book.go) until
// its loan ends: /v1/stats and the metrics show it.

// MaxLeaseTTL bounds the TTL a holder outside the cluster may ask
// (node/api's MaxLeaseTTLMS): what a crashed gateway strands, at most.
const MaxLeaseTTL = time.Minute

// lessor is an Engine's state for the lease protocol.
type lessor struct {
	now   func() time.Time
	book  *leaseBook
	split *regionSplit
}

func newLessor(e *Engine, now func() time.Time) *lessor {
	if now == nil {
		now = time.Now
	}
	return &lessor{now: now, book: newLeaseBook(e.set, now), split: newRegionSplit(now)}
}

// shareOf is the most a gateway holder may hold of p's capacity with
// gateway_share share (at least one token).
func shareOf(p lease.Policy, share float64) int64 {
	return max(int64(float64(p.Capacity())*share), 1)
}

// aheadOf is the shares ahead a gateway's fixed_window lease may ask:
// each window's share within the gateway's share of the limit, as its
// grants are, and no further ahead than MaxLeaseTTL, so that a gateway
// that crashes strands its shares no longer than its tokens.
func aheadOf(to lease.Lessee, p lease.Policy, share float64) (windows, tokens int64) {
	if to.AheadWindows <= 0 || to.AheadTokens <= 0 || p.Period <= 0 {
		return 0, 0
	}
	windows = min(to.AheadWindows, int64(MaxLeaseTTL/p.Period))
	tokens = min(to.AheadTokens, shareOf(p, share))
	if windows <= 0 {
		return 0, 0
	}
	return windows, tokens
}

// apply applies lo with store (the owner's).
func (l *lessor) apply(store lease.Store, lo *leaseOp) LeaseResult {
	op := lo.op
	ctx := context.Background()
	rm := lo.r.lease.Load()
	if rm == nil {
		rm = l.book.ruleMetrics(lo.r.name)
		lo.r.lease.Store(rm)
	}
	switch op.Kind {
	case LeaseReturn:
		if err := store.Return(ctx, lo.ckey, lo.p, op.Tokens, op.Holder); err != nil {
			return LeaseResult{Err: err.Error()}
		}
		l.book.returned(op.Holder, lo.ckey, rm, op.Tokens)
		if op.Region != "" {
			l.split.drop(lo.ckey, op.Holder)
		}
		return LeaseResult{}
	case LeasePeek:
		// A peek lends nothing: no holder named, so that no loan of
		// the holder's is settled by it.
		gr, err := store.Lease(ctx, lo.ckey, lo.p, 0, 0, lease.Lessee{})
		if err != nil {
			return LeaseResult{Err: err.Error()}
		}
		return LeaseResult{Grant: lease.Grant{Remaining: gr.Remaining, Wait: gr.Wait, Reset: gr.Reset}}
	}
	to := op.To
	to.ID, to.AheadWindows, to.AheadTokens = op.Holder, 0, 0
	to.MaxHolders = lo.r.rule.MaxHolders
	want, need := op.Want, min(op.Need, op.Want)
	share := lo.r.rule.GatewayShare
	region := op.Region != ""
	var wait *lease.Grant // a region's split says wait: the Store only renews the loan
	bound := !region
	if region {
		res, deny, ok := l.split.clamp(lo.ckey, op.Holder, lo.p, op, &want, &need)
		switch {
		case !ok:
			bound = true // too many regions or keys to split: bound by the share
		case deny:
			wait, want, need = &res, 0, 0
		}
	}
	if bound {
		most := shareOf(lo.p, share)
		room := most - min(to.Held, most)
		if need > room {
			return l.check(ctx, store, lo, to, need, rm)
		}
		want = max(min(want, room), need)
		if !region && lo.p.Algorithm.LeasesAhead() {
			to.AheadWindows, to.AheadTokens = aheadOf(op.To, lo.p, share)
		}
	}
	gr, err := store.Lease(ctx, lo.ckey, lo.p, want, need, to)
	if err != nil {
		return LeaseResult{Err: err.Error()}
	}
	if wait != nil {
		gr = lease.Grant{Lent: gr.Lent, Remaining: min(gr.Remaining, wait.Remaining), Wait: wait.Wait, Reset: wait.Reset,
			Crowded: gr.Crowded}
	}
	if region {
		l.split.granted(lo.ckey, op.Holder, gr.Granted)
	}
	l.book.lent(op.Holder, region, lo.ckey, rm, to, gr, lo.p)
	return LeaseResult{Grant: gr, Crowded: gr.Crowded}
}

// check decides a lease op's need as a check: the holder may not hold
// that much. The Store renews and settles the holder's loan, lending
// nothing, then grants need to no holder (spent at once). The result
// carries the loan as the renewal left it, so that the holder keeps what
// it holds, and the check's grant, which the check that asked spends.
func (l *lessor) check(ctx context.Context, store lease.Store, lo *leaseOp, to lease.Lessee, need int64, rm *leaseRuleMetrics) LeaseResult {
	renew, err := store.Lease(ctx, lo.ckey, lo.p, 0, 0, to)
	if err != nil {
		return LeaseResult{Err: err.Error()}
	}
	gr, err := store.Lease(ctx, lo.ckey, lo.p, need, need, lease.Lessee{})
	if err != nil {
		return LeaseResult{Err: err.Error()}
	}
	rm.checked.Inc()
	l.book.lent(lo.op.Holder, lo.op.Region != "", lo.ckey, rm, to, renew, lo.p)
	rm.granted.AddInt64(gr.Granted)
	return LeaseResult{Grant: lease.Grant{Granted: gr.Granted, Remaining: gr.Remaining, Wait: gr.Wait, Reset: gr.Reset, Lent: renew.Lent,
		Checked: true}, Checked: true}
}
