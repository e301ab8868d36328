package client_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

func Example() {
	// A single node on a loopback port (in production: sluiced).
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
	defer mgr.Close()
	set, err := rules.Parse([]byte("rules:\n  - {name: per-key, algorithm: token_bucket, limit: 2, period: 1m}\n"))
	if err != nil {
		panic(err)
	}
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go n.Serve(ln)
	defer n.Shutdown(context.Background())

	// The client: seeds are node HTTP addresses.
	cfg := client.DefaultConfig()
	cfg.Seeds = []string{ln.Addr().String()}
	cfg.Timeout = time.Second // generous: examples run on busy test machines
	c, err := client.New(cfg)
	if err != nil {
		panic(err)
	}
	defer c.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 3 {
		res, err := c.Check(ctx, "per-key", "user-42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Allowed, res.Remaining)
	}

	// A batch: one request per owner, results in order.
	checks := []api.CheckRequest{{Rule: "per-key", Key: "a"}, {Rule: "per-key", Key: ""}}
	results := make([]api.CheckResult, len(checks))
	if err := c.CheckMany(ctx, checks, results); err != nil {
		panic(err)
	}
	fmt.Println(results[0].Allowed, results[1].Field)
	// Output:
	// true 1
	// true 0
	// false 0
	// true checks[1].key
}
