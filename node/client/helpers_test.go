package client_test

import (
	"context"
	"encoding/json"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

const testRules = `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 1000
    period: 1m
  - name: tight
    algorithm: token_bucket
    limit: 2
    period: 1h
  - name: by-api-key
    algorithm: token_bucket
    limit: 1000
    period: 1m
    descriptor: api_key
  - name: uploads
    algorithm: concurrency
    limit: 1
    period: 1m
`

// testVnodes keeps ring builds fast in tests; routing does not depend on it.
const testVnodes = 256

// testNode is a real node.Node on a loopback port, behind a wrapper that
// serves /v1/members (the seam we own until the node serves it) and
// records which counter keys reached it.
type testNode struct {
	name string
	addr string
	n    *node.Node
	srv  *fasthttp.Server
	ln   net.Listener
	// gate, when set, holds every check request (after recording it)
	// until it is closed: a node that answers late.
	gate atomic.Pointer[chan struct{}]

	mu struct {
		sync.Mutex
		paths map[string]int // requests by path
		keys  []string       // rule:key of every check received
	}
}

// testCluster is a set of testNodes that answer /v1/members with the same,
// settable member list.
type testCluster struct {
	t     *testing.T
	nodes []*testNode

	mu struct {
		sync.Mutex
		members []byte // the /v1/members body; nil answers 404
	}
}

// newCluster starts len(names) nodes, each with its own MemoryStore, and
// sets the member list to all of them.
func newCluster(t *testing.T, names ...string) *testCluster {
	t.Helper()
	set, err := rules.Parse([]byte(testRules))
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	tc := &testCluster{t: t}
	for _, name := range names {
		store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
		// A 10s Store timeout: a MemoryStore call is quick, but on a
		// loaded 2-core machine under -race a goroutine can wait more
		// than the default 50ms for a core, and the check would be
		// decided in the rule's failure mode (not what these tests test).
		mcfg := lease.DefaultConfig()
		mcfg.StoreTimeout = 10 * time.Second
		mgr := lease.NewManager(store, mcfg)
		n := node.New(node.DefaultConfig(), mgr)
		n.SetRules(set)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		tn := &testNode{name: name, addr: ln.Addr().String(), n: n, ln: ln}
		tn.mu.paths = map[string]int{}
		h := n.Handler()
		tn.srv = &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
			tn.record(ctx)
			if g := tn.gate.Load(); g != nil && string(ctx.Path()) != "/v1/members" {
				<-*g
			}
			if string(ctx.Path()) == "/v1/members" {
				tc.serveMembers(ctx)
				return
			}
			h(ctx)
		}}
		served := make(chan error, 1)
		go func() { served <- tn.srv.Serve(ln) }()
		t.Cleanup(func() {
			_ = ln.Close() // also stops a Serve that has not started yet
			_ = tn.srv.Shutdown()
			<-served
			_ = mgr.Close()
			_ = store.Close()
		})
		tc.nodes = append(tc.nodes, tn)
	}
	tc.setMembers(tc.nodes...)
	return tc
}

func (tn *testNode) record(ctx *fasthttp.RequestCtx) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	path := string(ctx.Path())
	tn.mu.paths[path]++
	switch path {
	case "/v1/check":
		var r api.CheckRequest
		if api.DecodeCheck(ctx.PostBody(), &r) == nil && r.Rule != "" {
			tn.mu.keys = append(tn.mu.keys, r.Rule+":"+r.Key)
		}
	case "/v1/checks":
		var b api.ChecksRequest
		if api.DecodeChecks(ctx.PostBody(), &b) == nil {
			for _, r := range b.Checks {
				if r.Err == nil && r.Rule != "" {
					tn.mu.keys = append(tn.mu.keys, r.Rule+":"+r.Key)
				}
			}
		}
	case "/v1/acquire", "/v1/release":
		var r api.AcquireRequest
		if json.Unmarshal(ctx.PostBody(), &struct {
			Rule *string `json:"rule"`
			Key  *string `json:"key"`
		}{&r.Rule, &r.Key}) == nil && r.Rule != "" {
			tn.mu.keys = append(tn.mu.keys, r.Rule+":"+r.Key)
		}
	}
}

// counts returns the requests by path and the keys received, and resets them.
func (tn *testNode) take() (paths map[string]int, keys []string) {
	tn.mu.Lock()
	defer tn.mu.Unlock()
	paths, keys = tn.mu.paths, tn.mu.keys
	tn.mu.paths, tn.mu.keys = map[string]int{}, nil
	return paths, keys
}

// stop shuts the node's server down: its port then refuses connections.
func (tn *testNode) stop(t *testing.T) {
	t.Helper()
	// Closing the listener first also stops a Serve goroutine that has not
	// started yet (Shutdown alone would miss it).
	if err := tn.ln.Close(); err != nil {
		t.Fatal(err)
	}
	_ = tn.srv.Shutdown() // closes open connections; its error is the closed listener's

}

func (tc *testCluster) serveMembers(ctx *fasthttp.RequestCtx) {
	tc.mu.Lock()
	body := tc.mu.members
	tc.mu.Unlock()
	if body == nil {
		ctx.SetStatusCode(fasthttp.StatusNotFound)
		ctx.SetBodyString(`{"error":"not found"}`)
		return
	}
	ctx.SetContentType("application/json")
	ctx.SetBody(body)
}

// setMembers sets the member list to ns (all alive), as the nodes would
// report it.
func (tc *testCluster) setMembers(ns ...*testNode) {
	ms := make([]client.Member, 0, len(ns))
	for _, n := range ns {
		ms = append(ms, client.Member{Name: n.name, HTTPAddr: n.addr, GossipAddr: "127.0.0.1:1", State: "alive"})
	}
	tc.setMemberList(ms)
}

func (tc *testCluster) setMemberList(ms []client.Member) {
	self := ""
	if len(ms) > 0 {
		self = ms[0].Name
	}
	body, err := json.Marshal(client.MembersResponse{Self: self, Ready: true, Vnodes: testVnodes, Members: ms})
	if err != nil {
		tc.t.Fatal(err)
	}
	tc.mu.Lock()
	tc.mu.members = body
	tc.mu.Unlock()
}

// standalone makes /v1/members answer 404, like a node without clustering.
func (tc *testCluster) standalone() {
	tc.mu.Lock()
	tc.mu.members = nil
	tc.mu.Unlock()
}

func (tc *testCluster) byName(name string) *testNode {
	for _, n := range tc.nodes {
		if n.name == name {
			return n
		}
	}
	tc.t.Fatalf("no node %q", name)
	return nil
}

// newClient returns a Client seeded with the first node, closed at cleanup.
func newClient(t *testing.T, tc *testCluster, mod func(*client.Config)) *client.Client {
	t.Helper()
	cfg := client.DefaultConfig()
	cfg.Nodes = []string{tc.nodes[0].addr}
	// 10s: the failures these tests make are refusals (a stopped node),
	// never timeouts (a test about a slow node sets its own). A request
	// that times out is sent again (CheckMany's 1000-check batches took
	// over 1s under -race on a loaded 2-core machine: TestCheckManyChunks
	// saw 4 and 5 requests for its 3 batches, or gave up).
	cfg.Timeout = 10 * time.Second
	if mod != nil {
		mod(&cfg)
	}
	c, err := client.New(cfg)
	if err != nil {
		t.Fatalf("client.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
