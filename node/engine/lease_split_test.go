package node

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
	"github.com/sluicehq/sluice/node/api"
)

// regionStore is a region's Store as the lease protocol gives it (what
// node/client's remote Store sends, for one region): each call is applied
// by the global tier's gateway code as a regional holder's op, with the
// region's demand.
type regionStore struct {
	g      *gateway
	store  lease.Store // the global tier's Store
	holder string
	rule   string
	demand int64 // checks per second
}

func (s *regionStore) op(ckey string, p lease.Policy, op api.LeaseOp) api.LeaseResult {
	op.Rule, op.Key = s.rule, ckey[len(s.rule)+1:]
	lo := &leaseOp{op: &op, ckey: ckey, p: p, rm: s.g.ruleMetrics(s.rule), region: true, share: 0.25}
	return s.g.apply(s.store, s.holder, lo)
}

func (s *regionStore) Lease(_ context.Context, ckey string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	r := s.op(ckey, p, api.LeaseOp{Op: api.OpLease, Want: max(want, 1), Need: min(need, max(want, 1)), Held: to.Held,
		TTLMS: max(ceilMS(to.TTL), 1), SpentBefore: to.SpentBefore, IdleMS: int64(to.Idle / time.Millisecond),
		Call: to.Call, Unanswered: to.Unanswered, Demand: s.demand})
	if r.Error != "" {
		return lease.Grant{}, errors.New(r.Error)
	}
	return lease.Grant{Granted: r.Granted, Remaining: r.Remaining, Lent: r.Lent,
		Wait: time.Duration(r.WaitMS) * time.Millisecond, Reset: time.Duration(r.ResetMS) * time.Millisecond}, nil
}

func (s *regionStore) Return(_ context.Context, ckey string, p lease.Policy, tokens int64, _ string) error {
	if r := s.op(ckey, p, api.LeaseOp{Op: api.OpReturn, Tokens: tokens}); r.Error != "" {
		return errors.New(r.Error)
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
	g := newGateway(Config{ClientToken: "t"}, metrics.NewSet())
	g.split = newRegionSplit(clk.Now)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1000, Period: time.Second}
	const ckey = "g:hot"
	demand := []float64{1200, 600, 200} // checks per second: 2× the rate
	var mgrs []*lease.Manager
	for i, d := range demand {
		cfg := lease.DefaultConfig()
		cfg.Now, cfg.AfterFunc, cfg.SweepInterval = clk.Now, clk.AfterFunc, -1
		cfg.Holder = fmt.Sprintf("region-%d", i)
		cfg.StoreTimeout = time.Minute // the fake clock's Store never fails
		cfg.Metrics = metrics.NewSet()
		m := lease.NewManager(&regionStore{g: g, store: global, holder: "gw.x.r.region-" + fmt.Sprint(i), rule: "g", demand: int64(d)}, cfg)
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
	op := api.LeaseOp{Op: api.OpLease, Want: 900, Need: 1, Demand: 400}
	if _, deny, ok := s.clamp("g:k", "a", p, &op); !ok || deny || op.Want != 900 {
		t.Fatalf("one region at 40%% of the rate: want %d, deny %v, ok %v; want 900 unclamped", op.Want, deny, ok)
	}
	op2 := api.LeaseOp{Op: api.OpLease, Want: 900, Need: 1, Demand: 500}
	if _, deny, ok := s.clamp("g:k2", "b", p, &op2); !ok || deny || op2.Want != 900 {
		t.Fatalf("another key: want %d, deny %v; want 900 unclamped", op2.Want, deny)
	}
	// Past saturation (demand 400 + 1600 > 1000/s), b's share is 80%: a
	// new holder's credit starts at 80% of the capacity.
	op3 := api.LeaseOp{Op: api.OpLease, Want: 1000, Need: 1, Demand: 1600}
	if _, deny, ok := s.clamp("g:k", "b", p, &op3); !ok || deny || op3.Want != 800 {
		t.Fatalf("b at 80%% of the demand: want %d, deny %v; want 800", op3.Want, deny)
	}
	s.granted("g:k", "b", 800)
	op4 := api.LeaseOp{Op: api.OpLease, Want: 10, Need: 5, Held: 3, Demand: 1600}
	res, deny, ok := s.clamp("g:k", "b", p, &op4)
	if !ok || !deny || res.Lent != 3 || res.WaitMS != 7 {
		// 5 tokens at 800/s: 6.25ms.
		t.Fatalf("b with no credit left: %+v deny %v; want a wait of 7ms and its loan kept (3)", res, deny)
	}
	clk.Advance(10 * time.Millisecond) // 8 tokens of credit
	// A wait answers what b could be granted now, and its end as the
	// reset (not a period's: b would take the key for empty until then).
	more := api.LeaseOp{Op: api.OpLease, Want: 20, Need: 20, Demand: 1600}
	if res, deny, _ := s.clamp("g:k", "b", p, &more); !deny || res.Remaining != 8 || res.WaitMS != 15 || res.ResetMS != res.WaitMS {
		// 12 tokens more at 800/s: 15ms.
		t.Fatalf("b needing 20 with a credit of 8: %+v deny %v; want a wait of 15ms, remaining 8, reset at the wait", res, deny)
	}
	if _, deny, _ := s.clamp("g:k", "b", p, &op4); deny || op4.Want != 8 {
		t.Fatalf("b after 10ms: want %d, deny %v; want its credit, 8", op4.Want, deny)
	}
	// A check of more hits than b's share of the capacity (800) is not
	// denied for ever: once b's credit is a whole share, it goes to the
	// Store.
	s.granted("g:k", "b", 8)
	clk.Advance(time.Second)
	big := api.LeaseOp{Op: api.OpLease, Want: 900, Need: 900, Demand: 1600}
	if _, deny, _ := s.clamp("g:k", "b", p, &big); deny || big.Want != 900 || big.Need != 900 {
		t.Fatalf("a check of 900 hits with a full credit of 800: want %d need %d, deny %v; want it sent to the Store", big.Want, big.Need, deny)
	}
	// A return forgets b: a alone is not bound.
	s.drop("g:k", "b")
	op5 := api.LeaseOp{Op: api.OpLease, Want: 1000, Need: 1, Demand: 2000}
	if _, deny, _ := s.clamp("g:k", "a", p, &op5); deny || op5.Want != 1000 {
		t.Fatalf("a alone: want %d, deny %v; want 1000", op5.Want, deny)
	}
}
