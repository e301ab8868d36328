package lease

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// directManagers returns n Managers with Config.Direct sharing one
// MemoryStore on a fake clock, and the store.
func directManagers(t *testing.T, n int) ([]*Manager, *MemoryStore, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	s := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	ms := make([]*Manager, n)
	for i := range ms {
		cfg := DefaultConfig()
		cfg.Now, cfg.SweepInterval, cfg.Direct = clk.Now, -1, true
		ms[i] = NewManager(s, cfg)
		t.Cleanup(func() { _ = ms[i].Close() })
	}
	return ms, s, clk
}

// leasedPolicies are a policy of each leased algorithm with limit 5 per
// second (burst 5).
func leasedPolicies() []Policy {
	var ps []Policy
	for _, a := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow} {
		p := Policy{Algorithm: a, Limit: 5, Period: time.Second}
		if a.HasBurst() {
			p.Burst = 5
		}
		ps = append(ps, p)
	}
	return ps
}

// With Config.Direct every check is the Store's decision: two Managers
// sharing a key admit exactly its limit between them (leasing, each would
// take a batch, and each answer's Remaining would be its own), keep no
// bucket and make no lease call.
func TestDirectDecidesEveryCheckInStore(t *testing.T) {
	for _, p := range leasedPolicies() {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			ms, s, _ := directManagers(t, 2)
			for i := range 5 {
				d := mustTake(t, ms[i%2], "k", p, 1)
				if !d.Allowed || d.Remaining != int64(4-i) {
					t.Fatalf("check %d: %+v, want allowed with %d remaining", i, d, 4-i)
				}
			}
			for i := range 2 {
				d := mustTake(t, ms[i], "k", p, 1)
				if d.Allowed || d.RetryAfter <= 0 || d.Remaining != 0 {
					t.Fatalf("check over the limit by m%d: %+v, want denied with a retry", i, d)
				}
			}
			if d := mustTake(t, ms[0], "k", p, 0); !d.Allowed || d.Remaining != 0 {
				t.Fatalf("peek: %+v", d)
			}
			for i, m := range ms {
				if b := m.buckets.load("k"); b != nil {
					t.Errorf("m%d keeps a bucket", i)
				}
				st := m.Stats()
				if st.Leases != 0 || st.Prefetches != 0 || st.TokensLeased != 0 {
					t.Errorf("m%d leased: %+v", i, st)
				}
				if st.ActiveKeys != 1 {
					t.Errorf("m%d: ActiveKeys %d, want the Store's 1 key", i, st.ActiveKeys)
				}
			}
			if got := ms[0].Stats().StoreDecisions; got != 5 {
				t.Errorf("m0: %d store decisions, want 5 (3 allowed, 1 denied, 1 peek)", got)
			}
			// A peek of a key without state writes none.
			if d := mustTake(t, ms[0], "other", p, 0); !d.Allowed || d.Remaining != 5 {
				t.Fatalf("peek of a new key: %+v", d)
			}
			if n := s.Len(); n != 1 {
				t.Errorf("the Store holds %d keys after a peek of a new one, want 1", n)
			}
		})
	}
}

// Refund with Config.Direct gives the hits back to the Store, never
// more than were spent: nothing passes the capacity, and a holder's loan
// on the key (a gateway's, leasing from this node) stays counted.
func TestDirectRefund(t *testing.T) {
	ctx := context.Background()
	for _, p := range leasedPolicies() {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			ms, s, _ := directManagers(t, 1)
			m := ms[0]
			admit := func(key string, want int) {
				t.Helper()
				for i := range want {
					if d := mustTake(t, m, key, p, 1); !d.Allowed {
						t.Fatalf("%s: check %d of %d denied: %+v", key, i+1, want, d)
					}
				}
				if d := mustTake(t, m, key, p, 1); d.Allowed {
					t.Fatalf("%s: check %d allowed, want %d then a denial", key, want+1, want)
				}
			}
			admit("k", 5)
			m.Refund("k", p, 2)
			admit("k", 2)
			m.Refund("k", p, 100) // 5 were spent
			admit("k", 5)

			g, err := s.Lease(ctx, "l", p, 3, 3, Lessee{ID: "gw", TTL: time.Minute, Call: 1})
			if err != nil || g.Granted != 3 {
				t.Fatalf("the gateway's lease: %+v, %v", g, err)
			}
			admit("l", 2)
			m.Refund("l", p, 5) // 2 were spent without a loan; the gateway's 3 stay lent
			admit("l", 2)
		})
	}
}

// A refund under another algorithm than the key's state (a rule changed
// meanwhile) changes nothing: the key keeps its state.
func TestDirectRefundOtherAlgorithm(t *testing.T) {
	ms, _, _ := directManagers(t, 1)
	ps := leasedPolicies()
	mustTake(t, ms[0], "k", ps[0], 5)
	ms[0].Refund("k", ps[1], 5)
	if d := mustTake(t, ms[0], "k", ps[0], 0); d.Remaining != 0 {
		t.Fatalf("after a refund under %s, the %s key has %d remaining, want 0", ps[1].Algorithm, ps[0].Algorithm, d.Remaining)
	}
}

// Without Config.Direct a refund goes to the bucket, not the Store: the
// same calls leave the Store's key as it was.
func TestDirectRefundOnlyDirect(t *testing.T) {
	clk := clocktest.New()
	s := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	defer s.Close()
	cfg := DefaultConfig()
	cfg.Now, cfg.SweepInterval = clk.Now, -1
	m := NewManager(s, cfg)
	defer m.Close()
	p := leasedPolicies()[0]
	mustTake(t, m, "k", p, 1)
	before, _ := s.Lease(context.Background(), "k", p, 0, 0, Lessee{})
	m.Refund("k", p, 1)
	after, _ := s.Lease(context.Background(), "k", p, 0, 0, Lessee{})
	if before.Remaining != after.Remaining {
		t.Fatalf("a leasing Manager's refund changed the Store: remaining %d → %d", before.Remaining, after.Remaining)
	}
}

// TakeMany with Config.Direct decides in order: several checks of one key
// are admitted first to last (a leasing Manager's TakeMany may not).
func TestDirectTakeManyInOrder(t *testing.T) {
	for _, p := range leasedPolicies() {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			ms, _, _ := directManagers(t, 1)
			cs := make([]Check, 8)
			for i := range cs {
				cs[i] = Check{Key: fmt.Sprintf("k%d", i%2), Policy: p, Hits: 1}
			}
			cs[6].Hits, cs[7].Hits = 0, MaxHits+1
			ms[0].TakeMany(cs)
			for i, c := range cs[:6] {
				if c.Err != nil || !c.Decision.Allowed || c.Decision.Remaining != int64(4-i/2) {
					t.Errorf("check %d: %+v, %v; want allowed with %d remaining", i, c.Decision, c.Err, 4-i/2)
				}
			}
			if c := cs[6]; c.Err != nil || !c.Decision.Allowed || c.Decision.Remaining != 2 {
				t.Errorf("peek: %+v, %v", c.Decision, c.Err)
			}
			if c := cs[7]; c.Err == nil {
				t.Errorf("hits above MaxHits: no error")
			}
		})
	}
}

// BenchmarkTakeDirect is a check's cost on a MemoryStore with
// Config.Direct (a call into the store per check) beside a leasing
// Manager's (the bucket's fast path), on one hot key and over 1M keys. The
// policies keep every key's state for the run, as a limit must remember
// it (the 1M keys' tokens refill in 86s each; the hot key is spent far
// faster than it refills), and never run out.
func BenchmarkTakeDirect(b *testing.B) {
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: 24 * time.Hour, Burst: 50_000}
	hot := Policy{Algorithm: TokenBucket, Limit: 1 << 30, Period: 24 * time.Hour, Burst: 1 << 40}
	const n = 1 << 20
	keys := benchKeys(n)
	for _, direct := range []bool{true, false} {
		mode := "leased"
		if direct {
			mode = "direct"
		}
		store := NewMemoryStore(MemoryStoreConfig{SweepInterval: -1})
		m := NewManager(store, Config{Idle: time.Hour, Direct: direct, SweepInterval: -1})
		for _, k := range keys {
			_, _ = m.Take(k, p, 1)
		}
		for range 1000 {
			_, _ = m.Take("hot", hot, 1)
		}
		b.Run(mode+"/hot", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if d, _ := m.Take("hot", hot, 1); !d.Allowed {
						b.Fatal("denied")
					}
				}
			})
		})
		b.Run(mode+"/1M", func(b *testing.B) {
			b.ReportAllocs()
			var cursor atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(cursor.Add(1)) * 104729
				for pb.Next() {
					if d, _ := m.Take(keys[i&(n-1)], p, 1); !d.Allowed {
						b.Fatal("denied")
					}
					i += 7919
				}
			})
		})
		_ = m.Close()
		_ = store.Close()
	}
}

// A bad call gets the error a leasing Manager gives, word for word.
func TestDirectErrorsAsLeasing(t *testing.T) {
	ms, _, _ := directManagers(t, 1)
	leasing, _, _ := testManager(t, nil)
	for _, p := range []Policy{
		{Algorithm: TokenBucket, Limit: 0, Period: time.Second},
		{Algorithm: FixedWindow, Limit: 5, Period: time.Microsecond},
		{Algorithm: GCRA, Limit: 1, Period: time.Second, Burst: -1},
	} {
		_, derr := ms[0].Take("k", p, 1)
		_, lerr := leasing.Take("k", p, 1)
		if derr == nil || lerr == nil || derr.Error() != lerr.Error() {
			t.Errorf("%+v: Direct says %v, leasing %v", p, derr, lerr)
		}
	}
}

// With Config.Direct the active keys are the Store's: Stats says so at
// once, the sluice_lease_active_keys gauge after each sweep.
func TestDirectActiveKeys(t *testing.T) {
	clk := clocktest.New()
	s := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	defer s.Close()
	set := metrics.NewSet()
	cfg := DefaultConfig()
	cfg.Now, cfg.SweepInterval, cfg.Direct, cfg.Metrics = clk.Now, -1, true, set
	m := NewManager(s, cfg)
	defer m.Close()
	p := leasedPolicies()[0]
	for _, k := range []string{"a", "b", "c"} {
		mustTake(t, m, k, p, 1)
	}
	if n := m.Stats().ActiveKeys; n != 3 {
		t.Fatalf("ActiveKeys %d, want 3", n)
	}
	m.sweep(clk.Now())
	var b strings.Builder
	set.WritePrometheus(&b)
	if !strings.Contains(b.String(), "sluice_lease_active_keys 3\n") {
		t.Fatalf("after a sweep, /metrics says:\n%s", b.String())
	}
}
