package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/lease"
)

func ExampleMemoryStore() {
	// A fixed clock makes the example deterministic; leave Now nil for the
	// wall clock.
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: func() time.Time { return now }})
	defer s.Close()
	ctx := context.Background()

	// 100 requests per minute, bursts of up to 20.
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Minute, Burst: 20}

	// Lease a batch of up to 15 tokens to holder node-a; at least 1 is
	// needed. The Store counts them against the burst until node-a
	// spends them (says so at its next call), returns them, or a minute
	// passes.
	node := lease.Lessee{ID: "node-a", TTL: time.Minute}
	g, _ := s.Lease(ctx, "user-42", p, 15, 1, node)
	fmt.Printf("granted %d, %d left, full again in %v\n", g.Granted, g.Remaining, g.Reset)

	// Ask for 10 more, all of which are needed: only 5 are left.
	node.Held = 15 // none spent yet
	g, _ = s.Lease(ctx, "user-42", p, 10, 10, node)
	fmt.Printf("granted %d, retry in %v\n", g.Granted, g.Wait)

	// node-a gives back its 3 unspent tokens (it spent 12).
	_ = s.Return(ctx, "user-42", p, 3, "node-a")
	g, _ = s.Lease(ctx, "user-42", p, 0, 0, lease.Lessee{}) // a peek
	fmt.Printf("%d available\n", g.Remaining)

	// Output:
	// granted 15, 5 left, full again in 9s
	// granted 0, retry in 3s
	// 8 available
}

func ExampleMemoryStore_Log() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: func() time.Time { return now }})
	defer s.Close()
	ctx := context.Background()

	// 3 login attempts per 10 minutes, at least 5 seconds apart.
	p := lease.Policy{Algorithm: lease.SlidingLog, Limit: 3, Period: 10 * time.Minute, MinInterval: 5 * time.Second}
	for i := range 2 {
		r, _ := s.Log(ctx, "login:alice", p, 1)
		fmt.Printf("attempt %d: allowed=%t remaining=%d retry_after=%v\n", i+1, r.Allowed, r.Remaining, r.RetryAfter)
		now = now.Add(2 * time.Second)
	}

	// Output:
	// attempt 1: allowed=true remaining=2 retry_after=0s
	// attempt 2: allowed=false remaining=2 retry_after=3s
}
