package client_test

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

// benchLimiter is a Limiter on a real node (in this process, on
// loopback) whose rule "big" no benchmark exhausts: once a key is leased,
// every Allow is decided from the tokens the Limiter holds.
func benchLimiter(b *testing.B) *client.Limiter {
	clock := clocktest.New()
	return benchLimiterOn(b, benchNode(b, lease.MemoryStoreConfig{Now: clock.Now}, nil))
}

// benchNode starts a real node on the memory store (mem) with the client
// token and the rule "big" (a limit no benchmark reaches), in this
// process, on loopback; edit, when not nil, edits its configs. It returns
// the node's address.
func benchNode(b *testing.B, mem lease.MemoryStoreConfig, edit func(*lease.Config, *node.Config)) string {
	b.Helper()
	store := lease.NewMemoryStore(mem)
	b.Cleanup(func() { store.Close() })
	mcfg := lease.DefaultConfig()
	// zipfKeys leases 10k keys from 100 goroutines at once: on a loaded
	// machine a call of the node's Store (in memory) can wait longer than
	// the default timeout, and the key would be decided by its failure
	// mode (Degraded) in the gateway.
	mcfg.StoreTimeout = time.Minute
	cfg := node.DefaultConfig()
	cfg.ClientToken = limiterToken
	if edit != nil {
		edit(&mcfg, &cfg)
	}
	mgr := lease.NewManager(store, mcfg)
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte(`
rules:
  - name: big
    algorithm: token_bucket
    limit: 1000000000000
    period: 1s
`))
	if err != nil {
		b.Fatal(err)
	}
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	b.Cleanup(func() { _ = n.Shutdown(context.Background()); <-served; mgr.Close() })
	return ln.Addr().String()
}

// benchLimiterOn is a Limiter on the node at addr whose keys never go back
// idle while a benchmark runs.
func benchLimiterOn(b *testing.B, addr string) *client.Limiter {
	b.Helper()
	// A generous Timeout: under valgrind a lease answer takes long, and a
	// key whose lease timed out would be decided by its failure mode.
	lcfg := client.LimiterConfig{Nodes: []string{addr}, Token: limiterToken, Timeout: time.Minute}
	lcfg.Lease.Idle = time.Hour // no key goes back while the benchmark runs
	l, err := client.NewLimiter(lcfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	return l
}

// zipfKeys leases n keys in l and returns them with a table of Zipf(1.1)
// draws over them (drawn before the benchmark: the generator costs more
// than a decision).
func zipfKeys(b *testing.B, l *client.Limiter, n int) (keys []string, draws []int32) {
	keys = make([]string, n)
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}
	// Lease every key first, 100 at a time (one request per flush).
	var wg sync.WaitGroup
	for w := range 100 {
		wg.Go(func() {
			for i := w; i < len(keys); i += 100 {
				if d, err := l.Allow(context.Background(), "big", keys[i], 1); err != nil || !d.Allowed || d.Degraded {
					b.Errorf("leasing %s: %+v, %v", keys[i], d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 7)), 1.1, 1, uint64(n-1))
	draws = make([]int32, 1<<16)
	for i := range draws {
		draws[i] = int32(z.Uint64())
	}
	return keys, draws
}

// BenchmarkLimiterAllow decides one leased key in the gateway's process,
// from every goroutine at once (go test -cpu 2: both cores on one key).
func BenchmarkLimiterAllow(b *testing.B) {
	l := benchLimiter(b)
	ctx := context.Background()
	if d, err := l.Allow(ctx, "big", "k", 1); err != nil || !d.Allowed || d.Degraded {
		b.Fatalf("leasing k: %+v, %v", d, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if d, err := l.Allow(ctx, "big", "k", 1); err != nil || !d.Allowed || d.Degraded {
				b.Fatalf("%+v %v", d, err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkLimiterAllowZipf decides Zipf-distributed keys over 10k, all
// leased.
func BenchmarkLimiterAllowZipf(b *testing.B) {
	l := benchLimiter(b)
	ctx := context.Background()
	keys, draws := zipfKeys(b, l, 10000)
	var seed atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seed.Add(1)) * 7919
		for pb.Next() {
			i++
			if d, err := l.Allow(ctx, "big", keys[draws[i&(len(draws)-1)]], 1); err != nil || !d.Allowed || d.Degraded {
				b.Fatalf("%+v %v", d, err)
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkLimiterAllowLatency times every Allow (Zipf over 10k leased
// keys, every goroutine at once) and reports the distribution: the
// latency the Limiter adds to a request whose tokens it holds. Each
// sample includes one reading of the clock, whose own cost is reported
// as clock-p50/clock-p99 (the same two readings around nothing).
func BenchmarkLimiterAllowLatency(b *testing.B) {
	l := benchLimiter(b)
	keys, draws := zipfKeys(b, l, 10000)
	allowLatency(b, l, keys, draws)
}

// BenchmarkLimiterAllowLatencyOneKey is BenchmarkLimiterAllowLatency on
// one key: the decision's own latency, its key and bucket in the cache.
// The difference in the tail is the cold keys' memory reads.
func BenchmarkLimiterAllowLatencyOneKey(b *testing.B) {
	l := benchLimiter(b)
	if d, err := l.Allow(context.Background(), "big", "k", 1); err != nil || !d.Allowed || d.Degraded {
		b.Fatalf("leasing k: %+v, %v", d, err)
	}
	allowLatency(b, l, []string{"k"}, []int32{0})
}

// allowLatency decides keys[draws[i]] from every goroutine, timing each
// Allow; len(draws) is a power of 2.
func allowLatency(b *testing.B, l *client.Limiter, keys []string, draws []int32) {
	ctx := context.Background()
	var (
		mu          sync.Mutex
		all, clocks bench.Histogram
		seed        atomic.Uint32
	)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var h, c bench.Histogram
		i := int(seed.Add(1)) * 7919
		for pb.Next() {
			i++
			k := keys[draws[i&(len(draws)-1)]]
			t0 := time.Now()
			d, err := l.Allow(ctx, "big", k, 1)
			t1 := time.Now()
			h.Record(t1.Sub(t0))
			if i&63 == 0 {
				t2 := time.Now()
				c.Record(time.Since(t2))
			}
			if err != nil || !d.Allowed || d.Degraded {
				b.Fatalf("%+v %v", d, err)
			}
		}
		mu.Lock()
		all.Merge(&h)
		clocks.Merge(&c)
		mu.Unlock()
	})
	b.StopTimer()
	b.ReportMetric(float64(all.Quantile(0.5)), "p50-ns")
	b.ReportMetric(float64(all.Quantile(0.99)), "p99-ns")
	b.ReportMetric(float64(all.Quantile(0.999)), "p99.9-ns")
	b.ReportMetric(float64(clocks.Quantile(0.5)), "clock-p50-ns")
	b.ReportMetric(float64(clocks.Quantile(0.99)), "clock-p99-ns")
}
