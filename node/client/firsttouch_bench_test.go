package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

// firstTouchNode is a real node as sluiced runs one on the memory store
// (Direct: every check one Store call; a 20ms check budget), in this
// process, on loopback, serving the lease protocol with no flood bound:
// what a first touch costs on both sides, under the profiler.
func firstTouchNode(b *testing.B) string {
	b.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	mcfg := lease.DefaultConfig()
	mcfg.Direct = true
	mcfg.CheckBudget = 20 * time.Millisecond
	mcfg.StoreTimeout = time.Minute
	mgr := lease.NewManager(store, mcfg)
	cfg := node.DefaultConfig()
	cfg.ClientToken = limiterToken
	cfg.ClientRate = 1 << 30
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte("rules:\n  - {name: big, algorithm: token_bucket, limit: 1000000000000, period: 1s}\n"))
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
	b.Cleanup(func() {
		_ = n.Shutdown(context.Background())
		<-served
		mgr.Close()
		store.Close()
	})
	return ln.Addr().String()
}

// BenchmarkFirstTouchLimiter decides a key the Limiter never saw, one
// after another: a lease call that carries the check (need = hits), one
// round trip. Against BenchmarkFirstTouchCheck, the same node's
// POST /v1/check.
func BenchmarkFirstTouchLimiter(b *testing.B) {
	addr := firstTouchNode(b)
	cfg := client.LimiterConfig{Nodes: []string{addr}, Token: limiterToken, Timeout: time.Minute}
	cfg.Lease.Idle = time.Hour // no return while the benchmark runs
	l, err := client.NewLimiter(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "ft-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if d, err := l.Allow(ctx, "big", keys[i], 1); err != nil || !d.Allowed || d.Degraded {
			b.Fatalf("%+v %v", d, err)
		}
	}
}

// BenchmarkFirstTouchCheck is BenchmarkFirstTouchLimiter's baseline:
// client.Client.Check of keys the node never saw.
func BenchmarkFirstTouchCheck(b *testing.B) {
	addr := firstTouchNode(b)
	cfg := client.DefaultConfig()
	cfg.Nodes = []string{addr}
	cfg.Timeout = time.Minute
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "ft-" + strconv.Itoa(i)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if r, err := c.Check(ctx, "big", keys[i], 1); err != nil || !r.Allowed || r.Degraded {
			b.Fatalf("%+v %v", r, err)
		}
	}
}

// coldDraws is Zipf(1.1) over 1M keys, drawn once: a long-tailed stream
// whose draws are mostly keys not seen before within a benchmark's run.
var coldDraws = sync.OnceValue(func() []int32 {
	z := rand.NewZipf(rand.New(rand.NewPCG(11, 7)), 1.1, 1, 1_000_000-1)
	d := make([]int32, 1<<20)
	for i := range d {
		d[i] = int32(z.Uint64())
	}
	return d
})

// coldStream decides b.N checks of the cold stream from 2 goroutines with
// decide, each run on keys of its own (a fresh prefix), and reports
// decisions/s.
func coldStream(b *testing.B, decide func(key string) error) {
	draws := coldDraws()
	prefix := "c" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(int(draws[i&(len(draws)-1)]))
	}
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			for i := g; i < b.N; i += 2 {
				if err := decide(keys[i]); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkColdStreamLimiter is a fresh Limiter on the cold stream (the
// node's flood bound lifted: node.Config.ClientRate).
func BenchmarkColdStreamLimiter(b *testing.B) {
	addr := firstTouchNode(b)
	l, err := client.NewLimiter(client.LimiterConfig{Nodes: []string{addr}, Token: limiterToken, Timeout: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = l.Close() })
	ctx := context.Background()
	coldStream(b, func(key string) error {
		d, err := l.Allow(ctx, "big", key, 1)
		if err == nil && (!d.Allowed || d.Degraded) {
			err = fmt.Errorf("%s: %+v", key, d)
		}
		return err
	})
}

// BenchmarkColdStreamCheck is client.Client.Check on the cold stream.
func BenchmarkColdStreamCheck(b *testing.B) {
	addr := firstTouchNode(b)
	cfg := client.DefaultConfig()
	cfg.Nodes = []string{addr}
	cfg.Timeout = time.Minute
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	ctx := context.Background()
	coldStream(b, func(key string) error {
		r, err := c.Check(ctx, "big", key, 1)
		if err == nil && (!r.Allowed || r.Degraded) {
			err = fmt.Errorf("%s: %+v", key, r)
		}
		return err
	})
}
