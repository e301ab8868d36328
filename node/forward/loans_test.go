package forward

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/shard"
)

// recDecider is echoDecider that also records the refunds it was given.
type recDecider struct {
	echoDecider
	mu      sync.Mutex
	refunds []Item
	seen    []string // keys of every item decided
}

func (d *recDecider) DecideBatch(items []Item, results []Result) []shard.Plan {
	d.mu.Lock()
	for _, it := range items {
		d.seen = append(d.seen, strings.Clone(it.Key))
		if it.Op == OpRefund {
			it.Rule, it.Key = strings.Clone(it.Rule), strings.Clone(it.Key)
			d.refunds = append(d.refunds, it)
		}
	}
	d.mu.Unlock()
	return d.echoDecider.DecideBatch(items, results)
}

func (d *recDecider) takeRefunds() []Item {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.refunds
	d.refunds = nil
	return r
}

// TestRefundBoundedByLoan: a peer's refund gives back at most what this
// node lent that peer for that rule and key (allowed checks' hits, within
// the refund window); the excess is refused and counted.
func TestRefundBoundedByLoan(t *testing.T) {
	// The owner and its senders on one fake clock, with a window wide
	// enough for the test's jumps.
	clock := clocktest.New()
	d := &recDecider{}
	set := metrics.NewSet()
	s := startServer(t, NewHandler(HandlerConfig{ClusterKey: testKey, Now: clock.Now, Window: time.Hour, RefundWindow: 10 * time.Second, Metrics: set}, d))
	a := newForwarder(t, Config{ClusterKey: testKey, Self: "node-a", Now: clock.Now, AfterFunc: clock.AfterFunc})
	b := newForwarder(t, Config{ClusterKey: testKey, Self: "node-b", Now: clock.Now, AfterFunc: clock.AfterFunc})
	refusedItems := set.GetOrCreateCounter(`sluice_forward_refused_items_total{reason="refund_over_lent"}`)
	refusedRefundHits := set.GetOrCreateCounter(`sluice_forward_refused_refund_hits_total`)
	ctx := context.Background()
	do := func(f *Forwarder, op Op, key string, hits int64) Result {
		t.Helper()
		r, err := f.Forward(ctx, s.addr, Item{Op: op, Rule: "day", Key: key, Hits: hits})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	refused0, hits0 := refusedItems.Get(), refusedRefundHits.Get()

	if r := do(a, OpCheck, "k1", 5); !r.Allowed { // echoDecider allows hits ≤ 5: 5 lent to a
		t.Fatalf("check: %+v", r)
	}
	if r := do(a, OpRefund, "k1", 8); r.Error != "" { // 5 of 8 given back
		t.Errorf("refund of 8 after a loan of 5: %+v, want it cut to 5", r)
	}
	if got := d.takeRefunds(); len(got) != 1 || got[0].Hits != 5 {
		t.Errorf("the decider got refunds %+v, want one of 5 hits", got)
	}
	for _, c := range []struct {
		name string
		f    *Forwarder
		key  string
	}{
		{"a second refund", a, "k1"},         // the loan is used up
		{"another peer's refund", b, "k1"},   // lent to a, not to b
		{"a refund of another key", a, "k2"}, // nothing lent
	} {
		if r := do(c.f, OpRefund, c.key, 1); r.Error != errRefundOverLent {
			t.Errorf("%s: %+v, want refused", c.name, r)
		}
	}
	// A denied check lends nothing.
	if r := do(a, OpCheck, "k3", 7); r.Allowed {
		t.Fatalf("check of 7: %+v, want denied", r)
	}
	if r := do(a, OpRefund, "k3", 7); r.Error != errRefundOverLent {
		t.Errorf("refund after a denial: %+v, want refused", r)
	}
	// Loans expire with the refund window (kept one to two windows).
	do(b, OpCheck, "k4", 2)
	clock.Set(clock.Now().Add(15 * time.Second))
	if r := do(b, OpRefund, "k4", 1); r.Error != "" {
		t.Errorf("refund within two windows: %+v", r)
	}
	clock.Set(clock.Now().Add(21 * time.Second))
	if r := do(b, OpRefund, "k4", 1); r.Error != errRefundOverLent {
		t.Errorf("refund after the window: %+v, want refused", r)
	}
	if got := d.takeRefunds(); len(got) != 1 || got[0].Key != "k4" || got[0].Hits != 1 {
		t.Errorf("the decider got refunds %+v, want k4's 1", got)
	}
	if got, want := refusedItems.Get()-refused0, uint64(6); got != want {
		t.Errorf("sluice_forward_refused_items_total{reason=refund_over_lent} +%d, want +%d", got, want)
	}
	if got, want := refusedRefundHits.Get()-hits0, uint64(3+1+1+1+7+1); got != want {
		t.Errorf("sluice_forward_refused_refund_hits_total +%d, want +%d", got, want)
	}
}

// TestInternalKeysValidated: the owner refuses, item by item, the rules
// and keys the public API refuses (newlines, NUL, other control
// characters, invalid UTF-8), and decides the others of the batch.
func TestInternalKeysValidated(t *testing.T) {
	d := &recDecider{}
	s := startServer(t, NewHandler(HandlerConfig{ClusterKey: testKey}, d))
	f := newForwarder(t, Config{ClusterKey: testKey, Self: "node-a"})
	items := []Item{
		{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "a\nb", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "a\x00b", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "tab\there", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "\xff\xfe", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "k2", Hits: 2},
		{Op: OpCheck, Rule: "bad rule", Key: "k3", Hits: 1},
		{Op: OpRefund, Rule: "r", Key: "a\r\nb", Hits: 1},
		{Op: OpCheck, Rule: "r", Key: "ünïcödé|ok", Hits: 3},
	}
	res := make([]Result, len(items))
	if err := f.ForwardMany(context.Background(), s.addr, items, res); err != nil {
		t.Fatal(err)
	}
	for i, it := range items {
		valid := validItem(&it) == ""
		switch {
		case valid && res[i] != want(it):
			t.Errorf("item %d %q: %+v, want %+v", i, it.Key, res[i], want(it))
		case !valid && (res[i].Error == "" || !strings.Contains(res[i].Error, "rule") && !strings.Contains(res[i].Error, "key")):
			t.Errorf("item %d %q: %+v, want an error naming the field", i, it.Key, res[i])
		}
	}
	d.mu.Lock()
	seen := d.seen
	d.mu.Unlock()
	if !slices.Equal(seen, []string{"k1", "k2", "ünïcödé|ok"}) {
		t.Errorf("the decider saw %q, want only the valid items", seen)
	}
}

func TestLoans(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	l := newLoans(time.Second, 2)
	k := func(s string) loanKey { return loanKey{"p", "r", s} }
	l.lend(k("a"), 3, t0)
	l.lend(k("a"), 2, t0)
	l.lend(k("b"), 1, t0)
	l.lend(k("c"), 9, t0) // over max: not remembered
	if got := l.take(k("a"), 10, t0); got != 5 {
		t.Errorf("take a: %d, want 5", got)
	}
	if got := l.take(k("c"), 1, t0); got != 0 {
		t.Errorf("take c: %d, want 0 (never remembered)", got)
	}
	// Rotated once: b is in prev and still there; a new loan of b adds up.
	l.lend(k("b"), 1, t0.Add(time.Second))
	if got := l.take(k("b"), 5, t0.Add(time.Second)); got != 2 {
		t.Errorf("take b across generations: %d, want 2", got)
	}
	l.lend(k("d"), 4, t0.Add(time.Second))
	if got := l.take(k("d"), 4, t0.Add(5*time.Second)); got != 0 {
		t.Errorf("take d long after: %d, want 0", got)
	}
}
