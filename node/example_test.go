package node_test

import (
	"context"
	"fmt"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
)

func Example() {
	// A stopped clock keeps the output exact: on a real one, a slow
	// machine rounds the reset up a second (t=31).
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: now})
	defer store.Close()
	cfg := lease.DefaultConfig()
	cfg.Now = now
	mgr := lease.NewManager(store, cfg)
	defer mgr.Close()

	set, err := rules.Parse([]byte(`
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 2
    period: 1m
`))
	if err != nil {
		panic(err)
	}
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(set)

	// In production: n.Serve(listener). Here the handler is called directly.
	h := n.Handler()
	for range 3 {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI("/v1/check")
		ctx.Request.SetBodyString(`{"rule":"per-key","key":"user-42"}`)
		h(&ctx)
		for k, v := range ctx.Response.Header.All() {
			if string(k) == "RateLimit" {
				fmt.Println(ctx.Response.StatusCode(), string(v))
			}
		}
	}
	// Output:
	// 200 "per-key";r=1;t=30
	// 200 "per-key";r=0;t=60
	// 429 "per-key";r=0;t=60
}

// Decide is the one decision method of every front end: fill a Batch with
// requests of (rule, key, hits) items, decide, read each request's verdict
// and each item's decision.
func ExampleNode_Decide() {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
	defer mgr.Close()
	set, err := rules.Parse([]byte(`
rules:
  - name: per-user
    algorithm: token_bucket
    limit: 100
    period: 1m
  - name: per-tenant
    algorithm: fixed_window
    limit: 1
    period: 1m
`))
	if err != nil {
		panic(err)
	}
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(set)

	var b engine.Batch // keep it (a sync.Pool) and Reset it: no allocations
	for range 2 {      // two requests, each needing both rules
		b.Add("per-user", "alice", 1)
		b.Add("per-tenant", "acme", 1)
		b.End()
	}
	n.Decide(context.Background(), &b)
	for i, q := range b.Requests {
		fmt.Println("request", i, q.Status, b.Items[q.Rep].Rule)
		for _, it := range b.ItemsOf(i) {
			fmt.Println("  ", it.Rule, it.Decision.Allowed, it.Decision.Remaining)
		}
	}
	// Output:
	// request 0 200 per-tenant
	//    per-user true 99
	//    per-tenant true 0
	// request 1 429 per-tenant
	//    per-user true 98
	//    per-tenant false 0
}
