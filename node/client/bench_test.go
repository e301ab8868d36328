package client_test

import (
	"context"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

// benchClient serves one real node (no /v1/members: a single node) on a
// loopback port and returns a Client for it.
func benchClient(b *testing.B, mods ...func(*client.Config)) *client.Client {
	b.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	mgr := lease.NewManager(store, lease.DefaultConfig())
	set, err := rules.Parse([]byte("rules:\n  - {name: bench, algorithm: token_bucket, limit: 1000000000, period: 1s}\n"))
	if err != nil {
		b.Fatal(err)
	}
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	cfg := client.DefaultConfig()
	cfg.Nodes = []string{ln.Addr().String()}
	cfg.Timeout = time.Second // the benchmark shares 2 cores with the node
	for _, mod := range mods {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		c.Close()
		n.Shutdown(context.Background())
		<-served
		mgr.Close()
		store.Close()
	})
	return c
}

func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return keys
}

func BenchmarkCheck(b *testing.B) {
	c := benchClient(b)
	keys := benchKeys(1024)
	ctx := context.Background()
	var seq atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			res, err := c.Check(ctx, "bench", keys[i&1023], 1)
			if err != nil || !res.Allowed {
				b.Errorf("Check: %+v, %v", res, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

func BenchmarkCheckMany100(b *testing.B) {
	c := benchClient(b)
	keys := benchKeys(1024)
	ctx := context.Background()
	var seq atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		checks := make([]api.CheckRequest, 100)
		results := make([]api.CheckResult, 100)
		for pb.Next() {
			for j := range checks {
				i++
				checks[j] = api.CheckRequest{Rule: "bench", Key: keys[i&1023]}
			}
			if err := c.CheckMany(ctx, checks, results); err != nil || !results[99].Allowed {
				b.Errorf("CheckMany: %+v, %v", results[99], err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*100/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkCheckBatched: many concurrent callers, each Check queued for
// up to 200µs and sent with the others as one /v1/checks.
func BenchmarkCheckBatched(b *testing.B) {
	c := benchClient(b, func(cfg *client.Config) { cfg.BatchWindow = 200 * time.Microsecond })
	keys := benchKeys(1024)
	ctx := context.Background()
	var seq atomic.Uint32
	b.SetParallelism(64)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(seq.Add(1)) * 7919
		for pb.Next() {
			i++
			res, err := c.Check(ctx, "bench", keys[i&1023], 1)
			if err != nil || !res.Allowed {
				b.Errorf("Check: %+v, %v", res, err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
