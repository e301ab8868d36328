package rls_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/node/rls"
)

// staticMembership is a fixed member list (the node's Membership seam).
type staticMembership struct{ view []member.Member }

func (s *staticMembership) Ready() bool           { return true }
func (s *staticMembership) View() []member.Member { return s.view }

// TestClusterRouting: in a cluster of two nodes, each with its RLS server
// and the same configuration, a descriptor is decided by the owner of its
// counter key, whichever node Envoy calls, and the limit holds across both.
func TestClusterRouting(t *testing.T) { eachTransport(t, testClusterRouting) }

func testClusterRouting(t *testing.T, tr rls.Transport) {
	const yml = "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 4}\n"
	conf, err := rls.Parse(rls.Doc{Name: "d.yaml", Data: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	type peer struct {
		n      *node.Node
		mgr    *lease.Manager
		client rlsv3.RateLimitServiceClient
	}
	nodes := map[string]*peer{}
	var ms []member.Member
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, name := range []string{"a", "b"} {
		mgr := lease.NewManager(store, lease.DefaultConfig())
		ncfg := node.DefaultConfig()
		ncfg.Logger = quiet
		n := node.New(ncfg, mgr)
		n.SetRules(nil)
		// A patient forward: one that times out on a loaded machine is
		// decided by its sender, which this test would see as a routing
		// failure (seen under load: "call 3 via a: OVER").
		ccfg := node.ClusterConfig{Self: name, ClusterKey: []byte("0123456789abcdef")}
		ccfg.Forward.Timeout = 10 * time.Second
		if err := n.EnableCluster(ccfg); err != nil {
			t.Fatal(err)
		}
		hln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go n.Serve(hln)
		srv := rls.NewServer(rls.ServerConfig{Engine: n, Metrics: n.MetricsSet(), Logger: quiet, Transport: tr})
		srv.SetConfig(conf)
		gln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go srv.Serve(gln)
		conn, err := grpc.NewClient(gln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			conn.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Close(ctx)
			n.Shutdown(ctx)
			n.CloseCluster()
			mgr.Close()
		})
		nodes[name] = &peer{n: n, mgr: mgr, client: rlsv3.NewRateLimitServiceClient(conn)}
		ms = append(ms, member.Member{Name: name, HTTPAddr: hln.Addr().String(), GossipAddr: "127.0.0.1:1", State: member.StateAlive})
	}
	for _, m := range nodes {
		m.n.MembersChanged(ms)
		m.n.SetMembership(&staticMembership{view: ms})
	}

	// A user whose counter key b owns.
	rule := conf.Limits()[0].Rule
	user := ""
	for i := range 1000 {
		u := "u" + strconv.Itoa(i)
		if nodes["a"].n.Owner(rule+":"+u) == "b" {
			user = u
			break
		}
	}
	if user == "" {
		t.Fatal("no key owned by b")
	}
	call := func(via string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := nodes[via].client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: d1("user=" + user)})
		if err != nil {
			t.Fatalf("via %s: %v", via, err)
		}
		return codesOf(resp)
	}
	for i, via := range []string{"a", "b", "a", "b", "a", "b"} {
		want := "OK: OK"
		if i >= 4 {
			want = "OVER: OVER"
		}
		if got := call(via); got != want {
			t.Fatalf("call %d via %s: %s, want %s", i+1, via, got, want)
		}
	}
	if a := nodes["a"].mgr.Stats().ActiveKeys; a != 0 {
		t.Errorf("a holds %d keys: it decided b's key itself instead of routing it", a)
	}
	if b := nodes["b"].mgr.Stats().ActiveKeys; b != 1 {
		t.Errorf("b, the owner, holds %d keys, want 1", b)
	}
}
