package algo

import (
	"math"
	"time"
)

// slidingWindow is sliding_window's code in the algorithm table: a window
// (windowView) whose Store state is a SlidingWindowState.
type slidingWindow struct{ windowView }

func (slidingWindow) validate(p Policy) error {
	if float64(p.Limit)*float64(p.Period.Microseconds()) > MaxExact {
		// The previous window's weight ceil(prev × (period − e)/period)
		// with prev ≤ limit: the product stays an exact float64 integer.
		return &FieldError{Field: "limit", Msg: "limit × period must be at most 2^52 tokens·µs for sliding_window (e.g. 1.2M per hour, 52k per day), so that its weighted estimate stays exact in float64; use fixed_window or a shorter period"}
	}
	return nil
}

func (slidingWindow) newState() State { return new(SlidingWindowState) }

// expiry: the tokens are spendable until the end of the current window
// (windowExpiry).
func (s slidingWindow) expiry(p Policy, now int64, g Grant, _ time.Duration) int64 {
	return windowExpiry(now, g, s.resetPast(p))
}

// resetPast: after a grant cur > 0, so the grant's Reset is the end of the
// next window, one period after the end of its own.
func (slidingWindow) resetPast(p Policy) time.Duration { return p.Period }

// answerTimed: coverAt and projected project from when the answer came.
func (slidingWindow) answerTimed() bool { return true }

// coverAt is the rate since the answer: the previous window's weight falls
// no faster than limit per period, so this is never later than the truth
// (no slack: a rate, not a rounded-up Reset).
func (slidingWindow) coverAt(p Policy, a Answer, need int64) (int64, int64) {
	short := need - a.Remaining
	if short <= 0 {
		return 0, 0
	}
	return addNanos(a.At, time.Duration(math.Ceil(float64(short)*float64(p.Period)/float64(p.Limit)))), 0
}

// projected is the answer's Remaining plus that rate since the answer.
func (slidingWindow) projected(p Policy, a Answer, now int64) int64 {
	c := p.Capacity()
	since := float64(max(now-a.At, 0)) * float64(p.Limit) / float64(p.Period)
	return int64(math.Min(float64(c), float64(max(a.Remaining, 0))+math.Ceil(since)))
}

// The pure math of a leased algorithm (see algo.go): Lease expects a valid
// policy and 0 ≤ need ≤ want (see CheckLease), Return 0 ≤ tokens. In the
// formulas, t is now in unix µs, P the period in µs, L the limit, C the
// capacity, all as float64 unless said otherwise.

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
	Loans Loans
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
	var running Loans // the loans of the current window
	if s.Start == ws {
		running = s.Loans
	}
	to, want, crowded := running.crowd(to, want, need, -1)
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
	g.Crowded = crowded
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

// Refund gives back n tokens that calls without a Lessee ID were granted:
// it lowers the current window's count by min(n, what of it no loan
// lends). As for FixedWindowState.Refund, a grant of an earlier window
// cannot be told from one of this window: a refund that comes after its
// window ended lowers the current window's count if that window has one
// (a count that has rolled into the previous window's weight stays).
func (s *SlidingWindowState) Refund(p Policy, now time.Time, n int64) {
	ws, _, cur := s.current(unixMicros(now), periodMicros(p))
	if ws != s.Start || n <= 0 {
		return
	}
	if back := min(n, cur-s.Loans.total()); back > 0 {
		s.Cur = cur - back
	}
}

// Expiry is two windows after Start: by then both counts have rolled out.
func (s *SlidingWindowState) Expiry(p Policy) int64 { return s.Start + 2*periodMicros(p) }
