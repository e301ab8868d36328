package node

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/shard"
)

const shedRules = `
rules:
  - name: one
    algorithm: token_bucket
    limit: 1
    period: 1h
  - name: api
    algorithm: token_bucket
    limit: 1
    period: 1h
    key: header:X-API-Key
  - name: many
    algorithm: token_bucket
    limit: 1000
    period: 1h
  - name: two-local
    algorithm: fixed_window
    limit: 2
    period: 1h
  - name: two-open
    algorithm: fixed_window
    limit: 2
    period: 1h
    on_store_failure: open
  - name: two-closed
    algorithm: fixed_window
    limit: 2
    period: 1h
    on_store_failure: closed
`

// shedNode is node "a" of a two-member cluster whose other member "b" is
// the fasthttp handler peer, on a real loopback port (or addr, when peer
// is nil: a port nothing listens on).
type shedNode struct {
	*testNode
	peerAddr string
	logs     *syncBuf // the node's log (info and up)
}

// quorumMembership is a static membership that tells a quorum, as
// *member.Cluster does.
type quorumMembership struct {
	staticMembership
	mu sync.Mutex
	q  member.Quorum
}

func (m *quorumMembership) Quorum() member.Quorum {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.q
}

func (m *quorumMembership) set(q member.Quorum) {
	m.mu.Lock()
	m.q = q
	m.mu.Unlock()
}

// newShedNode is a node whose nodes share its Store (ClusterConfig.
// SharedStore), as on Redis.
func newShedNode(t *testing.T, fcfg forward.Config, peer fasthttp.RequestHandler) *shedNode {
	t.Helper()
	return newShedNodeWith(t, ClusterConfig{Self: "a", Insecure: true, Forward: fcfg, SharedStore: true}, peer, nil)
}

// newShedNodeWith is newShedNode with ccfg and, when not nil, membership
// qm (else a static one).
func newShedNodeWith(t *testing.T, ccfg ClusterConfig, peer fasthttp.RequestHandler, qm *quorumMembership) *shedNode {
	t.Helper()
	return newShedNodeStore(t, ccfg, peer, qm, nil)
}

// newShedNodeStore is newShedNodeWith with the Store wrapped by wrap (nil:
// the MemoryStore as is).
func newShedNodeStore(t *testing.T, ccfg ClusterConfig, peer fasthttp.RequestHandler, qm *quorumMembership, wrap func(lease.Store) lease.Store) *shedNode {
	t.Helper()
	mem := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { mem.Close() })
	var store lease.Store = mem
	if wrap != nil {
		store = wrap(mem)
	}
	mgr := lease.NewManager(store, patientManager())
	logs := &syncBuf{}
	cfg := DefaultConfig()
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	n := New(cfg, mgr)
	n.SetRules(mustParse(t, shedRules))
	if err := n.EnableCluster(ccfg); err != nil {
		t.Fatal(err)
	}
	var peerAddr string
	if peer != nil {
		pln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ps := &fasthttp.Server{Handler: peer}
		go func() { _ = ps.Serve(pln) }()
		t.Cleanup(func() { _ = ps.Shutdown() })
		peerAddr = pln.Addr().String()
	} else {
		peerAddr = closedPort(t)
	}
	ms := []member.Member{
		{Name: "a", HTTPAddr: "127.0.0.1:1", State: member.StateAlive},
		{Name: "b", HTTPAddr: peerAddr, State: member.StateAlive},
	}
	n.MembersChanged(ms)
	if qm != nil {
		qm.staticMembership = staticMembership{ready: true, view: ms}
		n.SetMembership(qm)
	} else {
		n.SetMembership(&staticMembership{ready: true, view: ms})
	}
	ln := fasthttputil.NewInmemoryListener()
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
		<-served
		_ = n.CloseCluster()
		mgr.Close()
	})
	tn := &testNode{t: t, n: n, mgr: mgr, ln: ln, client: &fasthttp.Client{
		Dial: func(string) (net.Conn, error) { return ln.Dial() },
	}}
	return &shedNode{testNode: tn, peerAddr: peerAddr, logs: logs}
}

// closedPort returns a loopback address that refuses connections.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func busyPeer(ctx *fasthttp.RequestCtx) {
	ctx.Error("overloaded", fasthttp.StatusServiceUnavailable)
}

// TestUnansweredOwnerSharedStore: on a shared Store, a check whose owner
// is alive (membership says so) but answers 503, or does not answer
// within the forwarding timeout, is decided here at once by leasing from
// the Store, on every front end (single check, batch, forward-auth): 200,
// not degraded, counted as decided_by="owner_unanswered"; nothing is
// shed. The Store keeps the limit whoever decides: the next check is
// denied (429). Fails before (issue 35): 503 with Retry-After, shed.
func TestUnansweredOwnerSharedStore(t *testing.T) {
	for _, tc := range []struct {
		name string
		fcfg forward.Config
		hang bool
	}{
		{"owner answers 503", forward.Config{}, false},
		// The timeout ends a request that is never answered: the outcome
		// does not depend on how long anything takes.
		{"owner never answers", forward.Config{Timeout: 20 * time.Millisecond}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peer := busyPeer
			hang := make(chan struct{})
			if tc.hang {
				peer = func(*fasthttp.RequestCtx) { <-hang }
			}
			sn := newShedNode(t, tc.fcfg, peer)
			t.Cleanup(func() { close(hang) }) // before the peer's server stops
			key := keyOwnedBy(t, sn.n, "one", "k", "b")
			r := sn.do("POST", "/v1/check", `{"rule":"one","key":"`+key+`"}`)
			if r.status != 200 || strings.Contains(r.body, `"degraded":true`) {
				t.Fatalf("check: %d %s, want 200 decided here from the Store (not degraded)", r.status, r.body)
			}
			r = sn.do("POST", "/v1/checks", `{"checks":[{"rule":"one","key":"`+key+`"}]}`)
			if r.status != 200 || !strings.Contains(r.body, `"allowed":false`) || strings.Contains(r.body, `"retry_after_ms":500`) {
				t.Errorf("batch: %d %s, want the item denied on its limit (the Store's one token spent)", r.status, r.body)
			}
			apiKey := keyOwnedBy(t, sn.n, "api", "h", "b")
			if r = sn.do("GET", "/v1/auth", "", "X-API-Key: "+apiKey); r.status != 200 {
				t.Errorf("forward-auth: %d %v, want 200", r.status, r.hdr)
			}
			m := sn.do("GET", "/metrics", "").body
			for _, want := range []string{
				`sluice_checks_total{rule="one",decision="shed"} 0`,
				`sluice_routed_items_total{decided_by="owner_unanswered"} 3`,
				`sluice_routed_items_total{decided_by="none_shed"} 0`,
			} {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s:\n%s", want, grepLines(m, "sluice_routed_items_total"))
				}
			}
			if l := sn.logs.String(); strings.Count(l, "an owner does not answer: deciding its checks here") != 1 {
				t.Errorf("want one line saying checks are decided for a silent owner:\n%s", l)
			}
		})
	}
}

// TestUnansweredOwnerStoreDown: with the owner silent and the shared
// Store down too, this node knows nothing it may admit: a local rule's
// check is denied (429), not admitted from this node's memory while the
// owner admits from its loan (two counts the Store never sees together:
// 101 of 100 admitted in the netns spray rows); an open rule's is allowed,
// degraded. Neither is a 5xx.
func TestUnansweredOwnerStoreDown(t *testing.T) {
	sn := newShedNodeStore(t, ClusterConfig{Self: "a", Insecure: true, SharedStore: true}, busyPeer, nil,
		func(lease.Store) lease.Store { return downStore{} })
	check := func(rule string) resp {
		t.Helper()
		return sn.do("POST", "/v1/check", `{"rule":"`+rule+`","key":"`+keyOwnedBy(t, sn.n, rule, "k", "b")+`"}`)
	}
	if r := check("two-local"); r.status != 429 || r.hdr["Retry-After"] == "" {
		t.Errorf("local: %d %v %s, want 429 with Retry-After", r.status, r.hdr, r.body)
	}
	if r := check("two-open"); r.status != 200 || !strings.Contains(r.body, `"degraded":true`) {
		t.Errorf("open: %d %s, want 200 degraded", r.status, r.body)
	}
}

// TestOwnerStoreDownDecidedHere: an owner that cannot reach the shared
// Store answers a closed rule's check unavailable; the sender, whose Store
// answers, decides it instead (200), so a node cut off from Redis alone
// costs only the closed checks it receives itself. Fails before: 503.
func TestOwnerStoreDownDecidedHere(t *testing.T) {
	h := forward.NewHandler(forward.HandlerConfig{}, unavailableDecider{})
	sn := newShedNode(t, forward.Config{}, h)
	key := keyOwnedBy(t, sn.n, "two-closed", "k", "b")
	if r := sn.do("POST", "/v1/check", `{"rule":"two-closed","key":"`+key+`"}`); r.status != 200 {
		t.Errorf("closed rule, the owner's Store down: %d %s, want 200 decided here", r.status, r.body)
	}
}

// unavailableDecider answers every check unavailable: an owner whose Store
// is down, for closed rules.
type unavailableDecider struct{}

func (unavailableDecider) DecideBatch(items []forward.Item, results []forward.Result) []shard.Plan {
	for i := range results {
		results[i] = forward.Result{Limit: 2, RetryAfterMS: 1000, Unavailable: true}
	}
	return nil
}

// TestUnansweredOwnerOwnStores: on each node's own memory store, a check
// whose owner does not answer follows its rule's on_store_failure, within
// this node's share of the limit (limit ÷ the members it last knew: 2 ÷ 2
// here): local admits 1 then denies (429), degraded; open allows,
// degraded; closed denies (429 with a retry-after), never 503. Fails
// before (issue 35): every check 503, shed.
func TestUnansweredOwnerOwnStores(t *testing.T) {
	qm := &quorumMembership{q: member.Quorum{Seen: 2, Known: 2}}
	sn := newShedNodeWith(t, ClusterConfig{Self: "a", Insecure: true}, busyPeer, qm)
	check := func(rule string) resp {
		t.Helper()
		return sn.do("POST", "/v1/check", `{"rule":"`+rule+`","key":"`+keyOwnedBy(t, sn.n, rule, "k", "b")+`"}`)
	}
	for i, want := range []int{200, 429, 429} {
		if r := check("two-local"); r.status != want || (want == 200 && !strings.Contains(r.body, `"degraded":true`)) {
			t.Errorf("local check %d: %d %s, want %d (its share of 2 on 2 members is 1), degraded", i, r.status, r.body, want)
		}
	}
	for i := range 3 {
		if r := check("two-open"); r.status != 200 || !strings.Contains(r.body, `"degraded":true`) {
			t.Errorf("open check %d: %d %s, want 200 degraded", i, r.status, r.body)
		}
	}
	if r := check("two-closed"); r.status != 429 || r.hdr["Retry-After"] == "" {
		t.Errorf("closed check: %d %v %s, want 429 with Retry-After", r.status, r.hdr, r.body)
	}
}

// TestMinorityHoldsOwnKeysToShare: a node that is the minority on the
// memory store holds its own keys to its share too (limit ÷ the members
// it last knew), and stops once it sees a majority again. Fails before:
// the minority admits its own keys' whole limit.
func TestMinorityHoldsOwnKeysToShare(t *testing.T) {
	qm := &quorumMembership{q: member.Quorum{Seen: 1, Known: 3, Minority: true, Missing: []string{"b", "c"}}}
	sn := newShedNodeWith(t, ClusterConfig{Self: "a", Insecure: true}, busyPeer, qm)
	own := keyOwnedBy(t, sn.n, "many", "k", "a")
	admitted := 0
	for range 400 {
		if r := sn.do("POST", "/v1/check", `{"rule":"many","key":"`+own+`"}`); r.status == 200 {
			admitted++
		}
	}
	if admitted != 1000/3 {
		t.Errorf("the minority admitted %d of its own key, want its share %d", admitted, 1000/3)
	}
	if r := sn.do("GET", "/readyz", ""); r.status != 503 || !strings.Contains(r.body, "minority") {
		t.Errorf("/readyz in the minority: %d %s, want 503 saying why", r.status, r.body)
	}
	qm.set(member.Quorum{Seen: 2, Known: 3, Missing: []string{"c"}})
	sn.n.cl.quorumAt.Store(nil) // the engine's view of it, refreshed now rather than in 50ms
	if r := sn.do("POST", "/v1/check", `{"rule":"many","key":"`+own+`"}`); r.status != 200 {
		t.Errorf("back in the majority: %d %s, want 200 (its own limit again)", r.status, r.body)
	}
	if r := sn.do("GET", "/readyz", ""); r.status != 200 {
		t.Errorf("/readyz in the majority: %d %s, want 200", r.status, r.body)
	}
}

// TestShedOnlyAliveOwners: the sender decides a check itself when its
// owner cannot be deciding it (the owner refuses connections: its process
// is gone, membership has not noticed yet) and when it does not answer,
// membership marking it dead meanwhile or not.
func TestShedOnlyAliveOwners(t *testing.T) {
	t.Run("connection refused", func(t *testing.T) {
		sn := newShedNode(t, forward.Config{}, nil)
		key := keyOwnedBy(t, sn.n, "one", "k", "b")
		if r := sn.do("POST", "/v1/check", `{"rule":"one","key":"`+key+`"}`); r.status != 200 {
			t.Errorf("check: %d %s, want 200 (decided here)", r.status, r.body)
		}
	})
	t.Run("owner left during the forward", func(t *testing.T) {
		var sn *shedNode
		left := make(chan struct{})
		sn = newShedNode(t, forward.Config{}, func(ctx *fasthttp.RequestCtx) {
			<-left
			// Membership drops b before its 503 arrives.
			sn.n.MembersChanged([]member.Member{{Name: "a", State: member.StateAlive}})
			busyPeer(ctx)
		})
		key := keyOwnedBy(t, sn.n, "one", "k", "b")
		close(left)
		r := sn.do("POST", "/v1/check", `{"rule":"one","key":"`+key+`"}`)
		if r.status != 200 {
			t.Errorf("check: %d %s, want 200 (b is no longer a member: decided here)", r.status, r.body)
		}
		if m := sn.do("GET", "/metrics", "").body; !strings.Contains(m, `sluice_routed_items_total{decided_by="owner_unanswered"} 1`) {
			t.Errorf("metrics lack the decision for the unanswering owner")
		}
	})
}
