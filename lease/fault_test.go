package lease

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// TestLocalDecisionIgnoresStoreDeadline: a FailLocal decision is made from
// this node's memory however little of the check's Store budget is left;
// it is never "unavailable". Before the fix the local call ran under the
// Store's deadline, and a check whose budget the failed Store call had
// spent answered 503 (finding 2; TestTakeManyHungStore flaked under -race
// for the same reason).
func TestLocalDecisionIgnoresStoreDeadline(t *testing.T) {
	m, fs, _ := testManager(t, func(c *Config) { c.StoreTimeout = time.Nanosecond })
	fs.mode.Store(faultHang)
	for _, p := range []Policy{
		{Algorithm: TokenBucket, Limit: 3, Period: time.Hour, OnFailure: FailLocal},
		{Algorithm: SlidingLog, Limit: 3, Period: time.Hour, OnFailure: FailLocal},
	} {
		allowed := 0
		for i := range 5 {
			d := mustTake(t, m, "k-"+p.Algorithm.String(), p, 1)
			if d.Unavailable || !d.Degraded {
				t.Fatalf("%v check %d: %+v, want a degraded local decision", p.Algorithm, i, d)
			}
			if d.Allowed {
				allowed++
			}
		}
		if allowed != 3 {
			t.Errorf("%v: allowed %d of 5, want the limit 3", p.Algorithm, allowed)
		}
	}
}

// TestCoarseClockSleepsWhenUnread: the coarse clock's ticker stops when
// nobody reads it (an idle node woke 1000 times a second, ~2% of a core:
// finding 8), readers then get 0 (and ask time.Now), and a read wakes it.
func TestCoarseClockSleepsWhenUnread(t *testing.T) {
	c := startCoarseClock(time.Millisecond)
	defer c.Stop()
	// The ticker is a real goroutine: wait for it.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		clocktest.Eventually(t, 20*time.Second, "the coarse clock to "+what, cond)
	}
	waitFor("go to sleep unread", func() bool { return c.ns.Load() == 0 })
	if c.Nanos() != 0 {
		t.Fatal("a sleeping clock answered a time")
	}
	waitFor("wake on a read", func() bool { return c.ns.Load() != 0 })
	if ns := c.Nanos(); ns == 0 {
		t.Fatal("an awake clock answered 0")
	}
}

// reconcileManager is a Manager on a fault store and the shared fake
// clock, whose breaker probes in the background on that clock.
func reconcileManager(t *testing.T) (*Manager, *faultStore, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute
	cfg.Breaker = BreakerConfig{Failures: 1, Cooldown: time.Second, AfterFunc: clk.AfterFunc}
	m := NewManager(fs, cfg)
	t.Cleanup(func() { _ = m.Close() })
	return m, fs, clk
}

// TestLocalAdmissionsCharged: what a node admits from memory while the
// Store is down is charged to the Store when it comes back, so the
// Store's count ends where it would have been without the outage. Before,
// the Store never saw those hits and the node went over by them once per
// outage (finding 3). Two ways back: the key's next lease, and the
// breaker closing on an idle node (background probe), for every key.
func TestLocalAdmissionsCharged(t *testing.T) {
	p := Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour, OnFailure: FailLocal}
	for _, tt := range []struct {
		name string
		back func(t *testing.T, m *Manager, clk *clocktest.Clock) int64 // hits it took
	}{
		{"next lease", func(t *testing.T, m *Manager, clk *clocktest.Clock) int64 {
			clk.Advance(time.Second) // no background probe: AfterFunc fires, Store is back
			mustTake(t, m, "k", p, 1)
			return 1
		}},
		{"breaker closes on an idle node", func(t *testing.T, m *Manager, clk *clocktest.Clock) int64 {
			clk.Advance(time.Second)
			return 0
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, fs, clk := reconcileManager(t)
			for range 10 {
				mustTake(t, m, "k", p, 1)
			}
			m.drain()
			fs.mode.Store(faultError)
			local, during := 0, 0 // admitted from memory, admitted in all
			for range 20 {
				d := mustTake(t, m, "k", p, 1)
				if d.Allowed {
					during++ // the first from tokens on hand
					if d.Degraded {
						local++
					}
				}
			}
			if local == 0 {
				t.Fatal("no local-mode admission while the Store was down")
			}
			// The prefetches the first checks started end while the
			// Store is still down: one that ran after it came back made
			// this test depend on the scheduler.
			m.drain()
			fs.mode.Store(faultNone)
			took := tt.back(t, m, clk)
			m.drain()
			if m.Stats().Breaker != BreakerClosed {
				t.Fatalf("breaker %v after the Store came back", m.Stats().Breaker)
			}
			held := int64(0)
			if b := m.buckets.load("k"); b != nil {
				held = m.striped.onHand(b)
			}
			admitted := int64(10+during) + took
			if got := fs.available(t, "k", p) + held; got != 100-admitted {
				t.Errorf("Store has %d (+%d held by the node) after %d admitted (%d locally), want %d in all",
					got-held, held, admitted, local, 100-admitted)
			}
		})
	}
}

// TestUnknownKeyLocalShare: in local mode a node admits only its share of
// a key it never leased (a key another node owns, decided here because
// its forward failed): before, it started from a full bucket, and the N
// nodes of an overloaded cluster each admitted the whole limit (finding
// 4: 155% of the allowance under 2x saturation). A key it has leased
// goes on from the Store's level as before.
func TestUnknownKeyLocalShare(t *testing.T) {
	for _, tt := range []struct {
		name  string
		share func() float64
		want  int
	}{
		{"default: the whole capacity", nil, 30},
		{"one node of three", func() float64 { return 1.0 / 3 }, 10},
		{"a share of 1 or more", func() float64 { return 2 }, 30},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, fs, _ := testManager(t, func(c *Config) {
				c.UnknownLocalShare = tt.share
				c.Breaker = BreakerConfig{Failures: 1}
			})
			fs.mode.Store(faultError)
			p := Policy{Algorithm: FixedWindow, Limit: 30, Period: time.Hour, OnFailure: FailLocal}
			allowed := 0
			for range 40 {
				if d := mustTake(t, m, "theirs", p, 1); d.Allowed {
					allowed++
				}
			}
			if allowed != tt.want {
				t.Errorf("admitted %d of 40 from memory for a key never leased, want %d", allowed, tt.want)
			}
		})
	}
}

// TestLocalAdmissionsOwedAfterEviction: a key that leaves the index while
// the Store is down (idle, or its ownership moved) ends its FailLocal
// episode when its charge cannot be made; the hits are owed and charged
// when the Store is back. Before, that charge failed once and was dropped:
// the Store never counted what local mode had admitted for the key (a
// region cut off from its global tier longer than the idle return lost
// its keys' charges the same way).
func TestLocalAdmissionsOwedAfterEviction(t *testing.T) {
	p := Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour, OnFailure: FailLocal}
	m, fs, clk := reconcileManager(t)
	for range 10 {
		mustTake(t, m, "k", p, 1)
	}
	m.drain()
	fs.mode.Store(faultError)
	admitted := int64(10)
	for range 20 {
		if mustTake(t, m, "k", p, 1).Allowed {
			admitted++
		}
	}
	m.drain()
	if err := m.ReturnKeys(func(string) bool { return false }); err == nil {
		t.Fatal("ReturnKeys with the Store down: no error")
	}
	m.drain()
	if m.buckets.load("k") != nil {
		t.Fatal("the key is still in the index")
	}
	fs.mode.Store(faultNone)
	clk.Advance(time.Second) // the breaker's probe: the Store is back
	m.drain()
	if m.Stats().Breaker != BreakerClosed {
		t.Fatalf("breaker %v after the Store came back", m.Stats().Breaker)
	}
	if got := fs.available(t, "k", p); got != 100-admitted {
		t.Errorf("Store has %d after %d admitted, want %d: local mode's admissions were not charged", got, admitted, 100-admitted)
	}
}
