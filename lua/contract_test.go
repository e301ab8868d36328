package lua

// The issue 9 findings on Redis (frozen-clock Redis shared with the
// Managers' clocks): lease/contract_test.go runs them on the memory store.

import (
	"context"
	"errors"
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
	for _, alg := range refillingAlgorithms {
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

// TestRedisDenialPerNeed (issue 9, finding 2) on Redis: burst 2000; take
// 1000, ask 1500 (denied), then peeks, 1 and 500 are allowed.
func TestRedisDenialPerNeed(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	for _, alg := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			m := newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
			p := lease.Policy{Algorithm: alg, Limit: 2000, Period: time.Hour, Burst: 2000}
			key := uniqueKey(t)
			steps := []struct {
				hits    int64
				allowed bool
			}{{1000, true}, {1500, false}, {0, true}, {1, true}, {500, true}, {0, true}, {499, true}, {1500, false}, {0, true}}
			for i, s := range steps {
				d, err := m.Take(key, p, s.hits)
				m.Settle()
				if err != nil || d.Allowed != s.allowed {
					t.Fatalf("step %d, hits %d: %+v %v, want allowed=%v", i, s.hits, d, err, s.allowed)
				}
			}
		})
	}
}

// TestRedisRefundAfterEmptyPrefetch (issue 9, finding 6) on Redis: a
// prefetch granted nothing keeps the refund bound.
func TestRedisRefundAfterEmptyPrefetch(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	var ms [2]*lease.Manager
	for i := range ms {
		ms[i] = newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
	}
	a, b := ms[0], ms[1]
	key := uniqueKey(t)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Hour}
	take := func(m *lease.Manager, hits int64) lease.Decision {
		t.Helper()
		d, err := m.Take(key, p, hits)
		if err != nil || d.Degraded {
			t.Fatalf("Take(%d): %+v %v", hits, d, err)
		}
		m.Settle()
		return d
	}
	take(a, 1) // a leases 13, keeps 12
	for take(b, 1).Allowed {
	}
	if !take(a, 10).Allowed { // 2 left: a prefetch, granted nothing
		t.Fatal("a's 10 denied")
	}
	a.Refund(key, p, 10)
	if d := take(a, 12); !d.Allowed {
		t.Fatalf("after refunding 10 of the 12 on hand: %+v, want 12 allowed", d)
	}
}

// TestRedisNoSilentOverflow (issue 9, finding 3) on Redis: gcra limit 1 per
// 8760h, burst 200000 is refused (the TAT cap under-charged: six checks of
// 100000 all allowed); burst 140 (140 years to refill) is charged exactly.
func TestRedisNoSilentOverflow(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	s := newTestStore(t, srv.Addr)
	m := newManager(t, s, lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
	for _, alg := range []lease.Algorithm{lease.GCRA, lease.TokenBucket} {
		p := lease.Policy{Algorithm: alg, Limit: 1, Period: 8760 * time.Hour, Burst: 200000}
		var fe *lease.FieldError
		if _, err := s.Lease(context.Background(), uniqueKey(t), p, 100000, 100000, lease.Lessee{}); !errors.As(err, &fe) || fe.Field != "burst" {
			t.Fatalf("%s: Lease = %v, want a FieldError on burst", alg, err)
		}
		p.Burst = 140
		key := uniqueKey(t)
		admitted := int64(0)
		for range 6 {
			d, err := m.Take(key, p, 100)
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed {
				admitted += 100
			}
			m.Settle()
		}
		if admitted != 100 {
			t.Fatalf("%s burst 140: admitted %d hits in six checks of 100, want 100", alg, admitted)
		}
	}
}

// TestRedisSpentLoanRefillsWhileIdle: lease's TestSpentLoanRefillsWhileIdle
// on Redis.
func TestRedisSpentLoanRefillsWhileIdle(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	for _, alg := range refillingAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			m := newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
			p := lease.Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			key := uniqueKey(t)
			take := func(hits int64) lease.Decision {
				t.Helper()
				d, err := m.Take(key, p, hits)
				if err != nil {
					t.Fatal(err)
				}
				m.Settle()
				return d
			}
			if !take(100).Allowed {
				t.Fatal("the burst denied")
			}
			for i := range 6 {
				clock.Advance(10 * time.Second)
				if d := take(1); !d.Allowed {
					t.Fatalf("check %d, %ds after spending the burst: %+v, want allowed", i, 10*(i+1), d)
				}
			}
			clock.Advance(10 * time.Second)
			if d := take(99); !d.Allowed {
				t.Fatalf("99 after 10s idle: %+v, want allowed", d)
			}
		})
	}
}

// TestRedisDeniedCallSettlesLoan: lease's TestDeniedCallSettlesLoan (the
// model harness's case A) on Redis: a lease call that grants nothing
// settles the holder's loan in the Store, so the credit for the tokens it
// reports spent is kept, not recomputed from a later call's Idle.
func TestRedisDeniedCallSettlesLoan(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	for _, alg := range refillingAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			m := newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
			p := lease.Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			key := uniqueKey(t)
			take := func(hits int64) lease.Decision {
				t.Helper()
				d, err := m.Take(key, p, hits)
				if err != nil {
					t.Fatal(err)
				}
				m.Settle()
				return d
			}
			if !take(100).Allowed {
				t.Fatal("the burst denied")
			}
			m.Refund(key, p, 100)
			if !take(88).Allowed { // its prefetch (held 12) is denied
				t.Fatal("88 of 100 on hand denied")
			}
			clock.Advance(21600 * time.Millisecond)
			if !take(1).Allowed {
				t.Fatal("1 of 11 on hand denied")
			}
			// 21.6s at 10/s refill the 88 spent: 88 + 11 on hand.
			if d := take(94); !d.Allowed {
				t.Fatalf("94 with 88 refilled and 11 on hand: %+v, want allowed", d)
			}
		})
	}
}

// TestRedisReportedSpendRefillsAfterOtherHolder: lease's
// TestReportedSpendRefillsAfterOtherHolder (the model harness's cases B/D)
// on Redis: a holder's spent tokens that another holder's lease found
// still lent refill from when they were spent once reported (b's 10 was
// denied with 18 in the bucket).
func TestRedisReportedSpendRefillsAfterOtherHolder(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	for _, alg := range refillingAlgorithms {
		t.Run(alg.String(), func(t *testing.T) {
			var ms [2]*lease.Manager
			for i := range ms {
				ms[i] = newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1, LowWater: 0.01})
			}
			a, b := ms[0], ms[1]
			p := lease.Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			key := uniqueKey(t)
			take := func(m *lease.Manager, hits int64) lease.Decision {
				t.Helper()
				d, err := m.Take(key, p, hits)
				if err != nil {
					t.Fatal(err)
				}
				m.Settle()
				return d
			}
			if !take(b, 17).Allowed || !take(a, 1).Allowed {
				t.Fatal("the first checks denied")
			}
			clock.Advance(10 * time.Second)
			if d := take(a, 82); !d.Allowed {
				t.Fatalf("a's 82 with 12 on hand and 70 in the bucket: %+v", d)
			}
			if d := take(b, 10); !d.Allowed {
				t.Fatalf("b's 10 with 18 in the bucket: %+v, want allowed", d)
			}
		})
	}
}
