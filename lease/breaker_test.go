package lease

import (
	"context"
	"errors"
	"testing"
	"time"
)

func testBreaker(t *testing.T) (*Breaker, *faultStore, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	fs := newFaultStore(clk.Now)
	b := NewBreaker(fs, BreakerConfig{Timeout: time.Minute, Failures: 3, Cooldown: time.Second, Now: clk.Now})
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
		fault     int32
		advance   time.Duration
		wantErr   bool
		wantCalls int64 // Store calls so far
		wantState BreakerState
	}{
		{"healthy", faultNone, 0, false, 1, BreakerClosed},
		{"failure 1", faultError, 0, true, 2, BreakerClosed},
		{"failure 2", faultError, 0, true, 3, BreakerClosed},
		{"failure 3 opens", faultError, 0, true, 4, BreakerOpen},
		{"open fails fast", faultNone, 500 * time.Millisecond, true, 4, BreakerOpen},
		{"probe fails, reopens", faultError, 500 * time.Millisecond, true, 5, BreakerOpen},
		{"still open", faultNone, 999 * time.Millisecond, true, 5, BreakerOpen},
		{"probe succeeds, closes", faultNone, time.Millisecond, false, 6, BreakerClosed},
		{"one failure keeps it closed", faultError, 0, true, 7, BreakerClosed},
		{"success resets the count", faultNone, 0, false, 8, BreakerClosed},
		{"failure 1 again", faultError, 0, true, 9, BreakerClosed},
		{"failure 2 again", faultError, 0, true, 10, BreakerClosed},
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		fs.mode.Store(s.fault)
		err := lease()
		if (err != nil) != s.wantErr {
			t.Fatalf("%s: err = %v, want error %v", s.name, err, s.wantErr)
		}
		if err != nil && !errors.Is(err, ErrStoreUnavailable) {
			t.Fatalf("%s: err = %v, want it to wrap ErrStoreUnavailable", s.name, err)
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

func TestBreakerTimeoutCountsCallerCancelDoesNot(t *testing.T) {
	clk := newFakeClock()
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
