package lease

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// Regression tests from the correctness review of the decision engine.

// A Store that fails at once (not a timeout) is reported as an error that
// keeps its cause, not as a timeout.
func TestBreakerKeepsStoreError(t *testing.T) {
	b, fs, _ := testBreaker(t)
	fs.mode.Store(faultError)
	_, err := b.Lease(context.Background(), "k", perSecond(10), 1, 1, Lessee{})
	if !errors.Is(err, ErrStoreUnavailable) || !errors.Is(err, errInjected) {
		t.Fatalf("err = %v, want it to wrap ErrStoreUnavailable and the Store's error", err)
	}
	if strings.Contains(err.Error(), "timed out") {
		t.Fatalf("err = %v: an immediate failure reported as a timeout", err)
	}
}

// Tokens leased in one window must not be spent in the next: there the
// Store grants a whole new limit, and the window would admit more than it.
func TestWindowedLeaseDoesNotOutliveItsWindow(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, nil)
			p := Policy{Algorithm: alg, Limit: 10, Period: time.Second}
			// The fake clock starts on a second: window [0, 1s).
			clk.Advance(900 * time.Millisecond)
			if !mustTake(t, m, "k", p, 10).Allowed {
				t.Fatal("first 10 denied")
			}
			// Another rule denied the request: the 10 hits come back to
			// the local bucket (they were counted by the Store in window 0).
			m.Refund("k", p, 10)
			// Over the next second, which is a second from 0.95s
			// ([0.95s, 1.95s)), at most 10 may be admitted.
			clk.Advance(150 * time.Millisecond) // 1.05s
			admitted := 0
			for range 20 {
				if mustTake(t, m, "k", p, 1).Allowed {
					admitted++
				}
			}
			m.drain()
			clk.Advance(850 * time.Millisecond) // 1.9s
			for range 20 {
				if mustTake(t, m, "k", p, 1).Allowed {
					admitted++
				}
			}
			if admitted > 10 {
				t.Fatalf("%d admitted in [1.05s, 1.9s], limit 10 per 1s", admitted)
			}
		})
	}
}

// latentStore is a Store whose lease calls take d of the (fake) clock
// before the Store reads it, like a Redis round trip.
type latentStore struct {
	*faultStore
	clk *clocktest.Clock
	d   time.Duration
}

func (s *latentStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	s.clk.Advance(s.d)
	return s.faultStore.Lease(ctx, key, p, want, need, to)
}

// A local denial during a deny-until must not tell the client to come
// back before the Store will have tokens: the Store's Wait counts from
// when it answered, not from when the call started.
func TestDenyUntilCountsFromTheStoresAnswer(t *testing.T) {
	clk := clocktest.New()
	ls := &latentStore{faultStore: newFaultStore(clk.Now), clk: clk, d: 10 * time.Millisecond}
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute
	m := NewManager(ls, cfg)
	t.Cleanup(func() { _ = m.Close() })

	p := Policy{Algorithm: FixedWindow, Limit: 1, Period: time.Second}
	windowEnd := clk.Now().Add(time.Second)
	if !mustTake(t, m, "k", p, 1).Allowed { // the call ends at 10ms
		t.Fatal("first check denied")
	}
	m.drain()
	d := mustTake(t, m, "k", p, 1) // a lease call, ends at 20ms
	if d.Allowed {
		t.Fatal("second check of a limit of 1 allowed")
	}
	d = mustTake(t, m, "k", p, 1) // answered locally at 20ms
	if d.Allowed {
		t.Fatal("third check allowed")
	}
	if back := clk.Now().Add(d.RetryAfter); back.Before(windowEnd) {
		t.Fatalf("RetryAfter %v: the client comes back %v before the window ends", d.RetryAfter, windowEnd.Sub(back))
	}
}

// A Store Wait of a century (a policy near the validation bounds) must
// still give a deny-until, not an overflowed one that sends every check to
// the Store.
func TestDenyUntilDoesNotOverflow(t *testing.T) {
	m, fs, _ := testManager(t, nil)
	// One token a year, a burst of 140: 100 tokens take 100 years.
	p := Policy{Algorithm: TokenBucket, Limit: 1, Period: MaxPeriod, Burst: 140}
	if !mustTake(t, m, "k", p, 140).Allowed {
		t.Fatal("the burst denied")
	}
	m.drain()
	if mustTake(t, m, "k", p, 100).Allowed {
		t.Fatal("100 more allowed")
	}
	calls := fs.n(opLease)
	if d := mustTake(t, m, "k", p, 100); d.Allowed || d.RetryAfter <= 0 {
		t.Fatalf("during deny-until: %+v, want denied with a RetryAfter", d)
	}
	if got := fs.n(opLease) - calls; got != 0 {
		t.Fatalf("%d Store calls during a deny-until, want 0", got)
	}
}

// The interned policies of evicted buckets are dropped: rule reloads and
// many overrides must not grow the Manager forever.
func TestPoliciesOfEvictedBucketsAreDropped(t *testing.T) {
	m, _, clk := testManager(t, nil)
	for i := range 100 {
		mustTake(t, m, "k", perSecond(int64(i+1)), 1) // a reload per check
	}
	m.drain()
	clk.Advance(time.Minute)
	m.sweep(clk.Now())
	m.policies.Lock()
	n := len(m.policies.m)
	m.policies.Unlock()
	if n != 0 {
		t.Fatalf("%d policies interned with no bucket left, want 0", n)
	}
}

// A deny-until is the Store's Wait for the check that got it. A bigger
// check during it needs longer: it must not be told to come back then.
func TestDenyUntilDoesNotShortenBiggerChecks(t *testing.T) {
	// No lease floor, so no batch wait: RetryAfter is the Store's Wait.
	m, _, clk := testManager(t, func(c *Config) { c.MinLeaseShare = -1 })
	p := Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Second} // a token per 100ms
	if !mustTake(t, m, "k", p, 10).Allowed {
		t.Fatal("burst denied")
	}
	m.drain()
	if d := mustTake(t, m, "k", p, 1); d.Allowed || d.RetryAfter != 100*time.Millisecond {
		t.Fatalf("check of 1: %+v, want denied with RetryAfter 100ms", d)
	}
	d := mustTake(t, m, "k", p, 5)
	if d.Allowed || d.RetryAfter < 500*time.Millisecond {
		t.Fatalf("check of 5: %+v, want denied with RetryAfter ≥ 500ms", d)
	}
	// Checks no bigger than the deny-until's are still answered locally.
	clk.Advance(10 * time.Millisecond)
	denials := m.Stats().LocalDenials
	for range 10 {
		mustTake(t, m, "k", p, 1)
	}
	if got := m.Stats().LocalDenials - denials; got != 10 {
		t.Fatalf("%d of 10 small checks denied locally, want 10", got)
	}
}

// Property: whatever the interleaving of checks, refunds, prefetches and
// time, a fixed_window key admits at most Limit per window. (A leased
// token_bucket can exceed Burst over a short stretch by the tokens held
// when it starts, at most one lease: the Store refills while they are held.
// That is the accuracy contract's slack of one horizon, not checked here.)
func TestManagerNeverOverAdmits(t *testing.T) {
	for _, alg := range []Algorithm{FixedWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			for seed := uint64(1); seed <= 30; seed++ {
				m, _, clk := testManager(t, nil)
				p := Policy{Algorithm: alg, Limit: 20, Period: 100 * time.Millisecond}
				start := clk.Now()
				x := seed * 0x9E3779B97F4A7C15
				next := func(n uint64) uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x % n }
				type adm struct {
					at   time.Duration
					hits int64
				}
				var log []adm
				for range 2000 {
					switch next(10) {
					case 0:
						clk.Advance(time.Duration(next(30_000)) * time.Microsecond)
					case 1:
						m.drain()
					default:
						hits := int64(1 + next(4))
						if d := mustTake(t, m, "k", p, hits); d.Allowed {
							if next(4) == 0 { // another rule denied it
								m.Refund("k", p, hits)
							} else {
								log = append(log, adm{clk.Now().Sub(start), hits})
							}
						}
					}
				}
				m.drain()
				for i := range log {
					var sum int64
					for j := i; j < len(log); j++ {
						sum += log[j].hits
						if log[j].at/p.Period != log[i].at/p.Period {
							break
						}
						if sum > p.Limit {
							t.Fatalf("seed %d: %d admitted in one window [%v, %v], limit %d", seed, sum, log[i].at, log[j].at, p.Limit)
						}
					}
				}
			}
		})
	}
}
