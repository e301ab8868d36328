package lease

import (
	"testing"
	"time"
)

// A window's bucket that holds its whole limit, checked in the window's
// last millisecond, where its tokens' bound (early by the rounding of the
// Store's Reset) has passed: the Store is still in the window, with those
// tokens lent to this Manager, so the checks are allowed from them (they
// were denied, with Remaining 0 and RetryAfter 1ms, on a key far from its
// limit: a hot key leases up to its whole limit), and the window still
// admits no more than its limit.
func TestWindowsLastMillisecondSpendsTheTokensOnHand(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, func(c *Config) {
				c.AheadHorizon = -1 // no shares: the bucket's window alone
				c.MinLeaseShare = 1 // the first lease takes the whole limit
			})
			p := Policy{Algorithm: alg, Limit: 10, Period: time.Second}
			clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 100e6, time.UTC)) // 100ms into a window
			if d := mustTake(t, m, "k", p, 1); !d.Allowed {
				t.Fatalf("first check: %+v, want allowed", d)
			}
			if on := m.onHand(m.buckets.load("k")); on != 9 {
				t.Fatalf("%d tokens on hand after the first lease, want 9 (the whole limit leased)", on)
			}
			clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 999_600_000, time.UTC)) // 400µs before the window's end
			for i := range 9 {
				if d := mustTake(t, m, "k", p, 1); !d.Allowed {
					t.Fatalf("check %d of the window's last millisecond: %+v, want allowed (9 tokens lent to this Manager in the Store's window)", i+2, d)
				}
			}
			if d := mustTake(t, m, "k", p, 1); d.Allowed {
				t.Fatalf("the 11th check of a window of 10: %+v, want denied", d)
			}
		})
	}
}
