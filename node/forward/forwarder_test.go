package forward

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/member/netsim"
	"github.com/sluicehq/sluice/shard"
)

func TestForwardBatchesConcurrentCalls(t *testing.T) {
	t.Run("flush interval", func(t *testing.T) { testBatching(t, false) })
	t.Run("eager", func(t *testing.T) { testBatching(t, true) })
}

func testBatching(t *testing.T, eager bool) {
	d := &echoDecider{}
	s := startServer(t, NewHandler(HandlerConfig{}, d))
	f := newForwarder(t, Config{EagerFlush: eager})
	const callers = 2000
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			it := Item{Op: OpCheck, Rule: "per-key", Key: fmt.Sprintf("k%d", i), Hits: int64(i % 9)}
			if i%7 == 0 {
				it.Op = OpRefund
			}
			r, err := f.Forward(context.Background(), s.addr, it)
			if err != nil {
				errs <- err
				return
			}
			w := want(it)
			if it.Op == OpRefund && it.Hits > 0 {
				w = Result{Error: errRefundOverLent} // nothing was lent for k<i>
			}
			if r != w {
				errs <- fmt.Errorf("item %+v: result %+v, want %+v", it, r, w)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	sizes := d.sizes()
	total := 0
	for _, n := range sizes {
		if n > 256 {
			t.Errorf("a batch of %d items, want ≤ 256", n)
		}
		total += n
	}
	refused := 0
	for i := 0; i < callers; i += 7 {
		if i%9 != 0 {
			refused++
		}
	}
	if total != callers-refused {
		t.Errorf("the owner decided %d items, want %d", total, callers-refused)
	}
	// 2000 calls in far fewer requests (≥ 8 at 256 per batch). Eager
	// batches form only while the connections are busy: no bound.
	if got := s.requests.Load(); got > callers/10 && !eager {
		t.Errorf("%d requests for %d calls, want far fewer", got, callers)
	}
	st := f.Stats()
	if st.Items != callers || st.Requests != uint64(s.requests.Load()) || st.Failed != 0 {
		t.Errorf("stats %+v, want %d items in %d requests, none failed", st, callers, s.requests.Load())
	}
	t.Logf("%d calls in %d requests", callers, s.requests.Load())
}

func TestForwardManyOrderAndBatchSize(t *testing.T) {
	d := &echoDecider{}
	s := startServer(t, NewHandler(HandlerConfig{}, d))
	f := newForwarder(t, Config{MaxBatch: 100})
	items := make([]Item, 1000)
	for i := range items {
		items[i] = Item{Op: OpCheck, Rule: "r", Key: fmt.Sprintf("k%d", i), Hits: int64(i % 11)}
	}
	items[17].Rule = "bad"
	results := make([]Result, len(items))
	if err := f.ForwardMany(context.Background(), s.addr, items, results); err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if results[i] != want(items[i]) {
			t.Fatalf("results[%d] = %+v, want %+v", i, results[i], want(items[i]))
		}
	}
	if results[17].Error == "" {
		t.Error("the owner's error for item 17 was lost")
	}
	for _, n := range d.sizes() {
		if n > 100 {
			t.Errorf("a batch of %d items, want ≤ MaxBatch 100", n)
		}
	}
	if got := s.requests.Load(); got < 10 {
		t.Errorf("%d requests for 1000 items at MaxBatch 100, want ≥ 10", got)
	}
}

func TestForwardManyRefusesBadInput(t *testing.T) {
	f := newForwarder(t, Config{})
	ctx := context.Background()
	err := f.ForwardMany(ctx, "127.0.0.1:1", make([]Item, 2), make([]Result, 1))
	if err == nil || !strings.Contains(err.Error(), "results") {
		t.Errorf("mismatched lengths: %v", err)
	}
	items := []Item{{Op: OpCheck, Rule: "r", Key: "k"}, {Op: OpCheck, Rule: "r", Key: ""}}
	err = f.ForwardMany(ctx, "127.0.0.1:1", items, make([]Result, 2))
	if err == nil || !strings.Contains(err.Error(), "item 1: key") {
		t.Errorf("empty key: %v", err)
	}
	_, err = f.Forward(ctx, "127.0.0.1:1", Item{Op: OpCheck, Rule: "r", Key: "k", Hits: -2})
	if err == nil || !strings.Contains(err.Error(), "hits") {
		t.Errorf("negative hits: %v", err)
	}
	_, err = f.Forward(ctx, "no-port", Item{Op: OpCheck, Rule: "r", Key: "k"})
	if err == nil || !strings.Contains(err.Error(), "peer") {
		t.Errorf("bad address: %v", err)
	}
	if st := f.Stats(); st != (Stats{}) {
		t.Errorf("stats %+v after refused calls, want none", st)
	}
}

func TestForwardAuth(t *testing.T) {
	key := []byte("0123456789abcdef")
	s := startServer(t, NewHandler(HandlerConfig{ClusterKey: key}, &echoDecider{}))
	it := Item{Op: OpCheck, Rule: "r", Key: "k5", Hits: 1}

	good := newForwarder(t, Config{ClusterKey: key})
	if r, err := good.Forward(context.Background(), s.addr, it); err != nil || r != want(it) {
		t.Errorf("right key: %+v, %v", r, err)
	}
	for name, k := range map[string][]byte{"wrong key": []byte("fedcba9876543210"), "no key": nil} {
		f := newForwarder(t, Config{ClusterKey: k})
		_, err := f.Forward(context.Background(), s.addr, it)
		if !isUnavailable(err) || !strings.Contains(err.Error(), "401") || isBusy(err) {
			t.Errorf("%s: error %v, want ErrPeerUnavailable with status 401, not ErrPeerBusy", name, err)
		}
	}
}

func TestForwardDeadPeer(t *testing.T) {
	addr := closedAddr(t)
	// An hour's timeout: a refused connection must fail at once, not
	// when the timeout ends (that would hang the test, whatever the
	// machine's load: a bound on the elapsed time is a wall-clock
	// threshold that a stalled, loaded machine can pass).
	f := newForwarder(t, Config{Timeout: time.Hour, Backoff: time.Hour})
	it := Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1}
	_, err := f.Forward(context.Background(), addr, it)
	if !isUnavailable(err) || isBusy(err) {
		t.Fatalf("error %v, want ErrPeerUnavailable, not ErrPeerBusy (a refused connection: nobody decides)", err)
	}
	if st := f.Stats(); st.Failures != 1 || st.Failed != 1 || st.FastFails != 0 {
		t.Errorf("stats %+v after one failed request", st)
	}
	// Now the peer is down: calls fail without a request.
	for range 100 {
		if _, err := f.Forward(context.Background(), addr, it); !isUnavailable(err) || isBusy(err) {
			t.Fatalf("error %v, want ErrPeerUnavailable, not ErrPeerBusy", err)
		}
	}
	err = f.ForwardMany(context.Background(), addr, []Item{it, it}, make([]Result, 2))
	if !isUnavailable(err) {
		t.Fatalf("ForwardMany: error %v, want ErrPeerUnavailable", err)
	}
	if st := f.Stats(); st.Failures != 1 || st.FastFails != 102 || st.Failed != 103 {
		t.Errorf("stats %+v, want 1 failed request and 102 fast fails", st)
	}
}

func TestForwardSlowPeerIsSkipped(t *testing.T) {
	release := make(chan struct{})
	h := NewHandler(HandlerConfig{}, &echoDecider{})
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		<-release
		h(ctx)
	})
	clk := clocktest.New()
	f := newForwarder(t, Config{Timeout: 20 * time.Millisecond, Backoff: time.Hour, Now: clk.Now, AfterFunc: clk.AfterFunc})
	t.Cleanup(func() { close(release) }) // runs before f's and the server's cleanups
	var wg sync.WaitGroup
	var unavailable, done atomic.Int64
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			_, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: fmt.Sprint(i), Hits: 1})
			if isUnavailable(err) && isBusy(err) {
				unavailable.Add(1)
			} else {
				t.Errorf("error %v, want ErrPeerUnavailable and ErrPeerBusy (the owner is slow, not gone)", err)
			}
		}()
	}
	// The owner never answers: each request's timeout fires when the
	// fake clock passes it.
	clocktest.Eventually(t, 20*time.Second, "the 50 calls to time out", func() bool {
		clk.Advance(20 * time.Millisecond)
		return done.Load() == 50
	})
	wg.Wait()
	if unavailable.Load() != 50 {
		t.Errorf("%d of 50 calls unavailable", unavailable.Load())
	}
	// Requests that timed out do not back the peer off (issue 35: a stall
	// of 150ms cost 500ms of checks decided without their owner): the
	// next call is sent, and fails busy at its own timeout.
	before := s.requests.Load()
	res := make(chan error, 1)
	go func() {
		_, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1})
		res <- err
	}()
	var err error
	clocktest.Eventually(t, 20*time.Second, "the next call to time out", func() bool {
		clk.Advance(20 * time.Millisecond)
		select {
		case err = <-res:
			return true
		default:
			return false
		}
	})
	if !isBusy(err) {
		t.Errorf("the call after the timeouts: error %v, want ErrPeerBusy", err)
	}
	if got := s.requests.Load(); got == before {
		t.Errorf("no request after the timeouts: the peer was backed off")
	}
}

func TestForwardProbesAfterBackoff(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	h := NewHandler(HandlerConfig{}, &echoDecider{})
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		if failing.Load() {
			ctx.Error("not ready", fasthttp.StatusServiceUnavailable)
			return
		}
		h(ctx)
	})
	clk := clocktest.New()
	f := newForwarder(t, Config{Backoff: time.Second, Now: clk.Now, AfterFunc: clk.AfterFunc})
	it := Item{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}
	if _, err := f.Forward(context.Background(), s.addr, it); !isUnavailable(err) || !isBusy(err) || !strings.Contains(err.Error(), "503") {
		t.Fatalf("error %v, want ErrPeerUnavailable and ErrPeerBusy with 503", err)
	}
	failing.Store(false)
	// Backing off: no request until the backoff ends, even to a peer
	// that is back.
	clk.Advance(time.Second - time.Nanosecond)
	before := s.requests.Load()
	if _, err := f.Forward(context.Background(), s.addr, it); !isBusy(err) {
		t.Fatalf("error %v while backing off, want ErrPeerBusy", err)
	}
	if n := s.requests.Load() - before; n != 0 {
		t.Fatalf("%d requests while backing off", n)
	}
	clk.Advance(time.Nanosecond)
	if r, err := f.Forward(context.Background(), s.addr, it); err != nil || r != want(it) {
		t.Errorf("result %+v, %v once the backoff ended, want %+v", r, err, want(it))
	}
}

// forwardUntilOK forwards it until it succeeds, advancing clk by the
// backoff after each failure (a request that fails on a connection cut
// before backs the peer off again), at most 100 times.
func forwardUntilOK(t *testing.T, f *Forwarder, clk *clocktest.Clock, addr string, it Item) Result {
	t.Helper()
	for range 100 {
		r, err := f.Forward(context.Background(), addr, it)
		if err == nil {
			return r
		}
		if !isUnavailable(err) {
			t.Fatalf("forwarding does not resume: %v", err)
		}
		clk.Advance(f.cfg.Backoff)
	}
	t.Fatal("forwarding does not resume after 100 backoffs")
	return Result{}
}

func TestForwardCutLink(t *testing.T) {
	s := startServer(t, NewHandler(HandlerConfig{}, &echoDecider{}))
	proxy, err := netsim.NewProxy(s.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	clk := clocktest.New()
	f := newForwarder(t, Config{Backoff: 10 * time.Millisecond, Now: clk.Now, AfterFunc: clk.AfterFunc})

	const workers, calls = 8, 400
	var ok, unavailable atomic.Int64
	var cutOnce sync.Once
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				if w == 0 && i == calls/4 {
					cutOnce.Do(proxy.Cut)
				}
				it := Item{Op: OpCheck, Rule: "r", Key: fmt.Sprintf("k%d", i), Hits: 1}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				r, err := f.Forward(ctx, proxy.Addr(), it)
				cancel()
				switch {
				case err == nil:
					if r != want(it) {
						t.Errorf("result %+v, want %+v", r, want(it))
					}
					ok.Add(1)
				case isUnavailable(err):
					unavailable.Add(1)
				default:
					t.Errorf("error %v, want nil or ErrPeerUnavailable (a hang ends in a context error)", err)
				}
			}
		}()
	}
	wg.Wait()
	if unavailable.Load() == 0 || ok.Load() == 0 {
		t.Errorf("%d answered, %d unavailable; want both before and after the cut", ok.Load(), unavailable.Load())
	}
	proxy.Restore()
	it := Item{Op: OpCheck, Rule: "r", Key: "k3", Hits: 2}
	if r := forwardUntilOK(t, f, clk, proxy.Addr(), it); r != want(it) {
		t.Errorf("result %+v after restore, want %+v", r, want(it))
	}
}

func TestForwardPlansReachOnPlans(t *testing.T) {
	plans := []shard.Plan{{Key: "r:hot", Holders: []string{"n1", "n2"}, Epoch: 9}}
	s := startServer(t, NewHandler(HandlerConfig{}, &echoDecider{plans: plans}))
	got := make(chan []shard.Plan, 10)
	f := newForwarder(t, Config{OnPlans: func(ps []shard.Plan) { got <- ps }})
	if _, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: "hot", Hits: 1}); err != nil {
		t.Fatal(err)
	}
	select {
	case ps := <-got:
		if len(ps) != 1 || ps[0].Key != "r:hot" || ps[0].Epoch != 9 || len(ps[0].Holders) != 2 || ps[0].Holders[1] != "n2" {
			t.Errorf("OnPlans got %+v, want %+v", ps, plans)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("OnPlans was not called")
	}
}

func TestForwardContext(t *testing.T) {
	release := make(chan struct{})
	h := NewHandler(HandlerConfig{}, &echoDecider{})
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		<-release
		h(ctx)
	})
	f := newForwarder(t, Config{Timeout: time.Hour})
	t.Cleanup(func() { close(release) }) // runs before f's and the server's cleanups
	it := Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.Forward(ctx, s.addr, it); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled context: %v", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := f.Forward(ctx, s.addr, it); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("context deadline while the owner hangs: %v", err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := f.ForwardMany(ctx2, s.addr, []Item{it, it}, make([]Result, 2)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("ForwardMany, context deadline while the owner hangs: %v", err)
	}
}

func TestForwarderCloseAndRemovePeer(t *testing.T) {
	d := &echoDecider{}
	s := startServer(t, NewHandler(HandlerConfig{}, d))
	f := newForwarder(t, Config{})
	it := Item{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}
	if _, err := f.Forward(context.Background(), s.addr, it); err != nil {
		t.Fatal(err)
	}
	f.RemovePeer(s.addr)
	noOwnGoroutines(t)
	f.RemovePeer(s.addr)      // unknown now: a no-op
	f.RemovePeer("nobody:80") // never known
	if _, err := f.Forward(context.Background(), s.addr, it); err != nil {
		t.Fatalf("after RemovePeer, the peer does not start afresh: %v", err)
	}
	f.Close()
	f.Close()
	if _, err := f.Forward(context.Background(), s.addr, it); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}

func TestForwarderCloseUnderLoad(t *testing.T) {
	s := startServer(t, NewHandler(HandlerConfig{}, &echoDecider{}))
	f := New(Config{})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10000 {
				_, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: fmt.Sprintf("k%d", w*i), Hits: 1})
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil && !isUnavailable(err) {
					t.Errorf("error %v", err)
					return
				}
			}
		}()
	}
	clocktest.Eventually(t, 10*time.Second, "a request to reach the owner", func() bool { return s.requests.Load() > 0 })
	f.Close()
	wg.Wait() // every caller returned: none hangs on a closed peer
	noOwnGoroutines(t)
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg   Config
		field string
	}{
		{Config{}, ""},
		{DefaultConfig(), ""},
		{Config{FlushInterval: -1}, "flush_interval"},
		{Config{MaxBatch: MaxItems + 1}, "max_batch"},
		{Config{Timeout: -1}, "timeout"},
		{Config{Backoff: -1}, "backoff"},
		{Config{MaxConnsPerPeer: -1}, "max_conns_per_peer"},
		{Config{QueueLen: -1}, "queue_len"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (err == nil) != (tt.field == "") || (err != nil && !strings.Contains(err.Error(), tt.field)) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tt.cfg, err, tt.field)
		}
	}
	c := Config{MaxBatch: -5, Timeout: -1}
	c.fill()
	if d := DefaultConfig(); c.MaxBatch != d.MaxBatch || c.Timeout != d.Timeout || c.FlushInterval != d.FlushInterval ||
		c.Backoff != d.Backoff || c.MaxConnsPerPeer != d.MaxConnsPerPeer || c.QueueLen != d.QueueLen {
		t.Errorf("filled %+v, want the defaults %+v", c, DefaultConfig())
	}
}

func TestForwardQueueFullFailsFast(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	releaseAll := func() { once.Do(func() { close(release) }) }
	h := NewHandler(HandlerConfig{}, &echoDecider{})
	s := startServer(t, func(ctx *fasthttp.RequestCtx) {
		<-release
		h(ctx)
	})
	// One request in flight, one batch of one item waiting for the
	// connection, one call in the queue: a fourth call finds it full.
	f := newForwarder(t, Config{MaxBatch: 1, MaxConnsPerPeer: 1, QueueLen: 1})
	t.Cleanup(releaseAll) // runs before f's and the server's cleanups
	it := Item{Op: OpCheck, Rule: "r", Key: "k1", Hits: 1}
	errs := make(chan error, 4)
	call := func() {
		_, err := f.Forward(context.Background(), s.addr, it)
		errs <- err
	}
	go call()
	clocktest.Eventually(t, 10*time.Second, "the first request to reach the owner", func() bool { return s.requests.Load() > 0 })
	for range 3 {
		go call()
	}
	// At most two of these three fit; the others fail at once.
	var full int
	select {
	case err := <-errs:
		if !isUnavailable(err) || !isBusy(err) || !strings.Contains(err.Error(), "queue full") {
			t.Fatalf("error %v, want ErrPeerUnavailable and ErrPeerBusy: queue full", err)
		}
		full++
	case <-time.After(5 * time.Second):
		t.Fatal("no call failed although the queue is full")
	}
	releaseAll()
	for range 3 {
		err := <-errs
		switch {
		case err == nil:
		case isUnavailable(err) && strings.Contains(err.Error(), "queue full"):
			full++
		default:
			t.Errorf("error %v", err)
		}
	}
	if full < 1 || full > 2 {
		t.Errorf("%d calls found the queue full, want 1 or 2", full)
	}
}

func TestForwardBadReplies(t *testing.T) {
	empty, _ := AppendReply(nil, nil, nil)
	tests := []struct {
		name string
		body []byte
		msg  string
	}{
		{"garbage", []byte("hello"), "version"},
		{"too few results", empty, "0 results for 1 items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, func(ctx *fasthttp.RequestCtx) { ctx.SetBody(tt.body) })
			f := newForwarder(t, Config{})
			_, err := f.Forward(context.Background(), s.addr, Item{Op: OpCheck, Rule: "r", Key: "k", Hits: 1})
			if !isUnavailable(err) || isBusy(err) || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("error %v, want ErrPeerUnavailable naming %q, not ErrPeerBusy", err, tt.msg)
			}
		})
	}
}
