package lease_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lease/storetest"
)

func newTestStore(t testing.TB, c *clocktest.Clock) *lease.MemoryStore {
	t.Helper()
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: c.Now, SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

func TestMemoryStoreConformance(t *testing.T) {
	// One clock per subtest store: Advance moves the clock of the store
	// that the current subtest created.
	clocks := map[*testing.T]*clocktest.Clock{}
	var mu sync.Mutex
	storetest.Run(t, storetest.Harness{
		New: func(t *testing.T) lease.Store {
			c := clocktest.New()
			// Start 7ms past a round instant so that window alignment
			// through Reset is exercised, not assumed.
			c.Advance(7 * time.Millisecond)
			mu.Lock()
			clocks[t] = c
			mu.Unlock()
			return newTestStore(t, c)
		},
		Advance: func(t *testing.T, d time.Duration) {
			mu.Lock()
			c := clocks[t]
			mu.Unlock()
			if c == nil {
				t.Fatal("Advance from a test that did not call New")
			}
			c.Advance(d)
		},
	})
}

func TestMemoryStoreSweep(t *testing.T) {
	c := clocktest.New()
	s := newTestStore(t, c)
	ctx := context.Background()
	tb := lease.Policy{Algorithm: lease.TokenBucket, Limit: 10, Period: time.Second}
	fw := lease.Policy{Algorithm: lease.FixedWindow, Limit: 10, Period: time.Second}
	sl := lease.Policy{Algorithm: lease.SlidingLog, Limit: 10, Period: time.Second}
	cc := lease.Policy{Algorithm: lease.Concurrency, Limit: 10, Period: 3 * time.Second}

	if _, err := s.Lease(ctx, "peek", tb, 0, 0, lease.Lessee{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Log(ctx, "peeklog", sl, 0); err != nil {
		t.Fatal(err)
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("after peeks on new keys Len() = %d, want 0: a peek must not create state", n)
	}
	mustLease := func(key string, p lease.Policy, n int64) {
		t.Helper()
		if g, err := s.Lease(ctx, key, p, n, n, lease.Lessee{}); err != nil || g.Granted != n {
			t.Fatalf("Lease(%s, %d) = %+v, %v", key, n, g, err)
		}
	}
	mustLease("tb", tb, 5) // full again after 5 × 100ms = 500ms
	mustLease("fw", fw, 5) // expires two windows after the window start: 2s
	if r, err := s.Log(ctx, "sl", sl, 1); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	if r, err := s.Acquire(ctx, "cc", cc, "id", 1); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	tests := []struct {
		advance time.Duration
		removed int
		left    int
		why     string
	}{
		{499 * time.Millisecond, 0, 4, "nothing has expired yet"},
		{1 * time.Millisecond, 1, 3, "the token bucket is full after 500ms"},
		{500 * time.Millisecond, 1, 2, "the log's only stamp left the window after 1s"},
		{1 * time.Second, 1, 1, "the fixed window's state is two windows old"},
		{1 * time.Second, 1, 0, "the concurrency slot's TTL (3s) passed"},
	}
	for _, tt := range tests {
		c.Advance(tt.advance)
		if got := s.Sweep(c.Now()); got != tt.removed || s.Len() != tt.left {
			t.Fatalf("Sweep removed %d, Len %d; want %d, %d: %s", got, s.Len(), tt.removed, tt.left, tt.why)
		}
	}
}

func TestMemoryStoreReleaseLastRemovesKey(t *testing.T) {
	c := clocktest.New()
	s := newTestStore(t, c)
	ctx := context.Background()
	cc := lease.Policy{Algorithm: lease.Concurrency, Limit: 2, Period: time.Hour}
	for _, id := range []string{"a", "b"} {
		if _, err := s.Acquire(ctx, "k", cc, id, 1); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"a", "b"} {
		if err := s.Release(ctx, "k", cc, id); err != nil {
			t.Fatal(err)
		}
	}
	if n := s.Len(); n != 0 {
		t.Fatalf("Len() = %d after releasing every id, want 0", n)
	}
}

func TestMemoryStoreJanitorAndClose(t *testing.T) {
	c := clocktest.New()
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: c.Now, SweepInterval: time.Millisecond})
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1, Period: time.Second}
	if _, err := s.Lease(context.Background(), "k", p, 1, 1, lease.Lessee{}); err != nil {
		t.Fatal(err)
	}
	c.Advance(time.Second)
	// The janitor is a real ticker goroutine (every millisecond): wait for
	// its sweep.
	clocktest.Eventually(t, 10*time.Second, "the janitor to remove expired state", func() bool { return s.Len() == 0 })
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v, want nil (Close is idempotent)", err)
	}
	// Still usable after Close.
	if g, err := s.Lease(context.Background(), "k", p, 1, 1, lease.Lessee{}); err != nil || g.Granted != 1 {
		t.Fatalf("Lease after Close = %+v, %v", g, err)
	}
}

func TestMemoryStoreNilNowUsesWallClock(t *testing.T) {
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer s.Close()
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 1, Period: time.Hour}
	g, err := s.Lease(context.Background(), "k", p, 0, 0, lease.Lessee{})
	if err != nil {
		t.Fatal(err)
	}
	want := time.Until(time.Now().Truncate(time.Hour).Add(time.Hour))
	if d := g.Reset - want; d < -time.Second || d > time.Second {
		t.Fatalf("Reset = %v, want about %v (the end of the wall clock's hour)", g.Reset, want)
	}
}

// TestMemoryStoreManyKeysConcurrent leases on many keys from many
// goroutines (run with -race): every key must grant exactly its limit.
func TestMemoryStoreManyKeysConcurrent(t *testing.T) {
	c := clocktest.New()
	s := newTestStore(t, c)
	ctx := context.Background()
	const keys, workers, limit = 64, 8, 20
	p := lease.Policy{Algorithm: lease.GCRA, Limit: limit, Period: time.Hour}
	var granted [keys]atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range keys * limit / 2 {
				k := (i + w) % keys
				g, err := s.Lease(ctx, "key"+strconv.Itoa(k), p, 1, 1, lease.Lessee{})
				if err != nil {
					t.Error(err)
					return
				}
				granted[k].Add(g.Granted)
			}
		})
	}
	wg.Wait()
	for k := range granted {
		if got := granted[k].Load(); got != limit {
			t.Fatalf("key %d: granted %d, want %d", k, got, limit)
		}
	}
}

func BenchmarkMemoryStoreLease(b *testing.B) {
	ctx := context.Background()
	for _, alg := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			s := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
			defer s.Close()
			// Limits high enough that every lease is granted and the
			// state persists (a full bucket would be deleted as expired):
			// the cost of the common path.
			p := lease.Policy{Algorithm: alg, Limit: 1 << 32, Period: time.Second}
			if alg == lease.TokenBucket || alg == lease.GCRA {
				p.Limit, p.Burst = 1<<20, 1<<32
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "bench:" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			var seq atomic.Uint64
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 7919
				for pb.Next() {
					i++
					if _, err := s.Lease(ctx, keys[i%len(keys)], p, 100, 1, lease.Lessee{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	b.Run("token_bucket/one_key", func(b *testing.B) {
		s := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
		defer s.Close()
		p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1 << 20, Period: time.Second, Burst: 1 << 32}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Lease(ctx, "hot", p, 100, 1, lease.Lessee{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

func BenchmarkMemoryStoreLog(b *testing.B) {
	ctx := context.Background()
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
	defer s.Close()
	p := lease.Policy{Algorithm: lease.SlidingLog, Limit: 100, Period: time.Second}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("log:%d", i)
	}
	b.ReportAllocs()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			if _, err := s.Log(ctx, keys[i%len(keys)], p, 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMemoryStoreLeaseHolder is a node's common call: a lease of an
// existing key by its Manager (a holder, with a loan to settle).
func BenchmarkMemoryStoreLeaseHolder(b *testing.B) {
	ctx := context.Background()
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
	defer s.Close()
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1 << 20, Period: time.Second, Burst: 1 << 32}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "bench:" + strconv.Itoa(i)
	}
	to := lease.Lessee{ID: "node-1", TTL: time.Minute, Idle: time.Second, Held: 100}
	b.ReportAllocs()
	var seq atomic.Uint64
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			if _, err := s.Lease(ctx, keys[i%len(keys)], p, 100, 1, to); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkMemoryStorePerKey reports the live heap per key of 1M
// token_bucket keys, each leased once by one holder (a node's Manager),
// beyond the key's own length, and the allocations of a first lease.
func BenchmarkMemoryStorePerKey(b *testing.B) {
	const n = 1 << 20
	ctx := context.Background()
	keys := make([]string, n)
	keyBytes := 0
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%07d", i)
		keyBytes += len(keys[i])
	}
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1000, Period: time.Second}
	to := lease.Lessee{ID: "node-1", TTL: time.Minute, Idle: time.Second}
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		s := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for _, k := range keys {
			if _, err := s.Lease(ctx, k, p, 10, 1, to); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
		b.ReportMetric(perKey, "B/key")
		b.ReportMetric(perKey-float64(keyBytes)/n, "B/key-beyond-key")
		runtime.KeepAlive(s)
		_ = s.Close()
		b.StartTimer()
	}
}
