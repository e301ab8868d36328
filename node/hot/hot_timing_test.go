package hot

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/sluicehq/sluice/shard"
)

// BenchmarkObserve measures the hot path's sketch update with the default
// sampling (one call in 8), over 1000 keys of which one takes half the
// checks.
func BenchmarkObserve(b *testing.B) {
	cfg := DefaultConfig()
	cfg.Self = "n1"
	cfg.Logger = quiet()
	h, err := New(cfg, nil)
	if err != nil {
		b.Fatal(err)
	}
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("per-key:user-%d", i)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := rand.New(rand.NewPCG(rand.Uint64(), 1))
		for pb.Next() {
			k := keys[0]
			if x := r.Uint32(); x&1 == 0 {
				k = keys[x>>22]
			}
			h.Observe(k)
		}
	})
}

// BenchmarkRoute measures the per-check lookup of a key that is not split,
// with 0 and 10 splits in the table, and of a split key (non-holder).
func BenchmarkRoute(b *testing.B) {
	for _, n := range []int{0, 10} {
		cfg := DefaultConfig()
		cfg.Self = "n1"
		cfg.Logger = quiet()
		h, err := New(cfg, nil)
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			h.ApplyPlans([]shard.Plan{{Key: fmt.Sprintf("r:hot-%d", i), Holders: []string{"n2", "n3", "n4"}, Epoch: 1}})
		}
		run := func(name, key string) {
			b.Run(fmt.Sprintf("splits=%d/%s", n, name), func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					var pick uint64
					for pb.Next() {
						pick++
						if _, split, _ := h.Route(key, pick); split && key == "r:cold" {
							b.Fatal("cold key split")
						}
					}
				})
			})
		}
		run("cold", "r:cold")
		if n > 0 {
			run("split", "r:hot-3")
		}
	}
}
