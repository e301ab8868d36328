package lease

import (
	"time"
)

// fixedWindow is fixed_window's code in the algorithm table: a window
// (windowView) whose Store state is a FixedWindowState.
type fixedWindow struct{ windowView }

func (fixedWindow) validate(Policy) error { return nil }
func (fixedWindow) newState() algoState   { return new(FixedWindowState) }

// expiry: the grant's Reset is the end of the current window, made early
// by 1ms so that its rounding up never lets a token into the next window.
func (fixedWindow) expiry(_ Policy, now int64, g Grant, _ time.Duration) int64 {
	return now + int64(g.Reset) - int64(time.Millisecond)
}

// coverAt: now if the window has need tokens left, else its end (within
// the rounding of Reset).
func (fixedWindow) coverAt(b *bucket, need, resetAt int64) (int64, int64) {
	if b.remaining.Load() >= need {
		return 0, 0
	}
	return resetAt, int64(time.Millisecond)
}

// The pure math of a leased algorithm (see algo.go): Lease expects a valid
// policy and 0 ≤ need ≤ want (see CheckLease), Return 0 ≤ tokens. In the
// formulas, t is now in unix µs, P the period in µs, L the limit, C the
// capacity, all as float64 unless said otherwise.

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
