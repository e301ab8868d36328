package node

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/forward"
)

// TestDemoteSilentOwner: an owner alive to membership that leaves
// DemoteAfter (2) forwarding requests in a row unanswered is routed
// around: its keys' checks are decided here at once from the shared Store
// (200, counted as decided_by="demoted_owner"), without waiting for its
// timeout; once per DemoteProbe one check goes to it again, and an answer
// (here a 503) restores it. Every check is answered 200: a silent owner's
// checks, the ones that wait for its timeout and the probes included, are
// decided here, never shed. The demotion and its end are logged once
// each. On a fake clock: the forwarding timeouts, back-off and probe
// interval are its timers. Fails before (issue 35): the unanswered
// requests and the probes answered 503.
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
	key := keyOwnedBy(t, sn.n, "many", "k", "b")
	check := func() int {
		t.Helper()
		r := sn.do("POST", "/v1/check", `{"rule":"many","key":"`+key+`"}`)
		return r.status
	}
	routed := func(what string, demoted int) {
		t.Helper()
		m := sn.do("GET", "/metrics", "").body
		if !strings.Contains(m, fmt.Sprintf(`sluice_routed_items_total{decided_by="demoted_owner"} %d`, demoted)) ||
			!strings.Contains(m, `sluice_routed_items_total{decided_by="none_shed"} 0`) {
			t.Errorf("%s: metrics: want %d demoted_owner, 0 none_shed:\n%s", what, demoted, grepLines(m, "sluice_routed_items_total"))
		}
	}
	// timedOut sends a check the owner does not answer: it is decided
	// here when its request times out (the fake clock's timer), then the
	// back-off passes.
	timedOut := func(what string) {
		t.Helper()
		res := make(chan int, 1)
		timers := clk.Timers()
		go func() { res <- check() }()
		clocktest.Eventually(t, 10*time.Second, what+": the request's timeout set", func() bool { return clk.Timers() > timers })
		clk.Advance(fcfg.Timeout)
		if st := <-res; st != 200 {
			t.Fatalf("%s: %d, want 200 (decided here: the owner did not answer)", what, st)
		}
		clk.Advance(fcfg.Backoff)
	}
	timedOut("first unanswered request")
	timedOut("second unanswered request")

	// Demoted: decided here, from the Store, at once (no timer needed).
	if st := check(); st != 200 {
		t.Fatalf("check after 2 unanswered requests: %d, want 200 (the owner is routed around)", st)
	}
	routed("demoted", 1)
	// Still demoted until the probe interval passes; then one check probes
	// it (decided here: it still does not answer), and it stays demoted.
	clk.Advance(demoteProbe - time.Millisecond)
	if st := check(); st != 200 {
		t.Fatalf("second check while demoted: %d, want 200", st)
	}
	clk.Advance(time.Millisecond)
	timedOut("the probe")
	if st := check(); st != 200 {
		t.Fatalf("check after an unanswered probe: %d, want 200 (still routed around)", st)
	}
	routed("after the probe", 3)
	// The owner answers the next probe (a 503): it is restored, and its
	// checks go to it again (decided here, as it says it is overloaded,
	// but no longer as a demoted owner's).
	answer.Store(true)
	clk.Advance(demoteProbe)
	if st := check(); st != 200 {
		t.Fatalf("the probe the owner answers: %d, want 200", st)
	}
	clk.Advance(fcfg.Backoff)
	if st := check(); st != 200 {
		t.Fatalf("check after the owner answered: %d, want 200", st)
	}
	routed("restored", 3)
	logs := sn.logs.String()
	for _, want := range []string{"owner does not answer: routing around it", "owner answers again: no longer routed around"} {
		if n := strings.Count(logs, want); n != 1 {
			t.Errorf("%d lines %q, want 1:\n%s", n, want, logs)
		}
	}
	if !strings.Contains(logs, "decided_here=3") {
		t.Errorf("the end of the demotion does not count the 3 checks decided for the owner:\n%s", logs)
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
	return newShedNodeWith(t, ClusterConfig{Self: "a", Insecure: true, Forward: fcfg, DemoteAfter: 2, DemoteProbe: demoteProbe, SharedStore: true}, peer, nil)
}
