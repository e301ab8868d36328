package lua

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/algo"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestGoLuaParityCorners runs call sequences written to reach states
// the random sequences of TestGoLuaParity and TestGoLuaParityEdges seldom
// do, through the same harness (the scripts, fast paths on and off, the
// Go definition and the MemoryStore must agree on every answer, byte of
// state and expiry), each algorithm a subtest. The expectations are the
// Go definition's: a scenario only chooses the calls.
func TestGoLuaParityCorners(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 5, 17, 3, 4, 5, 678901000, time.UTC))
	raw := newUnbatchedStore(t, srv.Addr)
	h := newParity(t, raw, raw, generalStore(t, srv.Addr), clock)
	byAlgorithm(t, func(t *testing.T, _ int, a lease.Algorithm) {
		h.t = t
		for _, sc := range scenarios {
			if sc.only != nil && !sc.only(a) {
				continue
			}
			t.Run(sc.name, func(t *testing.T) {
				h.t = t
				sc.run(h, a)
			})
		}
	})
}

// scenario is a call sequence run on a new key of each algorithm only
// accepts (nil: every one). Its name has a hyphen (the mutation harness
// runs the subtests so named).
type scenario struct {
	name string
	only func(lease.Algorithm) bool
	run  func(h *parity, a lease.Algorithm)
}

// newKey is a new key of algorithm a with limit and period.
func (h *parity) newKey(a lease.Algorithm, limit int64, period time.Duration) (string, *goKey) {
	return uniqueKey(h.t), &goKey{p: lease.Policy{Algorithm: a, Limit: limit, Period: period}}
}

// step moves the clock forward by d.
func (h *parity) step(d time.Duration) { h.clock.Advance(d) }

// seed writes st into Redis as k's state (both Stores' keys, packed as
// the scripts pack it, expiring as a script would set it): a state the
// calls of this release do not make, but the scripts read, as one an
// earlier release wrote.
func (h *parity) seed(key string, k *goKey, st algo.LeasedState) { h.seedAs(key, k, st, st) }

// seedAs is seed with Redis holding as, packed: the same state as st in
// another order of its loans (the order an earlier release kept).
func (h *parity) seedAs(key string, k *goKey, st, as algo.LeasedState) {
	h.t.Helper()
	a := k.p.Algorithm
	now := h.clock.Now().UnixMicro()
	exp := st.Expiry(k.p)
	ms := ttlMillis(exp - now)
	for _, s := range []*Store{h.raw, h.general} {
		if err := s.client.Do(h.ctx, s.client.B().Set().Key(s.Key(key, a)).Value(stateBytes(as, a)).PxMilliseconds(ms).Build()).Error(); err != nil {
			h.t.Fatal(err)
		}
	}
	k.st, k.seeded, k.at, k.exp = st, true, now/1000+ms, exp
}

// refilling is a state of refilling algorithm a (limit 10 a second) at
// now with 2 tokens left, and loans ls: its level, and the reference
// time of its loans' expiries (ref).
func refilling(a lease.Algorithm, now int64) (ref int64, with func(ls algo.Loans) algo.LeasedState) {
	ref = now
	if _, tat := a.NewState().(*algo.GCRAState); tat {
		ref = now + 800_000 // the TAT: 8 of 10 tokens used
	}
	return ref, func(ls algo.Loans) algo.LeasedState { return refillState(a, ref, 2, ls) }
}

// refillState is a state of refilling algorithm a whose reference time
// (the level's time, or the TAT) is ref, with loans ls and, where the
// state has one, a stored level of tokens.
func refillState(a lease.Algorithm, ref int64, tokens float64, ls algo.Loans) algo.LeasedState {
	switch s := a.NewState().(type) {
	case *algo.TokenBucketState:
		s.Tokens, s.Updated, s.Loans = tokens, ref, ls
		return s
	case *algo.GCRAState:
		s.TAT, s.Loans = ref, ls
		return s
	}
	panic(fmt.Sprintf("refillState: %v's state", a))
}

// acquire runs one concurrency acquire of id through the three and
// compares them.
func (h *parity) acquire(key string, k *goKey, id string, hits int64) {
	h.t.Helper()
	now := h.clock.Now()
	r0 := h.state(k, now.UnixMicro()).(algo.SlotState).Acquire(k.p, now, id, hits)
	r1, e1 := h.rs.Acquire(h.ctx, key, k.p, id, hits)
	r2, e2 := h.ms.Acquire(h.ctx, key, k.p, id, hits)
	if e1 != nil || e2 != nil || r1 != r0 || r2 != r0 {
		h.t.Fatalf("%+v Acquire(%s, %d):\n  go:     %+v\n  redis:  %+v %v\n  memory: %+v %v", k.p, id, hits, r0, r1, e1, r2, e2)
	}
	h.checkExpiry(key, k, r0.Allowed && hits > 0)
}

// log runs one sliding_log call of hits through the three and compares
// them.
func (h *parity) log(key string, k *goKey, hits int64) {
	h.t.Helper()
	now := h.clock.Now()
	r0 := h.state(k, now.UnixMicro()).(algo.LogState).Check(k.p, now, hits)
	r1, e1 := h.rs.Log(h.ctx, key, k.p, hits)
	r2, e2 := h.ms.Log(h.ctx, key, k.p, hits)
	if e1 != nil || e2 != nil || r1 != r0 || r2 != r0 {
		h.t.Fatalf("%+v Log(%d) at %s:\n  go:     %+v\n  redis:  %+v %v\n  memory: %+v %v", k.p, hits, now.Format(time.RFC3339Nano), r0, r1, e1, r2, e2)
	}
	h.checkExpiry(key, k, r0.Allowed && hits > 0)
}

var scenarios = []scenario{
	{
		// The clock steps back (NTP) between two calls of one holder.
		name: "leased-clock-back", only: lease.Algorithm.Leased,
		run: func(h *parity, a lease.Algorithm) {
			for _, call := range []string{"lease", "return"} {
				key, k := h.newKey(a, 10, time.Second)
				start := h.clock.Now()
				h.lease(key, k, 3, 1, lease.Lessee{ID: "node-a", TTL: time.Second, Held: 0})
				h.clock.Set(start.Add(-10 * time.Microsecond))
				if call == "lease" {
					h.lease(key, k, 1, 1, lease.Lessee{ID: "node-a", TTL: time.Second, Held: 3})
				} else {
					h.ret(key, k, 1, "node-a")
				}
				h.clock.Set(start.Add(time.Millisecond))
			}
		},
	},
	{
		// An anonymous call with max_holders set is never crowded out:
		// max_holders bounds holders.
		name: "anonymous-max-holders", only: lease.Algorithm.Leased,
		run: func(h *parity, a lease.Algorithm) {
			key, k := h.newKey(a, 10, time.Second)
			h.lease(key, k, 2, 1, lease.Lessee{ID: "node-a", TTL: time.Second})
			h.lease(key, k, 5, 1, lease.Lessee{MaxHolders: 1})
		},
	},
	{
		// Loans at the packed widths' bounds (255 and 256, 65,535 and
		// 65,536, 2^32 - 1 and 2^32 tokens), lent on a fast path and
		// repacked by another holder's call.
		name: "lent-width-bounds", only: lease.Algorithm.Leased,
		run: func(h *parity, a lease.Algorithm) {
			for _, n := range []int64{255, 256, 65535, 65536, 1<<32 - 1, 1 << 32} {
				key, k := h.newKey(a, 1<<33, time.Hour)
				h.lease(key, k, n, n, lease.Lessee{ID: "node-a", TTL: time.Second})
				h.lease(key, k, 1, 1, lease.Lessee{ID: "node-b/7f3a", TTL: time.Second})
			}
		},
	},
	{
		// Loans whose expiries are at the packed widths' bounds from
		// the reference time (zigzag distances of 256, 65,536 and
		// 2^32, and one less), repacked by another holder's call.
		name: "expiry-width-bounds", only: lease.Algorithm.Refills,
		run: func(h *parity, a lease.Algorithm) {
			key, k := h.newKey(a, 1<<20, time.Hour)
			now := h.clock.Now().UnixMicro()
			var ls algo.Loans
			for i, d := range []int64{1 << 31, 1<<31 - 1, 1 << 15, 1<<15 - 1, 1 << 7, 1<<7 - 1} {
				ls = append(ls, algo.Loan{Holder: holderOf(fmt.Sprintf("node-%d", i)), Lent: 100, Expires: now + d, LastSpend: now - 10})
			}
			h.seed(key, k, refillState(a, now, 1<<20-1000, ls))
			h.lease(key, k, 1, 1, lease.Lessee{ID: "node-c", TTL: time.Second})
		},
	},
	{
		// The caller's loan alone, spent whole before the call, which
		// grants nothing: the loan goes, an ended loan in its place.
		name: "spent-whole", only: lease.Algorithm.Refills,
		run: func(h *parity, a lease.Algorithm) {
			for _, want := range []int64{11, 1} {
				key, k := h.newKey(a, 10, time.Second)
				now := h.clock.Now().UnixMicro()
				_, with := refilling(a, now)
				h.seed(key, k, with(algo.Loans{{Holder: holderOf("node-a"), Lent: 2, Expires: now + 1_000_000, LastSpend: now - 10}}))
				h.lease(key, k, want, want, lease.Lessee{ID: "node-a", TTL: time.Second, SpentBefore: 2, Idle: time.Microsecond})
			}
		},
	},
	{
		// Calls of more hits than the script adds in one ZADD (500).
		name: "many-hits", only: lease.Algorithm.HasMinInterval,
		run: func(h *parity, a lease.Algorithm) {
			key, k := h.newKey(a, 2000, time.Minute)
			for range 3 {
				h.log(key, k, 700)
				h.step(time.Second)
			}
		},
	},
	{
		// A minimum interval of 1µs: a second call at the instant of the
		// newest stamp waits it.
		name: "min-interval-1us", only: lease.Algorithm.HasMinInterval,
		run: func(h *parity, a lease.Algorithm) {
			key, k := h.newKey(a, 10, time.Second)
			k.p.MinInterval = time.Microsecond
			h.log(key, k, 1)
			h.log(key, k, 1)
			h.step(time.Microsecond)
			h.log(key, k, 1)
		},
	},
	{
		// The clock steps back (NTP): a call then records at the newest
		// stamp, without a minimum interval; with one, it waits from
		// the newest stamp.
		name: "clock-back", only: lease.Algorithm.HasMinInterval,
		run: func(h *parity, a lease.Algorithm) {
			for _, mi := range []time.Duration{0, time.Millisecond} {
				key, k := h.newKey(a, 10, time.Second)
				k.p.MinInterval = mi
				start := h.clock.Now()
				h.log(key, k, 1)
				h.clock.Set(start.Add(-10 * time.Microsecond))
				h.log(key, k, 1)
				h.log(key, k, 0)
				h.clock.Set(start.Add(2 * time.Millisecond))
			}
		},
	},
	{
		// Releases: of a key without state, and of an id that a
		// release of another reaped (its expiry passed).
		name: "release-reaps", only: lease.Algorithm.Acquired,
		run: func(h *parity, a lease.Algorithm) {
			key, k := h.newKey(a, 3, time.Second)
			h.release(key, k, h.state(k, h.clock.Now().UnixMicro()).(algo.SlotState), "a")
			h.acquire(key, k, "b", 1)
			h.step(time.Second / 2)
			h.acquire(key, k, "a", 1)
			h.step(time.Second / 2)
			for _, id := range []string{"x", "b", "a"} {
				h.release(key, k, h.state(k, h.clock.Now().UnixMicro()).(algo.SlotState), id)
			}
		},
	},
	{
		// The caller's loan first, then ended loans: a fast path's
		// state. Packed out of expiry order (an earlier release's
		// order), which the fast paths leave to the general path to
		// sort; and two of one time, which a return merges with the
		// rest of the caller's loan.
		name: "ended-loans", only: lease.Algorithm.Refills,
		run: func(h *parity, a lease.Algorithm) {
			for _, c := range []string{"unsorted", "merged", "past"} {
				for _, call := range []string{"lease", "return"} {
					key, k := h.newKey(a, 10, time.Second)
					now := h.clock.Now().UnixMicro()
					_, with := refilling(a, now)
					if c == "past" {
						// The level's time or the TAT before the
						// ended loans' expiries: distances forward.
						with = func(ls algo.Loans) algo.LeasedState { return refillState(a, now-1000, 2, ls) }
					}
					own := algo.Loan{Holder: holderOf("node-a"), Lent: 5, Expires: now + 1_000_000, LastSpend: now - 10}
					ls := algo.Loans{own, {Lent: 1, Expires: now - 50}, {Lent: 1, Expires: now - 100}}
					as := algo.Loans{own, ls[2], ls[1]}
					switch c {
					case "merged":
						ls = algo.Loans{own, {Lent: 1, Expires: now}, {Lent: 2, Expires: now - 100}}
						as = ls
					case "past": // one: two out of order would decline
						ls = ls[:2]
						as = ls
					}
					h.seedAs(key, k, with(ls), with(as))
					if call == "lease" {
						h.lease(key, k, 1, 1, lease.Lessee{ID: "node-a", TTL: time.Second, Held: 3})
					} else {
						h.ret(key, k, 2, "node-a") // 3 of 5 end at now: 4 with the ended loan
					}
				}
			}
		},
	},
	{
		// Loans without a last spend (an earlier release's; this one
		// records one at every lease): kind byte 64 (every width 1
		// byte), a loan before another and the last; then calls of
		// each holder, the first of them the loan's holder alone (a
		// fast path) reporting a token spent before its call.
		name: "no-last-spend", only: lease.Algorithm.Refills,
		run: func(h *parity, a lease.Algorithm) {
			for _, c := range []string{"two", "one", "two-return"} {
				last := c == "one"
				key, k := h.newKey(a, 10, time.Second)
				ref, with := refilling(a, h.clock.Now().UnixMicro()) // the loans' expiries: distances from ref
				ls := algo.Loans{
					{Holder: holderOf("node-a"), Lent: 2, Expires: ref + 100},
					{Holder: holderOf("node-b/7f3a"), Lent: 3, Expires: ref + 50},
				}
				if last {
					ls = ls[:1]
				}
				h.seed(key, k, with(ls))
				if c == "two-return" {
					h.ret(key, k, 1, "node-a") // its loan first, another holder's after it
				}
				h.lease(key, k, 1, 1, lease.Lessee{ID: "node-a", TTL: time.Second, Held: 1, SpentBefore: 1, Idle: time.Microsecond})
				h.lease(key, k, 1, 1, lease.Lessee{ID: "node-c", TTL: time.Second})
				h.ret(key, k, 1, "node-b/7f3a")
			}
		},
	},
	{
		// A loan of a few tokens whose expiry is within 128µs of the
		// key's reference time packs with kind byte 64 (all width codes
		// 0, no last spend): written by another holder's call, then
		// read with another loan after it, and alone.
		name: "loan-kind-64", only: lease.Algorithm.Leased,
		run: func(h *parity, a lease.Algorithm) {
			for _, other := range []string{"node-b/7f3a", ""} {
				key, k := h.newKey(a, 10, time.Second)
				h.lease(key, k, 1, 1, lease.Lessee{ID: "node-a", TTL: time.Millisecond})
				h.step(time.Millisecond - time.Microsecond)
				h.lease(key, k, 1, 1, lease.Lessee{ID: other, TTL: time.Second})
				h.lease(key, k, 1, 1, lease.Lessee{ID: "node-c", TTL: time.Second})
				h.lease(key, k, 1, 1, lease.Lessee{ID: "node-a", TTL: time.Second})
			}
		},
	},
}
