package lease

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// dailyPolicy refills in a day: its Store bucket is never full again
// within a test, so an idle return is always made (see
// TestIdleReturnSkipsRefilledBuckets).
func dailyPolicy(limit int64) Policy {
	return Policy{Algorithm: TokenBucket, Limit: limit, Period: 24 * time.Hour}
}

// TestIdleKeepAnswersSlowKeyFromMemory: a slow key idle for Idle keeps its
// loan while its tokens are spendable on the fast path (token_bucket: half
// their LeaseTTL): a check coming back is answered without a Store call.
// Once they are not, the sweep drops the key and returns its tokens.
func TestIdleKeepAnswersSlowKeyFromMemory(t *testing.T) {
	m, fs, clk := testManager(t, nil)
	p := dailyPolicy(1000) // a cold lease is 125 tokens
	t0 := clk.Now()
	mustTake(t, m, "k", p, 1)
	if fs.n(opLease) != 1 {
		t.Fatalf("%d lease calls for the first check, want 1", fs.n(opLease))
	}
	clk.Advance(15 * time.Second)
	if n := m.sweep(clk.Now()); n != 0 || !m.Holds("k") {
		t.Fatalf("the sweep after 15s idle dropped %d keys (holds k: %v), want the slow key kept", n, m.Holds("k"))
	}
	if d := mustTake(t, m, "k", p, 1); !d.Allowed || d.Remaining != 1000-2 {
		t.Fatalf("the check after the idle spell: %+v, want allowed with 998 remaining", d)
	}
	if fs.n(opLease) != 1 || fs.n(opReturn) != 0 {
		t.Fatalf("%d lease and %d return calls, want the check answered from memory", fs.n(opLease), fs.n(opReturn))
	}
	// Kept up to the end of the tokens' fast-path life, half the TTL.
	half := DefaultConfig().LeaseTTL / 2
	clk.Set(t0.Add(half - time.Millisecond))
	if n := m.sweep(clk.Now()); n != 0 {
		t.Fatalf("the sweep 1ms before half the TTL dropped %d keys, want 0", n)
	}
	clk.Set(t0.Add(half))
	if n := m.sweep(clk.Now()); n != 1 || m.Holds("k") {
		t.Fatalf("the sweep at half the TTL dropped %d keys (holds k: %v), want the key dropped", n, m.Holds("k"))
	}
	if fs.n(opReturn) != 1 {
		t.Fatalf("%d return calls, want the unspent tokens returned", fs.n(opReturn))
	}
	// Returned: the Store lacks the two hits spent (less 150s of its
	// refill), not the loan.
	if got := fs.available(t, "k", p); got < 1000-2 || got > 1000 {
		t.Errorf("the Store has %d after the return, want 998-1000 (two hits spent)", got)
	}
}

// TestIdleKeepOffDropsAtIdle: with KeepIdle negative, the same slow key is
// dropped at Idle and its next check leases again.
func TestIdleKeepOffDropsAtIdle(t *testing.T) {
	m, fs, clk := testManager(t, func(c *Config) { c.KeepIdle = -1 })
	p := dailyPolicy(1000)
	mustTake(t, m, "k", p, 1)
	clk.Advance(15 * time.Second)
	if n := m.sweep(clk.Now()); n != 1 || fs.n(opReturn) != 1 {
		t.Fatalf("swept %d keys with %d returns, want 1 and 1", n, fs.n(opReturn))
	}
	mustTake(t, m, "k", p, 1)
	if fs.n(opLease) != 2 {
		t.Errorf("%d lease calls, want 2: the key came back as a new bucket", fs.n(opLease))
	}
}

// TestIdleKeepBoundDropsLongestIdle: past KeepIdle kept keys, the sweep
// drops the longest idle, returning their tokens.
func TestIdleKeepBoundDropsLongestIdle(t *testing.T) {
	m, fs, clk := testManager(t, func(c *Config) { c.KeepIdle = 2 })
	p := dailyPolicy(1000)
	for _, k := range []string{"a", "b", "c"} {
		mustTake(t, m, k, p, 1)
		clk.Advance(time.Second)
	}
	clk.Advance(15 * time.Second)
	if n := m.sweep(clk.Now()); n != 1 {
		t.Fatalf("swept %d of 3 kept keys with KeepIdle 2, want 1", n)
	}
	if m.Holds("a") || !m.Holds("b") || !m.Holds("c") {
		t.Errorf("holds a %v, b %v, c %v: want the longest idle (a) dropped", m.Holds("a"), m.Holds("b"), m.Holds("c"))
	}
	if fs.n(opReturn) != 1 {
		t.Errorf("%d return calls, want a's tokens returned", fs.n(opReturn))
	}
	if st := m.Stats(); st.ActiveKeys != 2 {
		t.Errorf("ActiveKeys = %d, want 2", st.ActiveKeys)
	}
}

// TestIdleKeepHotKeyReturnsAtIdle: a key whose loan is bigger than a slow
// key's (it leased for its rate) gives it back at Idle, also when the loan
// is below half the capacity (what a key far from its limit may keep).
func TestIdleKeepHotKeyReturnsAtIdle(t *testing.T) {
	// A small floor (100 tokens of 100000), so that a key's rate sizes
	// its lease well above it.
	m, fs, clk := testManager(t, func(c *Config) { c.MinLeaseShare = 1.0 / 1000 })
	p := dailyPolicy(100_000)
	for range 200 {
		mustTake(t, m, "hot", p, 30) // 30000 hits/s: leases of ~3000
		m.drain()
		clk.Advance(time.Millisecond)
	}
	mustTake(t, m, "cold", p, 1) // a lease of the floor
	b := m.buckets.load("hot")
	if lent, slow := b.basis.Load(), m.cfg.slowLoan(b); lent <= slow {
		t.Fatalf("the hot key's loan is %d, want above a slow key's %d", lent, slow)
	}
	clk.Advance(15 * time.Second)
	if n := m.sweep(clk.Now()); n != 1 || m.Holds("hot") || !m.Holds("cold") {
		t.Fatalf("swept %d keys (holds hot %v, cold %v), want the hot key dropped and the cold one kept", n, m.Holds("hot"), m.Holds("cold"))
	}
	if fs.n(opReturn) != 1 {
		t.Errorf("%d return calls, want the hot key's tokens returned", fs.n(opReturn))
	}
	// Returned: the Store lacks only what was spent (plus a few tokens
	// of refill), not the loan.
	if got, want := fs.available(t, "hot", p), p.Capacity()-200*30; got < want {
		t.Errorf("the Store has %d of the hot key after its return, want at least %d", got, want)
	}
}

// TestIdleKeepWindowsWithinTheirWindow: fixed_window and sliding_window
// keys are kept only until their window ends (their tokens are not
// spendable after it); dropped then, with no return call (the window that
// counted them is over). fixed_window without shares ahead (see
// TestAheadKeptIdle for a kept key with shares).
func TestIdleKeepWindowsWithinTheirWindow(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			m, fs, clk := testManager(t, func(c *Config) { c.AheadHorizon = -1 })
			p := Policy{Algorithm: alg, Limit: 100, Period: time.Minute}
			t0 := clk.Now() // a window's start
			mustTake(t, m, "k", p, 1)
			clk.Set(t0.Add(15 * time.Second))
			if n := m.sweep(clk.Now()); n != 0 {
				t.Fatalf("swept %d keys idle within their window, want 0", n)
			}
			if d := mustTake(t, m, "k", p, 1); !d.Allowed || fs.n(opLease) != 1 {
				t.Fatalf("the check after the idle spell: %+v with %d lease calls, want allowed from memory", d, fs.n(opLease))
			}
			clk.Set(t0.Add(58 * time.Second))
			if n := m.sweep(clk.Now()); n != 0 {
				t.Fatalf("swept %d keys before their window's end, want 0", n)
			}
			clk.Set(t0.Add(time.Minute))
			if n := m.sweep(clk.Now()); n != 1 || m.Holds("k") {
				t.Fatalf("swept %d keys at the window's end (holds k: %v), want the key dropped", n, m.Holds("k"))
			}
			if fs.n(opReturn) != 0 {
				t.Errorf("%d return calls for tokens of a window that ended, want 0", fs.n(opReturn))
			}
		})
	}
}

// TestIdleKeepStoreCallsPerVisit: keys visited in a cycle longer than Idle
// (the bench suite's redis-idle-return, scaled down: 300 keys, one visit
// each per 15s, token_bucket 100/s burst 100) cost one Store call per
// visit when every idle key is dropped, and with kept loans about one per
// half LeaseTTL of a key (a renewal or a new lease once the loan's fast
// path life is over): 10 visits.
func TestIdleKeepStoreCallsPerVisit(t *testing.T) {
	run := func(keep int) (calls, visits int64) {
		m, fs, clk := testManager(t, func(c *Config) { c.KeepIdle = keep })
		p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Second}
		const keys, step = 300, 50 * time.Millisecond // a 15s cycle
		for i := range 20 * 60 * int(time.Second/step) {
			if d := mustTake(t, m, fmt.Sprintf("k%d", i%keys), p, 1); !d.Allowed {
				t.Fatalf("visit %d denied: %+v", i, d)
			}
			m.drain()
			visits++
			clk.Advance(step)
			if i%50 == 0 { // every 2.5s, as the sweeper with Idle 10s
				m.sweep(clk.Now())
			}
		}
		return fs.n(opLease) + fs.n(opReturn), visits
	}
	off, visits := run(-1)
	on, _ := run(0)
	t.Logf("Store calls per visit over 20 minutes: %.3f with every idle key dropped, %.3f with slow loans kept", float64(off)/float64(visits), float64(on)/float64(visits))
	if float64(off) < 0.95*float64(visits) {
		t.Errorf("%d Store calls for %d visits with KeepIdle off: want about one per visit (does the workload go idle?)", off, visits)
	}
	if on*8 > visits {
		t.Errorf("%d Store calls for %d visits with slow loans kept: want at most one per 8", on, visits)
	}
}

// returnClockStore is a faultStore whose returns each take a second of the
// fake clock.
type returnClockStore struct {
	*faultStore
	clk  *clocktest.Clock
	step time.Duration // 0: a second
}

func (s *returnClockStore) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	s.clk.Advance(cmp.Or(s.step, time.Second))
	return s.faultStore.Return(ctx, key, p, tokens, holder)
}

// TestCloseReturnsWithinItsBudget: Close returns the biggest loans first and
// starts no return after ReturnTimeout; the loans left are logged in one
// line and stay counted by the Store until they end on their own.
func TestCloseReturnsWithinItsBudget(t *testing.T) {
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	var logs lockedBuffer
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.AfterFunc = clk.AfterFunc
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute
	cfg.ReturnWorkers = 1
	cfg.ReturnTimeout = 5 * time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	m := NewManager(&returnClockStore{faultStore: fs, clk: clk}, cfg)
	const keys = 20
	pol := func(i int) Policy { return dailyPolicy(int64(800 + 80*i)) } // loans of 100 + 10i
	for i := range keys {
		mustTake(t, m, fmt.Sprintf("k%d", i), pol(i), 1)
	}
	_ = m.Close()
	// Five returns of a second each: the budget runs out during the
	// fifth.
	if fs.n(opReturn) != 5 {
		t.Fatalf("%d return calls, want 5 within a 5s budget at 1s each", fs.n(opReturn))
	}
	for i := range keys {
		p := pol(i)
		want := p.Capacity() - p.Capacity()/8 // left: the loan counts until its TTL
		if i >= keys-5 {
			want = p.Capacity() - 1 // returned: the biggest loans
		}
		if got := fs.available(t, fmt.Sprintf("k%d", i), p); got != want {
			t.Errorf("k%d: the Store has %d after Close, want %d", i, got, want)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "\n"); n != 1 || !strings.Contains(out, "keys=15") {
		t.Errorf("want one line naming the 15 loans left, got:\n%s", out)
	}
}

// TestCloseLogsFailedReturnsOnce: a Close whose returns all fail (the Store
// is down) logs one line for all of them, not one per key.
func TestCloseLogsFailedReturnsOnce(t *testing.T) {
	var logs lockedBuffer
	m, fs, _ := testManager(t, func(c *Config) {
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	const keys = 30
	for i := range keys {
		mustTake(t, m, fmt.Sprintf("k%d", i), dailyPolicy(1000), 1)
	}
	fs.mode.Store(faultError)
	if err := m.Close(); err == nil || !strings.Contains(err.Error(), "30 keys") {
		t.Errorf("Close: %v, want the 30 failed returns reported", err)
	}
	out := logs.String()
	if n := strings.Count(out, "cannot return leased tokens"); n != 1 || !strings.Contains(out, "keys=30") {
		t.Errorf("%d lines about failed returns, want one naming 30 keys:\n%s", n, out)
	}
}

// TestLeftLoanNotDatedBack: a key whose loan ReturnKeys could not end (its
// return failed, or its budget ran out first) may have spent it just now.
// A new bucket of the key must not tell the Store those spends were Idle
// ago (as it may after an idle sweep dropped the key): the Store would lift
// the loan's cap on the refill from then, and a key that held its loan
// while its Store bucket filled up would pass its burst.
func TestLeftLoanNotDatedBack(t *testing.T) {
	// Burst 100, one token a second: Idle's refill is 10 tokens.
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: 100 * time.Second}
	admitted := func(t *testing.T, m *Manager) int64 {
		var n int64
		for range 200 {
			if mustTake(t, m, "k", p, 1).Allowed {
				n++
			}
			m.drain()
		}
		return n
	}
	for _, tt := range []struct {
		name string
		// leave runs ReturnKeys on every key so that k's loan is left.
		leave func(t *testing.T, m *Manager, fs *faultStore, budget *clocktest.Clock)
	}{
		{"return failed", func(t *testing.T, m *Manager, fs *faultStore, _ *clocktest.Clock) {
			fs.mode.Store(faultError)
			if err := m.ReturnKeys(func(string) bool { return false }); err == nil {
				t.Fatal("ReturnKeys did not report the failed return")
			}
			fs.mode.Store(faultNone)
		}},
		{"budget ran out", func(t *testing.T, m *Manager, fs *faultStore, _ *clocktest.Clock) {
			// A bigger loan, returned first: its return takes the whole
			// budget (returnClockStore).
			mustTake(t, m, "big", Policy{Algorithm: TokenBucket, Limit: 8000, Period: time.Hour}, 1)
			_ = m.ReturnKeys(func(string) bool { return false })
			if fs.n(opReturn) != 1 {
				t.Fatalf("%d return calls, want only the big key's", fs.n(opReturn))
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clk, budget := clocktest.New(), clocktest.New() // the budget's clock apart: time stands still for the Store
			fs := newFaultStore(clk.Now)
			cfg := DefaultConfig()
			cfg.Now = clk.Now
			cfg.AfterFunc = budget.AfterFunc
			cfg.SweepInterval = -1
			cfg.StoreTimeout = time.Minute
			cfg.ReturnWorkers = 1
			cfg.Breaker = BreakerConfig{Failures: 100}
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			m := NewManager(&returnClockStore{faultStore: fs, clk: budget, step: 5 * time.Second}, cfg)
			t.Cleanup(func() { _ = m.Close() })
			mustTake(t, m, "k", p, 1) // a loan of 12
			// The Store bucket fills up meanwhile, but for the loan.
			clk.Advance(20 * time.Second)
			first := admitted(t, m) // the whole burst: the loan, then the Store's
			tt.leave(t, m, fs, budget)
			if m.Holds("k") {
				t.Fatal("the key is still held after ReturnKeys")
			}
			if n := admitted(t, m); first+n > 100 {
				t.Errorf("admitted %d then %d hits at one instant, burst 100: the left loan's spends were dated back", first, n)
			}
		})
	}
}
