package bench

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// Compare runs every phase against a real node, briefly: each side makes
// decisions and no errors, and the figures it reports are filled.
func TestCompare(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mcfg := lease.DefaultConfig()
	mcfg.StoreTimeout = time.Minute // a loaded machine must not make the Store look failed
	mgr := lease.NewManager(store, mcfg)
	cfg := node.DefaultConfig()
	cfg.ClientToken = "bench-token"
	cfg.ClientRate = 1 << 30
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte("rules:\n  - {name: bench-big, algorithm: token_bucket, limit: 1000000000, period: 1s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() { _ = n.Shutdown(context.Background()); <-served; mgr.Close() })

	c, err := Compare(t.Context(), CompareConfig{Addr: ln.Addr().String(), Token: "bench-token", FirstTouches: 20,
		Stream: 100 * time.Millisecond, Keys: 1000, WarmKeys: 100, WarmFor: 300 * time.Millisecond, Leased: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Side{"first, Limiter": c.FirstLimiter, "first, client": c.FirstClient, "cold, Limiter": c.ColdLimiter,
		"cold, client": c.ColdClient, "warm": c.Warm, "leased key": c.LeasedOne, "leased Zipf": c.LeasedZipf} {
		if s.Decisions == 0 || s.Errors != 0 {
			t.Errorf("%s: %d decisions, %d errors (%s)", name, s.Decisions, s.Errors, s.FirstErr)
		}
	}
	if c.FirstLimiter.Decisions != 20 || c.FirstClient.Decisions != 20 || c.FirstLimiter.Latency == nil || c.FirstRatio <= 0 || c.ColdRatio <= 0 {
		t.Errorf("first touches %d and %d, ratios %v and %v", c.FirstLimiter.Decisions, c.FirstClient.Decisions, c.FirstRatio, c.ColdRatio)
	}
	if len(c.WarmWindows) == 0 {
		t.Error("no warm-up window")
	}
}
