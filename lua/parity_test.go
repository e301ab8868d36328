package lua

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/algo"
	"github.com/sluicehq/sluice/lua/redistest"
)

// The scripts are held to the Go definition of every algorithm (package
// lease/algo): a harness drives a Redis Store (the scripts, on a real
// redis-server whose clock is frozen and moved by the test), the Go
// definition itself (each key's algo state, its math called directly)
// and lease.MemoryStore (the same math behind its records and holder
// table) with the same calls on one clock, and requires after every call
// the same answer from all three and the same state: the bytes Redis
// holds are the Go state packed as the scripts pack it (the algorithm's
// row in store.go: pack), and the key's expiry is the Go state's.
// TestGoLuaParity runs random sequences of every algorithm; FuzzGoLuaParity
// runs the sequences the fuzzer's bytes spell.

// leasedAlgorithms are the table's leased algorithms and
// refillingAlgorithms its refilling ones (token_bucket, gcra), in its
// order: the tests that run every leased algorithm draw from them, so
// that a new one runs too.
var leasedAlgorithms, refillingAlgorithms = algo.Only(lease.Algorithm.Leased), algo.Only(lease.Algorithm.Refills)

// source is where a sequence's choices come from: a *rand.Rand, or the
// fuzzer's bytes (byteSource).
type source interface {
	IntN(n int) int
	Int64N(n int64) int64
	Uint32() uint32
}

// byteSource reads choices from bytes, little-endian, each from as few
// bytes as its range needs; 0 once they run out.
type byteSource struct{ b []byte }

func (s *byteSource) take(n uint64) uint64 {
	var v, span uint64 = 0, 1
	for span < n && len(s.b) > 0 {
		v |= uint64(s.b[0]) * span
		s.b = s.b[1:]
		if span > 1<<55 {
			break
		}
		span <<= 8
	}
	return v % n
}

func (s *byteSource) IntN(n int) int                           { return int(s.take(uint64(n))) }
func (s *byteSource) Int64N(n int64) int64                     { return int64(s.take(uint64(n))) }
func (s *byteSource) Uint32() uint32                           { return uint32(s.take(1 << 32)) }
func (s *byteSource) empty() bool                              { return len(s.b) == 0 }
func pick(src source, vals ...int64) int64                     { return vals[src.IntN(len(vals))] }
func ceilDiv(a, b int64) int64                                 { return (a + b - 1) / b } // a ≥ 0
func stateBytes(st algo.LeasedState, a lease.Algorithm) string { return string(algorithms[a].pack(st)) }

// goKey is one counter key as the Go definition holds it.
type goKey struct {
	p  lease.Policy
	st algo.State // nil: no state
	// at and exp are when Redis's key expires (unix ms: now + PTTL) and
	// when the Go state did, after the last call.
	at, exp int64
	// seeded: the key's state was written into Redis (parity.seed), not
	// made by calls, and the MemoryStore, which has no such door, is not
	// compared.
	seeded bool
}

// parity is the harness. Not safe for concurrent use.
type parity struct {
	t   testing.TB
	rs  lease.Store // the Redis Store, maybe forcing batches
	raw *Store      // the same Store, for GET and PTTL
	// general is a Store whose lease scripts take their general paths in
	// every state (scriptsWith(false); its keys under another prefix),
	// which the fast paths' states would leave unexercised.
	general *Store
	ms      *lease.MemoryStore
	clock   *redistest.Clock
	ctx     context.Context
	// edge narrows every choice to the values at the algorithms'
	// boundaries (TestGoLuaParityEdges): tiny limits and counts, short
	// periods, the clock moved to a window's start, a loan's or the
	// state's expiry exactly, or a microsecond either side.
	edge bool
	// What the sequences exercised.
	grants, denials, ahead, crowded, returns, states, gaps int
	// backs: calls naming as unanswered the key's last call, which
	// granted tokens (the grant comes back to the key if the loan runs)
	backs                           int
	ended                           int // states with the most ended loans a key keeps
	logAllowed, logDenied, acquired int
	byAlg                           map[lease.Algorithm]int // states compared
}

func newParity(t testing.TB, rs lease.Store, raw, general *Store, clock *redistest.Clock) *parity {
	ms := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	return &parity{t: t, rs: rs, raw: raw, general: general, ms: ms, clock: clock, ctx: context.Background(), byAlg: map[lease.Algorithm]int{}}
}

// generalStore is a Store on the server at addr whose lease scripts
// take their general paths in every state.
func generalStore(t testing.TB, addr string) *Store {
	t.Helper()
	s, err := NewStore(Config{Addrs: []string{addr}, CallTimeout: testTimeout, KeyPrefix: "general", MaxBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	s.scripts = scriptsWith(false)
	return s
}

// state is the Go state of k that a call at t (unix µs) works on: none
// once its expiry passed, as the MemoryStore drops it.
func (h *parity) state(k *goKey, t int64) algo.State {
	if k.st == nil || k.st.Expiry(k.p) <= t {
		k.st = k.p.Algorithm.NewState()
	}
	return k.st
}

// leasedState is the Go state of key k that a call at t (unix µs) works
// on as Redis's does: k's state, or none once it has expired, except that
// a Redis key outlives its state by up to a millisecond: while Redis
// still holds it, the call works on the expired state, and fresh is a
// state without state to which the call must answer the same (from its
// expiry on a state equals no state).
func (h *parity) leasedState(key string, k *goKey, t int64) (st, fresh algo.LeasedState) {
	if k.st != nil && k.st.Expiry(k.p) <= t {
		if v, _ := stored(h.t, h.raw, key, k.p.Algorithm); v != "" {
			h.gaps++
			return k.st.(algo.LeasedState), k.p.Algorithm.NewState().(algo.LeasedState)
		}
		k.st = nil
	}
	if k.st == nil {
		k.st = k.p.Algorithm.NewState()
	}
	return k.st.(algo.LeasedState), nil
}

// check compares what Redis holds of key with the Go state of k after
// call: the same bytes, and the Go state's expiry as a script sets it
// (ttl in prelude.lua: the time to it in whole ms, rounded up, plus 1ms
// by which the key outlives its state) when the call wrote it, or as an
// earlier write set it for the same expiry (a write that keeps the key's
// TTL, or no write); or no key where the Go state has no state (or one
// that expired).
func (h *parity) check(key string, k *goKey, call string) {
	h.t.Helper()
	a := k.p.Algorithm
	st := k.st.(algo.LeasedState)
	now := h.clock.Now().UnixMicro()
	want, exp := stateBytes(st, a), st.Expiry(k.p)
	at := int64(0)
	for i, s := range []*Store{h.raw, h.general} {
		if s == nil {
			continue
		}
		paths := [...]string{"", " (general paths)"}[i]
		v, pttl := stored(h.t, s, key, a)
		if v == "" {
			if want != "" && exp > now {
				h.t.Fatalf("%+v, %s: Redis%s holds no state, the Go state packs to %x (%+v)", k.p, call, paths, want, st)
			}
			continue
		}
		if v != want {
			h.t.Fatalf("%+v, %s: Redis%s holds\n  %x\nthe Go state packs to\n  %x\n  (%+v)", k.p, call, paths, v, want, st)
		}
		at = now/1000 + pttl
		if written := now/1000 + ttlMillis(exp-now); at != written && (exp != k.exp || at != k.at) {
			h.t.Fatalf("%+v, %s: the key%s expires at %d ms, want %d (the Go state at %d µs; before the call %d ms, %d µs): %x",
				k.p, call, paths, at, written, exp, k.at, k.exp, v)
		}
	}
	if at == 0 {
		k.at, k.exp = 0, 0
		return
	}
	k.at, k.exp = at, exp
	if exp > now {
		h.states++
		h.byAlg[a]++
		ended := 0
		for _, l := range st.Lent() {
			if l.Holder == "" {
				ended++
			}
		}
		if ended >= 3 { // lease/algo's maxEnded
			h.ended++
		}
	}
}

// lease runs one lease call through the three and compares them.
func (h *parity) lease(key string, k *goKey, want, need int64, to lease.Lessee) lease.Grant {
	h.t.Helper()
	now := h.clock.Now()
	var g0 lease.Grant
	before := ""
	valid := lease.CheckLease(k.p, want, need, to) == nil
	if valid {
		gto := to
		gto.ID = holderOf(to.ID) // as the scripts know it
		st, fresh := h.leasedState(key, k, now.UnixMicro())
		before = stateBytes(st, k.p.Algorithm)
		if c, g := lastCallOf(st); to.Unanswered != 0 && c == to.Unanswered && g > 0 {
			h.backs++
		}
		g0 = st.Lease(k.p, now, want, need, gto)
		if fresh != nil {
			if gf := fresh.Lease(k.p, now, want, need, gto); gf != g0 {
				h.t.Fatalf("%+v at %s: Lease(want=%d, need=%d, %+v) of an expired state %x: %+v, of no state %+v",
					k.p, now.Format(time.RFC3339Nano), want, need, to, before, g0, gf)
			}
		}
	}
	g1, e1 := h.rs.Lease(h.ctx, key, k.p, want, need, to)
	g2, e2 := g0, error(nil)
	if !valid {
		e2 = e1
	}
	if !k.seeded {
		g2, e2 = h.ms.Lease(h.ctx, key, k.p, want, need, to)
	}
	g3, e3 := g1, e1
	if h.general != nil {
		g3, e3 = h.general.Lease(h.ctx, key, k.p, want, need, to)
	}
	if (e1 == nil) != valid || (e2 == nil) != valid || (e3 == nil) != valid || valid && (g1 != g0 || g2 != g0 || g3 != g0) {
		h.t.Fatalf("%+v at %s: Lease(want=%d, need=%d, %+v):\n  go:     %+v (valid %v)\n  redis:  %+v %v\n  memory: %+v %v\n  redis (general paths): %+v %v",
			k.p, now.Format(time.RFC3339Nano), want, need, to, g0, valid, g1, e1, g2, e2, g3, e3)
	}
	if valid {
		h.check(key, k, fmt.Sprintf("after Lease(want=%d, need=%d, %+v) = %+v on %x", want, need, to, g0, before))
	}
	return g1
}

// lastCallOf is the Lessee.Call of the last call that settled a loan of
// a refilling state, and what it granted (0, 0 for another algorithm).
func lastCallOf(st algo.LeasedState) (uint32, int64) {
	switch s := st.(type) {
	case *algo.TokenBucketState:
		return s.Last.Call, s.Last.Grant
	case *algo.GCRAState:
		return s.Last.Call, s.Last.Grant
	}
	return 0, 0
}

// ret runs one return through the three and compares them.
func (h *parity) ret(key string, k *goKey, n int64, holder string) {
	h.t.Helper()
	now := h.clock.Now()
	before := ""
	valid := lease.CheckReturn(k.p, n, holder) == nil
	if valid {
		st, _ := h.leasedState(key, k, now.UnixMicro())
		before = stateBytes(st, k.p.Algorithm)
		st.Return(k.p, now, n, holderOf(holder))
	}
	e1, e2 := h.rs.Return(h.ctx, key, k.p, n, holder), error(nil)
	if !valid {
		e2 = e1
	}
	if !k.seeded {
		e2 = h.ms.Return(h.ctx, key, k.p, n, holder)
	}
	e3 := e1
	if h.general != nil {
		e3 = h.general.Return(h.ctx, key, k.p, n, holder)
	}
	if (e1 == nil) != valid || (e2 == nil) != valid || (e3 == nil) != valid {
		h.t.Fatalf("%+v Return(%d, %q): valid %v, redis %v, memory %v, redis (general paths) %v", k.p, n, holder, valid, e1, e2, e3)
	}
	if valid {
		h.returns++
		h.check(key, k, fmt.Sprintf("after Return(%d, %q) on %x", n, holder, before))
	}
}

// randPeriod is a period across the whole valid range: from 1ms to a year
// (at the edges: 1, 2 or 3ms, or a second).
func (h *parity) randPeriod(src source) time.Duration {
	if h.edge {
		return time.Duration(pick(src, 1, 2, 3, 1000)) * time.Millisecond
	}
	switch src.IntN(4) {
	case 0:
		return time.Duration(1+src.Int64N(1000)) * time.Millisecond
	case 1:
		return time.Duration(1+src.Int64N(3600)) * time.Second
	case 2:
		return time.Duration(pick(src, 1, 60, 3600, 86400, 365*86400)) * time.Second
	}
	return time.Millisecond + time.Duration(src.Int64N(int64(lease.MaxPeriod)))
}

// advance moves the clock: not at all, within a quarter of the period,
// up to two periods, or up to a second. At the edges: not at all, by
// 1µs, to the next window's start or 1µs either side of it, or to one of
// the times in at (a loan's expiry) or 1µs either side of it, if ahead.
func (h *parity) advance(src source, p time.Duration, at ...int64) {
	if h.edge {
		now := h.clock.Now().UnixMicro()
		to := now
		switch src.IntN(4) {
		case 0:
		case 1:
			to = now + 1
		case 2:
			to = now - now%p.Microseconds() + p.Microseconds()
		default:
			var ahead []int64 // the times not yet past (or just)
			for _, t := range at {
				if t >= now {
					ahead = append(ahead, t)
				}
			}
			if len(ahead) > 0 {
				to = ahead[src.IntN(len(ahead))]
			}
		}
		if to += pick(src, 0, 0, -1, 1); to > now {
			h.clock.Advance(time.Duration(to-now) * time.Microsecond)
		}
		return
	}
	switch src.IntN(4) {
	case 0: // same instant
	case 1:
		h.clock.Advance(time.Duration(src.Int64N(int64(p)/4 + 1)))
	case 2:
		h.clock.Advance(time.Duration(src.Int64N(int64(min(2*p, 1000*time.Hour)) + 1)))
	default:
		h.clock.Advance(time.Duration(src.Int64N(int64(time.Second))))
	}
}

// holders are the lessees' IDs: anonymous, or one of three holders.
var holders = []string{"", "node-a", "node-b/7f3a", "node-c"}

// leased runs steps calls of a random policy of leased algorithm a on a
// new key (fewer if src runs out): leases and returns of random holders
// with random holdings, lease TTLs, idle times, spent-before counts, call
// ids and unanswered calls (the lent accounting), max_holders, and shares
// ahead for an algorithm that leases ahead. Half the keys of a refilling
// algorithm are renewed by one holder, mostly, that reports spending part
// of what it was lent a little later each time (the steady state of a key
// one node checks): its spent tokens become ended loans that still cap
// the level, up to the most a key keeps, and the calls of other holders
// meanwhile take the scripts' general paths.
func (h *parity) leased(src source, a lease.Algorithm, steps int) {
	limit := func() int64 {
		if h.edge {
			return pick(src, 1, 2, 3)
		}
		return pick(src, 1, 2, 3, 7, 10, 100, 1000, 1+src.Int64N(1_000_000), lease.MaxLimit, 1+src.Int64N(lease.MaxLimit))
	}
	k := &goKey{p: lease.Policy{Algorithm: a, Limit: limit(), Period: h.randPeriod(src)}}
	p := &k.p
	if a.HasBurst() {
		p.Burst = pick(src, 0, 0, 1, p.Limit, limit())
	}
	key := uniqueKey(h.t)
	capacity := p.Capacity()
	renewing := a.Refills() && src.IntN(2) == 0
	lent := map[string]int64{}   // what each holder was last told it is lent
	calls := map[string]uint32{} // each holder's last Lessee.Call
	var ends []int64             // when the loans lent end, unix µs
	for step := 0; step < steps; step++ {
		if bs, ok := src.(*byteSource); ok && bs.empty() {
			return
		}
		if renewing && !h.edge && src.IntN(4) != 0 {
			h.clock.Advance(time.Duration(src.Int64N(int64(p.Period)/50 + 1)))
		} else {
			h.advance(src, p.Period, ends...)
		}
		if now := h.clock.Now().UnixMicro(); k.st != nil && src.IntN(6) == 0 {
			// To the state's expiry, or just past it: Redis keeps the
			// key up to a millisecond longer.
			if exp := k.st.Expiry(k.p); exp > now && exp-now < int64(100*24*time.Hour/time.Microsecond) {
				h.clock.Advance(time.Duration(exp-now+pick(src, 0, 0, 1, 500, 999, 1000, 1500)) * time.Microsecond)
			}
		}
		if step > 0 && src.IntN(4) == 0 {
			n := min(pick(src, 0, 1, 2, capacity/3+1, capacity, src.Int64N(capacity)+1, lease.MaxHits), lease.MaxHits)
			h.ret(key, k, n, holders[src.IntN(len(holders))])
			continue
		}
		need := min(pick(src, 0, 1, 1, 2, capacity/2, capacity, capacity+1, src.Int64N(capacity)+1), lease.MaxHits)
		want := min(lease.MaxHits, need+pick(src, 0, 0, 1, capacity, src.Int64N(capacity)+1))
		to := lease.Lessee{ID: holders[src.IntN(len(holders))]}
		if h.edge {
			h.edgeLease(src, k, &want, &need, &to, lent[to.ID])
			g := h.lease(key, k, want, need, to)
			if to.ID != "" {
				lent[to.ID] = g.Lent
				ends = append(ends, h.clock.Now().UnixMicro()+to.TTL.Microseconds())
			}
			h.tally(g)
			continue
		}
		if renewing && src.IntN(8) != 0 {
			to.ID = holders[1]
			need = min(pick(src, 1, 1, 2, src.Int64N(capacity/8+1)+1), lease.MaxHits) // mostly granted
			want = min(lease.MaxHits, need+pick(src, 0, 1, 10, capacity/4))
		}
		if to.ID != "" {
			to.Held = min(pick(src, 0, 0, 1, capacity/2, src.Int64N(capacity)+1), lease.MaxHits)
			if l := lent[to.ID]; renewing && src.IntN(4) != 0 {
				to.Held = pick(src, l/2, max(0, l-1), src.Int64N(l+1)) // some of it spent
			}
			to.TTL = time.Duration(pick(src, 1, 100, 1000, 60_000, 3_600_000)) * time.Millisecond
			to.Idle = time.Duration(pick(src, 0, 0, 1, 1000, src.Int64N(int64(p.Period)/1000+1))) * time.Microsecond
			to.SpentBefore = min(pick(src, 0, 0, 1, capacity/2, src.Int64N(capacity)+1), lease.MaxHits)
			to.MaxHolders = int(pick(src, 0, 0, 1, 2))
			if src.IntN(3) != 0 {
				to.Call = src.Uint32() | 1
			}
			if src.IntN(5) == 0 {
				to.Unanswered = uint32(pick(src, 0, 1, 2, 3))
			}
			if c := calls[to.ID]; c != 0 && src.IntN(4) == 0 {
				// Its previous call went unanswered: if it is still the
				// key's last call, its grant comes back.
				to.Unanswered = c
			}
			if a.LeasesAhead() {
				maxW := min(int64(lease.MaxAheadWindows), int64(lease.MaxLeaseTTL/p.Period))
				to.AheadWindows = min(pick(src, 0, 1, 2, 3, maxW, src.Int64N(maxW+1)), maxW)
				to.AheadTokens = min(pick(src, 0, 1, p.Limit/3, p.Limit, src.Int64N(p.Limit)+1), lease.MaxHits)
			}
		}
		g := h.lease(key, k, want, need, to)
		if to.ID != "" {
			lent[to.ID], calls[to.ID] = g.Lent, to.Call
		}
		h.tally(g)
	}
}

// tally counts what a grant exercised.
func (h *parity) tally(g lease.Grant) {
	switch {
	case g.Crowded:
		h.crowded++
	case g.AheadTokens > 0:
		h.ahead++
	}
	switch {
	case g.Granted > 0:
		h.grants++
	case g.Wait > 0:
		h.denials++
	}
}

// edgeLease draws a lease call's arguments at the edges: counts of 0 to
// 3, or what the holder was lent (l) and 1 either side; TTLs of 1ms, the
// period or two; idle times of 0, 1µs or 1ms.
func (h *parity) edgeLease(src source, k *goKey, want, need *int64, to *lease.Lessee, l int64) {
	*need = pick(src, 0, 1, 1, 2, 3)
	*want = *need + pick(src, 0, 0, 1, 2)
	if to.ID == "" {
		return
	}
	to.Held = max(0, pick(src, 0, 1, l, l, l-1, l+1))
	to.SpentBefore = max(0, pick(src, 0, 0, 1, l, l-to.Held))
	to.TTL = time.Duration(pick(src, 1, 1, 2, 1000)) * time.Millisecond
	if src.IntN(2) == 0 {
		to.TTL = k.p.Period
	}
	to.Idle = time.Duration(pick(src, 0, 0, 1, 1000)) * time.Microsecond
	to.MaxHolders = int(pick(src, 0, 0, 1, 2))
	to.Call = uint32(pick(src, 0, 1, 2, 3))
	to.Unanswered = uint32(pick(src, 0, 0, 1, 2, 3))
	if k.p.Algorithm.LeasesAhead() {
		maxW := min(int64(lease.MaxAheadWindows), int64(lease.MaxLeaseTTL/k.p.Period))
		to.AheadWindows = min(pick(src, 0, 1, 1, 2, 3), maxW)
		to.AheadTokens = pick(src, 0, 1, 1, 2, k.p.Limit)
	}
}

// exact runs steps calls of a random policy of exact algorithm a on a new
// key, and compares the answers of the three and how many stamps or
// slots Redis holds with the Go state's.
func (h *parity) exact(src source, a lease.Algorithm, steps int) {
	k := &goKey{p: lease.Policy{Algorithm: a, Limit: pick(src, 1, 2, 3, 5, 20, 200), Period: h.randPeriod(src)}}
	p := &k.p
	if a.Acquired() {
		p.Limit = pick(src, 1, 2, 3, 5)
	}
	if a.HasMinInterval() && src.IntN(2) == 0 {
		p.MinInterval = time.Duration(src.Int64N(int64(p.Period) + 1))
	}
	key := uniqueKey(h.t)
	var ends []int64 // when the stamps and slots taken end, unix µs
	for step := 0; step < steps; step++ {
		if bs, ok := src.(*byteSource); ok && bs.empty() {
			return
		}
		h.advance(src, p.Period, ends...)
		now := h.clock.Now()
		ends = append(ends, now.UnixMicro()+p.Period.Microseconds(), now.UnixMicro()+p.MinInterval.Microseconds())
		var r0, r1, r2 lease.Result
		var e1, e2 error
		var hits int64
		held := int64(-1) // what the Go state holds after the call
		switch st := h.state(k, now.UnixMicro()).(type) {
		case algo.LogState:
			hits = min(pick(src, 0, 1, 1, 1, 2, p.Limit, p.Limit+1), MaxLogHits)
			r0 = st.Check(*p, now, hits)
			r1, e1 = h.rs.Log(h.ctx, key, *p, hits)
			r2, e2 = h.ms.Log(h.ctx, key, *p, hits)
			if r0.Allowed {
				h.logAllowed++
			} else {
				h.logDenied++
			}
			for _, s := range st.(*algo.SlidingLogState).Stamps {
				held += s.N
			}
		case algo.SlotState:
			id := []string{"a", "b", "c", "d", "e", "f"}[src.IntN(6)]
			if src.IntN(3) == 0 {
				h.release(key, k, st, id)
				continue
			}
			hits = pick(src, 0, 1, 1)
			r0 = st.Acquire(*p, now, id, hits)
			r1, e1 = h.rs.Acquire(h.ctx, key, *p, id, hits)
			r2, e2 = h.ms.Acquire(h.ctx, key, *p, id, hits)
			if r0.Allowed && hits > 0 {
				h.acquired++
			}
			held += int64(len(st.(*algo.ConcurrencyState).Held))
		}
		if e1 != nil || e2 != nil || r1 != r0 || r2 != r0 {
			h.t.Fatalf("%+v, step %d at %s:\n  go:     %+v\n  redis:  %+v %v\n  memory: %+v %v", *p, step, now.Format(time.RFC3339Nano), r0, r1, e1, r2, e2)
		}
		h.checkExpiry(key, k, r0.Allowed && hits > 0)
		// Redis reaps stamps and ids at its next call: it may hold more
		// than the Go state, never fewer.
		n, err := h.raw.client.Do(h.ctx, h.raw.client.B().Zcard().Key(h.raw.Key(key, p.Algorithm)).Build()).AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			h.t.Fatal(err)
		}
		if n < held+1 {
			h.t.Fatalf("%+v, step %d: Redis holds %d stamps or slots, the Go state %d", *p, step, n, held+1)
		}
	}
}

// release runs one concurrency release of id through the three and
// compares them: nil where the Go state held id, else lease.ErrNoSlot.
func (h *parity) release(key string, k *goKey, st algo.SlotState, id string) {
	h.t.Helper()
	ok := st.Release(h.clock.Now(), id)
	e1, e2 := h.rs.Release(h.ctx, key, k.p, id), h.ms.Release(h.ctx, key, k.p, id)
	for _, err := range []error{e1, e2} {
		if ok && err != nil || !ok && !errors.Is(err, lease.ErrNoSlot) {
			h.t.Fatalf("%+v Release(%s): go %v, redis %v, memory %v", k.p, id, ok, e1, e2)
		}
	}
	h.checkExpiry(key, k, false)
}

// checkExpiry checks when Redis's key of an exact algorithm expires
// against the Go state's expiry: never before it, never without an expiry;
// after a call that recorded a stamp or a slot (wrote), as the script sets
// it (ttl in prelude.lua), and after any other call as before it.
func (h *parity) checkExpiry(key string, k *goKey, wrote bool) {
	h.t.Helper()
	now := h.clock.Now().UnixMicro()
	exp := k.st.Expiry(k.p)
	if exp <= now {
		k.at = 0
		return // no state: Redis may keep the key a while
	}
	pttl, err := h.raw.client.Do(h.ctx, h.raw.client.B().Pttl().Key(h.raw.Key(key, k.p.Algorithm)).Build()).AsInt64()
	if err != nil {
		h.t.Fatal(err)
	}
	at, written := now/1000+pttl, now/1000+ttlMillis(exp-now)
	if pttl < 0 || at*1000 < exp || wrote && at != written || !wrote && k.at != 0 && at != k.at {
		h.t.Fatalf("%+v: the key expires at %d ms (PTTL %d), the Go state at %d µs (want %d ms after a write, else %d as before)", k.p, at, pttl, exp, written, k.at)
	}
	k.at = at
}

// run runs one key of a random algorithm (any of the table's) for steps
// calls.
func (h *parity) run(src source, steps int) {
	as := lease.Algorithms()
	h.runAlgorithm(src, as[src.IntN(len(as))], steps)
}

// runAlgorithm runs one key of algorithm a for steps calls.
func (h *parity) runAlgorithm(src source, a lease.Algorithm, steps int) {
	if a.Leased() {
		h.leased(src, a, steps)
	} else {
		h.exact(src, a, steps)
	}
}

// byAlgorithm runs f as a subtest named after each algorithm of the
// table, in its order (go test -run 'TestGoLuaParity/gcra' runs one; the
// mutation harness, lua/testdata/mutate, runs those a script serves), and
// reports whether every one ran: the tests check what their sequences
// exercised, summed over the algorithms, only then.
func byAlgorithm(t *testing.T, f func(t *testing.T, i int, a lease.Algorithm)) (all bool) {
	ran := 0
	for i, a := range lease.Algorithms() {
		t.Run(a.String(), func(t *testing.T) {
			ran++
			f(t, i, a)
		})
	}
	if ran < len(lease.Algorithms()) {
		t.Logf("%d of %d algorithms run: what the sequences exercised is not checked", ran, len(lease.Algorithms()))
		return false
	}
	return true
}

// TestGoLuaParity runs random call sequences of every algorithm, with
// random policies across the whole valid range (periods from 1ms to a
// year, limits and bursts up to 2^40), through the harness above: the
// scripts, the Go definition and the MemoryStore must not drift apart by
// a token, a millisecond or a byte of state. Each algorithm (a subtest)
// runs twice: each call alone, and each lease and return in a batch of
// two (forceBatches).
func TestGoLuaParity(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 5, 17, 3, 4, 5, 678901000, time.UTC))
	general := generalStore(t, srv.Addr)
	single := newTestStore(t, srv.Addr)
	batchedRaw := newTestStore(t, srv.Addr) // its own: forceBatches takes every call it sees
	modes := []struct {
		name string
		h    *parity
		ran  int // algorithms
	}{
		{"single", newParity(t, single, single, general, clock), 0},
		{"batched", newParity(t, forceBatches(t, batchedRaw), batchedRaw, general, clock), 0},
	}
	all := byAlgorithm(t, func(t *testing.T, i int, a lease.Algorithm) {
		for j := range modes {
			m := &modes[j]
			t.Run(m.name, func(t *testing.T) {
				m.ran++
				h := m.h
				h.t = t
				r := rand.New(rand.NewPCG(7+uint64(j), 11+uint64(i)))
				for range 100 {
					h.runAlgorithm(r, a, 12)
				}
				if a.Leased() && h.byAlg[a] < 300 {
					t.Errorf("%v: %d states compared, want at least 300", a, h.byAlg[a])
				}
			})
		}
	})
	if !all {
		return
	}
	for _, m := range modes {
		h := m.h
		if m.ran < len(lease.Algorithms()) {
			continue
		}
		t.Logf("%s: identical answers and states: %d leases granted, %d denied with a wait, %d lending shares ahead, %d crowded out, %d returns, %d naming the key's last call unanswered; %d states compared byte for byte (%v; %d of them with 3 ended loans), %d calls on a key Redis kept past its Go state's expiry; sliding_log %d allowed, %d denied; %d acquires",
			m.name, h.grants, h.denials, h.ahead, h.crowded, h.returns, h.backs, h.states, h.byAlg, h.ended, h.gaps, h.logAllowed, h.logDenied, h.acquired)
		if h.grants < 500 || h.denials < 500 || h.ahead < 100 || h.crowded < 70 || h.returns < 300 || h.backs < 50 || h.gaps < 50 || h.ended < 50 || h.logDenied < 150 || h.logAllowed < 150 || h.acquired < 100 {
			t.Errorf("%s: the random sequences exercised too few grants, denials, shares, crowds, returns, expired keys or exact calls to compare", m.name)
		}
	}
}

// TestGoLuaParityEdges runs the harness at the algorithms' edges (see
// parity.edge), each algorithm a subtest: where the random sequences of
// TestGoLuaParity seldom land on a boundary (a comparison of equal times,
// a count of exactly the limit, a loan ending at the call's instant, a
// call naming the key's last call unanswered), these land on one at most
// calls, so that a script that compares < where Go compares <=, or is off
// by one, fails here.
func TestGoLuaParityEdges(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 5, 17, 3, 4, 5, 678901000, time.UTC))
	raw := newTestStore(t, srv.Addr)
	h := newParity(t, raw, raw, generalStore(t, srv.Addr), clock)
	h.edge = true
	all := byAlgorithm(t, func(t *testing.T, i int, a lease.Algorithm) {
		h.t = t
		r := rand.New(rand.NewPCG(13, 17+uint64(i)))
		for range 70 {
			h.runAlgorithm(r, a, 16)
		}
	})
	if !all {
		return
	}
	t.Logf("at the edges: %d leases granted, %d denied with a wait, %d lending shares ahead, %d crowded out, %d returns, %d naming the key's last call unanswered; %d states compared (%v), %d calls on a key Redis kept past its Go state's expiry; sliding_log %d allowed, %d denied; %d acquires",
		h.grants, h.denials, h.ahead, h.crowded, h.returns, h.backs, h.states, h.byAlg, h.gaps, h.logAllowed, h.logDenied, h.acquired)
	if h.grants < 1000 || h.denials < 500 || h.ahead < 100 || h.crowded < 100 || h.returns < 500 || h.backs < 50 || h.gaps < 200 || h.logDenied < 300 || h.logAllowed < 300 || h.acquired < 200 {
		t.Errorf("the sequences at the edges exercised too few grants, denials, shares, crowds, returns, expired keys or exact calls to compare")
	}
}

// FuzzGoLuaParity runs the harness on the sequences the fuzzer's bytes
// spell: an algorithm, its policy, then calls until the bytes run out, on
// a new key, the clock set back to one instant for each input (one
// redis-server for the whole run; go test runs the seeds).
func FuzzGoLuaParity(f *testing.F) {
	start := time.Date(2026, 5, 17, 3, 4, 5, 678901000, time.UTC)
	srv, clock := redistest.StartWithClock(f, start)
	raw, general := newUnbatchedStore(f, srv.Addr), generalStore(f, srv.Addr)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 12 {
		seed := make([]byte, 8*(4+i*4))
		for j := 0; j < len(seed); j += 8 {
			binary.LittleEndian.PutUint64(seed[j:], r.Uint64())
		}
		seed[0] = byte(i) // every algorithm first
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		clock.Set(start)
		h := newParity(t, raw, raw, general, clock)
		h.run(&byteSource{b: data}, 200)
	})
}

// TestReleaseAtItsExpiry: a concurrency key whose every id has expired is
// no state, as in the Go definition and the MemoryStore, though Redis
// keeps the key up to a few milliseconds longer (its TTL is rounded up to
// whole ms, plus 1): a release of the expired id there is ErrNoSlot on
// both stores, as on a key never acquired.
func TestReleaseAtItsExpiry(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 5, 17, 3, 4, 5, 678901000, time.UTC))
	rs := newUnbatchedStore(t, srv.Addr)
	ms := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.Concurrency, Limit: 2, Period: time.Second}
	for _, after := range []time.Duration{time.Second, time.Second + 500*time.Microsecond} {
		key := uniqueKey(t)
		for _, s := range []lease.Store{rs, ms} {
			if _, err := s.Acquire(ctx, key, p, "a", 1); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(after)
		if err := rs.Release(ctx, key, p, "a"); !errors.Is(err, lease.ErrNoSlot) {
			t.Errorf("%v after its acquire: Redis's release: %v, want %v", after, err, lease.ErrNoSlot)
		}
		if err := ms.Release(ctx, key, p, "a"); !errors.Is(err, lease.ErrNoSlot) {
			t.Errorf("%v after its acquire: the MemoryStore's release: %v, want %v", after, err, lease.ErrNoSlot)
		}
	}
}
