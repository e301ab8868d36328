package lease

import (
	"testing"
	"time"
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
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for i := 0; !cond(); i++ {
			if i == 20_000 {
				t.Fatalf("the coarse clock did not %s", what)
			}
			time.Sleep(time.Millisecond)
		}
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
