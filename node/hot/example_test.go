package hot_test

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/shard"
)

// gossip is an Announcer that hands messages to the other members at once
// (a node passes its *member.Cluster).
type gossip struct{ to []*hot.Hot }

func (g *gossip) Broadcast(msg []byte) error {
	for _, h := range g.to {
		h.Receive(msg)
	}
	return nil
}

func Example() {
	ring := shard.NewRing([]string{"node-a", "node-b", "node-c"}, 0)
	key := "per-key:user-42"
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	rules := func(string) (float64, int, bool) { return 1000, 2, true } // hot: {threshold: 1000, split: 2}

	// Every node has a Hot; here the key's owner and another member.
	var owner, other *hot.Hot
	g := &gossip{}
	for _, name := range ring.Members() {
		cfg := hot.DefaultConfig()
		cfg.Self, cfg.Threshold, cfg.Now = name, rules, func() time.Time { return now }
		cfg.TopK.Sample = 1
		cfg.Logger = slog.New(slog.DiscardHandler)
		h, _ := hot.New(cfg, g)
		h.SetRing(ring)
		h.Tick(now)
		if name == ring.Owner(key) {
			owner = h
		} else {
			other = h
			g.to = append(g.to, h)
		}
	}

	// The owner serves 5,000 checks of the key in one second.
	for range 5000 {
		owner.Observe(key)
	}
	owner.Tick(now.Add(time.Second))

	// The split was gossiped: a member routes the key to a holder (or
	// serves it itself if it is one).
	plan, _ := other.Lookup(key)
	holder, split, self := other.Route(key, 12345)
	fmt.Println(len(plan.Holders), split, self || plan.Has(holder))
	// Output:
	// 2 true true
}
