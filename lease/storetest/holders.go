package storetest

import (
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// The bound on a key's holders (lease.Lessee.MaxHolders): a holder
// without a running loan of a key that MaxHolders holders hold is crowded
// out: its call lends nothing and is made as a call with no holder for
// exactly need tokens (Grant.Crowded).

var holderCases = []struct {
	name string
	fn   func(*env)
}{
	{"holders/token_bucket_bound", func(e *env) { holdersBound(e, lease.TokenBucket) }},
	{"holders/gcra_bound", func(e *env) { holdersBound(e, lease.GCRA) }},
	{"holders/fixed_window_bound", func(e *env) { holdersBound(e, lease.FixedWindow) }},
	{"holders/sliding_window_bound", func(e *env) { holdersBound(e, lease.SlidingWindow) }},
	{"holders/token_bucket_loan_ends", func(e *env) { holdersLoanEnds(e, lease.TokenBucket) }},
	{"holders/gcra_loan_ends", func(e *env) { holdersLoanEnds(e, lease.GCRA) }},
	{"holders/fixed_window_window_ends", func(e *env) { holdersWindowEnds(e, lease.FixedWindow) }},
	{"holders/sliding_window_window_ends", func(e *env) { holdersWindowEnds(e, lease.SlidingWindow) }},
	{"holders/fixed_window_share", holdersShare},
}

// checkCrowded fails unless g is the answer of a call crowded out
// (crowded) or not, granting granted and lending lent.
func (e *env) checkCrowded(who string, g lease.Grant, crowded bool, granted, lent int64, why string) {
	e.t.Helper()
	if g.Crowded != crowded || g.Granted != granted || g.Lent != lent {
		e.t.Fatalf("%s: got crowded=%t granted=%d lent=%d, want crowded=%t granted=%d lent=%d\n  why: %s",
			who, g.Crowded, g.Granted, g.Lent, crowded, granted, lent, why)
	}
}

// leaseTo is Lease as to, failing on an error.
func (e *env) leaseTo(key string, p lease.Policy, want, need int64, to lease.Lessee) lease.Grant {
	e.t.Helper()
	g, err := e.s.Lease(e.ctx, key, p, want, need, to)
	if err != nil {
		e.t.Fatalf("Lease(%s; want=%d need=%d; as %s, max holders %d): %v", describe(p), want, need, to.ID, to.MaxHolders, err)
	}
	return g
}

// remaining is what a peek of key finds.
func (e *env) remaining(key string, p lease.Policy) int64 {
	e.t.Helper()
	return e.leaseTo(key, p, 0, 0, lease.Lessee{}).Remaining
}

// holdersBound: MaxHolders + 5 holders race for their first loan of one
// key: exactly MaxHolders are lent, the others crowded out, each granted
// exactly its need (not its want), spent at once. A holder with a loan
// keeps leasing; a crowded one stays crowded out (its grant left it no
// loan) and gets nothing back from a return; a crowded call the key
// cannot cover is denied as any; MaxHolders 0 bounds nothing.
func holdersBound(e *env, alg lease.Algorithm) {
	const bound, limit = 3, 1000
	const racers = bound + 5
	p := lease.Policy{Algorithm: alg, Limit: limit, Period: time.Hour}
	if alg == lease.FixedWindow || alg == lease.SlidingWindow {
		p.Period = quietHours(e)
	}
	k := e.key()
	who := func(i int) lease.Lessee {
		return lease.Lessee{ID: fmt.Sprintf("racer-%d", i), TTL: time.Hour, MaxHolders: bound}
	}
	grants := make([]lease.Grant, racers)
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() { grants[i], errs[i] = e.s.Lease(e.ctx, k, p, 5, 2, who(i)) })
	}
	wg.Wait()
	lent, crowded := -1, 0
	for i, g := range grants {
		if errs[i] != nil {
			e.t.Fatalf("%s: racer %d: %v", alg, i, errs[i])
		}
		if g.Crowded {
			crowded++
			e.checkCrowded(fmt.Sprintf("%s: racer %d", alg, i), g, true, 2, 0, "crowded out: a call with no holder for exactly its need (2), not its want (5), lending nothing")
			continue
		}
		e.checkCrowded(fmt.Sprintf("%s: racer %d", alg, i), g, false, 5, 5, "one of the first holders: its want, lent")
		lent = i
	}
	if crowded != racers-bound {
		e.t.Fatalf("%s: %d holders racing for a key of at most %d: %d crowded out, want exactly %d", alg, racers, bound, crowded, racers-bound)
	}
	if got, want := e.remaining(k, p), int64(limit-bound*5-(racers-bound)*2); got != want {
		e.t.Fatalf("%s: %d remaining after the race, want %d (the crowded calls' grants are spent)", alg, got, want)
	}
	// A holder with a loan keeps leasing.
	h := who(lent)
	h.Held = 5
	e.checkCrowded(alg.String()+": a holder with a loan", e.leaseTo(k, p, 5, 1, h), false, 5, 10, "never crowded out: it holds 5, and 5 more are lent")
	// A crowded holder stays crowded out: its grant left it no loan.
	var out int
	for i := range grants {
		if grants[i].Crowded {
			out = i
			break
		}
	}
	before := e.remaining(k, p)
	e.checkCrowded(alg.String()+": a crowded holder again", e.leaseTo(k, p, 3, 3, who(out)), true, 3, 0, "its crowded grant lent it nothing: still no loan, still crowded out")
	if err := e.s.Return(e.ctx, k, p, 100, who(out).ID); err != nil {
		e.t.Fatal(err)
	}
	if got := e.remaining(k, p); got != before-3 {
		e.t.Fatalf("%s: %d remaining after a crowded holder's return, want %d: nothing was lent to it, nothing comes back", alg, got, before-3)
	}
	// A crowded call the key cannot cover is denied.
	g := e.leaseTo(k, p, limit, limit, who(out))
	if !g.Crowded || g.Granted != 0 || g.Wait <= 0 || g.Lent != 0 {
		e.t.Fatalf("%s: a crowded call needing the whole limit: %+v, want crowded, nothing granted, a wait", alg, g)
	}
	// No bound: a new holder is lent.
	free := lease.Lessee{ID: "unbounded", TTL: time.Hour}
	e.checkCrowded(alg.String()+": MaxHolders 0", e.leaseTo(k, p, 1, 1, free), false, 1, 1, "MaxHolders 0 bounds nothing")
}

// holdersLoanEnds: once a loan ends (a return, its TTL), a new holder of a
// full key gets in; a holder that left is a new holder.
func holdersLoanEnds(e *env, alg lease.Algorithm) {
	p := lease.Policy{Algorithm: alg, Limit: 1000, Period: time.Hour}
	k := e.key()
	as := func(id string) lease.Lessee { return lease.Lessee{ID: id, TTL: ms(100), MaxHolders: 2} }
	e.checkCrowded("a", e.leaseTo(k, p, 1, 1, as("a")), false, 1, 1, "the first holder")
	e.checkCrowded("b", e.leaseTo(k, p, 1, 1, as("b")), false, 1, 1, "the second")
	e.checkCrowded("c", e.leaseTo(k, p, 1, 1, as("c")), true, 1, 0, "a third, of a key of at most 2")
	if err := e.s.Return(e.ctx, k, p, 1, "a"); err != nil {
		e.t.Fatal(err)
	}
	e.checkCrowded("c after a's return", e.leaseTo(k, p, 1, 1, as("c")), false, 1, 1, "a's return ended its loan: room for c")
	e.checkCrowded("a again", e.leaseTo(k, p, 1, 1, as("a")), true, 1, 0, "b and c hold the key: a, which left, is a new holder")
	e.advance(ms(300))
	e.checkCrowded("a after the loans' TTL", e.leaseTo(k, p, 1, 1, as("a")), false, 1, 1, "b's and c's loans ended with their TTL (100ms): room for a")
}

// holdersWindowEnds: a window's loans end with it: in the next window a
// new holder gets in.
func holdersWindowEnds(e *env, alg lease.Algorithm) {
	const P = 300
	p := lease.Policy{Algorithm: alg, Limit: 100, Period: ms(P)}
	k := e.key()
	as := func(id string) lease.Lessee { return lease.Lessee{ID: id, TTL: time.Hour, MaxHolders: 2} }
	e.alignWindow(p.Period)
	e.advance(ms(50))
	e.checkCrowded("a", e.leaseTo(k, p, 1, 1, as("a")), false, 1, 1, "the first holder")
	e.checkCrowded("b", e.leaseTo(k, p, 1, 1, as("b")), false, 1, 1, "the second")
	e.checkCrowded("c", e.leaseTo(k, p, 1, 1, as("c")), true, 1, 0, "a third, of a key of at most 2 in this window")
	e.advance(ms(P))
	e.checkCrowded("c in the next window", e.leaseTo(k, p, 1, 1, as("c")), false, 1, 1, "a's and b's loans ended with their window")
}

// holdersShare: a fixed_window loan that is only a share of the next
// windows counts as a holder's loan, in this window and in those the
// share covers.
func holdersShare(e *env) {
	const P = 300
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 100, Period: ms(P)}
	k := e.key()
	a := lease.Lessee{ID: "a", TTL: time.Hour, MaxHolders: 1, AheadWindows: 1, AheadTokens: 5}
	b := lease.Lessee{ID: "b", TTL: time.Hour, MaxHolders: 1}
	e.alignWindow(p.Period)
	e.advance(ms(50))
	if g := e.leaseTo(k, p, 0, 0, a); g.Crowded || g.AheadTokens != 5 || g.Lent != 0 {
		e.t.Fatalf("a asks a share of the next window only: %+v, want 5 ahead, nothing lent now", g)
	}
	e.checkCrowded("b", e.leaseTo(k, p, 1, 1, b), true, 1, 0, "a's share ahead is a's loan: the key has its one holder")
	e.advance(ms(P))
	e.checkCrowded("b in the share's window", e.leaseTo(k, p, 1, 1, b), true, 1, 0, "a's share is lent in this window")
	e.advance(ms(P))
	e.checkCrowded("b after the share's window", e.leaseTo(k, p, 1, 1, b), false, 1, 1, "a's share ended with its window")
}
