package lease

import (
	"testing"
	"time"
)

func TestFailureModes(t *testing.T) {
	const limit = 5
	tests := []struct {
		mode        FailureMode
		wantAllowed int // of 10 checks while the Store is down
		degraded    bool
		unavailable bool
	}{
		{FailLocal, limit, true, false},
		{FailOpen, 10, true, false},
		{FailClosed, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			m, fs, clk := testManager(t, func(c *Config) {
				c.Breaker = BreakerConfig{Failures: 2, Cooldown: time.Second}
			})
			p := Policy{Algorithm: FixedWindow, Limit: limit, Period: time.Hour, OnFailure: tt.mode}
			fs.mode.Store(faultError)
			allowed := 0
			for i := range 10 {
				d := mustTake(t, m, "k", p, 1)
				if d.Allowed {
					allowed++
				}
				if d.Degraded != tt.degraded || d.Unavailable != tt.unavailable {
					t.Fatalf("check %d: %+v, want degraded %v unavailable %v", i, d, tt.degraded, tt.unavailable)
				}
				if tt.unavailable && d.RetryAfter != time.Second {
					t.Fatalf("closed: RetryAfter %v, want the cool-down 1s", d.RetryAfter)
				}
			}
			if allowed != tt.wantAllowed {
				t.Fatalf("allowed %d of 10 while the Store is down, want %d", allowed, tt.wantAllowed)
			}
			if m.StoreHealthy() {
				t.Fatal("StoreHealthy with the breaker open")
			}
			// Only the calls that opened the breaker reached the Store.
			if got := fs.n(opLease); got != 2 {
				t.Errorf("%d lease calls, want 2 (then the breaker fails fast)", got)
			}
			// The Store comes back: after the cool-down the next check
			// probes it, and the key goes back to leasing.
			fs.mode.Store(faultNone)
			clk.Advance(time.Second)
			d := mustTake(t, m, "k", p, 1)
			if !d.Allowed || d.Degraded || d.Unavailable {
				t.Fatalf("after recovery: %+v, want an allowed, normal decision", d)
			}
			if !m.StoreHealthy() {
				t.Fatal("breaker still open after a successful probe")
			}
		})
	}
}

// TestFailureOnHungStore: a Store that never answers costs a check at most
// the timeout (the test would hang otherwise), and the failure mode
// decides.
func TestFailureOnHungStore(t *testing.T) {
	m, fs, _ := testManager(t, func(c *Config) { c.StoreTimeout = time.Millisecond })
	fs.mode.Store(faultHang)
	p := Policy{Algorithm: TokenBucket, Limit: 3, Period: time.Hour, OnFailure: FailLocal}
	for i := range 5 {
		d := mustTake(t, m, "k", p, 1)
		if !d.Degraded || d.Allowed != (i < 3) {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
	log := Policy{Algorithm: SlidingLog, Limit: 1, Period: time.Hour, OnFailure: FailOpen}
	if d := mustTake(t, m, "l", log, 1); !d.Allowed || !d.Degraded {
		t.Fatalf("sliding_log, open: %+v", d)
	}
	conc := Policy{Algorithm: Concurrency, Limit: 1, Period: time.Hour, OnFailure: FailLocal}
	d, id, err := m.Acquire("c", conc, 1)
	if err != nil || !d.Allowed || !d.Degraded || id == "" {
		t.Fatalf("concurrency, local: %+v %q %v", d, id, err)
	}
	if d, _, _ := m.Acquire("c", conc, 1); d.Allowed {
		t.Fatal("concurrency, local: second slot of 1 allowed")
	}
	closed := conc
	closed.OnFailure = FailClosed
	if d, id, _ := m.Acquire("c2", closed, 1); d.Allowed || !d.Unavailable || id != "" {
		t.Fatalf("concurrency, closed: %+v %q", d, id)
	}
}

// TestFailLocalSpendsLeasedTokensFirst: tokens already leased stay valid
// while the Store is down.
func TestFailLocalSpendsLeasedTokensFirst(t *testing.T) {
	m, fs, clk := testManager(t, nil)
	p := Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour}
	for range 20 {
		mustTake(t, m, "k", p, 1)
		m.drain()
		clk.Advance(time.Millisecond)
	}
	fs.mode.Store(faultError)
	calls := fs.n(opLease)
	if d := mustTake(t, m, "k", p, 1); !d.Allowed || d.Degraded {
		t.Fatalf("%+v: want a normal decision from the leased tokens", d)
	}
	if fs.n(opLease) != calls {
		t.Fatal("a check with leased tokens on hand called the Store")
	}
}
