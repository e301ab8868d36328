package lua

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestMatchesMemoryStore runs random call sequences of every algorithm,
// with random policies across the whole valid range (periods from 1ms to a
// year, limits and bursts up to 2^40), against Redis and against
// lease.MemoryStore on one fake clock, advancing it by random steps, and
// requires identical answers: the Lua scripts and the Go reference must not
// drift apart by a token or a millisecond. It runs twice: each call alone,
// and each lease and return in a batch of two (forceBatches).
func TestMatchesMemoryStore(t *testing.T) {
	t.Run("single", func(t *testing.T) { matchesMemoryStore(t, false) })
	t.Run("batched", func(t *testing.T) { matchesMemoryStore(t, true) })
}

func matchesMemoryStore(t *testing.T, batched bool) {
	start := time.Date(2026, 5, 17, 3, 4, 5, 678901000, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	var rs lease.Store = newTestStore(t, srv.Addr)
	if batched {
		rs = forceBatches(t, rs.(*Store))
	}
	ms := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now, SweepInterval: -1})
	defer ms.Close()
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 11))
	pick := func(vals ...int64) int64 { return vals[r.IntN(len(vals))] }
	randPeriod := func() time.Duration {
		switch r.IntN(4) {
		case 0:
			return time.Duration(1+r.Int64N(1000)) * time.Millisecond
		case 1:
			return time.Duration(1+r.Int64N(3600)) * time.Second
		case 2:
			return time.Duration(pick(1, 60, 3600, 86400, 365*86400)) * time.Second
		}
		return time.Millisecond + time.Duration(r.Int64N(int64(lease.MaxPeriod)))
	}
	randLimit := func() int64 {
		return pick(1, 2, 3, 7, 10, 100, 1000, 1+r.Int64N(1_000_000), lease.MaxLimit, 1+r.Int64N(lease.MaxLimit))
	}
	advance := func(p time.Duration) {
		switch r.IntN(4) {
		case 0: // same instant
		case 1:
			clock.Advance(time.Duration(r.Int64N(int64(p)/4 + 1)))
		case 2:
			clock.Advance(time.Duration(r.Int64N(int64(min(2*p, 1000*time.Hour)) + 1)))
		default:
			clock.Advance(time.Duration(r.Int64N(int64(time.Second))))
		}
	}
	var grants, denials, logAllowed, logDenied, acquired int
	// Lessees: anonymous, or one of three holders with random holdings,
	// lease TTLs, idle times and spent-before counts (the lent
	// accounting), and for fixed_window shares ahead.
	holders := []string{"", "node-a", "node-b/7f3a", "node-c"}
	var ahead, crowded int
	for i := 0; i < 400; i++ {
		alg := lease.Algorithm(1 + r.IntN(4))
		p := lease.Policy{Algorithm: alg, Limit: randLimit(), Period: randPeriod()}
		if alg == lease.TokenBucket || alg == lease.GCRA {
			p.Burst = pick(0, 0, 1, p.Limit, randLimit())
		}
		key := uniqueKey(t)
		capacity := p.Capacity()
		for step := 0; step < 12; step++ {
			advance(p.Period)
			if step > 0 && r.IntN(4) == 0 {
				n := min(pick(1, 2, capacity/3+1, capacity, r.Int64N(capacity)+1, lease.MaxHits), lease.MaxHits)
				h := holders[r.IntN(len(holders))]
				e1, e2 := rs.Return(ctx, key, p, n, h), ms.Return(ctx, key, p, n, h)
				if (e1 == nil) != (e2 == nil) {
					t.Fatalf("%+v Return(%d): redis %v, memory %v", p, n, e1, e2)
				}
				continue
			}
			need := min(pick(0, 1, 1, 2, capacity/2, capacity, capacity+1, r.Int64N(capacity)+1), lease.MaxHits)
			want := min(lease.MaxHits, need+pick(0, 0, 1, capacity, r.Int64N(capacity)+1))
			to := lease.Lessee{ID: holders[r.IntN(len(holders))]}
			if to.ID != "" {
				to.Held = min(pick(0, 0, 1, capacity/2, r.Int64N(capacity)+1), lease.MaxHits)
				to.TTL = time.Duration(pick(1, 100, 1000, 60_000, 3_600_000)) * time.Millisecond
				to.Idle = time.Duration(pick(0, 0, 1, 1000, r.Int64N(int64(p.Period)/1000+1))) * time.Microsecond
				to.SpentBefore = min(pick(0, 0, 1, capacity/2, r.Int64N(capacity)+1), lease.MaxHits)
				to.MaxHolders = int(pick(0, 0, 1, 2))
				if alg == lease.FixedWindow {
					maxW := min(int64(lease.MaxAheadWindows), int64(lease.MaxLeaseTTL/p.Period))
					to.AheadWindows = min(pick(0, 1, 2, 3, maxW, r.Int64N(maxW+1)), maxW)
					to.AheadTokens = min(pick(0, 1, p.Limit/3, p.Limit, r.Int64N(p.Limit)+1), lease.MaxHits)
				}
			}
			g1, e1 := rs.Lease(ctx, key, p, want, need, to)
			g2, e2 := ms.Lease(ctx, key, p, want, need, to)
			if g1.Crowded {
				crowded++
			}
			if (e1 == nil) != (e2 == nil) || g1 != g2 {
				t.Fatalf("%+v, step %d at %v: Lease(want=%d, need=%d, %+v):\n  redis:  %+v %v\n  memory: %+v %v",
					p, step, clock.Now().Format(time.RFC3339Nano), want, need, to, g1, e1, g2, e2)
			}
			if g1.AheadTokens > 0 {
				ahead++
			}
			switch {
			case g1.Granted > 0:
				grants++
			case g1.Wait > 0:
				denials++
			}
		}
	}
	// The exact algorithms. Separate keys for the two: the memory store
	// keeps one state per key (another algorithm starts it fresh), Redis
	// one key per algorithm.
	for i := 0; i < 200; i++ {
		lkey, ckey := uniqueKey(t), uniqueKey(t)
		pl := lease.Policy{Algorithm: lease.SlidingLog, Limit: pick(1, 2, 3, 5, 20, 200), Period: randPeriod()}
		if r.IntN(2) == 0 {
			pl.MinInterval = time.Duration(r.Int64N(int64(pl.Period) + 1))
		}
		pc := lease.Policy{Algorithm: lease.Concurrency, Limit: pick(1, 2, 3, 5), Period: randPeriod()}
		for step := 0; step < 12; step++ {
			advance(pl.Period)
			hits := min(pick(0, 1, 1, 1, 2, pl.Limit, pl.Limit+1), MaxLogHits)
			r1, e1 := rs.Log(ctx, lkey, pl, hits)
			r2, e2 := ms.Log(ctx, lkey, pl, hits)
			if (e1 == nil) != (e2 == nil) || r1 != r2 {
				t.Fatalf("%+v, step %d: Log(%d):\n  redis:  %+v %v\n  memory: %+v %v", pl, step, hits, r1, e1, r2, e2)
			}
			if r1.Allowed {
				logAllowed++
			} else {
				logDenied++
			}
			advance(pc.Period)
			id := []string{"a", "b", "c", "d", "e", "f"}[r.IntN(6)]
			if r.IntN(3) == 0 {
				e1, e2 := rs.Release(ctx, ckey, pc, id), ms.Release(ctx, ckey, pc, id)
				if (e1 == nil) != (e2 == nil) {
					t.Fatalf("%+v Release(%s): redis %v, memory %v", pc, id, e1, e2)
				}
				continue
			}
			hits = pick(0, 1, 1)
			r1, e1 = rs.Acquire(ctx, ckey, pc, id, hits)
			r2, e2 = ms.Acquire(ctx, ckey, pc, id, hits)
			if (e1 == nil) != (e2 == nil) || r1 != r2 {
				t.Fatalf("%+v, step %d: Acquire(%s, %d):\n  redis:  %+v %v\n  memory: %+v %v", pc, step, id, hits, r1, e1, r2, e2)
			}
			if r1.Allowed && hits > 0 {
				acquired++
			}
		}
	}
	t.Logf("identical answers: %d leases granted, %d denied with a wait, %d lending shares ahead, %d crowded out; sliding_log %d allowed, %d denied; %d acquires", grants, denials, ahead, crowded, logAllowed, logDenied, acquired)
	if grants < 500 || denials < 500 || ahead < 150 || crowded < 100 || logDenied < 200 || logAllowed < 200 {
		t.Errorf("the random sequences exercised too few grants or denials to compare")
	}
}
