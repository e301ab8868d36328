package bench

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
)

// Compare runs every phase against a real node, briefly: each side makes
// decisions and no errors, and the figures it reports are filled.
func TestCompare(t *testing.T) {
	addr := leaseNode(t, "rules:\n  - {name: bench-big, algorithm: token_bucket, limit: 1000000000, period: 1s}\n",
		func(m *lease.Config, n *node.Config) {
			m.StoreTimeout = time.Minute // a loaded machine must not make the Store look failed
			n.ClientRate = 1 << 30
		})
	c, err := Compare(t.Context(), CompareConfig{Addr: addr, Token: "bench-token", FirstTouches: 20,
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
