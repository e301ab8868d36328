package lua

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestSlowKeyScriptCalls: on Redis, a token_bucket key checked every 2 s
// under a 100/s limit makes a script call per ~25 checks once its rate is
// measured (a first lease of the smallest lease, 13 tokens, then a loan of
// half the capacity for its loan's life, topped up each time a quarter of
// the capacity is spent), not one per 13.
func TestSlowKeyScriptCalls(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	m := newManager(t, newUnbatchedStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Second, Burst: 100}
	scripts := func() int64 {
		st := commandStats(t, srv.Addr)
		return st["evalsha"] + st["eval"]
	}
	before := scripts()
	const checks = 400
	for i := range checks {
		d, err := m.Take("slow", p, 1)
		if err != nil || !d.Allowed {
			t.Fatalf("check %d: %+v, %v", i, d, err)
		}
		clock.Advance(2 * time.Second)
	}
	calls := scripts() - before
	t.Logf("%d script calls for %d checks", calls, checks)
	if want := int64(2 + checks/24); calls > want {
		t.Errorf("%d script calls for %d checks, want at most %d", calls, checks, want)
	}
}
