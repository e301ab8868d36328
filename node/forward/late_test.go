package forward

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/shard"
)

// TestHandlerRefusesLateBatches: the owner does not decide a batch it
// starts to decide after the sender's timeout has passed (answered 503, so
// the sender sheds it: it would have anyway), measured against the
// sender's own earlier requests, so that the clocks' skew does not matter.
// Before, an owner starved of CPU decided batches whose senders had given
// up: their tokens were spent, their checks shed (overload-x2 admitted
// 90–95% of the allowance). The owner's clock is fixed: no timing.
func TestHandlerRefusesLateBatches(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	d := &echoDecider{}
	h := NewHandler(HandlerConfig{Now: func() time.Time { return now }}, d)
	body, _ := AppendBatch(nil, make3())
	send := func(from string, sent time.Time, budget time.Duration) (int, string) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.Header.Set(FromHeader, from)
		if !sent.IsZero() {
			ctx.Request.Header.SetBytesV(DeadlineHeader, appendDeadline(nil, sent, budget))
		}
		ctx.Request.SetBody(body)
		h(&ctx)
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	ahead := now.Add(time.Hour) // b's clock is an hour ahead
	for i, tc := range []struct {
		from   string
		sent   time.Time
		status int
	}{
		{"a", now.Add(-time.Millisecond), 200},       // a's first: the reference
		{"a", now.Add(-41 * time.Millisecond), 200},  // queued 40ms < 50ms
		{"a", now.Add(-100 * time.Millisecond), 503}, // queued 99ms: a gave up
		{"b", ahead.Add(-time.Millisecond), 200},     // skew cancels out
		{"b", ahead.Add(-80 * time.Millisecond), 503},
		{"b", time.Time{}, 200}, // no header: decided
	} {
		before := len(d.sizes())
		status, msg := send(tc.from, tc.sent, 50*time.Millisecond)
		decided := len(d.sizes()) > before
		if status != tc.status || decided != (tc.status == 200) {
			t.Errorf("request %d: %d %q, decided %v; want %d", i, status, msg, decided, tc.status)
		}
		if status == 503 && !strings.Contains(msg, "late") {
			t.Errorf("request %d: %q, want it to say late", i, msg)
		}
	}
}

// TestLatenessForgetsOldOffsets: a sender's reference offset is the
// smallest of the last one to two windows, so a step of its clock (or of
// the owner's) is forgotten within two windows.
func TestLatenessForgetsOldOffsets(t *testing.T) {
	l := newLateness()
	t0 := time.Unix(1_800_000_000, 0)
	v := func(sent time.Time) []byte { return appendDeadline(nil, sent, 50*time.Millisecond) }
	if lag, budget, ok := l.check("a", v(t0), t0); !ok || lag != 0 || budget != 50*time.Millisecond {
		t.Fatalf("first: %v %v %v", lag, budget, ok)
	}
	// a's clock steps back 1s: its requests look 1s late...
	if lag, _, _ := l.check("a", v(t0.Add(-time.Second)), t0.Add(time.Second)); lag != time.Second+time.Second {
		t.Errorf("after the step: lag %v, want 2s (1s since the reference, 1s step)", lag)
	}
	// ...until both windows have rolled past the old reference.
	var lag time.Duration
	for s := 2; s <= 25; s++ {
		now := t0.Add(time.Duration(s) * time.Second)
		lag, _, _ = l.check("a", v(now.Add(-time.Second)), now)
	}
	if lag != 0 {
		t.Errorf("lag %v two windows after the step, want 0", lag)
	}
	for _, bad := range []string{"", "1", "x.1", "1.x", "1.0", "1.-5"} {
		if _, _, ok := l.check("a", []byte(bad), t0); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// slowDecider allows every check, records the ops it is given, and moves
// the handler's clock by cost per batch of checks (deciding takes time).
type slowDecider struct {
	now  *time.Time
	cost time.Duration
	ops  []Item
}

func (d *slowDecider) DecideBatch(items []Item, results []Result) []shard.Plan {
	for i := range items {
		d.ops = append(d.ops, Item{Op: items[i].Op, Rule: strings.Clone(items[i].Rule), Key: strings.Clone(items[i].Key), Hits: items[i].Hits})
		if items[i].Op == OpCheck {
			results[i] = Result{Allowed: true, Limit: 10}
		}
	}
	if items[0].Op == OpCheck {
		*d.now = d.now.Add(d.cost)
	}
	return nil
}

// TestHandlerRefundsBatchesDecidedLate: a batch whose decisions end after
// the sender's timeout (cold keys waiting on the Store) is answered 503,
// and what its allowed checks charged is refunded: the sender sheds them,
// so the tokens would be spent for nothing. Before, such batches were
// answered into the void and their tokens lost (overload-x2 admitted
// 90–95% of the allowance).
func TestHandlerRefundsBatchesDecidedLate(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	d := &slowDecider{now: &now, cost: 10 * time.Millisecond}
	h := NewHandler(HandlerConfig{Now: func() time.Time { return now }}, d)
	body, _ := AppendBatch(nil, make3())
	send := func() (int, string) {
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod(fasthttp.MethodPost)
		ctx.Request.Header.Set(FromHeader, "a")
		ctx.Request.Header.SetBytesV(DeadlineHeader, appendDeadline(nil, now, 50*time.Millisecond))
		ctx.Request.SetBody(body)
		h(&ctx)
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	if status, msg := send(); status != 200 {
		t.Fatalf("decided in 10ms of 50: %d %q", status, msg)
	}
	d.ops = nil
	d.cost = 60 * time.Millisecond
	status, msg := send()
	if status != 503 || !strings.Contains(msg, "late") {
		t.Fatalf("decided in 60ms of 50: %d %q, want 503 late", status, msg)
	}
	var refunds []string
	for _, it := range d.ops[3:] {
		if it.Op != OpRefund || it.Hits != 1 {
			t.Errorf("after the checks: %+v, want refunds of 1 hit", it)
		}
		refunds = append(refunds, it.Key)
	}
	if strings.Join(refunds, ",") != "k1,k2,k3" {
		t.Errorf("refunded %v, want the 3 allowed checks", refunds)
	}
}

// refundSignal decides like echoDecider and sends every refund it gets.
type refundSignal struct {
	echoDecider
	refunds chan Item
}

func (d *refundSignal) DecideBatch(items []Item, results []Result) []shard.Plan {
	d.echoDecider.DecideBatch(items, results)
	for _, it := range items {
		if it.Op == OpRefund {
			d.refunds <- Item{Op: it.Op, Rule: strings.Clone(it.Rule), Key: strings.Clone(it.Key), Hits: it.Hits}
		}
	}
	return nil
}

// TestForwardRefundsLateReplies: when the owner's reply comes after the
// callers were failed at the timeout (they shed the checks), the sender
// gives back what the owner allowed: a refund of each allowed check. Before,
// those tokens were spent for answers nobody read. No timing: the owner
// answers only once the caller has had its error.
func TestForwardRefundsLateReplies(t *testing.T) {
	d := &refundSignal{refunds: make(chan Item, 4)}
	h := NewHandler(HandlerConfig{}, d)
	release := make(chan struct{})
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		if bytes.Contains(ctx.PostBody(), []byte("late")) {
			<-release
		}
		h(ctx)
	})
	clk := clocktest.New()
	f := newForwarder(t, Config{Timeout: 20 * time.Millisecond, Backoff: time.Millisecond, Now: clk.Now, AfterFunc: clk.AfterFunc})
	errc := make(chan error, 1)
	go func() {
		_, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: "late", Hits: 2})
		errc <- err
	}()
	// The request is in flight once its timeout is set: fire it.
	clocktest.Eventually(t, 10*time.Second, "the request's timeout to be set", func() bool { return clk.Timers() > 0 })
	clk.Advance(20 * time.Millisecond)
	err := <-errc
	close(release)
	if !isBusy(err) {
		t.Fatalf("error %v, want ErrPeerBusy (the owner answers late)", err)
	}
	select {
	case r := <-d.refunds:
		if r.Key != "late" || r.Hits != 2 {
			t.Errorf("refund %+v, want 2 hits of key late", r)
		}
	case <-time.After(10 * time.Second): // a hang bound, not a timing
		t.Fatal("the late reply's allowed check was not refunded")
	}
}

// TestForwardRefundsAbandonedCalls: when the caller's own deadline passes
// before the owner answers (and before the Forwarder's timeout), the
// caller decides the checks itself; when the owner's answer comes, what
// it allowed is refunded to it, for Forward and ForwardMany alike. Before
// (issue 35), those answers went into the void and the owner's charge
// stayed: with the caller deciding too, a key on a shared Store admitted
// over its limit (101 of 100 in the netns spray rows). No timing: the
// owner answers only once the caller has had its error.
func TestForwardRefundsAbandonedCalls(t *testing.T) {
	d := &refundSignal{refunds: make(chan Item, 8)}
	h := NewHandler(HandlerConfig{}, d)
	release := make(chan struct{}, 8)
	var armed atomic.Bool // the next request (a check, not the refund) waits for release
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		if armed.CompareAndSwap(true, false) {
			<-release
		}
		h(ctx)
	})
	f := newForwarder(t, Config{Timeout: time.Hour})
	for _, many := range []bool{false, true} {
		armed.Store(true)
		s.requests.Store(0)
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			it := Item{Op: OpCheck, Rule: "r", Key: "slow", Hits: 2}
			var err error
			if many {
				err = f.ForwardMany(ctx, s.addr, []Item{it, it}, make([]Result, 2))
			} else {
				_, err = f.Forward(ctx, s.addr, it)
			}
			errc <- err
		}()
		clocktest.Eventually(t, 10*time.Second, "the request at the owner", func() bool { return s.requests.Load() > 0 })
		cancel() // the caller's deadline
		if err := <-errc; !isBusy(err) {
			t.Fatalf("many %v: error %v, want ErrPeerBusy", many, err)
		}
		release <- struct{}{}
		want := map[bool]int{false: 1, true: 2}[many]
		for range want {
			select {
			case r := <-d.refunds:
				if r.Key != "slow" || r.Hits != 2 {
					t.Errorf("many %v: refund %+v, want 2 hits of key slow", many, r)
				}
			case <-time.After(10 * time.Second): // a hang bound, not a timing
				t.Fatalf("many %v: the abandoned call's allowed checks were not refunded", many)
			}
		}
	}
}
