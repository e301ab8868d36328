package node

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
)

// TestDecideRequests: Decide decides each request of a Batch as one
// (every rule must allow; a denied request's charged hits are refunded),
// answers per item, and refuses a request with a bad item without
// charging anything; on a single node and on a cluster of one alike.
func TestDecideRequests(t *testing.T) {
	for _, cluster := range []bool{false, true} {
		tn := newTestNode(t, testRules)
		n := tn.n
		if cluster {
			if err := n.EnableCluster(ClusterConfig{Self: "a", ClusterKey: []byte("0123456789abcdef0123456789abcdef")}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { n.CloseCluster() })
		}
		var b engine.Batch
		// tight (gcra, 1/h) and wide (10/h) both key on tenant: the first
		// request takes both, the second is denied by tight and its hit
		// on wide is refunded; the third names an unknown rule.
		for range 2 {
			b.Add("wide", "t1", 1)
			b.Add("tight", "t1", 1)
			b.End()
		}
		b.Add("wide", "t1", 1)
		b.Add("nope", "t1", 1)
		b.End()
		b.Add("wide", "t1", 0) // a peek, in an implicit last request
		n.Decide(context.Background(), &b)
		if len(b.Requests) != 4 {
			t.Fatalf("cluster=%v: %d requests, want 4", cluster, len(b.Requests))
		}
		q0, q1, q2, q3 := b.Requests[0], b.Requests[1], b.Requests[2], b.Requests[3]
		if !q0.Allowed() || q0.Err != nil {
			t.Fatalf("cluster=%v: request 0 %+v, want allowed", cluster, q0)
		}
		if q1.Status != 429 || b.Items[q1.Rep].Rule != "tight" {
			t.Errorf("cluster=%v: request 1 %+v, want 429 reported by tight", cluster, q1)
		}
		if it := b.ItemsOf(1)[0]; !it.Decided || !it.Decision.Allowed {
			t.Errorf("cluster=%v: request 1's wide item %+v, want decided and allowed (then refunded)", cluster, it)
		}
		var fe *lease.FieldError
		if !errors.As(q2.Err, &fe) || fe.Field != "rule" || q2.ErrItem != 5 || b.Items[4].Decided {
			t.Errorf("cluster=%v: request 2 err %v item %d, want an error on field rule of item 5, nothing decided", cluster, q2.Err, q2.ErrItem)
		}
		// wide: 10, request 0 took 1, request 1's hit was refunded.
		if it := b.ItemsOf(3)[0]; !q3.Allowed() || it.Decision.Remaining != 9 {
			t.Errorf("cluster=%v: peek %+v remaining %d, want allowed with 9 left", cluster, q3, it.Decision.Remaining)
		}
		b.Reset()
		if len(b.Items) != 0 || len(b.Requests) != 0 {
			t.Fatalf("Reset left %d items, %d requests", len(b.Items), len(b.Requests))
		}
	}
}

// TestDecideNotReady: before the first rule set every request errs with
// ErrNotReady.
func TestDecideNotReady(t *testing.T) {
	tn := newTestNode(t, "")
	var b engine.Batch
	b.Add("x", "k", 1)
	tn.n.Decide(context.Background(), &b)
	if !errors.Is(b.Requests[0].Err, ErrNotReady) {
		t.Fatalf("err %v, want ErrNotReady", b.Requests[0].Err)
	}
}

// BenchmarkDecide is Decide of one request of one warm item, the engine
// without HTTP.
func BenchmarkDecide(b *testing.B) {
	tn := newTestNode(&testing.T{}, benchDecideRules)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var bt engine.Batch
		for pb.Next() {
			bt.Reset()
			bt.Add("big", "k", 1)
			tn.n.Decide(context.Background(), &bt)
		}
	})
}

// BenchmarkDecideBatch100 is Decide of 100 one-item requests over 100
// warm keys, as POST /v1/checks of 100 makes (node/testdata/batch100.lua):
// the engine's work per batch without HTTP and JSON. Compare its
// cpu-ns/op (or instructions, under valgrind --tool=callgrind) before and
// after a change to the engine's passes over a batch.
func BenchmarkDecideBatch100(b *testing.B) {
	tn := newTestNode(&testing.T{}, benchDecideRules)
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = "k-" + strconv.Itoa(i+1)
	}
	fill := func(bt *engine.Batch) {
		bt.Reset()
		for _, k := range keys {
			bt.Add("big", k, 1)
			bt.End()
		}
	}
	var warm engine.Batch
	fill(&warm)
	tn.n.Decide(context.Background(), &warm)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() { reportCPU(b, cpu0) }()
	b.RunParallel(func(pb *testing.PB) {
		var bt engine.Batch
		for pb.Next() {
			fill(&bt)
			tn.n.Decide(context.Background(), &bt)
			if !bt.Requests[99].Allowed() {
				b.Errorf("request 99: status %d", bt.Requests[99].Status)
				return
			}
		}
	})
}

const benchDecideRules = `
rules:
  - name: big
    algorithm: token_bucket
    limit: 1000000000
    period: 1s
`

// TestUnansweredRefundsTheRequest: a request whose remote item is denied
// because its owner does not answer (a closed rule on the memory store:
// 429) is denied, so the hits its other items took here are given back.
// Fails (the local key's one token stays spent: 429 after) when the
// unanswered item does not mark the request denied.
func TestUnansweredRefundsTheRequest(t *testing.T) {
	sn := newShedNodeWith(t, ClusterConfig{Self: "a", Insecure: true}, busyPeer, nil)
	remote := keyOwnedBy(t, sn.n, "two-closed", "r", "b")
	local := keyOwnedBy(t, sn.n, "one", "l", "a")
	var b engine.Batch
	b.Add("one", local, 1)
	b.Add("two-closed", remote, 1)
	sn.n.Decide(context.Background(), &b)
	if q := b.Requests[0]; q.Status != 429 || q.Err != nil {
		t.Fatalf("request: status %d err %v, want 429 (its remote item denied: closed, its owner silent)", q.Status, q.Err)
	}
	if r := sn.do("POST", "/v1/check", `{"rule":"one","key":"`+local+`"}`); r.status != 200 {
		t.Errorf("the local key after: %d %s, want 200 (its hit refunded)", r.status, r.body)
	}
}
