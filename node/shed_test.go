package node

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/member"
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
`

// shedNode is node "a" of a two-member cluster whose other member "b" is
// the fasthttp handler peer, on a real loopback port (or addr, when peer
// is nil: a port nothing listens on).
type shedNode struct {
	*testNode
	peerAddr string
}

func newShedNode(t *testing.T, fcfg forward.Config, peer fasthttp.RequestHandler) *shedNode {
	t.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mgr := lease.NewManager(store, patientManager())
	n := New(DefaultConfig(), mgr)
	n.SetRules(mustParse(t, shedRules))
	if err := n.EnableCluster(ClusterConfig{Self: "a", Insecure: true, Forward: fcfg}); err != nil {
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
	n.SetMembership(&staticMembership{ready: true, view: ms})
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
	return &shedNode{testNode: tn, peerAddr: peerAddr}
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

// TestShedBusyOwner: a check whose owner is alive (membership says so) but
// answers 503, or does not answer within the forwarding timeout, is
// answered 503 with Retry-After on every front end (single check, batch,
// forward-auth) and counted as shed; the sender does not decide it (it
// used to lease from the Store itself: the owner, still deciding, and the
// sender both admitted: finding 4 of issue 11). Fails before: 200.
func TestShedBusyOwner(t *testing.T) {
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
			if r.status != 503 || r.hdr["Retry-After"] != "1" {
				t.Fatalf("check: %d %v %s, want 503 with Retry-After: 1", r.status, r.hdr, r.body)
			}
			if m := r.json(t); m["allowed"] != false || m["retry_after_ms"] != 500.0 {
				t.Errorf("check body %s, want allowed false, retry_after_ms 500 (the forwarding back-off)", r.body)
			}
			r = sn.do("POST", "/v1/checks", `{"checks":[{"rule":"one","key":"`+key+`"}]}`)
			if r.status != 200 || !strings.Contains(r.body, `"allowed":false`) || !strings.Contains(r.body, `"retry_after_ms":500`) {
				t.Errorf("batch: %d %s, want the item denied with retry_after_ms 500", r.status, r.body)
			}
			apiKey := keyOwnedBy(t, sn.n, "api", "h", "b")
			r = sn.do("GET", "/v1/auth", "", "X-API-Key: "+apiKey)
			if r.status != 503 || r.hdr["Retry-After"] != "1" {
				t.Errorf("forward-auth: %d %v, want 503 with Retry-After: 1", r.status, r.hdr)
			}
			m := sn.do("GET", "/metrics", "").body
			for _, want := range []string{
				`sluice_checks_total{rule="one",decision="shed"} 2`,
				`sluice_checks_total{rule="api",decision="shed"} 1`,
				`sluice_routed_items_total{decided_by="none_shed"} 3`,
				`sluice_routed_items_total{decided_by="fallback"} 0`,
				"# TYPE sluice_routed_items_total counter\n",
			} {
				if !strings.Contains(m, want) {
					t.Errorf("metrics lack %s", want)
				}
			}
			// /v1/stats counts them too (its sampler reads the counters).
			var shed uint64
			for _, v := range rowOf(t, sn.n.stat.local().Rules, "one").Shed {
				shed += v
			}
			if shed != 2 {
				t.Errorf("/v1/stats: %d checks of rule one shed, want 2", shed)
			}
			// The sender took nothing: once b leaves, a decides the key
			// and its one token is still there.
			sn.n.MembersChanged([]member.Member{{Name: "a", State: member.StateAlive}})
			if r := sn.do("POST", "/v1/check", `{"rule":"one","key":"`+key+`"}`); r.status != 200 {
				t.Errorf("after b left: %d %s, want 200 (the shed checks charged nothing)", r.status, r.body)
			}
		})
	}
}

// TestShedOnlyAliveOwners: the sender decides a check itself when its
// owner cannot be deciding it: the owner refuses connections (its process
// is gone, membership has not noticed yet), or membership marked it dead
// while the forward was failing.
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
		if m := sn.do("GET", "/metrics", "").body; !strings.Contains(m, `sluice_routed_items_total{decided_by="fallback"} 1`) {
			t.Errorf("metrics lack the fallback decision")
		}
	})
}
