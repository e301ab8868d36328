package lua

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/storetest"
	"github.com/sluicehq/sluice/lua/redistest"
)

// hooks are a batcher's test hooks, which a test may change while the
// batcher runs: set once on the batcher, they call what set gave last.
type hooks struct {
	mu      sync.Mutex
	queued  func(c *call, n int)
	sending func(calls []*call)
}

func hook(s *Store) *hooks {
	h := &hooks{}
	s.batch.queued = func(c *call, n int) {
		h.mu.Lock()
		f := h.queued
		h.mu.Unlock()
		if f != nil {
			f(c, n)
		}
	}
	s.batch.sending = func(calls []*call) {
		h.mu.Lock()
		f := h.sending
		h.mu.Unlock()
		if f != nil {
			f(calls)
		}
	}
	return h
}

func (h *hooks) set(queued func(c *call, n int), sending func(calls []*call)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.queued, h.sending = queued, sending
}

// forcedBatches is a Store whose every Lease and Return that reaches Redis
// runs in a batch of two, through the batched path: while a lease of a key
// of its own (the plug) is held in flight, the call joins the queue, then
// a lease of another key of its own (the companion) joins it, and the
// plug is let go; the two go out as one batch script call. Log, Acquire
// and Release are the Store's own. One call at a time goes through this.
type forcedBatches struct {
	*Store
	t      testing.TB
	hooks  *hooks
	mu     sync.Mutex
	plug   string // the plug's Redis key
	held   chan struct{}
	let    chan struct{}
	queued chan int
	n      int          // companions so far
	pairs  atomic.Int64 // batches of two sent
}

var plugPolicy = lease.Policy{Algorithm: lease.TokenBucket, Limit: lease.MaxLimit, Period: time.Hour}

func forceBatches(t testing.TB, s *Store) *forcedBatches {
	if s.batch == nil {
		t.Fatal("forceBatches: the store does not batch")
	}
	f := &forcedBatches{Store: s, t: t, hooks: hook(s), plug: s.Key("batch-plug", lease.TokenBucket),
		held: make(chan struct{}), let: make(chan struct{}), queued: make(chan int, 4)}
	f.hooks.set(f.onQueued, f.onSending)
	return f
}

func (f *forcedBatches) onQueued(c *call, n int) {
	// The plug queues when the previous batch is still finishing.
	if c.key != f.plug {
		f.queued <- n
	}
}

func (f *forcedBatches) onSending(calls []*call) {
	if len(calls) == 1 && calls[0].key == f.plug {
		f.held <- struct{}{}
		<-f.let
	}
	if len(calls) == 2 {
		f.pairs.Add(1)
	}
}

// force runs op (one Lease or Return of the Store) in a batch of two if it
// reaches Redis.
func (f *forcedBatches) force(op func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ctx := context.Background()
	pairs := f.pairs.Load()
	plugged := make(chan error, 1)
	go func() {
		_, err := f.Store.Lease(ctx, "batch-plug", plugPolicy, 1, 1, lease.Lessee{})
		plugged <- err
	}()
	<-f.held
	done := make(chan struct{})
	go func() {
		defer close(done)
		op()
	}()
	var companion chan error
	select {
	case n := <-f.queued:
		if n != 1 {
			f.t.Fatalf("forceBatches: queue of %d after the call, want 1", n)
		}
		f.n++
		key := fmt.Sprintf("batch-companion-%d", f.n)
		companion = make(chan error, 1)
		go func() {
			_, err := f.Store.Lease(ctx, key, plugPolicy, 1, 1, lease.Lessee{})
			companion <- err
		}()
		if n := <-f.queued; n != 2 {
			f.t.Fatalf("forceBatches: queue of %d after the companion, want 2", n)
		}
	case <-done: // answered without Redis (invalid arguments, a done context)
	}
	f.let <- struct{}{}
	if err := <-plugged; err != nil {
		f.t.Fatalf("forceBatches: the plug's lease: %v", err)
	}
	<-done
	if companion != nil {
		if err := <-companion; err != nil {
			f.t.Fatalf("forceBatches: the companion's lease: %v", err)
		}
		if f.pairs.Load() != pairs+1 {
			f.t.Fatalf("forceBatches: the call and its companion did not go out as one batch")
		}
	}
}

func (f *forcedBatches) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (g lease.Grant, err error) {
	f.force(func() { g, err = f.Store.Lease(ctx, key, p, want, need, to) })
	return g, err
}

func (f *forcedBatches) Return(ctx context.Context, key string, p lease.Policy, tokens int64, holder string) (err error) {
	f.force(func() { err = f.Store.Return(ctx, key, p, tokens, holder) })
	return err
}

// TestConformanceBatched runs the conformance suite with every lease and
// return in a batch of two (see forcedBatches), on a frozen clock: the
// batch script must answer each call exactly as the call's own script.
func TestConformanceBatched(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 3, 1, 12, 34, 56, 789012000, time.UTC))
	storetest.Run(t, storetest.Harness{
		New:     func(t *testing.T) lease.Store { return forceBatches(t, newConformanceStore(t, srv.Addr)) },
		Advance: func(t *testing.T, d time.Duration) { clock.Advance(d) },
		Slack:   0,
	})
}

// newUnbatchedStore is newTestStore with batching off: each Store call is
// one script call, for the tests that count Store calls as script calls.
func newUnbatchedStore(t testing.TB, addrs ...string) *Store {
	t.Helper()
	s, err := NewStore(Config{Addrs: addrs, CallTimeout: testTimeout, MaxBatch: 1})
	if err != nil {
		t.Fatalf("NewStore(%v): %v", addrs, err)
	}
	t.Cleanup(s.Close)
	return s
}

// newHoldingStore is a Store for tests that hold calls in flight for as
// long as they need: no call or connection timeout gets in their way.
func newHoldingStore(t testing.TB, addrs ...string) *Store {
	t.Helper()
	s, err := NewStore(Config{Addrs: addrs, CallTimeout: time.Hour, ConnWriteTimeout: time.Hour, MaxBatch: testBatch})
	if err != nil {
		t.Fatalf("NewStore(%v): %v", addrs, err)
	}
	t.Cleanup(s.Close)
	return s
}

// burst starts Store calls one after another, each once the previous one
// has joined the queue (so they queue in this order), while the first is
// in flight; wait returns when all have returned.
type burst struct {
	t      *testing.T
	queued chan int
	wg     sync.WaitGroup
	n      int
}

// holdFirst stops forcing batches and starts a lease of key first, which
// goes out alone; it returns when that call is in flight (the caller has
// paused Redis so that it stays there), and a burst whose calls queue
// behind it. The lease's error goes to done.
func holdFirst(t *testing.T, f *forcedBatches, first string, p lease.Policy, done chan<- error) *burst {
	b := &burst{t: t, queued: make(chan int, 1)}
	redisKey := f.Key(first, p.Algorithm)
	inFlight := make(chan struct{})
	f.hooks.set(func(c *call, n int) {
		// first queues if the previous batch is still finishing.
		if c.key != redisKey {
			b.queued <- n
		}
	}, func(calls []*call) {
		if len(calls) == 1 && calls[0].key == redisKey {
			close(inFlight)
		}
	})
	go func() {
		_, err := f.Store.Lease(context.Background(), first, p, 3, 1, lease.Lessee{})
		done <- err
	}()
	<-inFlight
	return b
}

// add starts f and waits for it to join the queue. The channel is closed
// when f returns.
func (b *burst) add(f func()) <-chan struct{} {
	done := make(chan struct{})
	b.wg.Go(func() {
		defer close(done)
		f()
	})
	b.n++
	if n := <-b.queued; n != b.n {
		b.t.Fatalf("queue of %d after call %d", n, b.n)
	}
	return done
}

// TestBatchCoalesces holds a lease in flight in Redis (CLIENT PAUSE WRITE
// stops the server from running it) while leases and returns of other keys
// arrive: they must go out together as one script call when it ends, each
// with the answer its own call gives, and a call whose script raises an
// error must fail alone.
func TestBatchCoalesces(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newHoldingStore(t, srv.Addr)
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 10, Period: time.Hour}
	g := lease.Policy{Algorithm: lease.GCRA, Limit: 10, Period: time.Hour}
	holder := newLessee("node-a")
	// Loans to give back in the burst, and both scripts loaded (the first
	// call of each is an EVAL).
	for _, k := range []string{"ret-0", "ret-1"} {
		if gr, err := s.Lease(ctx, k, g, 6, 1, holder); err != nil || gr.Granted != 6 {
			t.Fatalf("lease %s: %+v %v", k, gr, err)
		}
	}
	f := forceBatches(t, s)
	if _, err := f.Lease(ctx, "warm", p, 1, 1, lease.Lessee{}); err != nil {
		t.Fatal(err)
	}
	// A key whose script fails: a list where a string is expected.
	if got := srv.Do("RPUSH", s.Key("wrongtype", p.Algorithm), "x"); got != "1" {
		t.Fatalf("RPUSH: %s", got)
	}
	want := lease.Grant{Granted: 3, Remaining: 7, Reset: 1080 * time.Second}
	_, single := s.Lease(ctx, "wrongtype", p, 3, 1, lease.Lessee{})
	if !errors.Is(single, lease.ErrStoreUnavailable) || !strings.Contains(single.Error(), "WRONGTYPE") {
		t.Fatalf("lease of a list, alone: %v, want ErrStoreUnavailable with WRONGTYPE", single)
	}
	srv.Do("CONFIG", "RESETSTAT")

	srv.Do("CLIENT", "PAUSE", "600000", "WRITE")
	defer srv.Do("CLIENT", "UNPAUSE")
	firstErr := make(chan error, 1)
	b := holdFirst(t, f, "first", p, firstErr)
	const n = 10
	grants := make([]lease.Grant, n)
	errs := make([]error, n)
	var bad error
	var retErrs [2]error
	for i := range n {
		b.add(func() { grants[i], errs[i] = s.Lease(ctx, fmt.Sprintf("burst-%d", i), p, 3, 1, lease.Lessee{}) })
		switch i {
		case 3:
			b.add(func() { _, bad = s.Lease(ctx, "wrongtype", p, 3, 1, lease.Lessee{}) })
		case 5, 7:
			j := (i - 5) / 2
			b.add(func() { retErrs[j] = s.Return(ctx, fmt.Sprintf("ret-%d", j), g, 6, holder.ID) })
		}
	}
	srv.Do("CLIENT", "UNPAUSE")
	if err := <-firstErr; err != nil {
		t.Errorf("the lease in flight: %v", err)
	}
	b.wg.Wait()

	for i := range n {
		if errs[i] != nil || grants[i] != want {
			t.Errorf("burst lease %d: %+v %v, want %+v", i, grants[i], errs[i], want)
		}
	}
	if !errors.Is(bad, lease.ErrStoreUnavailable) || !strings.Contains(bad.Error(), "WRONGTYPE") {
		t.Errorf("lease of a list in the batch: %v, want ErrStoreUnavailable with WRONGTYPE, like alone (%v)", bad, single)
	}
	for j, err := range retErrs {
		if err != nil {
			t.Errorf("return %d in the batch: %v", j, err)
		}
	}
	stats := commandStats(t, srv.Addr)
	if stats["evalsha"] != 2 || stats["eval"] != 0 {
		t.Errorf("script calls: EVALSHA %d, EVAL %d; want 2 EVALSHA (the call in flight, then one batch of %d)", stats["evalsha"], stats["eval"], n+3)
	}
	// The returns gave the loans back: all 10 tokens are there.
	for j := range retErrs {
		if gr, err := s.Lease(ctx, fmt.Sprintf("ret-%d", j), g, 10, 10, lease.Lessee{}); err != nil || gr.Granted != 10 {
			t.Errorf("after the return of ret-%d: lease of 10 = %+v %v, want granted", j, gr, err)
		}
	}
}

// TestBatchCallerContext: a call waiting for its batch stops waiting when
// its context is done, without waiting for the call in flight; if it is
// still queued then, it is never sent (no tokens granted that no one
// receives); the others are answered.
func TestBatchCallerContext(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newHoldingStore(t, srv.Addr)
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 10, Period: time.Hour}
	f := forceBatches(t, s)
	if _, err := f.Lease(ctx, "warm", p, 1, 1, lease.Lessee{}); err != nil {
		t.Fatal(err)
	}
	srv.Do("CLIENT", "PAUSE", "600000", "WRITE")
	defer srv.Do("CLIENT", "UNPAUSE")
	firstDone := make(chan error, 1)
	b := holdFirst(t, f, "first", p, firstDone)
	cctx, cancel := context.WithCancel(ctx)
	var canceled, other error
	canceledDone := b.add(func() { _, canceled = s.Lease(cctx, "canceled", p, 1, 1, lease.Lessee{}) })
	b.add(func() { _, other = s.Lease(ctx, "other", p, 1, 1, lease.Lessee{}) })
	cancel()
	// It returns while the call in flight is still held.
	<-canceledDone
	if !errors.Is(canceled, lease.ErrStoreUnavailable) || !errors.Is(canceled, context.Canceled) {
		t.Errorf("canceled call: %v, want ErrStoreUnavailable and context.Canceled", canceled)
	}
	srv.Do("CLIENT", "UNPAUSE")
	b.wg.Wait()
	if err := <-firstDone; err != nil {
		t.Errorf("the call in flight: %v", err)
	}
	if other != nil {
		t.Errorf("the other queued call: %v", other)
	}
	if got := srv.Do("EXISTS", s.Key("canceled", p.Algorithm)); got != "0" {
		t.Errorf("the canceled call's key exists: it was sent after its caller gave up")
	}
	if got := srv.Do("EXISTS", s.Key("other", p.Algorithm)); got != "1" {
		t.Errorf("the other queued call's key does not exist")
	}
}

// TestBatchFailsWhole: when Redis dies with a call in flight and others
// queued behind it, every caller gets ErrStoreUnavailable, as a call of
// its own does; after SCRIPT FLUSH a batch still runs (EVALSHA falls back
// to EVAL, which loads the script again).
func TestBatchFailsWhole(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newHoldingStore(t, srv.Addr)
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.SlidingWindow, Limit: 10, Period: time.Hour}
	f := forceBatches(t, s)
	if _, err := f.Lease(ctx, "warm", p, 1, 1, lease.Lessee{}); err != nil {
		t.Fatal(err)
	}
	srv.Do("SCRIPT", "FLUSH")
	if g, err := f.Lease(ctx, "flushed", p, 2, 1, lease.Lessee{}); err != nil || g.Granted != 2 {
		t.Fatalf("batch after SCRIPT FLUSH: %+v %v", g, err)
	}

	srv.Do("CLIENT", "PAUSE", "600000", "WRITE")
	firstErr := make(chan error, 1)
	b := holdFirst(t, f, "first", p, firstErr)
	errs := make([]error, 3)
	for i := range errs {
		b.add(func() { _, errs[i] = s.Lease(ctx, fmt.Sprintf("queued-%d", i), p, 1, 1, lease.Lessee{}) })
	}
	srv.Kill()
	if err := <-firstErr; !errors.Is(err, lease.ErrStoreUnavailable) {
		t.Errorf("the call in flight: %v, want ErrStoreUnavailable", err)
	}
	b.wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, lease.ErrStoreUnavailable) {
			t.Errorf("queued call %d: %v, want ErrStoreUnavailable", i, err)
		}
	}
}

// TestBatchCluster: on a Cluster only calls of one hash slot share a
// batch. While a call is held in flight, calls on other slots go out at
// once and are answered; calls on its slot queue and go out together.
func TestBatchCluster(t *testing.T) {
	addrs := redistest.StartCluster(t)
	s := newHoldingStore(t, addrs...)
	if s.batch == nil || !s.batch.cluster {
		t.Fatal("the store does not batch per slot on a Cluster")
	}
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.GCRA, Limit: 10, Period: time.Hour}
	// Three counters of one slot, and ten of other slots (one with a '}',
	// tagged by its hash).
	bySlot := map[uint16][]string{}
	var same []string
	for i := 0; same == nil; i++ {
		k := fmt.Sprintf("cluster-%d", i)
		sl := keySlot(s.Key(k, p.Algorithm))
		bySlot[sl] = append(bySlot[sl], k)
		if len(bySlot[sl]) == 3 {
			same = bySlot[sl]
		}
	}
	others := []string{"we}ird"}
	for i := 0; len(others) < 10; i++ {
		k := fmt.Sprintf("other-%d", i)
		if keySlot(s.Key(k, p.Algorithm)) != keySlot(s.Key(same[0], p.Algorithm)) {
			others = append(others, k)
		}
	}
	for _, k := range append(append([]string(nil), same...), others...) {
		rk := s.Key(k, p.Algorithm)
		if got, err := redistest.Command(addrs[0], "CLUSTER", "KEYSLOT", rk); err != nil || got != fmt.Sprint(keySlot(rk)) {
			t.Fatalf("CLUSTER KEYSLOT %s = %q, %v; keySlot says %d", rk, got, err, keySlot(rk))
		}
	}

	h := hook(s)
	held, let := make(chan struct{}), make(chan struct{})
	queued := make(chan int, 2)
	var batches [][]string
	var mu sync.Mutex
	first := s.Key(same[0], p.Algorithm)
	h.set(func(c *call, n int) {
		if c.key != first {
			queued <- n
		}
	}, func(calls []*call) {
		if len(calls) == 1 && calls[0].key == first {
			close(held)
			<-let
		}
		mu.Lock()
		defer mu.Unlock()
		var keys []string
		for _, c := range calls {
			keys = append(keys, c.key)
		}
		batches = append(batches, keys)
	})
	want := lease.Grant{Granted: 2, Remaining: 8, Reset: 720 * time.Second}
	firstDone := make(chan error, 1)
	go func() {
		g, err := s.Lease(ctx, same[0], p, 2, 1, lease.Lessee{})
		if err == nil && g != want {
			err = fmt.Errorf("%+v, want %+v", g, want)
		}
		firstDone <- err
	}()
	<-held
	// Other slots: answered while the call is held.
	var wg sync.WaitGroup
	for _, k := range others {
		wg.Go(func() {
			if g, err := s.Lease(ctx, k, p, 2, 1, lease.Lessee{}); err != nil || g != want {
				t.Errorf("lease of %s on another slot: %+v %v, want %+v", k, g, err, want)
			}
		})
	}
	wg.Wait()
	// Its slot: queued, then one batch.
	for i, k := range same[1:] {
		wg.Go(func() {
			if g, err := s.Lease(ctx, k, p, 2, 1, lease.Lessee{}); err != nil || g != want {
				t.Errorf("lease of %s on the held slot: %+v %v, want %+v", k, g, err, want)
			}
		})
		if n := <-queued; n != i+1 {
			t.Fatalf("queue of %d after call %d", n, i+1)
		}
	}
	close(let)
	wg.Wait()
	if err := <-firstDone; err != nil {
		t.Errorf("the held call: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	last := batches[len(batches)-1]
	if len(batches) != 1+len(others)+1 || len(last) != 2 || last[0] != s.Key(same[1], p.Algorithm) || last[1] != s.Key(same[2], p.Algorithm) {
		t.Errorf("script calls: %v; want the held call, one per other slot, then the two queued calls together", batches)
	}
}

// TestMaxBatchConfig: the bound's default, its URL option and its range;
// 1 turns batching off.
func TestMaxBatchConfig(t *testing.T) {
	if got := (Config{}).withDefaults().MaxBatch; got != 1 {
		t.Errorf("default MaxBatch = %d, want 1 (off)", got)
	}
	c, err := ParseURL("redis://h:1?max_batch=1&password=pw")
	if err != nil || c.MaxBatch != 1 {
		t.Errorf("ParseURL(max_batch=1) = %+v, %v", c, err)
	}
	for _, v := range []string{"0", "-1", "1025", "x", ""} {
		if _, err := ParseURL("redis://h:1?max_batch=" + v); err == nil || !strings.Contains(err.Error(), "max_batch") {
			t.Errorf("ParseURL(max_batch=%s) = %v, want an error naming max_batch", v, err)
		}
	}
	if got, want := RedactURL("redis://h:1?max_batch=8&password=pw"), "redis://h:1?max_batch=8&password=xxxxx"; got != want {
		t.Errorf("RedactURL = %q, want %q", got, want)
	}
	for _, n := range []int{-1, MaxBatchLimit + 1} {
		if err := (Config{Addrs: []string{"h:1"}, MaxBatch: n}).withDefaults().validate(); err == nil || !strings.Contains(err.Error(), "max_batch") {
			t.Errorf("validate(MaxBatch %d) = %v, want an error naming max_batch", n, err)
		}
	}
	addr := redistest.Start(t)
	s, err := NewStore(Config{Addrs: []string{addr}, MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.batch != nil {
		t.Errorf("MaxBatch 1: the store batches")
	}
	def, err := NewStore(Config{Addrs: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer def.Close()
	if def.batch != nil {
		t.Errorf("default: the store batches")
	}
	if s := newTestStore(t, addr); s.batch == nil || s.batch.max != testBatch {
		t.Errorf("MaxBatch %d: the store does not batch up to it", testBatch)
	}
	// First touches: on by default, off with batching unless asked for.
	if !def.firstOn.Load() || s.firstOn.Load() == false {
		t.Errorf("first touches off without batching (default %v, MaxBatch 1 %v)", def.firstOn.Load(), s.firstOn.Load())
	}
	for _, c := range []struct {
		url string
		on  bool
	}{{"?max_batch=8", false}, {"?max_batch=8&first_touch=on", true}, {"?first_touch=off", false}, {"", true}} {
		cfg, err := ParseURL("redis://" + addr + c.url)
		if err != nil {
			t.Fatalf("ParseURL(%s): %v", c.url, err)
		}
		st, err := NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if st.firstOn.Load() != c.on {
			t.Errorf("%q: first touches %v, want %v", c.url, st.firstOn.Load(), c.on)
		}
		st.Close()
	}
	if _, err := ParseURL("redis://h:1?first_touch=maybe"); err == nil || !strings.Contains(err.Error(), "first_touch") {
		t.Errorf("ParseURL(first_touch=maybe) = %v, want an error naming first_touch", err)
	}
	if got, want := RedactURL("redis://h:1?first_touch=off&password=pw"), "redis://h:1?first_touch=off&password=xxxxx"; got != want {
		t.Errorf("RedactURL = %q, want %q", got, want)
	}
}

// TestBatchBound: a queue that reaches MaxBatch goes out at once, without
// waiting for the call in flight; the next call starts a new queue.
func TestBatchBound(t *testing.T) {
	srv := redistest.StartServer(t)
	s, err := NewStore(Config{Addrs: []string{srv.Addr}, CallTimeout: time.Hour, ConnWriteTimeout: time.Hour, MaxBatch: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 10, Period: time.Hour}
	f := forceBatches(t, s)
	if _, err := f.Lease(ctx, "warm", p, 1, 1, lease.Lessee{}); err != nil {
		t.Fatal(err)
	}
	srv.Do("CONFIG", "RESETSTAT")
	srv.Do("CLIENT", "PAUSE", "600000", "WRITE")
	defer srv.Do("CLIENT", "UNPAUSE")
	firstErr := make(chan error, 1)
	first := s.Key("first", p.Algorithm)
	b := &burst{t: t, queued: make(chan int, 1)}
	inFlight, full := make(chan struct{}), make(chan []string, 1)
	f.hooks.set(func(c *call, n int) {
		if c.key != first {
			b.queued <- n
		}
	}, func(calls []*call) {
		if len(calls) == 1 && calls[0].key == first {
			close(inFlight)
		} else if len(calls) == 2 {
			full <- []string{calls[0].key, calls[1].key}
		}
	})
	go func() {
		_, err := s.Lease(ctx, "first", p, 1, 1, lease.Lessee{})
		firstErr <- err
	}()
	<-inFlight
	errs := make([]error, 3)
	lease := func(i int) func() {
		return func() { _, errs[i] = s.Lease(ctx, fmt.Sprintf("k%d", i), p, 1, 1, lease.Lessee{}) }
	}
	b.add(lease(0))
	b.wg.Go(lease(1))
	if got := <-full; got[0] != s.Key("k0", p.Algorithm) || got[1] != s.Key("k1", p.Algorithm) {
		t.Errorf("full batch %v, want k0 and k1", got)
	}
	<-b.queued // the second call made the queue full: 2
	b.n = 0
	b.add(lease(2))
	srv.Do("CLIENT", "UNPAUSE")
	if err := <-firstErr; err != nil {
		t.Errorf("first: %v", err)
	}
	b.wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("call %d: %v", i, err)
		}
	}
	if got := commandStats(t, srv.Addr)["evalsha"]; got != 3 {
		t.Errorf("EVALSHA calls = %d, want 3: the first, the full batch, the last call", got)
	}
}

// TestWriteBatchScript writes the batch script and the token_bucket lease
// script to the directory SLUICE_BATCH_SCRIPTS names, for
// testdata/batch-instructions.sh; without it, it is skipped.
func TestWriteBatchScript(t *testing.T) {
	dir := os.Getenv("SLUICE_BATCH_SCRIPTS")
	if dir == "" {
		t.Skip("SLUICE_BATCH_SCRIPTS not set")
	}
	for name, src := range map[string]string{"batch.lua": batchSource(), "single.lua": scriptSource("token_bucket_lease.lua", true, true)} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
