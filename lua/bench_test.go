package lua

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// BenchmarkLease is one lease round trip to a loopback Redis, one caller.
func BenchmarkLease(b *testing.B) {
	s := newTestStore(b, redistest.Start(b))
	ctx := context.Background()
	for _, a := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		b.Run(a.String(), func(b *testing.B) {
			p := lease.Policy{Algorithm: a, Limit: 1 << 40, Period: time.Hour}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := s.Lease(ctx, "bench", p, 1, 1, lease.Lessee{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLeaseParallel is many callers leasing at once (16 per CPU), on
// one hot key and on distinct keys: auto-pipelining batches them on shared
// connections, so ns/op is throughput, not latency.
func BenchmarkLeaseParallel(b *testing.B) {
	s := newTestStore(b, redistest.Start(b))
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1 << 40, Period: time.Hour}
	b.Run("hot_key", func(b *testing.B) {
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Lease(ctx, "hot", p, 1, 1, lease.Lessee{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("many_keys", func(b *testing.B) {
		var n atomic.Int64
		b.ReportAllocs()
		b.SetParallelism(16)
		b.RunParallel(func(pb *testing.PB) {
			key := "k" + strconv.FormatInt(n.Add(1), 10)
			for pb.Next() {
				if _, err := s.Lease(ctx, key, p, 1, 1, lease.Lessee{}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkExact is one sliding_log check and one concurrency acquire.
func BenchmarkExact(b *testing.B) {
	s := newTestStore(b, redistest.Start(b))
	ctx := context.Background()
	b.Run("sliding_log", func(b *testing.B) {
		p := lease.Policy{Algorithm: lease.SlidingLog, Limit: 100, Period: 10 * time.Millisecond}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := s.Log(ctx, "log", p, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("concurrency", func(b *testing.B) {
		p := lease.Policy{Algorithm: lease.Concurrency, Limit: 100, Period: time.Second}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := s.Acquire(ctx, "cc", p, strconv.Itoa(i%50), 1); err != nil {
				b.Fatal(err)
			}
		}
	})
}
