package lease

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

func testBreaker(t *testing.T) (*Breaker, *faultStore, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	b := NewBreaker(fs, BreakerConfig{Timeout: time.Minute, Failures: 3, Cooldown: time.Second, Now: clk.Now, AfterFunc: clk.AfterFunc})
	t.Cleanup(b.Close)
	return b, fs, clk
}

func TestBreakerOpensHalfOpensCloses(t *testing.T) {
	b, fs, clk := testBreaker(t)
	ctx := context.Background()
	p := perSecond(10)
	lease := func() error {
		_, err := b.Lease(ctx, "k", p, 1, 1, Lessee{})
		return err
	}
	steps := []struct {
		name      string
		fault     int32 // set before the clock moves
		advance   time.Duration
		call      bool
		wantErr   bool
		wantCalls int64 // Store calls so far (calls and probes)
		wantState BreakerState
	}{
		{"healthy", faultNone, 0, true, false, 1, BreakerClosed},
		{"failure 1", faultError, 0, true, true, 2, BreakerClosed},
		{"failure 2", faultError, 0, true, true, 3, BreakerClosed},
		{"failure 3 opens", faultError, 0, true, true, 4, BreakerOpen},
		{"open fails fast", faultError, 500 * time.Millisecond, true, true, 4, BreakerOpen},
		{"background probe fails, reopens", faultError, 500 * time.Millisecond, false, false, 5, BreakerOpen},
		{"still open", faultNone, 999 * time.Millisecond, true, true, 5, BreakerOpen},
		{"background probe succeeds, closes", faultNone, time.Millisecond, false, false, 6, BreakerClosed},
		{"one failure keeps it closed", faultError, 0, true, true, 7, BreakerClosed},
		{"success resets the count", faultNone, 0, true, false, 8, BreakerClosed},
		{"failure 1 again", faultError, 0, true, true, 9, BreakerClosed},
		{"failure 2 again", faultError, 0, true, true, 10, BreakerClosed},
		{"failure 3 opens again", faultError, 0, true, true, 11, BreakerOpen},
		{"a call after the cool-down is the probe", faultNone, 0, false, false, 11, BreakerOpen},
	}
	for _, s := range steps {
		fs.mode.Store(s.fault)
		clk.Advance(s.advance)
		if s.call {
			err := lease()
			if (err != nil) != s.wantErr {
				t.Fatalf("%s: err = %v, want error %v", s.name, err, s.wantErr)
			}
			if err != nil && !errors.Is(err, ErrStoreUnavailable) {
				t.Fatalf("%s: err = %v, want it to wrap ErrStoreUnavailable", s.name, err)
			}
		}
		if got := fs.n(opLease); got != s.wantCalls {
			t.Fatalf("%s: %d Store calls, want %d", s.name, got, s.wantCalls)
		}
		if got := b.State(); got != s.wantState {
			t.Fatalf("%s: state %v, want %v", s.name, got, s.wantState)
		}
		if got := b.Rejecting(); got != (s.wantState == BreakerOpen) {
			t.Fatalf("%s: Rejecting() = %v in state %v", s.name, got, s.wantState)
		}
	}
}

// TestBreakerProbesWhenIdle: an open breaker probes the Store in the
// background after its cool-down, so its state (and the gauge, /readyz)
// is right on a node that gets no checks. Before, it stayed open until a
// check came (finding 5).
func TestBreakerProbesWhenIdle(t *testing.T) {
	b, fs, clk := testBreaker(t)
	fs.mode.Store(faultError)
	for range 3 {
		_, _ = b.Lease(context.Background(), "k", perSecond(10), 1, 1, Lessee{})
	}
	if b.State() != BreakerOpen {
		t.Fatalf("state %v after 3 failures, want open", b.State())
	}
	fs.mode.Store(faultNone)
	clk.Advance(time.Second)
	if b.State() != BreakerClosed {
		t.Fatalf("state %v a cool-down after the Store came back, with no call, want closed", b.State())
	}
	if clk.Timers() != 0 {
		t.Fatalf("%d timers left on a closed breaker", clk.Timers())
	}
}

// stallStore is a Store whose leases all wait at a gate and then fail: the
// calls in flight together when a Store stalls.
type stallStore struct {
	Store
	in   atomic.Int32
	gate chan struct{}
}

func (g *stallStore) Lease(ctx context.Context, key string, p Policy, want, need int64, _ Lessee) (Grant, error) {
	g.in.Add(1)
	<-g.gate
	return Grant{}, errInjected
}

// TestBreakerCountsRoundTripsNotCalls: calls in flight together that fail
// together are one failed round trip. Before, 10 calls pipelined into one
// stall counted 10 failures and opened the breaker (finding 1).
func TestBreakerCountsRoundTripsNotCalls(t *testing.T) {
	clk := clocktest.New()
	g := &stallStore{Store: NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1}), gate: make(chan struct{})}
	b := NewBreaker(g, BreakerConfig{Timeout: time.Minute, Failures: 3, Cooldown: time.Second, Now: clk.Now, AfterFunc: clk.AfterFunc})
	t.Cleanup(b.Close)
	fail := func(n int) {
		t.Helper()
		g.in.Store(0)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() { _, _ = b.Lease(context.Background(), "k", perSecond(10), 1, 1, Lessee{}) })
		}
		for g.in.Load() < int32(n) { // every call inside the Store: an event, not a time
			runtime.Gosched()
		}
		for range n {
			g.gate <- struct{}{}
		}
		wg.Wait()
	}
	fail(10)
	if b.State() != BreakerClosed {
		t.Fatalf("10 calls failing in one round trip: state %v, want closed (1 failure of 3)", b.State())
	}
	fail(1)
	fail(5)
	if b.State() != BreakerOpen {
		t.Fatalf("3 failed round trips: state %v, want open", b.State())
	}
}

// TestBreakerLogsEachTransitionOnce: one log line per state change, with
// its cause, and none for calls rejected while open (finding 5: an outage
// with 1,040 rejected calls logged nothing); the closing line says how
// long the Store was unavailable in all (2s: a failed probe between), not
// only the last open interval (1s: what it said alone, issue 35).
func TestBreakerLogsEachTransitionOnce(t *testing.T) {
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	var logs logBuffer
	b := NewBreaker(fs, BreakerConfig{Timeout: time.Minute, Failures: 2, Cooldown: time.Second, Now: clk.Now, AfterFunc: clk.AfterFunc,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	t.Cleanup(b.Close)
	fs.mode.Store(faultError)
	for range 50 { // 2 failures open it, 48 rejected
		_, _ = b.Lease(context.Background(), "k", perSecond(10), 1, 1, Lessee{})
	}
	clk.Advance(time.Second) // probe fails
	fs.mode.Store(faultNone)
	clk.Advance(time.Second) // probe succeeds
	want := []string{
		`msg="store breaker opened" from=closed to=open cause="2 consecutive failed round trips, the last: cannot lease: store unavailable: injected failure"`,
		`msg="store breaker" from=open to=half-open cause="cool-down passed: probing the Store"`,
		`msg="store breaker" from=half-open to=open cause="probe failed: injected failure"`,
		`msg="store breaker" from=open to=half-open cause="cool-down passed: probing the Store"`,
		`msg="store breaker closed" from=half-open to=closed cause="probe succeeded" unavailable_for=2s open_for=1s`,
	}
	lines := logs.lines()
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), strings.Join(lines, "\n"))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], w)
		}
	}
}

type logBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

// TestRTTEstimator: the adaptive timeout is 2 × (srtt + 4·rttvar) within
// [lo, hi], lo being the configured timeout: a fast Store keeps it, a
// steadily slow one gets the room it needs (up to the maximum), and
// timeouts stretch it to the maximum.
func TestRTTEstimator(t *testing.T) {
	const lo, hi = 50 * time.Millisecond, 200 * time.Millisecond
	steady := func(r time.Duration, n int) *RTTEstimator {
		var e RTTEstimator
		for range n {
			e.Add(r)
		}
		return &e
	}
	tests := []struct {
		name string
		e    *RTTEstimator
		want time.Duration
	}{
		{"no sample: the configured timeout", &RTTEstimator{}, lo},
		{"fast Store: the configured timeout", steady(300*time.Microsecond, 100), lo},
		{"steady 30ms: twice that", steady(30*time.Millisecond, 100), 60 * time.Millisecond},
		{"steady 200ms: the maximum", steady(200*time.Millisecond, 100), hi},
	}
	for _, tt := range tests {
		if got := tt.e.Timeout(lo, hi); got < tt.want || got > tt.want+time.Millisecond {
			t.Errorf("%s: timeout %v, want %v", tt.name, got, tt.want)
		}
	}
	e := steady(300*time.Microsecond, 100)
	for range 10 {
		e.Add(e.Timeout(lo, hi)) // each timeout is a sample of the timeout
	}
	if got := e.Timeout(lo, hi); got != hi {
		t.Errorf("after 10 timeouts: %v, want the maximum %v", got, hi)
	}
}

func TestBreakerTimeoutCountsCallerCancelDoesNot(t *testing.T) {
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	b := NewBreaker(fs, BreakerConfig{Timeout: time.Millisecond, Failures: 2, Cooldown: time.Second, Now: clk.Now})
	fs.mode.Store(faultHang) // returns when its context ends
	p := perSecond(10)

	// The caller's own context ending says nothing about the Store.
	for range 5 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := b.Lease(ctx, "k", p, 1, 1, Lessee{}); !errors.Is(err, context.Canceled) {
			t.Fatalf("canceled caller: err = %v", err)
		}
	}
	if b.State() != BreakerClosed {
		t.Fatal("caller cancellations opened the breaker")
	}
	// The breaker's own timeout is a failure.
	for range 2 {
		_, err := b.Lease(context.Background(), "k", p, 1, 1, Lessee{})
		if !errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("timeout: err = %v, want ErrStoreUnavailable", err)
		}
	}
	if b.State() != BreakerOpen {
		t.Fatalf("state %v after 2 timeouts, want open", b.State())
	}
}

func TestBreakerCallerErrorsAreNotFailures(t *testing.T) {
	b, _, _ := testBreaker(t)
	bad := Policy{Algorithm: TokenBucket, Limit: 0, Period: time.Second}
	for range 5 {
		_, err := b.Lease(context.Background(), "k", bad, 1, 1, Lessee{})
		var fe *FieldError
		if !errors.As(err, &fe) || errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("err = %v, want the Store's FieldError unwrapped", err)
		}
		_, err = b.Log(context.Background(), "k", perSecond(1), 1)
		if !errors.Is(err, ErrWrongAlgorithm) {
			t.Fatalf("err = %v, want ErrWrongAlgorithm", err)
		}
	}
	if b.State() != BreakerClosed {
		t.Fatal("caller errors opened the breaker")
	}
}

func TestBreakerPassesEveryOperation(t *testing.T) {
	b, fs, _ := testBreaker(t)
	ctx := context.Background()
	tb, log := perSecond(10), Policy{Algorithm: SlidingLog, Limit: 2, Period: time.Second}
	conc := Policy{Algorithm: Concurrency, Limit: 1, Period: time.Second}
	if g, err := b.Lease(ctx, "t", tb, 4, 1, Lessee{}); err != nil || g.Granted != 4 {
		t.Fatalf("Lease: %+v %v", g, err)
	}
	if err := b.Return(ctx, "t", tb, 4, ""); err != nil {
		t.Fatal(err)
	}
	if r, err := b.Log(ctx, "l", log, 1); err != nil || !r.Allowed {
		t.Fatalf("Log: %+v %v", r, err)
	}
	if r, err := b.Acquire(ctx, "c", conc, "id1", 1); err != nil || !r.Allowed {
		t.Fatalf("Acquire: %+v %v", r, err)
	}
	if err := b.Release(ctx, "c", conc, "id1"); err != nil {
		t.Fatal(err)
	}
	for op := range numOps {
		if fs.n(op) != 1 {
			t.Errorf("%s: %d calls, want 1", opNames[op], fs.n(op))
		}
	}
}
