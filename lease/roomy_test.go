package lease

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// TestSlowKeyLeasesForItsLoansLife: a token_bucket key far from its limit
// (checked every 2 s, limit 100/s) leases for its rate over its loan's
// fast-path life, at most half the capacity, and calls the Store once per
// quarter of the capacity it spends: about once per 25 checks instead of
// once per 13 (the smallest lease, 13 tokens more at each prefetch); the
// same key with another holder holding most of the capacity keeps the
// smallest lease.
func TestSlowKeyLeasesForItsLoansLife(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		p := Policy{Algorithm: alg, Limit: 100, Period: time.Second, Burst: 100}
		for _, tt := range []struct {
			name       string
			other      int64 // tokens another holder holds of the key
			minC, maxC int64 // lease calls for the 100 checks
		}{
			// First lease 13, the prefetch at 3 left asks up to 50
			// (0.5/s × 150 s = 75, capped at half the capacity), then a
			// prefetch per 25 checks (a quarter of the capacity): 5
			// calls.
			{"far from its limit", 0, 3, 5},
			// Free 40 < half the capacity: the smallest lease, 13
			// tokens more at each prefetch: 8 calls.
			{"another holder holds 60", 60, 7, 9},
		} {
			t.Run(alg.String()+"/"+tt.name, func(t *testing.T) {
				m, fs, clk := testManager(t, nil)
				if tt.other > 0 {
					g, err := fs.Lease(context.Background(), "k", p, tt.other, tt.other, Lessee{ID: "other", TTL: time.Hour})
					if err != nil || g.Granted != tt.other {
						t.Fatalf("the other holder's lease: %+v, %v", g, err)
					}
				}
				base := fs.n(opLease)
				maxLent := int64(0)
				for i := range 100 {
					if !mustTake(t, m, "k", p, 1).Allowed {
						t.Fatalf("check %d denied", i)
					}
					m.drain()
					maxLent = max(maxLent, m.buckets.load("k").basis.Load())
					clk.Advance(2 * time.Second)
				}
				calls := fs.n(opLease) - base
				t.Logf("%d lease calls, the Manager's loan up to %d", calls, maxLent)
				if calls < tt.minC || calls > tt.maxC {
					t.Errorf("%d lease calls for 100 checks, want %d to %d", calls, tt.minC, tt.maxC)
				}
				twiceFloor := 2 * leaseWant(0, m.cfg.Horizon, m.cfg.MinLeaseShare, 1, p.Capacity())
				if limit := min(p.Capacity()/2, p.Capacity()-tt.other); maxLent > limit && maxLent > twiceFloor {
					t.Errorf("the Store lent this Manager up to %d tokens, want at most %d (half the capacity, or twice the smallest lease)", maxLent, limit)
				}
			})
		}
	}
}

// TestIdleKeepKeepsARoomyLoan: the idle sweep keeps a slow token_bucket
// key's loan sized for its loan's life (above twice the smallest lease, at
// most half the capacity), as it keeps the smallest lease's: the key
// coming back is answered from memory, with no return call and no lease.
func TestIdleKeepKeepsARoomyLoan(t *testing.T) {
	m, fs, clk := testManager(t, nil)
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Second, Burst: 100}
	for range 12 { // every 2 s: the prefetch at 3 left leases for the loan's life
		mustTake(t, m, "k", p, 1)
		m.drain()
		clk.Advance(2 * time.Second)
	}
	b := m.buckets.load("k")
	floor := leaseWant(0, m.cfg.Horizon, m.cfg.MinLeaseShare, 1, p.Capacity())
	if lent := b.basis.Load(); lent <= 2*floor || lent > p.Capacity()/2 {
		t.Fatalf("the key's loan is %d, want above twice the smallest lease (%d) and at most half the capacity", lent, 2*floor)
	}
	calls := fs.n(opLease)
	clk.Advance(15 * time.Second)
	if n := m.sweep(clk.Now()); n != 0 || !m.Holds("k") {
		t.Fatalf("swept %d keys (holds k %v), want the roomy loan kept", n, m.Holds("k"))
	}
	if !mustTake(t, m, "k", p, 1).Allowed {
		t.Fatal("the key coming back was denied")
	}
	m.drain()
	if fs.n(opReturn) != 0 || fs.n(opLease) != calls {
		t.Errorf("%d returns and %d leases after the idle spell, want none", fs.n(opReturn), fs.n(opLease)-calls)
	}
}

// TestBurstAfterSlowTraffic: what a key far from its limit pays for its
// bigger loan. The tokens it spent since its last lease call count at the
// Store as spent when the next call reports them (from its last spend: see
// Lessee.Idle), so a burst right after slow traffic finds those not yet
// refilled: at most the loan less its prefetch mark, a quarter of the
// capacity (lowFor), where the smallest lease's loan left about an
// eighth (63 of 100 here with loans for a key's life and the usual
// prefetch mark, a quarter of the grant). The worst moment is checked: the
// burst comes when the loan is one token above its prefetch mark.
func TestBurstAfterSlowTraffic(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, nil)
			p := Policy{Algorithm: alg, Limit: 100, Period: time.Second, Burst: 100}
			var b *bucket
			for i := 0; ; i++ {
				if i == 200 {
					t.Fatal("the key never held a loan for its life one token above its prefetch mark")
				}
				mustTake(t, m, "k", p, 1)
				m.drain()
				clk.Advance(2 * time.Second)
				b = m.buckets.load("k")
				if b.roomy() && m.striped.onHand(b) == int64(b.low.Load())+1 {
					break
				}
			}
			loan, unreported := b.basis.Load(), b.basis.Load()-m.striped.onHand(b)
			admitted := int64(0)
			for range 2 * p.Capacity() {
				if mustTake(t, m, "k", p, 1).Allowed {
					admitted++
				}
			}
			t.Logf("loan %d, %d spent since the last call: the burst admitted %d of %d", loan, unreported, admitted, p.Capacity())
			if want := p.Capacity() - p.Capacity()/4; admitted < want {
				t.Errorf("the burst admitted %d, want at least %d", admitted, want)
			}
		})
	}
}

// TestFarKeyLoanBound: a token_bucket key at 40% of its limit whose rate
// over the horizon (40 tokens) is near half its burst (100) keeps leasing
// batches for its rate: its loan stays at most half the burst, another
// holder's burst of 50 is admitted, and it makes a lease call per ~40
// checks. (A first form of loans for a key's life added a batch on top of
// the quarter of the capacity its raised prefetch mark left: the loan
// ratcheted to 74, the other holder was denied, and the calls rose by
// half.)
func TestFarKeyLoanBound(t *testing.T) {
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	mk := func(id string) *Manager {
		cfg := DefaultConfig()
		cfg.Now, cfg.SweepInterval, cfg.StoreTimeout, cfg.Holder = clk.Now, -1, time.Minute, id
		m := NewManager(fs, cfg)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	a, b := mk("a"), mk("b")
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Second, Burst: 100}
	maxLent := int64(0)
	const checks = 4000
	for i := range checks {
		if !mustTake(t, a, "k", p, 1).Allowed {
			t.Fatalf("check %d at 40%% of the limit denied", i)
		}
		a.drain()
		maxLent = max(maxLent, a.buckets.load("k").basis.Load())
		clk.Advance(2500 * time.Microsecond) // 400/s
	}
	calls := fs.n(opLease)
	if maxLent > p.Capacity()/2 {
		t.Errorf("the loan reached %d, want at most half the burst (%d)", maxLent, p.Capacity()/2)
	}
	if want := int64(checks/40 + checks/400); calls > want {
		t.Errorf("%d lease calls for %d checks, want at most %d (a batch of 40 per call)", calls, checks, want)
	}
	if d := mustTake(t, b, "k", p, 50); !d.Allowed {
		t.Errorf("another holder's burst of 50 denied (%+v) with the key at 40%% of its limit", d)
	}
}
