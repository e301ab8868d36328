package forward_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/shard"
)

// managerDecider is how a node answers its peers: with its lease.Manager.
// Here every rule is "5 per minute".
type managerDecider struct{ m *lease.Manager }

func (d managerDecider) DecideBatch(items []forward.Item, results []forward.Result) []shard.Plan {
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 5, Period: time.Minute}
	for i, it := range items {
		key := it.Rule + ":" + it.Key
		if it.Op == forward.OpRefund {
			d.m.Refund(key, p, it.Hits)
			continue
		}
		dec, err := d.m.Take(key, p, it.Hits)
		if err != nil {
			results[i] = forward.Result{Error: err.Error()}
			continue
		}
		results[i] = forward.ResultOf(dec)
	}
	return nil
}

func Example() {
	// The owner: a Manager over the in-memory store, behind the internal
	// endpoint, guarded by the cluster key.
	key := []byte("0123456789abcdef")
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	m := lease.NewManager(store, lease.DefaultConfig())
	defer m.Close()
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	srv := &fasthttp.Server{Handler: forward.NewHandler(forward.HandlerConfig{ClusterKey: key}, managerDecider{m})}
	go srv.Serve(ln)
	defer srv.Shutdown()

	// The forwarding node.
	cfg := forward.DefaultConfig()
	cfg.ClusterKey = key
	cfg.Timeout = 5 * time.Second // generous: examples run on busy machines
	f := forward.New(cfg)
	defer f.Close()

	ctx := context.Background()
	for range 3 {
		r, err := f.Forward(ctx, ln.Addr().String(), forward.Item{Op: forward.OpCheck, Rule: "per-key", Key: "user-42", Hits: 2})
		if errors.Is(err, forward.ErrPeerUnavailable) {
			fmt.Println("owner unavailable: decide locally")
			continue
		}
		fmt.Printf("allowed=%v limit=%d remaining=%d\n", r.Allowed, r.Limit, r.Remaining)
	}
	// Output:
	// allowed=true limit=5 remaining=3
	// allowed=true limit=5 remaining=1
	// allowed=false limit=5 remaining=1
}
