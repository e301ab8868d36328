package shard_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/shard"
)

func ExampleRing() {
	// Every node builds the same ring from the same member list, in any
	// order, and so agrees on every key's owner.
	a := shard.NewRing([]string{"node-a:7946", "node-b:7946", "node-c:7946"}, 0)
	b := shard.NewRing([]string{"node-c:7946", "node-a:7946", "node-b:7946"}, 0)
	fmt.Println(a.Owner("per-key:user-42") == b.Owner("per-key:user-42"))

	// OwnerN lists the owner first, then the members that would own the
	// key if the ones before them left: the holders of a split.
	holders := a.OwnerN("per-key:user-42", 2, nil)
	fmt.Println(holders[0] == a.Owner("per-key:user-42"), len(holders))

	// When a member leaves, only its keys move.
	c := shard.NewRing([]string{"node-a:7946", "node-b:7946"}, 0)
	moved, lost := 0, 0
	for i := range 10000 {
		key := fmt.Sprintf("user-%d", i)
		if a.Owner(key) != c.Owner(key) {
			moved++
		}
		if a.Owner(key) == "node-c:7946" {
			lost++
		}
	}
	fmt.Println(moved == lost)
	// Output:
	// true
	// true 2
	// true
}

func ExampleTopK() {
	sketch := shard.NewTopK(8)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sketch.Tick(start)
	for i := range 1000 {
		sketch.Observe("hot", 1)
		sketch.Observe(fmt.Sprintf("cold-%d", i%100), 1)
	}
	sketch.Tick(start.Add(time.Second))
	// Half the stream is one key: it is tracked exactly. The 100 cold
	// keys share the 7 other counters, whose counts carry their errors.
	top := sketch.Top(nil)
	fmt.Printf("%s: count %d ± %d, rate %.0f/s\n", top[0].Key, top[0].Count, top[0].Err, top[0].Rate)
	fmt.Printf("%s: count %d ± %d\n", top[1].Key, top[1].Count, top[1].Err)
	fmt.Println(sketch.Rate("hot"), sketch.Rate("cold-0"))
	// Output:
	// hot: count 1000 ± 0, rate 1000/s
	// cold-94: count 143 ± 142
	// 1000 0
}

func ExampleSplitter() {
	ring := shard.NewRing([]string{"node-a", "node-b", "node-c"}, 0)
	key := "per-key:user-42"
	owner := ring.Owner(key)
	splitter, _ := shard.NewSplitter(owner, shard.DefaultSplitConfig())
	table := shard.NewTable() // every node has one, fed by gossip

	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	loads := []shard.Load{{Key: key, Rate: 25000, Threshold: 20000, Split: 0}}
	start, _ := splitter.Decide(now, loads, ring)
	for _, p := range start {
		table.Apply(p)
	}
	plan, split := table.Lookup(key)
	fmt.Println(split, len(plan.Holders), plan.Holders[0] == owner)

	// Each of the three holders now serves a third; the owner's 2,000/s
	// are 6,000/s in total, below half the threshold: after the cooling
	// period the split ends.
	var end []shard.Plan
	for i := 1; len(end) == 0; i++ {
		loads[0].Rate = 2000
		_, end = splitter.Decide(now.Add(time.Duration(i)*time.Second), loads, ring)
	}
	table.Apply(end[0])
	_, split = table.Lookup(key)
	fmt.Println(split)
	// Output:
	// true 3 true
	// false
}
