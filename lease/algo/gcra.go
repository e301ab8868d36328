package algo

import (
	"math"
	"time"
)

// gcra is gcra's code in the algorithm table: a refilling bucket
// (refillView) whose Store state is a GCRAState.
type gcra struct{ refillView }

func (gcra) validate(p Policy) error {
	if err := validateRefill(p); err != nil {
		return err
	}
	if float64(p.Capacity())*float64(p.Period.Microseconds()) > MaxExact {
		// avail = floor(burst − d × limit/period) with d ≤ burst ×
		// period/limit: d × limit stays an exact float64 integer.
		return &FieldError{Field: "burst", Msg: "burst × period must be at most 2^52 tokens·µs for gcra (e.g. 1.2M per hour, 52k per day), so that its arithmetic stays exact in float64; use token_bucket or a shorter period"}
	}
	return nil
}

func (gcra) newState() State { return new(GCRAState) }

// The pure math of a leased algorithm (see algo.go): Lease expects a valid
// policy and 0 ≤ need ≤ want (see CheckLease), Return 0 ≤ tokens. In the
// formulas, t is now in unix µs, P the period in µs, L the limit, C the
// capacity, all as float64 unless said otherwise.

// GCRAState is the Store state of one gcra key: the theoretical arrival
// time. The zero value is a key without state (TAT ≤ now: full). Not safe
// for concurrent use.
//
// TAT is whole microseconds. A grant of g advances it by ceil(g*P/L) and a
// return moves it back by floor(n*P/L): when P/L is not a whole number of
// µs, each grant costs up to 1µs more than its exact share (under-admission
// of at most 1µs worth of tokens per lease call), but the Store never
// admits early. A float64 TAT would not be exact either: at today's unix
// µs its resolution is 0.25µs, and its rounding goes both ways.
//
// Policy.Validate keeps Burst*P/L (the most the TAT runs ahead of now) at
// most 2^52 µs, so the TAT stays an exact integer below 2^53 in float64
// (Lua) and in int64, with no cap.
type GCRAState struct {
	// TAT is the theoretical arrival time in unix µs; 0 means no state.
	TAT int64
	// Loans are the tokens lent to holders and still counted against
	// the burst: the TAT is never below loans.floorTAT.
	Loans Loans
	// Last is the last call that settled a loan (Lessee.Unanswered).
	Last lastCall
	// bake: see TokenBucketState.
	bake bakeFunc
}

// gcraAvail is floor(B - d*L/P), at least 0, where d = max(TAT, t) - t.
func gcraAvail(d int64, bf, lf, pf float64) int64 {
	a := math.Floor(bf - float64(d)*lf/pf)
	if a < 0 {
		return 0
	}
	return int64(a)
}

// reset is the time from t until the key is full with no further calls,
// with its loans: the TAT, or a loan's expiry plus its tokens' worth
// (A(E)·P/L), if later.
func (s *GCRAState) reset(t int64, pf, lf float64) int64 {
	return max(s.Loans.spentBy(s.TAT, pf, lf)-t, 0)
}

// Lease runs one lease call at now (see the lease package doc). With base =
// max(TAT, t, loans.floorTAT(t)) and d = base - t (integers): avail =
// floor(B - d*L/P); a grant of g sets TAT = base + ceil(g*P/L); Wait = d -
// (B - need)*P/L; Reset = TAT_after - t (lent tokens counted as spent). These
// are the lease package doc's formulas with T = P/L and tau = B*T multiplied
// out, which keeps whole-token boundaries exact whenever P/L is a whole
// number of µs.
func (s *GCRAState) Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant {
	t := unixMicros(now)
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	b := p.Capacity()
	bf := float64(b)
	to, want, crowded := s.Loans.crowd(to, want, need, t)
	if back := s.Loans.unanswered(to, t, s.Last); back > 0 {
		// Granted by a call whose answer to never got: the TAT moves
		// back as Return moves it.
		s.TAT = tatBack(s.TAT, t, back, pf, lf)
		s.Last = lastCall{}
	}
	base := max(s.TAT, t, s.Loans.effective(to, t).floorTAT(t, pf, lf))
	d := base - t
	avail := gcraAvail(d, bf, lf, pf)
	var g Grant
	switch {
	case need > b:
		g.Wait = ceilMillis(pf)
	case avail >= need:
		g.Granted = min(want, avail)
	default:
		g.Wait = ceilMillis(float64(d) - (bf-float64(need))*pf/lf)
	}
	if sp := s.Loans.split(to, t); g.Granted > 0 || sp.running(s.Loans, t) {
		// Every call of a holder with a loan settles it (see
		// TokenBucketState.Lease): the TAT it saw is written.
		keep := sp.keep(s.Loans, t, g.Granted)
		cost := int64(math.Ceil(float64(g.Granted) * pf / lf))
		// The stored TAT is the grants' (see TokenBucketState.Lease):
		// the loans' floors apply when read. A grant without a Lessee ID
		// while a floor binds moves the TAT on from the floor, baking it
		// in (see TokenBucketState.Lease).
		baked := to.ID == "" && g.Granted > 0 && base > max(s.TAT, t)
		if baked {
			s.TAT = base + cost
		} else {
			s.TAT = max(s.TAT, t) + cost
		}
		s.Loans = s.Loans.settling(to, t, g.Granted > 0).retire(t).settle(to, keep, g.Granted, t, false)
		var lent int64 // lent when a grant to no holder bakes the caps in
		if baked {
			lent = s.Loans.after(t)
		}
		if to.ID != "" { // see TokenBucketState.Lease
			s.Last = lastCallOf(to, g.Granted)
		}
		s.trim(t, pf, lf)
		if baked {
			s.bake.report(Loan{Expires: t}, lent)
		}
		d = base + cost - t
	}
	g.Lent = s.Loans.lentTo(to.ID, t)
	g.Crowded = crowded
	g.Remaining = gcraAvail(d, bf, lf, pf)
	g.Reset = ceilMillis(float64(d))
	return g
}

// trim is TokenBucketState.trim for the TAT.
func (s *GCRAState) trim(t int64, pf, lf float64) {
	floor := func(l Loan, a int64) int64 { return l.Expires + int64(math.Ceil(float64(a)*pf/lf)) }
	s.Loans = s.Loans.trim(t, func(l Loan, a int64) bool { return floor(l, a) > t },
		func(l Loan, a int64) { s.TAT = max(s.TAT, floor(l, a)); s.bake.report(l, a) })
}

// Return ends holder's loan at now: TAT = max(t, max(TAT, t) −
// floor(n'*P/L)), n' = min(n, lent); the rest of the loan counts as spent
// now (an ended loan). A key without state is a full bucket: nothing to
// do.
func (s *GCRAState) Return(p Policy, now time.Time, n int64, holder string) {
	t := unixMicros(now)
	if s.TAT == 0 || n < 0 {
		return
	}
	if s.Loans.lentTo(holder, t) == 0 {
		return // nothing lent to holder: nothing comes back, nothing changes
	}
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	ls, back := s.Loans.end(holder, n, t)
	s.TAT, s.Loans, s.Last = tatBack(s.TAT, t, back, pf, lf), ls.retire(t), lastCall{}
	s.trim(t, pf, lf)
}

// Refund gives back n tokens that calls without a Lessee ID were granted:
// the TAT moves back as Return moves it (floor(n*P/L), not before now).
// The loans' floors still apply when read. A key without state is full:
// nothing to do.
func (s *GCRAState) Refund(p Policy, now time.Time, n int64) {
	if s.TAT == 0 || n <= 0 {
		return
	}
	t := unixMicros(now)
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	s.TAT = tatBack(s.TAT, t, n, pf, lf)
	s.trim(t, pf, lf)
}

// tatBack is the TAT after n tokens come back at t (a return, or an
// unanswered call's grant): max(t, max(TAT, t) − floor(n·P/L)).
func tatBack(tat, t, n int64, pf, lf float64) int64 {
	base := max(tat, t)
	return base - min(int64(math.Floor(float64(n)*pf/lf)), base-t)
}

// Expiry is when the key is full with no further calls: the TAT, or
// later while loans run.
func (s *GCRAState) Expiry(p Policy) int64 {
	if s.TAT == 0 {
		return 0
	}
	return s.TAT + s.reset(s.TAT, float64(periodMicros(p)), float64(p.Limit))
}
