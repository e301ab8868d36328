package client_test

import (
	"context"
	"net"
	"strconv"
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
