package lua

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestRedisOpsRenewals bounds the Store calls of keys in steady use over
// several lease TTLs, on a frozen Redis clock shared with the Manager and
// moved 1ms at a time (no wall clock, no sweeper): each key pays its
// first lease, then one renewal per half LeaseTTL (2.5 min by default) while
// its lease lasts that long (the limit here is so high that it always
// does), and nothing else. TestRedisOpsPerDecision measures 25 simulated
// seconds at most, before the first renewal.
//
// ab-versions.sh's Redis phase counts the same calls on wall-clock load;
// its measured pass also pays the first leases of keys its warm-up pass
// decided degraded (Store over its timeout on a loaded machine), so its
// figures vary run to run by hundreds of calls whichever build runs.
func TestRedisOpsRenewals(t *testing.T) {
	const seconds = 600 // four half lease TTLs
	renewals := int64(seconds * time.Second / (lease.DefaultConfig().LeaseTTL / 2))
	for _, tc := range []struct {
		name    string
		keys    int     // besides the hot key
		rate    int     // decisions per simulated second
		hotFrac float64 // share of them on the hot key
	}{
		{"hot key", 0, 1000, 1},
		{"hot key and 2000 others", 2000, 4000, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
			m := newManager(t, newUnbatchedStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
			p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1_000_000_000, Period: time.Second}
			r := rand.New(rand.NewPCG(1, 2))
			scripts := func() int64 {
				st := commandStats(t, srv.Addr)
				return st["evalsha"] + st["eval"]
			}
			before := scripts()
			seen := map[int]bool{}
			var buf []byte
			for ms := 0; ms < seconds*1000; ms++ {
				for i := 0; i < tc.rate/1000; i++ {
					k := -1
					if r.Float64() >= tc.hotFrac {
						k = r.IntN(tc.keys)
					}
					seen[k] = true
					buf = strconv.AppendInt(append(buf[:0], 'k'), int64(k), 10)
					if d, err := m.Take(string(buf), p, 1); err != nil || !d.Allowed || d.Degraded {
						t.Fatalf("Take = %+v, %v; want allowed from a lease", d, err)
					}
				}
				clock.Advance(time.Millisecond)
			}
			calls, decisions := scripts()-before, int64(seconds*tc.rate)
			st := m.Stats()
			t.Logf("%d keys, %d decisions over %ds (simulated): %d script calls (%.4f%% per decision); manager: %d sync leases, %d prefetches, %d returns",
				len(seen), decisions, seconds, calls, 100*float64(calls)/float64(decisions), st.Leases, st.Prefetches, st.Returns)
			if want := int64(len(seen)) * (1 + renewals); calls > want {
				t.Errorf("%d script calls for %d keys over %ds, want ≤ %d (a first lease and a renewal per half lease TTL each)", calls, len(seen), seconds, want)
			}
		})
	}
}
