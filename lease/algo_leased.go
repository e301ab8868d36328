package lease

import (
	"math"
	"time"
)

// The leased algorithms' pure math. Each Lease method expects a valid
// policy and 0 ≤ need ≤ want (see CheckLease); each Return method expects
// 0 ≤ tokens. In the formulas, t is now in unix µs, P the period in µs, L
// the limit, C the capacity, all as float64 unless said otherwise.

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
	Loans loans
	// Last is the last call that settled a loan (Lessee.Unanswered).
	Last lastCall
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

// Lease runs one lease call at now (see the package doc). Wait is
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
		s.Tokens = s.raw(t, pf, lf, cf) - float64(g.Granted)
		s.Updated = u
		s.Loans = s.Loans.settling(to, u, g.Granted > 0).retire(u).settle(to, keep, g.Granted, u, false)
		s.Last = lastCallOf(to, g.Granted)
		s.trim(u, pf, lf, cf)
	}
	g.Lent = s.Loans.lentTo(to.ID, t)
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
		func(l Loan, a int64) { s.Tokens = math.Min(s.Tokens, cap(l, a)) })
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

// expiry is when the bucket is full again with no further calls (unix
// µs, rounded up): from then on the state equals no state. Updated +
// ceil((C - Tokens)*P/L), or later while loans run (loans.fullIn).
func (s *TokenBucketState) expiry(p Policy) int64 {
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
	Loans loans
	// Last is the last call that settled a loan (Lessee.Unanswered).
	Last lastCall
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
	end := s.TAT
	for _, l := range s.Loans {
		end = max(end, l.Expires+int64(math.Ceil(float64(s.Loans.after(l.Expires))*pf/lf)))
	}
	return max(end-t, 0)
}

// Lease runs one lease call at now (see the package doc). With base =
// max(TAT, t, loans.floorTAT(t)) and d = base - t (integers): avail =
// floor(B - d*L/P); a grant of g sets TAT = base + ceil(g*P/L); Wait = d -
// (B - need)*P/L; Reset = TAT_after - t (lent tokens counted as spent). These
// are the package doc's formulas with T = P/L and tau = B*T multiplied
// out, which keeps whole-token boundaries exact whenever P/L is a whole
// number of µs.
func (s *GCRAState) Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant {
	t := unixMicros(now)
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	b := p.Capacity()
	bf := float64(b)
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
		// the loans' floors apply when read.
		s.TAT = max(s.TAT, t) + cost
		s.Loans = s.Loans.settling(to, t, g.Granted > 0).retire(t).settle(to, keep, g.Granted, t, false)
		s.Last = lastCallOf(to, g.Granted)
		s.trim(t, pf, lf)
		d = base + cost - t
	}
	g.Lent = s.Loans.lentTo(to.ID, t)
	g.Remaining = gcraAvail(d, bf, lf, pf)
	g.Reset = ceilMillis(float64(d))
	return g
}

// trim is TokenBucketState.trim for the TAT.
func (s *GCRAState) trim(t int64, pf, lf float64) {
	floor := func(l Loan, a int64) int64 { return l.Expires + int64(math.Ceil(float64(a)*pf/lf)) }
	s.Loans = s.Loans.trim(t, func(l Loan, a int64) bool { return floor(l, a) > t },
		func(l Loan, a int64) { s.TAT = max(s.TAT, floor(l, a)) })
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

// tatBack is the TAT after n tokens come back at t (a return, or an
// unanswered call's grant): max(t, max(TAT, t) − floor(n·P/L)).
func tatBack(tat, t, n int64, pf, lf float64) int64 {
	base := max(tat, t)
	return base - min(int64(math.Floor(float64(n)*pf/lf)), base-t)
}

// expiry is when the key is full with no further calls: the TAT, or
// later while loans run.
func (s *GCRAState) expiry(p Policy) int64 {
	if s.TAT == 0 {
		return 0
	}
	return s.TAT + s.reset(s.TAT, float64(periodMicros(p)), float64(p.Limit))
}

// windowStart is the start of the window of length pu containing t:
// t - t mod pu (windows are aligned on multiples of Period since the epoch).
func windowStart(t, pu int64) int64 {
	m := t % pu
	if m < 0 {
		m += pu
	}
	return t - m
}

// FixedWindowState is the Store state of one fixed_window key. The zero
// value is a key without state. Not safe for concurrent use.
type FixedWindowState struct {
	// Start is the start of the window that Count belongs to (unix µs).
	Start int64
	// Count is the tokens granted in that window.
	Count int64
	// Loans are the tokens lent to each holder in that window and not
	// known to be spent: they bound what a holder may return.
	Loans loans
}

// current returns the current window's start and count at t. A stored
// window later than t's (a clock that went back) stays current.
func (s *FixedWindowState) current(t, pu int64) (ws, count int64) {
	ws = windowStart(t, pu)
	if s.Start >= ws {
		return s.Start, s.Count
	}
	return ws, 0
}

// Lease runs one lease call at now: avail = L - count; Wait and Reset are
// the time to the end of the current window (Reset even when count is 0).
func (s *FixedWindowState) Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant {
	t, pu := unixMicros(now), periodMicros(p)
	ws, count := s.current(t, pu)
	end := float64(ws + pu - t)
	avail := max(0, p.Limit-count)
	var g Grant
	switch {
	case need > p.Limit:
		g.Wait = ceilMillis(float64(pu))
	case avail >= need:
		g.Granted = min(want, avail)
		if g.Granted > 0 {
			count += g.Granted
			if s.Start != ws {
				s.Loans = s.Loans[:0] // lent in a window that ended
			}
			s.Start, s.Count = ws, count
			s.Loans = s.Loans.settle(to, s.Loans.held(to), g.Granted, t, true)
		}
	default:
		g.Wait = ceilMillis(end)
	}
	if s.Start == ws {
		g.Lent = s.Loans.lentTo(to.ID, -1)
	}
	g.Remaining = max(0, p.Limit-count)
	g.Reset = ceilMillis(end)
	return g
}

// Return ends holder's loan: it lowers the current window's count by
// min(n, lent to holder in this window), not below 0. Tokens granted in an
// earlier window are not returned to this one.
func (s *FixedWindowState) Return(p Policy, now time.Time, n int64, holder string) {
	ws, count := s.current(unixMicros(now), periodMicros(p))
	if ws != s.Start || count == 0 || n < 0 {
		return
	}
	ls, back := s.Loans.take(holder, n)
	s.Loans = ls
	s.Count = max(0, count-back)
}

// expiry is two windows after Start.
func (s *FixedWindowState) expiry(p Policy) int64 { return s.Start + 2*periodMicros(p) }

// SlidingWindowState is the Store state of one sliding_window key. The
// zero value is a key without state. Not safe for concurrent use.
type SlidingWindowState struct {
	// Start is the start of the window that Cur belongs to (unix µs).
	Start int64
	// Prev is the count of the window before Start; Cur the count of the
	// window at Start.
	Prev, Cur int64
	// Loans are the tokens lent to each holder in the window at Start and
	// not known to be spent: they bound what a holder may return.
	Loans loans
}

// current rolls the stored window to t's: the previous window's count
// becomes prev; anything older is 0.
func (s *SlidingWindowState) current(t, pu int64) (ws, prev, cur int64) {
	ws = windowStart(t, pu)
	switch {
	case s.Start >= ws:
		return s.Start, s.Prev, s.Cur
	case s.Start == ws-pu:
		return ws, s.Cur, 0
	}
	return ws, 0, 0
}

// slidingAvail is L - cur - ceil(prev*(P-e)/P), at least 0: the same as
// floor(L - est) with est = prev*(1 - e/P) + cur, computed so that a
// weight that is a whole number stays exact.
func slidingAvail(limit, prev, cur int64, pe, pf float64) int64 {
	w := math.Ceil(float64(prev) * pe / pf)
	return max(0, limit-cur-int64(w))
}

// Lease runs one lease call at now. With ws the current window's start, e
// = t - ws and the weight of prev w = prev*(P-e)/P:
// avail = L - cur - ceil(w). Wait, when denied:
//   - if room = L - cur - need ≥ 0, in this window when w falls to room:
//     (P - e) - room*P/prev;
//   - else in the next window, where cur becomes prev: (P - e) if
//     cur ≤ L - need, else (P - e) + P - (L-need)*P/cur.
//
// Reset: end of the next window if cur > 0, end of this one if only
// prev > 0, else 0.
func (s *SlidingWindowState) Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant {
	t, pu := unixMicros(now), periodMicros(p)
	pf := float64(pu)
	ws, prev, cur := s.current(t, pu)
	e := max(0, t-ws)
	pe := float64(pu - e)
	avail := slidingAvail(p.Limit, prev, cur, pe, pf)
	var g Grant
	switch {
	case need > p.Limit:
		g.Wait = ceilMillis(pf)
	case avail >= need:
		g.Granted = min(want, avail)
		if g.Granted > 0 {
			cur += g.Granted
			if s.Start != ws {
				s.Loans = s.Loans[:0] // lent in a window that ended
			}
			s.Start, s.Prev, s.Cur = ws, prev, cur
			s.Loans = s.Loans.settle(to, s.Loans.held(to), g.Granted, t, true)
		}
	default:
		if room := p.Limit - cur - need; room >= 0 {
			g.Wait = ceilMillis(pe - float64(room)*pf/float64(prev))
		} else if room2 := p.Limit - need; cur <= room2 {
			g.Wait = ceilMillis(pe)
		} else {
			g.Wait = ceilMillis(pe + pf - float64(room2)*pf/float64(cur))
		}
	}
	if s.Start == ws {
		g.Lent = s.Loans.lentTo(to.ID, -1)
	}
	g.Remaining = slidingAvail(p.Limit, prev, cur, pe, pf)
	switch {
	case cur > 0:
		g.Reset = ceilMillis(pe + pf)
	case prev > 0:
		g.Reset = ceilMillis(pe)
	}
	return g
}

// Return ends holder's loan: it lowers the current window's count by
// min(n, lent to holder in this window), not below 0.
func (s *SlidingWindowState) Return(p Policy, now time.Time, n int64, holder string) {
	ws, prev, cur := s.current(unixMicros(now), periodMicros(p))
	if ws != s.Start || cur == 0 || n < 0 {
		return
	}
	ls, back := s.Loans.take(holder, n)
	s.Loans = ls
	s.Start, s.Prev, s.Cur = ws, prev, max(0, cur-back)
}

// expiry is two windows after Start: by then both counts have rolled out.
func (s *SlidingWindowState) expiry(p Policy) int64 { return s.Start + 2*periodMicros(p) }
