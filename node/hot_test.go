package node

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/shard"
)

const hotRules = `
rules:
  - name: hot
    algorithm: token_bucket
    limit: 1000000
    period: 1h
    hot: {threshold: 100}
`

// gossipNet is the hand-written gossip seam of these tests: each node's
// Membership delivers its broadcasts synchronously to the other nodes'
// GossipMessage, except to the nodes marked deaf.
type gossipNet struct {
	mu    sync.Mutex
	nodes map[string]*Node
	deaf  map[string]bool
	view  []member.Member
}

type gossipMembership struct {
	net  *gossipNet
	self string
}

func (g *gossipMembership) Ready() bool { return true }
func (g *gossipMembership) View() []member.Member {
	g.net.mu.Lock()
	defer g.net.mu.Unlock()
	return g.net.view
}

func (g *gossipMembership) Broadcast(msg []byte) error {
	g.net.mu.Lock()
	var to []*Node
	for name, n := range g.net.nodes {
		if name != g.self && !g.net.deaf[name] {
			to = append(to, n)
		}
	}
	g.net.mu.Unlock()
	for _, n := range to {
		n.GossipMessage(slices.Clone(msg))
	}
	return nil
}

// hotCluster is three nodes a, b, c on loopback sharing one MemoryStore,
// with a hot-key loop that never ticks by itself (Tick 1h) on a fake
// clock: the tests call tick.
type hotCluster struct {
	nodes map[string]*clusterNode
	net   *gossipNet
	clock atomic.Int64 // Unix nanoseconds
}

func newHotCluster(t *testing.T, noSplit bool, yml ...string) *hotCluster {
	t.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	hc := &hotCluster{nodes: map[string]*clusterNode{}, net: &gossipNet{nodes: map[string]*Node{}, deaf: map[string]bool{}}}
	hc.clock.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	var ms []member.Member
	for _, name := range []string{"a", "b", "c"} {
		mgr := lease.NewManager(store, patientManager())
		n := New(DefaultConfig(), mgr)
		n.SetRules(mustParse(t, append(yml, hotRules)[0]))
		hcfg := hot.Config{
			Tick:       time.Hour,
			Split:      shard.SplitConfig{Cooling: 2 * time.Second},
			Reannounce: -1,
			Now:        func() time.Time { return time.Unix(0, hc.clock.Load()) },
		}
		if err := n.EnableCluster(ClusterConfig{Self: name, ClusterKey: []byte("0123456789abcdef"), Hot: &hcfg, HotNoSplit: noSplit, Forward: patientForward, SharedStore: true}); err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan error, 1)
		go func() { served <- n.Serve(ln) }()
		cn := &clusterNode{name: name, n: n, mgr: mgr, addr: ln.Addr().String(), client: &fasthttp.Client{}}
		cn.stop = func() {
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
		hc.nodes[name] = cn
		hc.net.nodes[name] = n
		ms = append(ms, member.Member{Name: name, HTTPAddr: cn.addr, GossipAddr: "127.0.0.1:1", State: member.StateAlive})
	}
	hc.net.view = ms
	for name, cn := range hc.nodes {
		cn.n.SetMembership(&gossipMembership{net: hc.net, self: name})
		cn.n.MembersChanged(ms)
	}
	hc.tick() // the first tick opens the sketches' windows
	return hc
}

// tick advances the clock by one second and ticks every node's loop.
func (hc *hotCluster) tick() { hc.advance(time.Second) }

func (hc *hotCluster) advance(d time.Duration) {
	now := time.Unix(0, hc.clock.Add(int64(d)))
	for _, cn := range hc.nodes {
		cn.n.Hot().Tick(now)
	}
}

// send makes count checks of key at cn, in batches of 100, all allowed.
func (hc *hotCluster) send(t *testing.T, cn *clusterNode, key string, count int) {
	t.Helper()
	for count > 0 {
		b := min(count, 100)
		count -= b
		var sb strings.Builder
		sb.WriteString(`{"checks":[`)
		for i := range b {
			if i > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"rule":"hot","key":%q}`, key)
		}
		sb.WriteString(`]}`)
		r := cn.do(t, "POST", "/v1/checks", sb.String())
		if r.status != 200 || strings.Contains(r.body, `"allowed":false`) || strings.Contains(r.body, `"error"`) {
			t.Fatalf("checks at %s: %d %.300s", cn.name, r.status, r.body)
		}
	}
}

// split makes the key owned by a hot: 300 checks in one second against a
// threshold of 100.
func (hc *hotCluster) split(t *testing.T) (key string, p shard.Plan) {
	t.Helper()
	a := hc.nodes["a"]
	key = keyOwnedBy(t, a.n, "hot", "k", "a")
	hc.send(t, a, key, 300)
	hc.tick()
	p, ok := a.n.Hot().Lookup("hot:" + key)
	if !ok {
		t.Fatalf("no split after 300 checks/s against a threshold of 100: %s", a.n.Hot().AppendJSON(nil))
	}
	return key, p
}

// TestHotSplit: a key past its threshold is split by its owner over every
// node, every node learns the plan by gossip, and each then serves the key
// itself: no check of it is forwarded.
func TestHotSplit(t *testing.T) {
	hc := newHotCluster(t, false)
	key, p := hc.split(t)
	if len(p.Holders) != 3 || p.Holders[0] != "a" {
		t.Fatalf("holders %v, want all three, owner a first", p.Holders)
	}
	for _, name := range []string{"b", "c"} {
		cn := hc.nodes[name]
		got, ok := cn.n.Hot().Lookup("hot:" + key)
		if !ok || got.Epoch != p.Epoch {
			t.Fatalf("%s: plan %+v %v, want the owner's (epoch %d)", name, got, ok, p.Epoch)
		}
		before := cn.n.ForwardStats().Items
		hc.send(t, cn, key, 200)
		if after := cn.n.ForwardStats().Items; after != before {
			t.Errorf("%s forwarded %d checks of a split key it holds, want 0", name, after-before)
		}
		if st := cn.mgr.Stats(); st.ActiveKeys != 1 {
			t.Errorf("%s leases %d keys, want 1 (the split key, from the shared Store)", name, st.ActiveKeys)
		}
	}
	// A key that is not split is still forwarded to its owner.
	b := hc.nodes["b"]
	cold := keyOwnedBy(t, b.n, "hot", "cold", "a")
	before := b.n.ForwardStats().Items
	hc.send(t, b, cold, 1)
	if b.n.ForwardStats().Items != before+1 {
		t.Errorf("a cold key owned by a was not forwarded")
	}
	r := hc.nodes["a"].do(t, "GET", "/v1/hotkeys", "")
	if r.status != 200 || !strings.Contains(r.body, `"key":"hot:`+key+`"`) || !strings.Contains(r.body, `"split":true`) {
		t.Errorf("/v1/hotkeys: %d %s", r.status, r.body)
	}
}

// TestHotSplitLearnedFromReply: a node that missed the gossip learns the
// split from the owner's forwarding reply and serves the key itself from
// then on.
func TestHotSplitLearnedFromReply(t *testing.T) {
	hc := newHotCluster(t, false)
	hc.net.mu.Lock()
	hc.net.deaf["b"] = true
	hc.net.mu.Unlock()
	key, _ := hc.split(t)
	b := hc.nodes["b"]
	if _, ok := b.n.Hot().Lookup("hot:" + key); ok {
		t.Fatal("b knows the split without gossip")
	}
	hc.send(t, b, key, 1) // forwarded to a, whose reply carries the plan
	clocktest.Eventually(t, 10*time.Second, "b to learn the split from a's reply", func() bool {
		_, ok := b.n.Hot().Lookup("hot:" + key)
		return ok
	})
	before := b.n.ForwardStats().Items
	hc.send(t, b, key, 50)
	if after := b.n.ForwardStats().Items; after != before {
		t.Errorf("b forwarded %d checks after learning the split", after-before)
	}
}

// TestHotUnsplit: once the key's rate stays below half its threshold for
// the cooling period, the owner ends the split, the other holders return
// the key's tokens, and checks go to the owner again.
func TestHotUnsplit(t *testing.T) {
	hc := newHotCluster(t, false)
	key, _ := hc.split(t)
	b := hc.nodes["b"]
	hc.send(t, b, key, 100) // b leases the key
	if st := b.mgr.Stats(); st.ActiveKeys != 1 {
		t.Fatalf("b leases %d keys, want 1", st.ActiveKeys)
	}
	// Idle: the rate decays below half the threshold, then cools 2s.
	hc.advance(time.Minute)
	hc.advance(3 * time.Second)
	for name, cn := range hc.nodes {
		if p, ok := cn.n.Hot().Lookup("hot:" + key); ok {
			t.Errorf("%s still has the split %+v", name, p)
		}
	}
	if st := hc.nodes["a"].n.Hot().Stats(); st.Started != 1 || st.Ended != 1 {
		t.Errorf("owner stats %+v, want 1 split started and ended", st)
	}
	clocktest.Eventually(t, 10*time.Second, "b to return the ended key's tokens", func() bool { return b.mgr.Stats().ActiveKeys == 0 })
	before := b.n.ForwardStats().Items
	hc.send(t, b, key, 1)
	if b.n.ForwardStats().Items != before+1 {
		t.Error("after the split ended, b did not forward the key to its owner")
	}
}

// TestHotNoSplit: with HotNoSplit the owner detects the key (it is in
// /v1/hotkeys with its rate) but never splits it: the others keep
// forwarding.
func TestHotNoSplit(t *testing.T) {
	hc := newHotCluster(t, true)
	a, b := hc.nodes["a"], hc.nodes["b"]
	key := keyOwnedBy(t, a.n, "hot", "k", "a")
	hc.send(t, a, key, 300)
	hc.tick()
	if p, ok := a.n.Hot().Lookup("hot:" + key); ok {
		t.Fatalf("split %+v with HotNoSplit", p)
	}
	r := a.do(t, "GET", "/v1/hotkeys", "")
	if !strings.Contains(r.body, `"key":"hot:`+key+`","count":300`) || !strings.Contains(r.body, `"split":false`) {
		t.Errorf("/v1/hotkeys does not show the key unsplit: %s", r.body)
	}
	before := b.n.ForwardStats().Items
	hc.send(t, b, key, 10)
	if b.n.ForwardStats().Items != before+10 {
		t.Error("b did not forward the hot key to its owner")
	}
}

// TestHotHolderLeaves: when a holder leaves, the owner announces new
// holders with a new epoch and the remaining nodes route by them.
func TestHotHolderLeaves(t *testing.T) {
	hc := newHotCluster(t, false)
	key, p := hc.split(t)
	// c leaves: the others' membership drops it.
	var ms []member.Member
	for _, m := range hc.net.view {
		if m.Name != "c" {
			ms = append(ms, m)
		}
	}
	hc.net.mu.Lock()
	hc.net.view = ms
	delete(hc.net.nodes, "c")
	hc.net.mu.Unlock()
	hc.nodes["a"].n.MembersChanged(ms)
	hc.nodes["b"].n.MembersChanged(ms)
	for _, name := range []string{"a", "b"} {
		got, ok := hc.nodes[name].n.Hot().Lookup("hot:" + key)
		if !ok || got.Epoch <= p.Epoch || !slices.Equal(got.Holders, []string{"a", "b"}) {
			t.Errorf("%s: plan %+v %v, want holders [a b] with an epoch above %d", name, got, ok, p.Epoch)
		}
	}
	b := hc.nodes["b"]
	before := b.n.ForwardStats().Items
	hc.send(t, b, key, 50)
	if b.n.ForwardStats().Items != before {
		t.Error("b, still a holder, forwarded the split key")
	}
}

// TestHotStaleEpoch: a plan with an epoch below the one a node has, by
// gossip or in a forwarding reply, is ignored; a newer one applies.
func TestHotStaleEpoch(t *testing.T) {
	hc := newHotCluster(t, false)
	key, p := hc.split(t)
	b := hc.nodes["b"]
	ckey := "hot:" + key
	gossip := func(q shard.Plan) {
		msgs, errs := hot.EncodePlans([]shard.Plan{q})
		if len(errs) > 0 || len(msgs) != 1 {
			t.Fatalf("EncodePlans: %v", errs)
		}
		b.n.GossipMessage(msgs[0])
	}
	gossip(shard.Plan{Key: ckey, Epoch: p.Epoch - 1})                              // a stale end
	gossip(shard.Plan{Key: ckey, Holders: []string{"c", "a"}, Epoch: p.Epoch - 2}) // stale holders
	if got, ok := b.n.Hot().Lookup(ckey); !ok || got.Epoch != p.Epoch || len(got.Holders) != 3 {
		t.Fatalf("after stale plans: %+v %v, want the split of epoch %d", got, ok, p.Epoch)
	}
	before := b.n.ForwardStats().Items
	hc.send(t, b, key, 20)
	if b.n.ForwardStats().Items != before {
		t.Error("b forwarded the split key after stale plans")
	}
	gossip(shard.Plan{Key: ckey, Epoch: p.Epoch + 1}) // a newer end applies
	if _, ok := b.n.Hot().Lookup(ckey); ok {
		t.Error("a newer end was ignored")
	}
}

// TestHotkeysSingleNode: a single node answers /v1/hotkeys with no keys.
func TestHotkeysSingleNode(t *testing.T) {
	n := New(Config{Name: "solo"}, lease.NewManager(lease.NewMemoryStore(lease.MemoryStoreConfig{}), lease.DefaultConfig()))
	ctx := newCtx("GET", "/v1/hotkeys", "", "127.0.0.1") // an admin endpoint: from loopback
	n.Handler()(ctx)
	if got := string(ctx.Response.Body()); ctx.Response.StatusCode() != 200 || got != `{"self":"solo","node_rate":0.0,"top":[],"splits":[]}` {
		t.Errorf("%d %s", ctx.Response.StatusCode(), got)
	}
}

// TestHotSplitSubset: with hot.split 2 of 3 nodes, the non-holder sends
// the key's checks to the holders, spread over both (not only the owner).
func TestHotSplitSubset(t *testing.T) {
	hc := newHotCluster(t, false, strings.Replace(hotRules, "{threshold: 100}", "{threshold: 100, split: 2}", 1))
	key, p := hc.split(t)
	if len(p.Holders) != 2 || p.Holders[0] != "a" {
		t.Fatalf("holders %v, want a and one other", p.Holders)
	}
	var out *clusterNode
	for name, cn := range hc.nodes {
		if !p.Has(name) {
			out = cn
		}
	}
	other := hc.nodes[p.Holders[1]]
	before := out.n.ForwardStats().Items
	hc.send(t, out, key, 200)
	if got := out.n.ForwardStats().Items - before; got != 200 {
		t.Errorf("the non-holder %s forwarded %d of 200 checks, want all", out.name, got)
	}
	if st := out.mgr.Stats(); st.ActiveKeys != 0 {
		t.Errorf("the non-holder %s leases %d keys, want 0", out.name, st.ActiveKeys)
	}
	if st := other.mgr.Stats(); st.ActiveKeys != 1 || st.LocalHits+st.StoreDecisions == 0 {
		t.Errorf("the holder %s that is not the owner served none of them: %+v", other.name, st)
	}
}

// TestHotOwnerLeaves: when the owner of a split key leaves, the key's new
// owner adopts the split with the remaining members as holders.
func TestHotOwnerLeaves(t *testing.T) {
	hc := newHotCluster(t, false)
	key, p := hc.split(t)
	var ms []member.Member
	for _, m := range hc.net.view {
		if m.Name != "a" {
			ms = append(ms, m)
		}
	}
	hc.net.mu.Lock()
	hc.net.view = ms
	delete(hc.net.nodes, "a")
	hc.net.mu.Unlock()
	// Epochs are the owners' clocks: the adopter's is later than the
	// split's.
	hc.clock.Add(int64(time.Second))
	hc.nodes["b"].n.MembersChanged(ms)
	hc.nodes["c"].n.MembersChanged(ms)
	owner := hc.nodes["b"].n.Owner("hot:" + key)
	for _, name := range []string{"b", "c"} {
		got, ok := hc.nodes[name].n.Hot().Lookup("hot:" + key)
		if !ok || got.Epoch <= p.Epoch || len(got.Holders) != 2 || got.Holders[0] != owner || got.Has("a") {
			t.Errorf("%s: plan %+v %v, want holders b and c, %s first, with an epoch above %d", name, got, ok, owner, p.Epoch)
		}
	}
}
