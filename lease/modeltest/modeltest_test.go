package modeltest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
)

// The harness must fail on a broken Store: each mutant below breaks one
// side of the contract, and Run must report it, shrunk, with its replay
// command. (The real Managers and Stores are tested by lease and lua's
// TestModel.)

// capture is a testing.TB that records Errorf instead of failing.
type capture struct {
	*testing.T
	mu   sync.Mutex
	errs []string
}

func (c *capture) Errorf(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
}

func harness(wrap func(lease.Store) lease.Store) Harness {
	clk := clocktest.New()
	return Harness{
		NewStore: func(testing.TB) lease.Store {
			return wrap(lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clk.Now, SweepInterval: -1}))
		},
		Now: clk.Now, Advance: clk.Advance, Package: "./lease/modeltest/",
	}
}

// overGrant grants one token more than the Store did whenever the caller
// wanted more: tokens made up.
type overGrant struct{ lease.Store }

func (s overGrant) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	g, err := s.Store.Lease(ctx, key, p, want, need, to)
	if err == nil && g.Granted > 0 && g.Granted < want {
		g.Granted++
	}
	return g, err
}

// stingy denies every lease that needs more than half of what is left.
type stingy struct{ lease.Store }

func (s stingy) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	if need > 1 {
		peek, err := s.Store.Lease(ctx, key, p, 0, 0, lease.Lessee{})
		if err == nil && need > peek.Remaining/2 {
			return lease.Grant{Remaining: peek.Remaining, Wait: time.Second, Reset: peek.Reset}, nil
		}
	}
	return s.Store.Lease(ctx, key, p, want, need, to)
}

// lenientLog admits a sliding_log check one over the limit.
type lenientLog struct{ lease.Store }

func (s lenientLog) Log(ctx context.Context, key string, p lease.Policy, hits int64) (lease.Result, error) {
	p.Limit++
	return s.Store.Log(ctx, key, p, hits)
}

// hiddenShares asks for shares ahead in every fixed_window lease call of
// a holder and does not report them: tokens the Store counts that the
// model does not see.
type hiddenShares struct{ lease.Store }

func (s hiddenShares) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	if p.Algorithm == lease.FixedWindow && to.ID != "" {
		to.AheadWindows, to.AheadTokens = 2, p.Limit/2+1
	}
	g, err := s.Store.Lease(ctx, key, p, want, need, to)
	g.AheadTokens, g.AheadWindows = 0, 0
	return g, err
}

// unbounded ignores the bound on a key's holders (Lessee.MaxHolders): it
// lends to holders it should crowd out.
type unbounded struct{ lease.Store }

func (s unbounded) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	to.MaxHolders = 0
	return s.Store.Lease(ctx, key, p, want, need, to)
}

// overbounded crowds out one holder more than the bound: a holder with a
// loan, or a call the bound leaves room for.
type overbounded struct{ lease.Store }

func (s overbounded) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	if to.MaxHolders > 1 {
		to.MaxHolders--
	}
	return s.Store.Lease(ctx, key, p, want, need, to)
}

func TestHarnessFailsOnBrokenStores(t *testing.T) {
	cases := []struct {
		name  string
		wrap  func(lease.Store) lease.Store
		algs  []lease.Algorithm
		safe  bool
		wants string
		// holders, maxHolders: Options.Holders (0: 1), MaxHolders
		holders, maxHolders int
	}{
		{"over-grant", func(s lease.Store) lease.Store { return overGrant{s} }, []lease.Algorithm{lease.TokenBucket}, true, "more than burst", 0, 0},
		{"over-grant/window", func(s lease.Store) lease.Store { return overGrant{s} }, []lease.Algorithm{lease.FixedWindow}, true, "more than the limit", 0, 0},
		{"stingy", func(s lease.Store) lease.Store { return stingy{s} }, []lease.Algorithm{lease.GCRA}, false, "denial unjustified", 0, 0},
		{"hidden-shares", func(s lease.Store) lease.Store { return hiddenShares{s} }, []lease.Algorithm{lease.FixedWindow}, false, "denial unjustified", 0, 0},
		{"lenient-log", func(s lease.Store) lease.Store { return lenientLog{s} }, []lease.Algorithm{lease.SlidingLog}, true, "over the limit", 0, 0},
		{"unbounded", func(s lease.Store) lease.Store { return unbounded{s} }, []lease.Algorithm{lease.TokenBucket}, true, "bound broken", 4, 2},
		{"unbounded/window", func(s lease.Store) lease.Store { return unbounded{s} }, []lease.Algorithm{lease.FixedWindow}, true, "bound broken", 4, 2},
		{"overbounded", func(s lease.Store) lease.Store { return overbounded{s} }, []lease.Algorithm{lease.GCRA}, true, "crowded out m0", 4, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ct := &capture{T: t}
			Run(ct, harness(c.wrap), Options{Seeds: 30, Steps: 150, Holders: max(c.holders, 1), Algorithms: c.algs, SafetyOnly: c.safe, MaxHolders: c.maxHolders})
			if len(ct.errs) != 1 {
				t.Fatalf("Run reported %d failures on a broken Store, want 1", len(ct.errs))
			}
			msg := ct.errs[0]
			for _, want := range []string{c.wants, "minimal reproduction", "FAILS at op", "replay: SLUICE_MODEL_SEED="} {
				if !strings.Contains(msg, want) {
					t.Errorf("the report lacks %q:\n%s", want, msg)
				}
			}
			if t.Failed() || testing.Verbose() {
				t.Logf("report:\n%s", msg)
			}
		})
	}
}

// TestLongFormBaseMoves: long-form runs started minutes apart (two
// SLUICE_MODEL_TIME runs in a row) explore different seeds, and their
// ranges do not overlap.
func TestLongFormBaseMoves(t *testing.T) {
	start := time.Date(2026, 11, 27, 11, 39, 31, 0, time.UTC)
	a := longFormBase(start)
	for _, d := range []time.Duration{2 * time.Second, time.Minute, 11 * time.Minute} {
		b := longFormBase(start.Add(d))
		// A run's tests start at their offsets (10^6 apart) plus the
		// base and each runs at most some 10^6 seeds.
		if b-a < 100_000_000 {
			t.Errorf("runs %v apart start %d seeds apart: their seeds overlap", d, b-a)
		}
	}
}
