package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/member"
)

// staticMembership is a fixed view, the Membership seam's test double.
type staticMembership struct {
	ready bool
	view  []member.Member
}

func (s *staticMembership) Ready() bool           { return s.ready }
func (s *staticMembership) View() []member.Member { return s.view }

// clusterNode is a Node on a real loopback TCP port, clustered with others
// by a static member list (no gossip: the ring is what these tests look
// at). All nodes of a test share one MemoryStore, as nodes share Redis.
type clusterNode struct {
	name   string
	n      *Node
	mgr    *lease.Manager
	addr   string
	client *fasthttp.Client
	stop   func()
}

// patientForward is the forwarding config of the cluster tests: a 10s
// timeout instead of 50ms. A forward that times out makes its sender
// decide the check itself while the owner decides it too (both charge the
// shared Store); under -race on a loaded 2-core machine 50ms was seen to
// pass, and TestRoutedBatch then found the sender holding the owner's keys
// and every key charged twice. These tests are about routing, not about
// slow owners; a stopped owner still fails at once (connection refused).
var patientForward = forward.Config{Timeout: 10 * time.Second}

// patientManager is lease.DefaultConfig with a 10s Store timeout, for the
// same reason: a MemoryStore call is not slow, but a goroutine of a loaded
// -race process can wait longer than 50ms for a core.
func patientManager() lease.Config {
	c := lease.DefaultConfig()
	c.StoreTimeout = 10 * time.Second
	return c
}

func newClusterNodes(t *testing.T, store lease.Store, ymls map[string]string) map[string]*clusterNode {
	t.Helper()
	return newClusterNodesWith(t, func(string) lease.Store { return store }, ymls)
}

// newClusterNodesWith is newClusterNodes with the Store of each node
// given by storeOf(name).
func newClusterNodesWith(t *testing.T, storeOf func(name string) lease.Store, ymls map[string]string) map[string]*clusterNode {
	t.Helper()
	return newClusterNodesOpts(t, storeOf, ymls, nil)
}

// newClusterNodesOpts is newClusterNodesWith with each node's
// ClusterConfig changed by opt (nil: none).
func newClusterNodesOpts(t *testing.T, storeOf func(name string) lease.Store, ymls map[string]string, opt func(*ClusterConfig)) map[string]*clusterNode {
	t.Helper()
	nodes := map[string]*clusterNode{}
	var ms []member.Member
	for name, yml := range ymls {
		mgr := lease.NewManager(storeOf(name), patientManager())
		cfg := DefaultConfig()
		cfg.ClientToken = testClientToken // the lease protocol's tests route through these nodes
		n := New(cfg, mgr)
		n.SetRules(mustParse(t, yml))
		ccfg := ClusterConfig{Self: name, ClusterKey: []byte("0123456789abcdef"), Forward: patientForward, SharedStore: true}
		if opt != nil {
			opt(&ccfg)
		}
		if err := n.EnableCluster(ccfg); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- n.Serve(ln) }()
		cn := &clusterNode{name: name, n: n, mgr: mgr, addr: ln.Addr().String(), client: &fasthttp.Client{}}
		stopped := false
		cn.stop = func() {
			if stopped {
				return
			}
			stopped = true
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := n.Shutdown(ctx); err != nil {
				t.Errorf("Shutdown: %v", err)
			}
			<-served
		}
		t.Cleanup(func() {
			cn.stop()
			n.CloseCluster()
			mgr.Close()
		})
		nodes[name] = cn
		ms = append(ms, member.Member{Name: name, HTTPAddr: cn.addr, GossipAddr: "127.0.0.1:1", State: member.StateAlive})
	}
	for _, cn := range nodes {
		cn.n.MembersChanged(ms)
		cn.n.SetMembership(&staticMembership{ready: true, view: ms})
	}
	return nodes
}

func (cn *clusterNode) do(t *testing.T, method, uri, body string) resp {
	t.Helper()
	r, err := cn.try(method, uri, body)
	if err != nil {
		t.Fatalf("%s %s: %v", method, uri, err)
	}
	return r
}

// try is do for a goroutine other than the test's: it returns the error.
func (cn *clusterNode) try(method, uri, body string) (resp, error) {
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://" + cn.addr + uri)
	req.Header.SetMethod(method)
	req.SetBodyString(body)
	if err := cn.client.DoTimeout(req, res, 10*time.Second); err != nil {
		return resp{}, err
	}
	return resp{status: res.StatusCode(), body: string(res.Body())}, nil
}

// keyOwnedBy returns the first key "<prefix>N" whose counter key under
// rule is owned by owner.
func keyOwnedBy(t *testing.T, n *Node, rule, prefix, owner string) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprint(prefix, i)
		if n.Owner(rule+":"+k) == owner {
			return k
		}
	}
	t.Fatalf("no key of %s owned by %s", rule, owner)
	return ""
}

const routeRules = `
rules:
  - name: tight
    algorithm: gcra
    limit: 1
    period: 1h
    descriptor: tenant
  - name: wide
    algorithm: token_bucket
    limit: 10
    period: 1h
    descriptor: tenant
  - name: per-key
    algorithm: token_bucket
    limit: 5
    period: 1h
`

// TestRoutedMultiRuleRefund: a request matching two rules whose keys have
// different owners is decided by both owners, and when one denies, the
// other's charge is refunded at its owner.
func TestRoutedMultiRuleRefund(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	nodes := newClusterNodes(t, store, map[string]string{"a": routeRules, "b": routeRules})
	a, b := nodes["a"], nodes["b"]
	// A tenant whose "tight" key a owns and whose "wide" key b owns.
	var tenant string
	for i := range 1000 {
		k := fmt.Sprint("t", i)
		if a.n.Owner("tight:"+k) == "a" && a.n.Owner("wide:"+k) == "b" {
			tenant = k
			break
		}
	}
	if tenant == "" {
		t.Fatal("no tenant split between a and b")
	}
	body := `{"descriptors":{"tenant":"` + tenant + `"}}`
	if r := a.do(t, "POST", "/v1/check", body); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.body)
	}
	for range 3 {
		if r := a.do(t, "POST", "/v1/check", body); r.status != 429 || r.json(t)["rule"] != "tight" {
			t.Fatalf("denied: %d %s", r.status, r.body)
		}
	}
	// wide was charged once: the 3 denials were refunded at b, its owner.
	r := b.do(t, "POST", "/v1/check", `{"rule":"wide","key":"`+tenant+`","hits":0}`)
	if m := r.json(t); m["remaining"] != float64(9) {
		t.Errorf("wide at its owner after 3 denials: %s, want remaining 9", r.body)
	}
	if st := a.mgr.Stats(); st.ActiveKeys != 1 {
		t.Errorf("a holds %d keys, want 1 (tight only: wide is b's)", st.ActiveKeys)
	}
	if fs := a.n.ForwardStats(); fs.Items != 4+3 || fs.Failed != 0 {
		t.Errorf("a forwarded %+v, want 4 checks and 3 refunds", fs)
	}
}

// TestRoutedBatch: a batch is split by owner and answered in order; the
// owner decides its keys; when the owner is gone, the sender decides them
// itself from the shared Store, and no item fails.
func TestRoutedBatch(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	nodes := newClusterNodes(t, store, map[string]string{"a": routeRules, "b": routeRules})
	a, b := nodes["a"], nodes["b"]
	batch := func(prefix string, n int) string {
		var sb strings.Builder
		sb.WriteString(`{"checks":[`)
		for i := range n {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"rule":"per-key","key":"%s%d","hits":2}`, prefix, i)
		}
		sb.WriteString(`,{"rule":"nope","key":"x"}]}`)
		return sb.String()
	}
	type result struct {
		Allowed   bool   `json:"allowed"`
		Key       string `json:"key"`
		Remaining int64  `json:"remaining"`
		Field     string `json:"field"`
	}
	decode := func(r resp) []result {
		var out struct{ Results []result }
		if err := json.Unmarshal([]byte(r.body), &out); err != nil || r.status != 200 {
			t.Fatalf("%d %s: %v", r.status, r.body, err)
		}
		return out.Results
	}
	const n = 40
	res := decode(a.do(t, "POST", "/v1/checks", batch("k", n)))
	ownedByB := 0
	for i := range n {
		if a.n.Owner(fmt.Sprint("per-key:k", i)) == "b" {
			ownedByB++
		}
		if r := res[i]; !r.Allowed || r.Key != fmt.Sprint("k", i) || r.Remaining != 3 {
			t.Errorf("result %d: %+v, want allowed k%d remaining 3", i, r, i)
		}
	}
	if last := res[n]; last.Field != fmt.Sprintf("checks[%d].rule", n) {
		t.Errorf("unknown rule: %+v", last)
	}
	if ownedByB == 0 || ownedByB == n {
		t.Fatalf("%d of %d keys owned by b", ownedByB, n)
	}
	if ka, kb := a.mgr.Stats().ActiveKeys, b.mgr.Stats().ActiveKeys; ka != int64(n-ownedByB) || kb != int64(ownedByB) {
		t.Errorf("a holds %d keys, b %d; want %d and %d", ka, kb, n-ownedByB, ownedByB)
	}

	// b stops: a decides b's keys itself, every item still answered.
	b.stop()
	res = decode(a.do(t, "POST", "/v1/checks", batch("k", n)))
	for i := range n {
		if r := res[i]; !r.Allowed || r.Remaining != 1 {
			t.Errorf("after b stopped, result %d: %+v, want allowed remaining 1", i, r)
		}
	}
	if fs := a.n.ForwardStats(); fs.Failed == 0 {
		t.Errorf("a's forwards: %+v, want failures (b is down)", fs)
	}
}

// TestRoutedUnknownRuleAtOwner: an owner that does not know a rule yet
// answers an item error, and the sender decides the check itself.
func TestRoutedUnknownRuleAtOwner(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	extra := routeRules + `
  - name: extra
    algorithm: token_bucket
    limit: 2
    period: 1h
`
	nodes := newClusterNodes(t, store, map[string]string{"a": extra, "b": routeRules})
	a := nodes["a"]
	k := keyOwnedBy(t, a.n, "extra", "e", "b")
	for i, want := range []int{200, 200, 429} {
		if r := a.do(t, "POST", "/v1/check", `{"rule":"extra","key":"`+k+`"}`); r.status != want {
			t.Fatalf("check %d: %d %s, want %d", i, r.status, r.body, want)
		}
	}
	if st := a.mgr.Stats(); st.ActiveKeys != 1 {
		t.Errorf("a holds %d keys, want 1 (it decided extra itself)", st.ActiveKeys)
	}
}

// TestInternalEndpointAuth: the internal endpoint refuses requests without
// the cluster key's token.
func TestInternalEndpointAuth(t *testing.T) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	a := newClusterNodes(t, store, map[string]string{"a": routeRules})["a"]
	if r := a.do(t, "POST", "/internal/v1/batch", "\x01\x00"); r.status != 401 {
		t.Errorf("no token: %d %s, want 401", r.status, r.body)
	}
}

// TestMembersAndReadyz: /v1/members in node/client's format, single and
// clustered; /readyz waits for the join.
func TestMembersAndReadyz(t *testing.T) {
	single := newTestNode(t, routeRules)
	ctx := newCtx("GET", "/v1/members", "", "127.0.0.1") // an admin endpoint: from loopback
	single.n.Handler()(ctx)
	r := resp{status: ctx.Response.StatusCode(), body: string(ctx.Response.Body())}
	m, err := client.ParseMembers([]byte(r.body))
	if err != nil || r.status != 200 || m.Self != "local" || !m.Ready || len(m.Members) != 1 || m.Vnodes != 8192 ||
		strings.Join(m.Ring, ",") != "local" {
		t.Errorf("single /v1/members: %d %s %v", r.status, r.body, err)
	}
	if r := single.do("GET", "/readyz", ""); r.status != 200 || r.json(t)["joined"] != true {
		t.Errorf("single /readyz: %d %s", r.status, r.body)
	}

	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	nodes := newClusterNodes(t, store, map[string]string{"a": routeRules, "b": routeRules})
	a := nodes["a"]
	r = a.do(t, "GET", "/v1/members", "")
	m, err = client.ParseMembers([]byte(r.body))
	if err != nil || m.Self != "a" || !m.Ready || len(m.Members) != 2 || m.Members[0].HTTPAddr == "" ||
		strings.Join(m.Ring, ",") != "a,b" {
		t.Errorf("cluster /v1/members: %s %v", r.body, err)
	}
	// The ring is what routing uses, not membership's view: a node whose
	// ring has not taken b in yet says so.
	a.n.MembersChanged([]member.Member{{Name: "a"}})
	r = a.do(t, "GET", "/v1/members", "")
	if m, err = client.ParseMembers([]byte(r.body)); err != nil || len(m.Members) != 2 || strings.Join(m.Ring, ",") != "a" {
		t.Errorf("/v1/members with a ring of a alone: %s %v, want members a and b, ring [a]", r.body, err)
	}
	a.n.SetMembership(&staticMembership{ready: false})
	if r := a.do(t, "GET", "/readyz", ""); r.status != 503 || r.json(t)["joined"] != false {
		t.Errorf("/readyz before joining: %d %s, want 503", r.status, r.body)
	}
	if r := a.do(t, "POST", "/v1/members", ""); r.status != 405 {
		t.Errorf("POST /v1/members: %d", r.status)
	}
}

func TestEnableClusterErrors(t *testing.T) {
	n := New(DefaultConfig(), nil)
	for _, c := range []struct {
		cfg  ClusterConfig
		want string
	}{
		{ClusterConfig{}, "Self"},
		{ClusterConfig{Self: "a", Vnodes: -1}, "Vnodes"},
		{ClusterConfig{Self: "a", ClusterKey: []byte("0123456789abcdef"), Forward: forward.Config{MaxBatch: -1}}, "max_batch"},
		// No key and not Insecure: no cluster (a keyless cluster is open
		// to forged checks and refunds).
		{ClusterConfig{Self: "a"}, "ClusterKey: required"},
	} {
		if err := n.EnableCluster(c.cfg); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error naming %s", c.cfg, err, c.want)
		}
	}
	if err := n.EnableCluster(ClusterConfig{Self: "a", Insecure: true}); err != nil {
		t.Errorf("Insecure without a key: %v", err)
	}
	n.CloseCluster()
}

// newOwnerBenchNode is newBenchNode in a cluster of which it is the only
// member: every key is its own, so the routed path runs without
// forwarding (what a member pays for the keys it owns).
func newOwnerBenchNode(b *testing.B) *Node {
	n := newBenchNode(b)
	if err := n.EnableCluster(ClusterConfig{Self: "a", ClusterKey: []byte("0123456789abcdef")}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.CloseCluster() })
	return n
}

// BenchmarkRoutedCheckOwned is BenchmarkCheckHandler on a clustered node,
// for keys it owns: the ring lookup and the routing scratch space.
func BenchmarkRoutedCheckOwned(b *testing.B) {
	n := newOwnerBenchNode(b)
	benchHandler(b, n.Handler(), func(i int) *fasthttp.RequestCtx {
		return newCtx("POST", "/v1/check", checkBody(i), "127.0.0.1")
	}, 1)
}

// BenchmarkRoutedBatch100Owned is BenchmarkChecksBatch100 on a clustered
// node that owns every key.
func BenchmarkRoutedBatch100Owned(b *testing.B) {
	n := newOwnerBenchNode(b)
	body := batchBody(100)
	benchHandler(b, n.Handler(), func(int) *fasthttp.RequestCtx {
		return newCtx("POST", "/v1/checks", body, "127.0.0.1")
	}, 100)
}
