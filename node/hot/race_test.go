package hot

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/shard"
)

// TestConcurrentUse runs every method at once, a bounded number of times,
// for the race detector: the hot path (Observe, Route, PlansFor) against
// the loop (Tick, SetRing), gossip (Receive), replies (ApplyPlans) and the
// admin view.
func TestConcurrentUse(t *testing.T) {
	c := clocktest.New()
	b := newBus()
	r4, r3 := ring(members4...), ring("n1", "n2", "n3")
	key := keyOwnedBy(t, r4, "n1", "n2")
	var hs []*Hot
	for _, n := range []string{"n1", "n2"} {
		cfg := testConfig(n, c, 100, 0)
		cfg.Tick = time.Millisecond
		h := newHot(t, cfg, port{b, n})
		h.OnEnd(func(string) {})
		h.SetRing(r4)
		b.members[n] = h
		hs = append(hs, h)
	}
	hs[0].Tick(c.Now())
	heat(c, hs[0], key, 1000) // split before the storm
	b.flush()
	hs[1].Run() // the real loop too (its ticks are not counted on)
	msg, err := AppendPlans(nil, []shard.Plan{{Key: "r:x", Holders: []string{"n2", "n3"}, Epoch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	do := func(f func(i int)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2000 {
				f(i)
			}
		}()
	}
	do(func(i int) { hs[0].Observe(key); hs[1].Observe(fmt.Sprint("r:", i%50)) })
	do(func(i int) { hs[0].Route(key, uint64(i)); hs[1].Route(key, uint64(i)) })
	do(func(i int) { _ = hs[1].PlansFor(nil, key); _ = hs[0].RecentPlans(nil) })
	do(func(i int) {
		if i%20 == 0 {
			hs[0].Tick(advance(c, time.Second))
			b.flush()
		}
	})
	do(func(i int) {
		if i%200 == 0 {
			hs[0].SetRing([]*shard.Ring{r4, r3}[i/200%2])
		}
	})
	do(func(i int) {
		hs[0].Receive(msg)
		hs[1].ApplyPlans([]shard.Plan{{Key: "r:y", Holders: []string{"n1", "n2"}, Epoch: uint64(i + 1)}})
	})
	do(func(i int) {
		if i%100 == 0 {
			_ = hs[0].AppendJSON(nil)
			_ = hs[1].Stats()
		}
	})
	wg.Wait()
	for _, h := range hs {
		h.Close()
	}
	if hs[0].Stats().Started == 0 {
		t.Fatal("the hot key never split")
	}
	if _, ok := hs[1].Lookup("r:y"); !ok {
		t.Fatal("the last plan of r:y was not applied")
	}
}
