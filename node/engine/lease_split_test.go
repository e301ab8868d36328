package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/rules"
)

// regionStore is a region's Store as the lease protocol gives it (what
// node/client's remote Store sends, for one region): each call is applied
// by the global tier's lessor as a regional holder's op, with the
// region's demand.
type regionStore struct {
	l      *lessor
	store  lease.Store // the global tier's Store
	holder string
	rule   *Rule
	demand int64 // checks per second
}

func (s *regionStore) op(ckey string, p lease.Policy, op LeaseOp) LeaseResult {
	op.Rule, op.Key, op.Holder, op.Region = s.rule.name, ckey[len(s.rule.name)+1:], s.holder, "r"
	return s.l.apply(s.store, &leaseOp{op: &op, r: s.rule, p: p, ckey: ckey})
}

func (s *regionStore) Lease(_ context.Context, ckey string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	r := s.op(ckey, p, LeaseOp{Kind: LeaseLend, Want: max(want, 1), Need: min(need, max(want, 1)), Demand: s.demand, To: to})
	if r.Err != "" {
		return lease.Grant{}, errors.New(r.Err)
	}
	return r.Grant, nil
}

func (s *regionStore) Return(_ context.Context, ckey string, p lease.Policy, tokens int64, _ string) error {
	if r := s.op(ckey, p, LeaseOp{Kind: LeaseReturn, Tokens: tokens}); r.Err != "" {
		return errors.New(r.Err)
	}
	return nil
}

func (s *regionStore) Log(context.Context, string, lease.Policy, int64) (lease.Result, error) {
	return lease.Result{}, lease.ErrWrongAlgorithm
}

func (s *regionStore) Acquire(context.Context, string, lease.Policy, string, int64) (lease.Result, error) {
	return lease.Result{}, lease.ErrWrongAlgorithm
}

func (s *regionStore) Release(context.Context, string, lease.Policy, string) error {
	return lease.ErrWrongAlgorithm
}

// Three regions check one global key past saturation, with demand
// 60/30/10% of twice its rate: together they admit about its allowance,
// each about its demand's share (Doorman's proportional share), on one
// fake clock.
func TestRegionSplitFollowsDemand(t *testing.T) {
	clk := clocktest.New()
	global := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	defer global.Close()
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1000, Period: time.Second}
	e := New(Config{Metrics: metrics.NewSet(), Now: clk.Now})
	set, err := rules.NewSet([]rules.Spec{{Name: "g", Algorithm: "token_bucket", Limit: 1000, Period: "1s"}})
	if err != nil {
		t.Fatal(err)
	}
	rule := e.SetRules(set, nil).Get("g")
	const ckey = "g:hot"
	demand := []float64{1200, 600, 200} // checks per second: 2× the rate
	var mgrs []*lease.Manager
	for i, d := range demand {
		cfg := lease.DefaultConfig()
		cfg.Now, cfg.AfterFunc, cfg.SweepInterval = clk.Now, clk.AfterFunc, -1
		cfg.Holder = fmt.Sprintf("region-%d", i)
		cfg.StoreTimeout = time.Minute // the fake clock's Store never fails
		cfg.Metrics = metrics.NewSet()
		m := lease.NewManager(&regionStore{l: e.lessor, store: global, holder: "gw.x.r.region-" + fmt.Sprint(i), rule: rule, demand: int64(d)}, cfg)
		defer m.Close()
		mgrs = append(mgrs, m)
	}
	const (
		tick = time.Millisecond
		run  = 30 * time.Second
	)
	admitted := make([]int64, len(demand))
	due := make([]float64, len(demand))
	for range int(run / tick) {
		clk.Advance(tick)
		for i, m := range mgrs {
			due[i] += demand[i] * tick.Seconds()
			for ; due[i] >= 1; due[i]-- {
				d, err := m.Take(ckey, p, 1)
				if err != nil {
					t.Fatal(err)
				}
				if d.Allowed {
					admitted[i]++
				}
				m.Settle() // its prefetch lands before the next region checks
			}
		}
	}
	allowance := float64(p.Capacity()) + float64(p.Limit)*run.Seconds()
	var total int64
	for _, a := range admitted {
		total += a
	}
	t.Logf("admitted %v: %d of %.0f (%.1f%%)", admitted, total, allowance, 100*float64(total)/allowance)
	if f := float64(total) / allowance; f < 0.95 || f > 1 {
		t.Errorf("admitted %d in all, %.1f%% of the allowance %.0f; want [95%%, 100%%]", total, 100*f, allowance)
	}
	for i, a := range admitted {
		share, want := float64(a)/float64(total), demand[i]/2000
		if math.Abs(share-want) > 0.10 {
			t.Errorf("region %d admitted %.1f%% of the total; its demand is %.0f%%: want within 10 points", i, 100*share, 100*want)
		}
	}
}

// Below saturation a regional holder is not bound: one region may lease
// the whole capacity (gateway_share bounds gateways, not regions).
func TestRegionSplitNoBoundBelowSaturation(t *testing.T) {
	clk := clocktest.New()
	s := newRegionSplit(clk.Now)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1000, Period: time.Second}
	// clamp asks for want and need with demand (and held), and returns
	// what the split lets through.
	clamp := func(ckey, holder string, want, need, held, demand int64) (int64, int64, lease.Grant, bool, bool) {
		op := LeaseOp{Kind: LeaseLend, Want: want, Need: need, Demand: demand, To: lease.Lessee{Held: held}}
		res, deny, ok := s.clamp(ckey, holder, p, &op, &want, &need)
		return want, need, res, deny, ok
	}
	if want, _, _, deny, ok := clamp("g:k", "a", 900, 1, 0, 400); !ok || deny || want != 900 {
		t.Fatalf("one region at 40%% of the rate: want %d, deny %v, ok %v; want 900 unclamped", want, deny, ok)
	}
	if want, _, _, deny, ok := clamp("g:k2", "b", 900, 1, 0, 500); !ok || deny || want != 900 {
		t.Fatalf("another key: want %d, deny %v; want 900 unclamped", want, deny)
	}
	// Past saturation (demand 400 + 1600 > 1000/s), b's share is 80%: a
	// new holder's credit starts at 80% of the capacity.
	if want, _, _, deny, ok := clamp("g:k", "b", 1000, 1, 0, 1600); !ok || deny || want != 800 {
		t.Fatalf("b at 80%% of the demand: want %d, deny %v; want 800", want, deny)
	}
	s.granted("g:k", "b", 800)
	_, _, res, deny, ok := clamp("g:k", "b", 10, 5, 3, 1600)
	if !ok || !deny || res.Lent != 3 || ceilMS(res.Wait) != 7 {
		// 5 tokens at 800/s: 6.25ms.
		t.Fatalf("b with no credit left: %+v deny %v; want a wait of 7ms and its loan kept (3)", res, deny)
	}
	clk.Advance(10 * time.Millisecond) // 8 tokens of credit
	// A wait answers what b could be granted now, and its end as the
	// reset (not a period's: b would take the key for empty until then).
	if _, _, res, deny, _ := clamp("g:k", "b", 20, 20, 0, 1600); !deny || res.Remaining != 8 || ceilMS(res.Wait) != 15 || res.Reset != res.Wait {
		// 12 tokens more at 800/s: 15ms.
		t.Fatalf("b needing 20 with a credit of 8: %+v deny %v; want a wait of 15ms, remaining 8, reset at the wait", res, deny)
	}
	if want, _, _, deny, _ := clamp("g:k", "b", 10, 5, 3, 1600); deny || want != 8 {
		t.Fatalf("b after 10ms: want %d, deny %v; want its credit, 8", want, deny)
	}
	// A check of more hits than b's share of the capacity (800) is not
	// denied for ever: once b's credit is a whole share, it goes to the
	// Store.
	s.granted("g:k", "b", 8)
	clk.Advance(time.Second)
	if want, need, _, deny, _ := clamp("g:k", "b", 900, 900, 0, 1600); deny || want != 900 || need != 900 {
		t.Fatalf("a check of 900 hits with a full credit of 800: want %d need %d, deny %v; want it sent to the Store", want, need, deny)
	}
	// A return forgets b: a alone is not bound.
	s.drop("g:k", "b")
	if want, _, _, deny, _ := clamp("g:k", "a", 1000, 1, 0, 2000); deny || want != 1000 {
		t.Fatalf("a alone: want %d, deny %v; want 1000", want, deny)
	}
}
