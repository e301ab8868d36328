package upstream

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
)

func TestDemandRate(t *testing.T) {
	clk := clocktest.New()
	d := demandTable{now: clk.Now, m: map[string]*demandCounter{}}
	if r := d.rate("g:k"); r != 0 {
		t.Fatalf("unknown key: %d, want 0", r)
	}
	for range 100 {
		d.add("g:k")
	}
	clk.Advance(rateWindow / 5)
	if r := d.rate("g:k"); r != 0 {
		t.Fatalf("before a whole window: %d/s, want 0 (unknown)", r)
	}
	clk.Advance(time.Second - rateWindow/5)
	if r := d.rate("g:k"); r != 100 {
		t.Fatalf("100 checks in 1s: %d/s, want 100", r)
	}
	// Within rateWindow the estimate stands.
	for range 50 {
		d.add("g:k")
	}
	clk.Advance(rateWindow / 2)
	if r := d.rate("g:k"); r != 100 {
		t.Fatalf("within the window: %d/s, want the last estimate 100", r)
	}
	// A key not checked since the last sweep is dropped.
	d.sweep()
	d.sweep()
	if r := d.rate("g:k"); r != 0 || len(d.m) != 0 {
		t.Fatalf("after two sweeps without checks: rate %d, %d keys; want it dropped", r, len(d.m))
	}
}

// Cut off, a rule admits at most its regional floor per period from the
// node's memory; a rule without a floor admits nothing.
func TestFloorStore(t *testing.T) {
	inner := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
	defer inner.Close()
	floors := map[string]float64{"g": 0.1}
	s := &floorStore{inner: inner, floor: func(rule string) float64 { return floors[rule] }}
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Hour}
	ctx := context.Background()
	got := int64(0)
	for range 50 {
		g, err := s.Lease(ctx, "g:k", p, 1, 1, lease.Lessee{})
		if err != nil {
			t.Fatal(err)
		}
		got += g.Granted
	}
	if got != 10 {
		t.Fatalf("floor 0.1 of 100: %d admitted, want 10", got)
	}
	g, err := s.Lease(ctx, "h:k", p, 1, 1, lease.Lessee{})
	if err != nil || g.Granted != 0 || g.Wait <= 0 {
		t.Fatalf("no floor: %+v %v, want nothing granted and a wait", g, err)
	}
}
