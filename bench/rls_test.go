package bench

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rls"
)

// The RLS driver calls a real Envoy rate limit service: each key's limit
// is admitted and no more, and a descriptor the configuration does not
// limit is always allowed.
func TestRLSDriver(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mgr := lease.NewManager(store, lease.DefaultConfig())
	t.Cleanup(func() { mgr.Close() })
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(nil)
	conf, err := rls.Parse(rls.Doc{Name: "rls.yaml", Data: []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 3}\n")})
	if err != nil {
		t.Fatal(err)
	}
	srv := rls.NewServer(rls.ServerConfig{Engine: n, Metrics: n.MetricsSet()})
	srv.SetConfig(conf)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close(context.Background()) })

	kc := KeyConfig{Keys: 5, Dist: Uniform, Seed: 3}
	run := func(entry string) *RunResult {
		t.Helper()
		// A generous deadline: the test may run on a loaded machine.
		d, err := NewRLSDriver(RLSConfig{Addr: ln.Addr().String(), Entry: entry, Conns: 2, Timeout: 5 * time.Second, Keys: kc.KeyNames()})
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		r, err := Run(context.Background(), d, RunConfig{Mode: Closed, Duration: 300 * time.Millisecond, Workers: 4, Batch: 1, Keys: kc})
		if err != nil {
			t.Fatal(err)
		}
		if r.Errors != 0 || r.Decisions == 0 {
			t.Fatalf("entry %q: errors %d (%s), %d decisions", entry, r.Errors, r.FirstErr, r.Decisions)
		}
		return r
	}
	if r := run(""); r.Allowed != 15 || r.Denied != r.Decisions-15 {
		t.Fatalf("allowed %d, denied %d of %d, want 15 allowed (3 an hour for each of 5 values) and the rest denied", r.Allowed, r.Denied, r.Decisions)
	}
	if r := run("other"); r.Allowed != r.Decisions {
		t.Fatalf("an entry no limit names: allowed %d of %d, want all", r.Allowed, r.Decisions)
	}
	if _, err := NewRLSDriver(RLSConfig{Keys: kc.KeyNames()}); err == nil {
		t.Fatal("no address: accepted")
	}
}
