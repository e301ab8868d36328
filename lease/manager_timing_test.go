package lease

import (
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

// benchManager is a Manager with the real clock on a MemoryStore.
func benchManager(b *testing.B) *Manager {
	b.Helper()
	store := NewMemoryStore(MemoryStoreConfig{})
	m := NewManager(store, Config{})
	b.Cleanup(func() {
		_ = m.Close()
		_ = store.Close()
	})
	return m
}

// hotPolicy never runs out during a benchmark: the fast path is measured.
var hotPolicy = Policy{Algorithm: TokenBucket, Limit: MaxLimit, Period: time.Second}

func BenchmarkTakeHot(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		m := benchManager(b)
		for range 1000 {
			_, _ = m.Take("hot", hotPolicy, 1)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if d, _ := m.Take("hot", hotPolicy, 1); !d.Allowed {
				b.Fatal("denied")
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		m := benchManager(b)
		for range 1000 {
			_, _ = m.Take("hot", hotPolicy, 1)
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, _ := m.Take("hot", hotPolicy, 1); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
	})
	// window: a fixed_window key, whose checks read the precise clock
	// (clock.nanosFor): the cost of that read over single's.
	b.Run("window", func(b *testing.B) {
		m := benchManager(b)
		p := Policy{Algorithm: FixedWindow, Limit: 1 << 40, Period: time.Hour}
		for range 1000 {
			_, _ = m.Take("hot", p, 1)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if d, _ := m.Take("hot", p, 1); !d.Allowed {
				b.Fatal("denied")
			}
		}
	})
	// striped: the key striped before the first timed check (parallel
	// stripes it once two goroutines are seen taking it); with -cpu 1,
	// the striped fast path's own cost.
	b.Run("striped", func(b *testing.B) {
		m := benchManager(b)
		for range 1000 {
			_, _ = m.Take("hot", hotPolicy, 1)
		}
		bk := m.buckets.load("hot")
		m.striped.stripe(bk)
		if bk.tokens.Load() >= 0 {
			b.Fatal("not striped")
		}
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if d, _ := m.Take("hot", hotPolicy, 1); !d.Allowed {
					b.Fatal("denied")
				}
			}
		})
	})
}

// BenchmarkTakeDenied: checks of an exhausted key are answered from its
// deny-until, without a Store call.
func BenchmarkTakeDenied(b *testing.B) {
	m := benchManager(b)
	p := Policy{Algorithm: TokenBucket, Limit: 1, Period: time.Hour}
	_, _ = m.Take("denied", p, 1)
	_, _ = m.Take("denied", p, 1)
	calls := m.Stats().Leases
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, _ := m.Take("denied", p, 1); d.Allowed {
				b.Fatal("allowed")
			}
		}
	})
	b.ReportMetric(float64(m.Stats().Leases-calls)/float64(b.N), "store-calls/op")
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkTake1MKeys spreads checks over 1M keys, each already leased.
func BenchmarkTake1MKeys(b *testing.B) {
	const n = 1 << 20
	keys := benchKeys(n)
	store := NewMemoryStore(MemoryStoreConfig{})
	// No idle sweep during the run (warming 1M keys takes seconds), and a
	// long horizon so that each key's second lease holds plenty of tokens:
	// the benchmark measures the fast path over a large key space.
	m := NewManager(store, Config{Idle: time.Hour, Horizon: 10 * time.Second})
	b.Cleanup(func() {
		_ = m.Close()
		_ = store.Close()
	})
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Second}
	// Two quick checks per key: the second lease is sized from the
	// measured rate, so each key holds a few tokens to spend locally.
	for _, k := range keys {
		_, _ = m.Take(k, p, 1)
		_, _ = m.Take(k, p, 1)
	}
	storeCalls := func() int64 { st := m.Stats(); return st.Leases + st.Prefetches }
	// Every run walks on from where the last stopped (i += 7919 visits
	// all keys before any twice), so no key is spent down by repeats.
	var cursor atomic.Int64
	b.Run("single", func(b *testing.B) {
		b.ReportAllocs()
		calls := storeCalls()
		i := int(cursor.Add(int64(b.N)))
		for b.Loop() {
			_, _ = m.Take(keys[i&(n-1)], p, 1)
			i += 7919
		}
		b.ReportMetric(float64(storeCalls()-calls)/float64(b.N), "store-calls/op")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		calls := storeCalls()
		b.RunParallel(func(pb *testing.PB) {
			i := int(cursor.Add(int64(b.N)))
			for pb.Next() {
				_, _ = m.Take(keys[i&(n-1)], p, 1)
				i += 7919
			}
		})
		b.ReportMetric(float64(storeCalls()-calls)/float64(b.N), "store-calls/op")
	})
}

// BenchmarkMemoryPerKey reports the heap bytes per active key of 1M keys,
// beyond the key's own length (the budget is 128 bytes + the key; a
// bucket with a key of up to 15 bytes, as these, takes 96 of them).
func BenchmarkMemoryPerKey(b *testing.B) {
	const n = 1 << 20
	keys := benchKeys(n)
	var keyBytes int
	for _, k := range keys {
		keyBytes += len(k)
	}
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Second}
	for b.Loop() {
		b.StopTimer()
		store := NewMemoryStore(MemoryStoreConfig{})
		m := NewManager(store, Config{})
		// Lease outside the measurement: the MemoryStore's own state is
		// not the node's per-key cost (Redis holds it in production).
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		b.StartTimer()
		for _, k := range keys {
			m.bucketFor(k, p, 0)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
		b.ReportMetric(perKey, "B/key")
		b.ReportMetric(perKey-float64(keyBytes)/n, "B/key-beyond-key")
		runtime.KeepAlive(m)
		_ = m.Close()
		_ = store.Close()
		b.StartTimer()
	}
}
