package lease

import (
	"context"
	"testing"
	"time"
)

// A window's tokens on hand end with their window even when the coarse
// clock lags far behind: a node whose CPUs are busy runs the clock's
// ticker late, and a check of a window key that read it would spend the
// tokens of a window that had ended in the next one (over its limit).
// Window checks read the precise clock.
func TestWindowChecksIgnoreALaggingCoarseClock(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			m, fs, clk := testManager(t, func(c *Config) { c.AheadHorizon = -1 })
			p := Policy{Algorithm: alg, Limit: 100, Period: time.Second}
			px := m.Prefix("r:")
			clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 100e6, time.UTC)) // 100ms into a window
			if d, err := px.Take("k", p, 1); err != nil || !d.Allowed {
				t.Fatalf("first check: %+v, %v, want allowed", d, err)
			}
			if _, _, ok := px.TakeLocal("k", &p, 1); !ok {
				t.Fatal("the gateway's local check refused a key with tokens on hand")
			}
			if got := m.striped.onHand(m.buckets.load("r:k")); got < 1 {
				t.Fatalf("%d tokens on hand after the first lease, want some", got)
			}
			// The coarse clock stops in this window (its ticker starved);
			// the real clock moves on into the next.
			stale := &coarseClock{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
			close(stale.done)
			stale.ns.Store(clk.Now().UnixNano())
			m.clk.coarse = stale
			clk.Advance(time.Second)
			// Another holder takes all the new window has.
			g, err := fs.Lease(context.Background(), "r:k", p, 100, 1, Lessee{ID: "other", TTL: time.Minute})
			if err != nil || g.Granted == 0 {
				t.Fatalf("the other holder's lease: %+v, %v", g, err)
			}
			if _, _, ok := px.TakeLocal("k", &p, 1); ok {
				t.Fatal("the gateway's local check spent the last window's tokens in the next window")
			}
			if d := mustTake(t, m, "r:k", p, 1); d.Allowed {
				t.Fatalf("a check in the next window, the coarse clock still in the last: %+v, want denied (the window is the other holder's; the last window's tokens are gone)", d)
			}
		})
	}
}

// A token_bucket key's checks read the coarse clock, and the Store's
// answers to them are dated by the same clock: dated by the precise one
// while the coarse one lagged, an answer looked to come from the future,
// and the next check, projecting it back to its own (coarse) now, denied
// tokens the Store had (the second of a limit of 2 denied).
func TestRefillingChecksDateAnswersByTheirClock(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, nil)
			lag := &coarseClock{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
			close(lag.done)
			lag.ns.Store(clk.Now().Add(-time.Second).UnixNano()) // a second behind
			m.clk.coarse = lag
			p := Policy{Algorithm: alg, Limit: 2, Period: time.Hour}
			for i, want := range []bool{true, true, false} {
				if d := mustTake(t, m, "k", p, 1); d.Allowed != want {
					t.Fatalf("check %d of a limit of 2: %+v, want allowed %v", i+1, d, want)
				}
			}
		})
	}
}
