package algo

import (
	"time"
)

// fixedWindow is fixed_window's code in the algorithm table: a window
// (windowView) whose Store state is a FixedWindowState.
type fixedWindow struct{ windowView }

func (fixedWindow) validate(Policy) error { return nil }
func (fixedWindow) newState() State       { return new(FixedWindowState) }

// expiry: the grant's Reset is the end of the current window (windowExpiry).
func (f fixedWindow) expiry(p Policy, now int64, g Grant, _ time.Duration) int64 {
	return windowExpiry(now, g, f.resetPast(p))
}

// resetPast: the Reset of a grant is the end of its window.
func (fixedWindow) resetPast(Policy) time.Duration { return 0 }

// coverAt: now if the window has need tokens left, else its end (within
// the rounding of Reset).
func (fixedWindow) coverAt(_ Policy, a Answer, need int64) (int64, int64) {
	if a.Remaining >= need {
		return 0, 0
	}
	return a.ResetAt, int64(time.Millisecond)
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
	// Count is the tokens granted in that window, the shares lent into it
	// ahead included.
	Count int64
	// Loans are the tokens lent to each holder in that window and not
	// known to be spent (they bound what a holder may return), and the
	// shares lent to it ahead (Loan.Share, up to Loan.Expires).
	Loans Loans
}

// roll makes the window of t (start ws) the state's window if it is later
// than Start: the loans with a share ahead covering it (ending at or after
// its end) lend their share in it and the others end; its count is the
// sum of those shares. A stored window later than t's (a clock that went
// back) stays current. roll leaves the loans it had in place (a new list
// when any are left), so that a call that changes nothing else can put
// the state back as it was: a Store writes a key only when a call grants
// tokens or changes a share ahead, as the Lua scripts do.
func (s *FixedWindowState) roll(t, pu int64) {
	ws := windowStart(t, pu)
	if s.Start >= ws {
		return
	}
	s.Start, s.Count = ws, 0
	var ls Loans
	for _, l := range s.Loans {
		if l.Share > 0 && l.Expires >= ws+pu {
			l.Lent = l.Share
			s.Count += l.Share
			ls = append(ls, l)
		}
	}
	s.Loans = ls
}

// aheadOf is the sum of the shares the loans other than holder's lend in
// windows after the one starting at ws.
func (s *FixedWindowState) aheadOf(holder string, ws, pu int64) int64 {
	var a int64
	for _, l := range s.Loans {
		if l.Holder != holder && l.Share > 0 && l.Expires > ws+pu {
			a += l.Share
		}
	}
	return a
}

// Lease runs one lease call at now: avail = L - count; Wait and Reset are
// the time to the end of the current window (Reset even when count is 0).
// A call of a holder (to.ID) then sets its shares ahead: min(AheadTokens,
// L − the other holders' shares ahead) in each of the next AheadWindows
// windows, none when that is 0 or AheadWindows is 0.
func (s *FixedWindowState) Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant {
	t, pu := unixMicros(now), periodMicros(p)
	was := *s
	s.roll(t, pu)
	to, want, crowded := s.Loans.crowd(to, want, need, -1) // every loan of the window runs
	ws, count := s.Start, s.Count
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
			s.Count = count
			s.Loans = s.Loans.settle(to, s.Loans.held(to), g.Granted, t, true)
		}
	default:
		g.Wait = ceilMillis(end)
	}
	changed := g.Granted > 0
	if to.ID != "" {
		changed = s.setAhead(p, to, ws, pu, &g) || changed
	}
	g.Lent = s.Loans.lentTo(to.ID, -1)
	g.Crowded = crowded
	if !changed {
		*s = was
	}
	g.Remaining = max(0, p.Limit-count)
	g.Reset = ceilMillis(end)
	return g
}

// setAhead sets to's shares ahead of the window starting at ws (see
// Lease) in g and the state, and reports whether that changed the state;
// a loan left with nothing lent and no share goes.
func (s *FixedWindowState) setAhead(p Policy, to Lessee, ws, pu int64, g *Grant) bool {
	var tokens, windows int64
	if to.AheadWindows > 0 {
		tokens = max(0, min(to.AheadTokens, p.Limit-s.aheadOf(to.ID, ws, pu)))
	}
	if tokens > 0 {
		windows = to.AheadWindows
	}
	g.AheadTokens, g.AheadWindows = tokens, windows
	i := s.Loans.find(to.ID)
	if i >= 0 && s.Loans[i].Share == tokens && (tokens == 0 || s.Loans[i].Expires == ws+(windows+1)*pu) {
		return false
	}
	switch {
	case i < 0 && tokens > 0:
		s.Loans = append(s.Loans, Loan{Holder: to.ID, Share: tokens, Expires: ws + (windows+1)*pu})
	case i < 0:
	case tokens > 0:
		s.Loans[i].Share, s.Loans[i].Expires = tokens, ws+(windows+1)*pu
	case s.Loans[i].Lent > 0:
		s.Loans[i].Share, s.Loans[i].Expires = 0, 0
	default:
		s.Loans, _ = s.Loans.take(to.ID, 0)
	}
	return i >= 0 || tokens > 0
}

// Return ends holder's loan, its shares ahead included: it lowers the
// current window's count by min(n, lent to holder in this window), not
// below 0. Tokens granted in an earlier window are not returned to this
// one.
func (s *FixedWindowState) Return(p Policy, now time.Time, n int64, holder string) {
	was := *s
	s.roll(unixMicros(now), periodMicros(p))
	if n < 0 || holder == "" || s.Loans.find(holder) < 0 {
		*s = was // nothing to end: the state as it was (see roll)
		return
	}
	ls, back := s.Loans.take(holder, n)
	s.Loans = ls
	s.Count = max(0, s.Count-back)
}

// Refund gives back n tokens that calls without a Lessee ID were granted:
// it lowers the current window's count by min(n, what of it no loan or
// share lends), so that what the holders may still return stays counted.
// A grant of an earlier window cannot be told from one of this window:
// a refund that comes after its window ended lowers the current one's
// count, as a Manager's refund to its bucket does then.
func (s *FixedWindowState) Refund(p Policy, now time.Time, n int64) {
	was := *s
	s.roll(unixMicros(now), periodMicros(p))
	back := min(n, s.Count-s.Loans.total())
	if back <= 0 {
		*s = was // nothing to give back: the state as it was (see roll)
		return
	}
	s.Count -= back
}

// Expiry is two windows after Start, or one window after the end of the
// last window a share is lent into, whichever is later.
func (s *FixedWindowState) Expiry(p Policy) int64 {
	e := s.Start + 2*periodMicros(p)
	for _, l := range s.Loans {
		if l.Share > 0 {
			e = max(e, l.Expires+periodMicros(p))
		}
	}
	return e
}
