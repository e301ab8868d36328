package lua

// The issue 9 findings on Redis (frozen-clock Redis shared with the
// Managers' clocks): lease/contract_test.go runs them on the memory store.

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestRedisHeldLeaseDoesNotAddToBurst (issue 9, finding 1): token_bucket
// limit 600/1m, burst 100: one check on one node, 8s idle, then 300 checks
// at one instant on that node and another: at most the burst.
func TestRedisHeldLeaseDoesNotAddToBurst(t *testing.T) {
	start := time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	for _, alg := range []lease.Algorithm{lease.TokenBucket, lease.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			p := lease.Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			key := uniqueKey(t)
			var ms [2]*lease.Manager
			for i := range ms {
				ms[i] = newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
			}
			if d, err := ms[0].Take(key, p, 1); err != nil || !d.Allowed {
				t.Fatalf("first check: %+v %v", d, err)
			}
			clock.Advance(8 * time.Second)
			admitted := 0
			for i := range 300 {
				d, err := ms[i%2].Take(key, p, 1)
				if err != nil || d.Degraded {
					t.Fatalf("Take: %+v %v", d, err)
				}
				if d.Allowed {
					admitted++
				}
			}
			if admitted > 100 {
				t.Fatalf("admitted %d in one instant, want ≤ burst 100 (a held lease and the refilled Store spent twice)", admitted)
			}
		})
	}
}

// TestRedisReturnBoundedByLent: a return gives back at most what the Store
// lent the holder, and nothing to a holder it lent nothing.
func TestRedisReturnBoundedByLent(t *testing.T) {
	srv, _ := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	s := newTestStore(t, srv.Addr)
	ctx := context.Background()
	for _, alg := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			p := lease.Policy{Algorithm: alg, Limit: 10, Period: time.Hour}
			key := uniqueKey(t)
			h := lease.Lessee{ID: "node-a", TTL: time.Minute}
			g, err := s.Lease(ctx, key, p, 4, 4, h)
			if err != nil || g.Granted != 4 || g.Lent != 4 {
				t.Fatalf("Lease = %+v, %v; want 4 granted and lent", g, err)
			}
			if err := s.Return(ctx, key, p, 100, "node-b"); err != nil {
				t.Fatal(err)
			}
			if err := s.Return(ctx, key, p, 100, "node-a"); err != nil {
				t.Fatal(err)
			}
			if err := s.Return(ctx, key, p, 100, "node-a"); err != nil {
				t.Fatal(err)
			}
			g, err = s.Lease(ctx, key, p, 0, 0, lease.Lessee{})
			if err != nil || g.Remaining != 10 {
				t.Fatalf("after returns of 100 by a stranger, and twice by the holder of 4: %+v %v; want 10 remaining", g, err)
			}
		})
	}
}
