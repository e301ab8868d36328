package lease

// Tests of the accuracy contract (the package doc's "Lent tokens") for the
// findings of issue 9, at the Manager level on a MemoryStore with a fake
// clock. lua/contract_test.go runs the same cases on Redis.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// TestHeldLeaseDoesNotAddToBurst (issue 9, finding 1): token_bucket limit
// 600/1m, burst 100: one check, 8s idle, then 300 checks at one instant.
// Before lent accounting the Store refilled to its whole burst while the
// node still held its lease, and both were spent: 112 admitted in an
// instant against a burst of 100.
func TestHeldLeaseDoesNotAddToBurst(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, nil)
			p := Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			if !mustTake(t, m, "k", p, 1).Allowed {
				t.Fatal("first check denied")
			}
			m.drain()
			clk.Advance(8 * time.Second)
			admitted := 0
			for range 300 {
				if mustTake(t, m, "k", p, 1).Allowed {
					admitted++
				}
				m.drain()
			}
			if admitted > 100 {
				t.Fatalf("admitted %d checks in one instant, want ≤ burst 100 (held lease + refilled Store spent twice)", admitted)
			}
			if admitted < 99 {
				t.Fatalf("admitted %d checks in one instant, want 99 (the burst less the first check)", admitted)
			}
		})
	}
}

// TestLentAccountingSharedKey: two Managers share a key; one holds a lease
// through an idle spell while the other drains the refilled Store: in one
// instant, together, they never pass the burst.
func TestLentAccountingSharedKey(t *testing.T) {
	clk := clocktest.New()
	store := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = store.Close() })
	var ms [2]*Manager
	for i := range ms {
		cfg := DefaultConfig()
		cfg.Now, cfg.SweepInterval, cfg.StoreTimeout = clk.Now, -1, time.Minute
		ms[i] = NewManager(store, cfg)
		t.Cleanup(func() { _ = ms[i].Close() })
	}
	p := Policy{Algorithm: TokenBucket, Limit: 600, Period: time.Minute, Burst: 100}
	admitted := 0
	take := func(m *Manager) {
		t.Helper()
		if mustTake(t, m, "k", p, 1).Allowed {
			admitted++
		}
		m.drain()
	}
	take(ms[0]) // ms[0] leases 13 and keeps 12
	clk.Advance(8 * time.Second)
	admitted = 0
	for range 300 {
		take(ms[1])
		take(ms[0])
	}
	if admitted > 100 {
		t.Fatalf("admitted %d in one instant, want ≤ burst 100", admitted)
	}
}

// TestDenialPerNeed (issue 9, finding 2): burst 2000; take 1000 (allowed,
// 1000 remain), ask 1500 (denied, right), then 500 must be allowed, and
// peeks and single hits too. Before, the denial of 1500 set a deny-until
// of about 15 minutes that refused every smaller check.
func TestDenialPerNeed(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, _ := testManager(t, nil)
			p := Policy{Algorithm: alg, Limit: 2000, Period: time.Hour, Burst: 2000}
			steps := []struct {
				hits    int64
				allowed bool
			}{{1000, true}, {1500, false}, {0, true}, {1, true}, {500, true}, {0, true}, {499, true}, {1500, false}, {0, true}}
			for i, s := range steps {
				d := mustTake(t, m, "k", p, s.hits)
				m.drain()
				if d.Allowed != s.allowed {
					t.Fatalf("step %d, hits %d: %+v, want allowed=%v", i, s.hits, d, s.allowed)
				}
			}
		})
	}
}

// TestRefundAfterEmptyPrefetch (issue 9, finding 6): a prefetch that the
// Store grants nothing must not lower the refund bound: hits refunded
// after it (a request another rule denied) go back. Before, the bound fell
// to the tokens on hand and the refund was lost (the TestReturnKeys flake).
func TestRefundAfterEmptyPrefetch(t *testing.T) {
	clk := clocktest.New()
	store := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = store.Close() })
	var ms [2]*Manager
	for i := range ms {
		cfg := DefaultConfig()
		cfg.Now, cfg.SweepInterval, cfg.StoreTimeout = clk.Now, -1, time.Minute
		ms[i] = NewManager(store, cfg)
		t.Cleanup(func() { _ = ms[i].Close() })
	}
	a, b := ms[0], ms[1]
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Hour} // burst 100
	mustTake(t, a, "k", p, 1)                                          // a leases 13, keeps 12
	for mustTake(t, b, "k", p, 1).Allowed {                            // b drains the Store
		b.drain()
	}
	if !mustTake(t, a, "k", p, 10).Allowed { // 2 left: under the low mark, a prefetch
		t.Fatal("a's 10 denied")
	}
	a.drain() // the prefetch: the Store has nothing
	a.Refund("k", p, 10)
	if d := mustTake(t, a, "k", p, 12); !d.Allowed {
		t.Fatalf("after refunding 10 of the 12 on hand: %+v, want 12 allowed", d)
	}
}

// TestNoSilentOverflow (issue 9, finding 3): gcra limit 1 per 8760h,
// burst 200000: the TAT would run 200000 years ahead of now, which neither
// int64 nor float64 holds exactly; the TAT cap under-charged, and six
// checks of 100000 hits were all allowed. Such a policy is refused, naming
// the burst; one inside the bound is charged exactly.
func TestNoSilentOverflow(t *testing.T) {
	m, _, _ := testManager(t, nil)
	for _, alg := range []Algorithm{GCRA, TokenBucket} {
		p := Policy{Algorithm: alg, Limit: 1, Period: 8760 * time.Hour, Burst: 200000}
		var fe *FieldError
		if _, err := m.Take("k-"+alg.String(), p, 100000); !errors.As(err, &fe) || fe.Field != "burst" {
			t.Fatalf("%s: Take = %v, want a FieldError on burst", alg, err)
		}
		if _, err := NewMemoryStore(MemoryStoreConfig{}).Lease(context.Background(), "k", p, 1, 1, Lessee{}); !errors.As(err, &fe) || fe.Field != "burst" {
			t.Fatalf("%s: Lease = %v, want a FieldError on burst", alg, err)
		}
		// Inside the bounds (140 years to refill; burst × period < 2^52),
		// and charged exactly.
		p.Burst = 140
		admitted := int64(0)
		for range 6 {
			if mustTake(t, m, "ok-"+alg.String(), p, 100).Allowed {
				admitted += 100
			}
			m.drain()
		}
		if admitted != 100 {
			t.Fatalf("%s burst 140: admitted %d hits in six checks of 100, want 100", alg, admitted)
		}
	}
}

// TestSpentLoanRefillsWhileIdle (found by the model harness on the first
// lent accounting): a Manager that spent its whole loan and went quiet
// must find the idle spell's refill: the tokens it no longer holds were
// spent by its last spend (Lessee.Idle), not at its next call. Before,
// every later check was denied: the stale loan capped the refill at 0 and
// a denial never settled it.
func TestSpentLoanRefillsWhileIdle(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, nil)
			p := Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			if !mustTake(t, m, "k", p, 100).Allowed {
				t.Fatal("the burst denied")
			}
			for i := range 12 {
				clk.Advance(10 * time.Second)
				if d := mustTake(t, m, "k", p, 1); !d.Allowed {
					t.Fatalf("check %d, %ds after spending the burst: %+v, want allowed", i, 10*(i+1), d)
				}
				m.drain()
			}
			clk.Advance(10 * time.Second)
			// 10s at 10/s refill 100, less the 1 of 10s ago: 99 at least.
			if d := mustTake(t, m, "k", p, 99); !d.Allowed {
				t.Fatalf("99 after 10s idle: %+v, want allowed", d)
			}
		})
	}
}

// TestInexactPoliciesRefused (issue 9, finding 3's audit): gcra and
// sliding_window policies whose count × time products would leave
// float64's exact integers are refused, naming the field.
func TestInexactPoliciesRefused(t *testing.T) {
	for _, tt := range []struct {
		p     Policy
		field string
	}{
		{Policy{Algorithm: GCRA, Limit: 1 << 40, Period: time.Second}, "burst"},
		{Policy{Algorithm: SlidingWindow, Limit: 1_000_000, Period: 24 * time.Hour}, "limit"},
	} {
		var fe *FieldError
		if err := tt.p.Validate(); !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%+v: Validate = %v, want a FieldError on %s", tt.p, err, tt.field)
		}
	}
	for _, p := range []Policy{
		{Algorithm: GCRA, Limit: 1_000_000, Period: time.Hour},
		{Algorithm: SlidingWindow, Limit: 50_000, Period: 24 * time.Hour},
		{Algorithm: TokenBucket, Limit: 1 << 40, Period: time.Second},
		{Algorithm: FixedWindow, Limit: 1 << 40, Period: 24 * time.Hour},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v, want valid", p, err)
		}
	}
}

// TestDeniedCallSettlesLoan (issue 9, model harness case A, seed 35 of
// token_bucket/holders=1): token_bucket limit 600/1m burst 100, one
// Manager. Take 100 and refund it (100 on hand, all lent); take 88: the
// prefetch (held 12) is denied and reports the 88 spent now; 21.6s later a
// local take of 1, then a take of 94 (a lease with held 11). Before a call
// that grants nothing settled the loan in the Store, the 88's credit was
// recomputed at each call from that call's Idle (0 after the local spend):
// the 94 was denied with 98 tokens in the bucket, and so was every later
// check of the key.
func TestDeniedCallSettlesLoan(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, nil)
			p := Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			if !mustTake(t, m, "k", p, 100).Allowed {
				t.Fatal("the burst denied")
			}
			m.Refund("k", p, 100)
			if !mustTake(t, m, "k", p, 88).Allowed {
				t.Fatal("88 of 100 on hand denied")
			}
			m.drain() // the prefetch: denied, the 88 reported spent now
			clk.Advance(21600 * time.Millisecond)
			if !mustTake(t, m, "k", p, 1).Allowed {
				t.Fatal("1 of 11 on hand denied")
			}
			// 21.6s at 10/s refill the 88 spent: 88 + 11 on hand.
			if d := mustTake(t, m, "k", p, 94); !d.Allowed {
				t.Fatalf("94 with 88 refilled and 11 on hand: %+v, want allowed", d)
			}
		})
	}
}

// TestReportedSpendRefillsAfterOtherHolder (issue 9, the model harness's
// cases B/D, seed 1000000 of token_bucket/holders=3): token_bucket limit
// 600/1m burst 100, two Managers (LowWater 0.01: no prefetch). b spends 17 and goes
// quiet; a takes 1 (a lease of 13). 10s later a takes 82: the Store grants
// it the 70 it lacks while b's 17, spent 10s ago, are still lent to b.
// b's next check (10 hits) reports them spent 10s ago: they refilled long
// since, 18 tokens are left. Before, a's call wrote the level capped by
// b's loan (100 − 17 − 12 − 70, plus the refill of a's spent 1: 1 token),
// and b was denied until the bucket refilled.
func TestReportedSpendRefillsAfterOtherHolder(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := clocktest.New()
			store := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
			t.Cleanup(func() { _ = store.Close() })
			var ms [2]*Manager
			for i := range ms {
				cfg := DefaultConfig()
				cfg.Now, cfg.SweepInterval, cfg.StoreTimeout, cfg.LowWater = clk.Now, -1, time.Minute, 0.01
				ms[i] = NewManager(store, cfg)
				t.Cleanup(func() { _ = ms[i].Close() })
			}
			a, b := ms[0], ms[1]
			p := Policy{Algorithm: alg, Limit: 600, Period: time.Minute, Burst: 100}
			take := func(m *Manager, hits int64) Decision {
				t.Helper()
				d := mustTake(t, m, "k", p, hits)
				m.drain()
				return d
			}
			if !take(b, 17).Allowed || !take(a, 1).Allowed {
				t.Fatal("the first checks denied")
			}
			clk.Advance(10 * time.Second)
			if d := take(a, 82); !d.Allowed {
				t.Fatalf("a's 82 with 12 on hand and 70 in the bucket: %+v", d)
			}
			if d := take(b, 10); !d.Allowed {
				t.Fatalf("b's 10 with 18 in the bucket: %+v, want allowed", d)
			}
		})
	}
}
