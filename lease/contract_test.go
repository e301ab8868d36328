package lease

// Tests of the accuracy contract (the package doc's "Lent tokens") for the
// findings of issue 9, at the Manager level on a MemoryStore with a fake
// clock. lua/contract_test.go runs the same cases on Redis.

import (
	"testing"
	"time"
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
	clk := newFakeClock()
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
