package algo

import (
	"math"
	"time"
)

// tokenBucket is token_bucket's code in the algorithm table: a refilling
// bucket (refillView) whose Store state is a TokenBucketState.
type tokenBucket struct{ refillView }

func (tokenBucket) validate(p Policy) error { return validateRefill(p) }
func (tokenBucket) newState() State         { return new(TokenBucketState) }

// The pure math of a leased algorithm (see algo.go): Lease expects a valid
// policy and 0 ≤ need ≤ want (see CheckLease), Return 0 ≤ tokens. In the
// formulas, t is now in unix µs, P the period in µs, L the limit, C the
// capacity, all as float64 unless said otherwise.

// TokenBucketState is the Store state of one token_bucket key. The zero
// value is a key without state, which is a full bucket. Not safe for
// concurrent use.
type TokenBucketState struct {
	// Tokens is the (fractional) number of tokens at Updated.
	Tokens float64
	// Updated is when Tokens was written, in unix µs; 0 means no state.
	Updated int64
	// Loans are the tokens lent to holders and still counted against
	// the capacity (all expiring after Updated).
	Loans Loans
	// Last is the last call that settled a loan (Lessee.Unanswered).
	Last lastCall
	// bake, when set, is told of each ended loan trim bakes in
	// (MemoryStoreConfig.OnBake).
	bake bakeFunc
}

// raw is the stored level refilled to t: min(C, Tokens + (t-Updated)*L/P),
// or C without state.
func (s *TokenBucketState) raw(t int64, pf, lf, cf float64) float64 {
	if s.Updated == 0 {
		return cf
	}
	return math.Min(cf, s.Tokens+float64(max(t-s.Updated, 0))*lf/pf)
}

// level is the number of tokens at t: raw, capped by the loans as the
// caller to sees them (loans.effective, loans.capLevel), or C without
// state.
func (s *TokenBucketState) level(t int64, pf, lf, cf float64, to Lessee) float64 {
	if s.Updated == 0 {
		return cf
	}
	raw := s.raw(t, pf, lf, cf)
	t = max(t, s.Updated)
	return s.Loans.effective(to, t).capLevel(raw, t, pf, lf, cf)
}

// Lease runs one lease call at now (see the lease package doc). Wait is
// (need - tokens)*P/L, Reset is (C - tokens_after)*P/L (lent tokens
// counted as spent, as Grant.Reset says). The state is written (Tokens =
// tokens after the grant, Updated = now, the expired loans dropped, to's
// loan settled, see loans.split) when something is granted or to has a
// running loan.
func (s *TokenBucketState) Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant {
	t := unixMicros(now)
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	c := p.Capacity()
	cf := float64(c)
	to, want, crowded := s.Loans.crowd(to, want, need, max(s.Updated, t))
	if back := s.Loans.unanswered(to, max(s.Updated, t), s.Last); back > 0 {
		// Granted by a call whose answer to never got: back to the
		// level, as Return gives them (at most C).
		u := max(s.Updated, t)
		s.Tokens, s.Updated = math.Min(cf, s.raw(t, pf, lf, cf)+float64(back)), u
		s.Last = lastCall{}
	}
	tokens := s.level(t, pf, lf, cf, to)
	avail := int64(math.Floor(tokens))
	var g Grant
	switch {
	case need > c:
		g.Wait = ceilMillis(pf)
	case avail >= need:
		g.Granted = min(want, avail)
	default:
		g.Wait = ceilMillis((float64(need) - tokens) * pf / lf)
	}
	u := max(s.Updated, t)
	if sp := s.Loans.split(to, u); g.Granted > 0 || sp.running(s.Loans, u) {
		// Every call of a holder with a loan settles it: the level it saw
		// (its spent tokens credited from when they were spent) is
		// written, so that the credit holds whatever later calls say.
		keep := sp.keep(s.Loans, u, g.Granted)
		tokens -= float64(g.Granted)
		// The stored level is the refill less the grants: the running
		// loans cap it when read, the ended ones too until trim drops
		// them (or bakes their cap in).
		raw := s.raw(t, pf, lf, cf)
		s.Tokens = raw - float64(g.Granted)
		// A grant to a holder becomes a loan, which lowers the caps by
		// itself. One without a Lessee ID lends nothing: while a cap
		// binds, the refill above it would hide the grant, so it comes
		// off the level as capped, which bakes the binding caps into the
		// stored level as trim bakes an ended loan's (the loans' tokens
		// count as spent now at the latest).
		baked := to.ID == "" && g.Granted > 0 && tokens+float64(g.Granted) < raw
		if baked {
			s.Tokens = tokens
		}
		s.Updated = u
		s.Loans = s.Loans.settling(to, u, g.Granted > 0).retire(u).settle(to, keep, g.Granted, u, false)
		var lent int64 // lent when a grant to no holder bakes the caps in
		if baked {
			lent = s.Loans.after(u)
		}
		if to.ID != "" {
			// A call without a Lessee ID settles no loan: the last call
			// that did stays the one an unanswered call is told by.
			s.Last = lastCallOf(to, g.Granted)
		}
		s.trim(u, pf, lf, cf)
		if baked {
			// After trim's own bakes, which are of older ended loans:
			// bakes are reported oldest first.
			s.bake.report(Loan{Expires: u}, lent)
		}
	}
	g.Lent = s.Loans.lentTo(to.ID, t)
	g.Crowded = crowded
	g.Remaining = int64(math.Floor(tokens))
	g.Reset = ceilMillis((cf - tokens) * pf / lf)
	return g
}

// trim drops the ended loans that no longer cap the level at u, and caps
// the stored level for good by the oldest ones past maxEnded (see
// loans.trim).
func (s *TokenBucketState) trim(u int64, pf, lf, cf float64) {
	cap := func(l Loan, a int64) float64 { return cf - float64(a) + float64(u-l.Expires)*lf/pf }
	s.Loans = s.Loans.trim(u, func(l Loan, a int64) bool { return cap(l, a) < cf },
		func(l Loan, a int64) { s.Tokens = math.Min(s.Tokens, cap(l, a)); s.bake.report(l, a) })
}

// Return ends holder's loan at now: min(n, lent) tokens go back to the
// stored level (at most C), the rest of the loan counts as spent now (an
// ended loan, see loans.retire). A key without state is a full bucket:
// nothing to do.
func (s *TokenBucketState) Return(p Policy, now time.Time, n int64, holder string) {
	if s.Updated == 0 || n < 0 {
		return
	}
	t := unixMicros(now)
	pf, lf, cf := float64(periodMicros(p)), float64(p.Limit), float64(p.Capacity())
	u := max(s.Updated, t)
	if s.Loans.lentTo(holder, u) == 0 {
		return // nothing lent to holder: nothing comes back, nothing changes
	}
	raw := s.raw(t, pf, lf, cf)
	ls, back := s.Loans.end(holder, n, u)
	s.Tokens, s.Updated, s.Loans, s.Last = math.Min(cf, raw+float64(back)), u, ls.retire(u), lastCall{}
	s.trim(u, pf, lf, cf)
}

// Refund gives back n tokens that calls without a Lessee ID were granted
// (spent at once): the stored level rises by n, at most to C. The loans
// are left as they are (their caps on the level still apply). A key
// without state is a full bucket: nothing to do.
func (s *TokenBucketState) Refund(p Policy, now time.Time, n int64) {
	if s.Updated == 0 || n <= 0 {
		return
	}
	t := unixMicros(now)
	pf, lf, cf := float64(periodMicros(p)), float64(p.Limit), float64(p.Capacity())
	u := max(s.Updated, t)
	s.Tokens, s.Updated = math.Min(cf, s.raw(t, pf, lf, cf)+float64(n)), u
	s.trim(u, pf, lf, cf)
}

// Expiry is when the bucket is full again with no further calls (unix
// µs, rounded up): from then on the state equals no state. Updated +
// ceil((C - Tokens)*P/L), or later while loans run (loans.fullIn).
func (s *TokenBucketState) Expiry(p Policy) int64 {
	if s.Updated == 0 {
		return 0
	}
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	d := s.Loans.fullIn((float64(p.Capacity())-s.Tokens)*pf/lf, s.Updated, pf, lf)
	if d <= 0 {
		return s.Updated
	}
	return s.Updated + int64(math.Ceil(math.Min(d, 1<<62)))
}
