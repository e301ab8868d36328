package node

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/member"
)

// TestDemoteSilentOwner: an owner alive to membership that leaves
// DemoteAfter (2) forwarding requests in a row unanswered is routed
// around: its keys' checks are decided here from the Store (200, counted
// as decided_by="demoted_owner") instead of shed; once per DemoteProbe
// one check goes to it again, and an answer (here a 503) restores it. On
// a fake clock: the forwarding timeouts, back-off and probe interval are
// its timers. Fails before: every check of the silent owner's key is shed.
func TestDemoteSilentOwner(t *testing.T) {
	clk := clocktest.New()
	var answer atomic.Bool // false: the owner never answers; true: it answers 503
	hang := make(chan struct{})
	peer := func(ctx *fasthttp.RequestCtx) {
		if answer.Load() {
			busyPeer(ctx)
			return
		}
		<-hang
	}
	fcfg := forward.Config{Timeout: 10 * time.Second, MaxTimeout: 10 * time.Second, Backoff: 100 * time.Millisecond, Now: clk.Now, AfterFunc: clk.AfterFunc}
	sn := newDemoteNode(t, fcfg, peer)
	t.Cleanup(func() { close(hang) }) // before the peer's server stops
	key := keyOwnedBy(t, sn.n, "one", "k", "b")
	check := func() int {
		t.Helper()
		r := sn.do("POST", "/v1/check", `{"rule":"one","key":"`+key+`"}`)
		return r.status
	}
	// timedOut sends a check the owner does not answer: it is shed when
	// its request times out (the fake clock's timer), then the back-off
	// passes.
	timedOut := func(what string) {
		t.Helper()
		res := make(chan int, 1)
		timers := clk.Timers()
		go func() { res <- check() }()
		clocktest.Eventually(t, 10*time.Second, what+": the request's timeout set", func() bool { return clk.Timers() > timers })
		clk.Advance(fcfg.Timeout)
		if st := <-res; st != 503 {
			t.Fatalf("%s: %d, want 503 (shed: the owner did not answer)", what, st)
		}
		clk.Advance(fcfg.Backoff)
	}
	timedOut("first unanswered request")
	timedOut("second unanswered request")

	// Demoted: decided here, from the Store, at once.
	if st := check(); st != 200 {
		t.Fatalf("check after 2 unanswered requests: %d, want 200 (the owner is routed around)", st)
	}
	if m := sn.do("GET", "/metrics", "").body; !strings.Contains(m, `sluice_routed_items_total{decided_by="demoted_owner"} 1`) ||
		!strings.Contains(m, `sluice_routed_items_total{decided_by="none_shed"} 2`) {
		t.Errorf("metrics: want 1 demoted_owner, 2 none_shed:\n%s", grepLines(m, "sluice_routed_items_total"))
	}
	// Still demoted until the probe interval passes; then one check probes
	// it (shed: it still does not answer), and it stays demoted.
	clk.Advance(demoteProbe - time.Millisecond)
	if st := check(); st != 429 {
		t.Fatalf("second check while demoted: %d, want 429 (decided here: the limit is 1)", st)
	}
	clk.Advance(time.Millisecond)
	timedOut("the probe")
	if st := check(); st != 429 {
		t.Fatalf("check after an unanswered probe: %d, want 429 (still routed around)", st)
	}
	// The owner answers the next probe (a 503): it is restored, and its
	// checks go to it again (shed, as it says it is overloaded).
	answer.Store(true)
	clk.Advance(demoteProbe)
	if st := check(); st != 503 {
		t.Fatalf("the probe the owner answers: %d, want 503 (its answer)", st)
	}
	clk.Advance(fcfg.Backoff)
	if st := check(); st != 503 {
		t.Fatalf("check after the owner answered: %d, want 503 (forwarded to it again, not decided here)", st)
	}
	if m := sn.do("GET", "/metrics", "").body; !strings.Contains(m, `sluice_routed_items_total{decided_by="demoted_owner"} 3`) {
		t.Errorf("metrics: want 3 demoted_owner:\n%s", grepLines(m, "sluice_routed_items_total"))
	}
}

// demoteProbe is the test's probe interval, longer than its forwarding
// timeout (as 1s is than sluiced's 50ms): a probe's timeout does not make
// the next one due.
const demoteProbe = time.Minute

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// newDemoteNode is newShedNode with demotion on (DemoteAfter 2).
func newDemoteNode(t *testing.T, fcfg forward.Config, peer fasthttp.RequestHandler) *shedNode {
	t.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mgr := lease.NewManager(store, patientManager())
	n := New(DefaultConfig(), mgr)
	n.SetRules(mustParse(t, shedRules))
	if err := n.EnableCluster(ClusterConfig{Self: "a", Insecure: true, Forward: fcfg, DemoteAfter: 2, DemoteProbe: demoteProbe}); err != nil {
		t.Fatal(err)
	}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ps := &fasthttp.Server{Handler: peer}
	go func() { _ = ps.Serve(pln) }()
	t.Cleanup(func() { _ = ps.Shutdown() })
	ms := []member.Member{
		{Name: "a", HTTPAddr: "127.0.0.1:1", State: member.StateAlive},
		{Name: "b", HTTPAddr: pln.Addr().String(), State: member.StateAlive},
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
	return &shedNode{testNode: tn, peerAddr: pln.Addr().String()}
}
