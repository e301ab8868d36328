package lease

import (
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
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
			if on := m.striped.onHand(m.buckets.load("k")); on != 9 {
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

// A check that finds its key's bucket short because a lease call in
// flight took the tokens on hand off it (to report them held, and put
// back what the Store still lends) waits for that call instead of
// denying on the Store's last answer, which counted those tokens as lent
// to this Manager. Seen with the real clock (64 goroutines on one
// fixed_window key of 1e9 a second: about one check in 400k denied): a
// check reads its clock mid-window and is descheduled; meanwhile a check
// in the window's last millisecond leases with the whole limit out; the
// first then finds the bucket empty, its tokens spendable at its now.
func TestCheckWaitsForTheTokensACallTookOut(t *testing.T) {
	clk := clocktest.New()
	mem := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = mem.Close() })
	st := &pausedStore{Store: mem, entered: make(chan Lessee, 1), gate: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute // a loaded machine must not fail the stalled call
	cfg.AheadHorizon = -1
	cfg.MinLeaseShare = 1 // the first lease takes the whole limit
	m := NewManager(st, cfg)
	t.Cleanup(func() { _ = m.Close() })
	var open sync.Once
	release := func() { open.Do(func() { close(st.gate) }) }
	t.Cleanup(release) // before Close: a failed test must not leave the call stalled
	p := Policy{Algorithm: FixedWindow, Limit: 10, Period: time.Second}
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 100e6, time.UTC)) // 100ms into a window
	if d := mustTake(t, m, "k", p, 1); !d.Allowed {
		t.Fatalf("first check: %+v, want allowed", d)
	}
	mid := clk.Now().UnixNano() // the descheduled check's now
	// In the window's last millisecond a check leases; its call stalls
	// at the Store with the 9 tokens on hand off the bucket.
	clk.Set(time.Date(2026, 1, 1, 0, 0, 0, 999_600_000, time.UTC))
	st.stall.Store(true)
	last := make(chan Decision, 1)
	go func() { last <- mustTake(t, m, "k", p, 1) }()
	<-st.entered
	waiting := make(chan struct{})
	slotWaitHook = func(string) { close(waiting) }
	t.Cleanup(func() { slotWaitHook = nil })
	late := make(chan Decision, 1)
	go func() {
		d, err := m.takeSlow(m.buckets.load("k"), "k", p, 1, mid)
		if err != nil {
			t.Error(err)
		}
		late <- d
	}()
	select {
	case d := <-late:
		t.Fatalf("a check dated mid-window while a call had the 9 tokens on hand out: %+v, want it to wait for the call", d)
	case <-waiting:
	}
	st.stall.Store(false)
	release()
	for _, c := range []chan Decision{last, late} {
		if d := <-c; !d.Allowed {
			t.Fatalf("a check of a window with 9 tokens lent to this Manager: %+v, want allowed", d)
		}
	}
}
