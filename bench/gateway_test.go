package bench

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// The gateway driver decides in this process with a Limiter leasing from
// a real node: every key's limit is admitted and no more.
func TestGatewayDriver(t *testing.T) {
	addr := leaseNode(t, "rules:\n  - {name: bench, algorithm: token_bucket, limit: 3, period: 1h}\n", nil)
	kc := KeyConfig{Keys: 5, Dist: Uniform, Seed: 3}
	d, err := NewGatewayDriver(GatewayConfig{Nodes: []string{addr}, Token: "bench-token", Keys: kc.KeyNames()})
	if err != nil {
		t.Fatal(err)
	}
	// A closed loop long enough to spend every key's 3 tokens many times
	// over: 3 per key (1h refills none of them) is what is admitted.
	r, err := Run(context.Background(), d, RunConfig{
		Mode: Closed, Duration: 300 * time.Millisecond, Workers: 2, Batch: 10,
		Keys: kc, Limit: &Limit{Limit: 3, Period: time.Hour, Burst: 3},
	})
	d.Close()
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors != 0 || r.Decisions != r.Requests*10 {
		t.Fatalf("errors %d (%s), %d decisions for %d requests", r.Errors, r.FirstErr, r.Decisions, r.Requests)
	}
	if r.Allowed != 15 || r.Accuracy.OverAdmitted != 0 {
		t.Fatalf("allowed %d, want 15 (3 for each of 5 keys); accuracy %+v", r.Allowed, *r.Accuracy)
	}
	if _, err := NewGatewayDriver(GatewayConfig{Nodes: []string{addr}, Token: "wrong", Keys: kc.KeyNames()}); err == nil || !strings.Contains(err.Error(), "cannot start the Limiter") {
		t.Fatalf("a wrong token: %v", err)
	}
}

// leaseNode starts a real node on the memory store serving rules yml and
// the lease protocol (client token "bench-token"), in this process, on
// loopback, and returns its address; edit, when not nil, edits its
// configs.
func leaseNode(t *testing.T, yml string, edit func(*lease.Config, *node.Config)) string {
	t.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mcfg := lease.DefaultConfig()
	cfg := node.DefaultConfig()
	cfg.ClientToken = "bench-token"
	if edit != nil {
		edit(&mcfg, &cfg)
	}
	mgr := lease.NewManager(store, mcfg)
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte(yml))
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
	return ln.Addr().String()
}
