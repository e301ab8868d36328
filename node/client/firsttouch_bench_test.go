package client_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/client"
)

// firstTouchNode is a real node as sluiced runs one on the memory store
// (Direct: every check one Store call; a 20ms check budget), in this
// process, on loopback, serving the lease protocol with no flood bound:
// what a first touch costs on both sides, under the profiler.
func firstTouchNode(b *testing.B) string {
	return benchNode(b, lease.MemoryStoreConfig{}, func(m *lease.Config, n *node.Config) {
		m.Direct, m.CheckBudget = true, 20*time.Millisecond
		n.ClientRate = 1 << 30
	})
}

// benchCheckClient is a Client of the node at addr.
func benchCheckClient(b *testing.B, addr string) *client.Client {
	cfg := client.DefaultConfig()
	cfg.Nodes = []string{addr}
	cfg.Timeout = time.Minute
	c, err := client.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// firstKeys is n keys no benchmark run used before.
func firstKeys(n int) []string {
	prefix := "ft" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	return keys
}

// BenchmarkFirstTouchLimiter decides a key the Limiter never saw, one
// after another: a lease call that carries the check (need = hits), one
// round trip. Against BenchmarkFirstTouchCheck, the same node's
// POST /v1/check.
func BenchmarkFirstTouchLimiter(b *testing.B) {
	l := benchLimiterOn(b, firstTouchNode(b))
	keys := firstKeys(b.N)
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
	c := benchCheckClient(b, firstTouchNode(b))
	keys := firstKeys(b.N)
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
	l := benchLimiterOn(b, firstTouchNode(b))
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
	c := benchCheckClient(b, firstTouchNode(b))
	ctx := context.Background()
	coldStream(b, func(key string) error {
		r, err := c.Check(ctx, "big", key, 1)
		if err == nil && (!r.Allowed || r.Degraded) {
			err = fmt.Errorf("%s: %+v", key, r)
		}
		return err
	})
}
