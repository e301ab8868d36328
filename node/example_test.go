package node_test

import (
	"fmt"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

func Example() {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
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
