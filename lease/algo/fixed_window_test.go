package algo

import (
	"testing"
	"time"
)

// TestFixedWindowAhead follows fixed_window's shares ahead through the
// windows: counted in each window they cover from its start, capped by
// the other holders' shares, ended by a return or a call asking none.
func TestFixedWindowAhead(t *testing.T) {
	p := Policy{Algorithm: FixedWindow, Limit: 10, Period: time.Second}
	at := func(w int, ms int) time.Time { // base is a window start
		return base.Add(time.Duration(w)*time.Second + time.Duration(ms)*time.Millisecond)
	}
	a := Lessee{ID: "a", TTL: time.Second, AheadWindows: 3, AheadTokens: 4}
	var s FixedWindowState

	g := s.Lease(p, at(0, 100), 2, 1, a)
	if g.Granted != 2 || g.Lent != 2 || g.AheadTokens != 4 || g.AheadWindows != 3 || g.Remaining != 8 {
		t.Fatalf("window 0: %+v, want 2 granted, lent 2, 4 ahead for 3 windows, 8 remaining", g)
	}
	for w := 1; w <= 3; w++ {
		if g := s.Lease(p, at(w, 500), 0, 0, Lessee{}); g.Remaining != 6 {
			t.Fatalf("window %d: %d remaining, want 6 (a's share of 4 counted)", w, g.Remaining)
		}
	}
	if g := s.Lease(p, at(4, 0), 0, 0, Lessee{}); g.Remaining != 10 {
		t.Fatalf("window 4: %d remaining, want 10 (a's shares ended)", g.Remaining)
	}

	// b asks for the whole limit ahead: it gets what a's shares leave.
	b := Lessee{ID: "b", TTL: time.Second, AheadWindows: 2, AheadTokens: 10}
	s = FixedWindowState{}
	s.Lease(p, at(0, 0), 0, 0, a)
	if g := s.Lease(p, at(0, 10), 0, 0, b); g.AheadTokens != 6 || g.AheadWindows != 2 {
		t.Fatalf("b: %+v, want 6 ahead for 2 windows", g)
	}
	if g := s.Lease(p, at(1, 0), 1, 1, Lessee{}); g.Granted != 0 || g.Remaining != 0 {
		t.Fatalf("window 1: %+v, want nothing left: a's 4 and b's 6 counted", g)
	}
	// a's call in window 1 holding 3 of its 4 that grants nothing: its
	// loan unchanged (a windowed loan settles only with a grant), share
	// renewed; b's shares unchanged.
	a.Held = 3
	if g := s.Lease(p, at(1, 200), 0, 0, a); g.Lent != 4 || g.AheadTokens != 4 {
		t.Fatalf("a in window 1: %+v, want lent 4, 4 ahead", g)
	}
	// a returns 3 in window 1: its loan and shares end.
	s.Return(p, at(1, 300), 3, "a")
	if g := s.Lease(p, at(1, 400), 0, 0, Lessee{}); g.Remaining != 3 {
		t.Fatalf("window 1 after a's return: %d remaining, want 3", g.Remaining)
	}
	if g := s.Lease(p, at(2, 0), 0, 0, Lessee{}); g.Remaining != 4 {
		t.Fatalf("window 2: %d remaining, want 4 (b's 6 only)", g.Remaining)
	}
	// b asks for none ahead: its shares end with window 2.
	b.AheadWindows, b.Held = 0, 6
	if g := s.Lease(p, at(2, 100), 0, 0, b); g.AheadTokens != 0 || g.AheadWindows != 0 || g.Lent != 6 {
		t.Fatalf("b asking none: %+v, want lent 6, none ahead", g)
	}
	if g := s.Lease(p, at(3, 0), 0, 0, Lessee{}); g.Remaining != 10 {
		t.Fatalf("window 3: %d remaining, want 10", g.Remaining)
	}
	if len(s.Loans) != 1 || s.Loans[0].Share != 0 {
		t.Fatalf("loans %+v, want b's loan of window 2 alone", s.Loans)
	}

	// The key lives until a window after the last share's.
	s = FixedWindowState{}
	s.Lease(p, at(0, 0), 0, 0, a)
	if e, want := s.Expiry(p), at(5, 0).UnixMicro(); e != want {
		t.Fatalf("expiry %d, want %d (the end of window 3, plus a window)", e, want)
	}
	// A call that changes nothing leaves the state as it was, even when it
	// saw a later window (a clock that goes back then finds it unchanged).
	s = FixedWindowState{}
	s.Lease(p, at(0, 0), 1, 1, Lessee{ID: "c", TTL: time.Second})
	s.Lease(p, at(1, 0), 0, 0, Lessee{})
	if s.Start != at(0, 0).UnixMicro() || s.Count != 1 {
		t.Fatalf("after a peek in window 1: start %d count %d, want window 0's", s.Start, s.Count)
	}
}

// A return of a holder without a loan changes nothing, even when it comes
// in a later window (a Store then writes nothing, as a lease call that
// changes nothing).
func TestFixedWindowReturnWithoutLoan(t *testing.T) {
	p := Policy{Algorithm: FixedWindow, Limit: 10, Period: time.Second}
	var s FixedWindowState
	s.Lease(p, base, 3, 3, Lessee{ID: "a", TTL: time.Second})
	was := s.Start
	s.Return(p, base.Add(time.Second), 2, "b")
	if s.Start != was || s.Count != 3 || len(s.Loans) != 1 {
		t.Fatalf("after b's return in the next window: %+v, want window 0's state unchanged", s)
	}
}
