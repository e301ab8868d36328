package lua

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// stored is key's value and PTTL (counter key, algorithm a) in s's Redis.
func stored(t testing.TB, s *Store, key string, a lease.Algorithm) (string, int64) {
	t.Helper()
	ctx := context.Background()
	k := s.Key(key, a)
	// One round trip: the parity tests read every key after every call.
	rs := s.client.DoMulti(ctx, s.client.B().Get().Key(k).Build(), s.client.B().Pttl().Key(k).Build())
	v, err := rs[0].ToString()
	if err != nil && !rueidis.IsRedisNil(err) {
		t.Fatalf("GET %s: %v", k, err)
	}
	ttl, err := rs[1].AsInt64()
	if err != nil {
		t.Fatalf("PTTL %s: %v", k, err)
	}
	return v, ttl
}

// scriptRuns is the scripts Redis at addr has run (EVALSHA and EVAL; an
// EVALSHA of a script Redis does not have yet counts twice: see
// loadLeaseScripts).
func scriptRuns(t testing.TB, addr string) int64 {
	st := commandStats(t, addr)
	return st["evalsha"] + st["eval"]
}

// loadLeaseScripts runs each lease script of s once (on a key of its
// own), so that Redis has them and later calls count once in scriptRuns.
func loadLeaseScripts(t *testing.T, s *Store) {
	t.Helper()
	for _, a := range leasedAlgorithms {
		p := lease.Policy{Algorithm: a, Limit: 10, Period: time.Second}
		if _, err := s.Lease(context.Background(), uniqueKey(t), p, 1, 1, lease.Lessee{}); err != nil {
			t.Fatal(err)
		}
	}
}

// sampleClock gives s a fresh sample of its Redis's clock (a TIME).
func sampleClock(t *testing.T, s *Store) {
	t.Helper()
	send := s.clock.now()
	v, err := s.client.Do(context.Background(), s.client.B().Time().Build()).AsStrSlice()
	if err != nil {
		t.Fatal(err)
	}
	s.clock.record(v, send, s.clock.now())
}

// frozenRedis is a redis-server whose clock is frozen: the test stores
// read it as the node's clock (testClock), so their samples of it are
// exact and never go stale, whatever the machine's load.
func frozenRedis(t *testing.T) string {
	t.Helper()
	srv, _ := redistest.StartWithClock(t, time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	return srv.Addr
}

// TestFirstTouchMatchesScript leases random new keys of every leased
// algorithm twice on one frozen Redis clock: once through the lease script
// (Lessee.First false) and once as a first touch (First: SET NX of the
// state the Store computes), and requires the same answer, the same
// stored bytes and the same expiry. Old and new nodes then read one
// format: a first touch writes what the scripts of this release and the
// previous one (the same format, the same key suffixes) would. It also
// requires that the first touches ran no script where the call writes
// state.
func TestFirstTouchMatchesScript(t *testing.T) {
	start := time.Date(2026, 6, 1, 12, 0, 0, 123456000, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	s := newUnbatchedStore(t, srv.Addr)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(7, 11))
	pick := func(vals ...int64) int64 { return vals[r.IntN(len(vals))] }
	loadLeaseScripts(t, s)
	before := scriptRuns(t, srv.Addr)
	var cases, written int64
	byAlg := map[lease.Algorithm]int{}
	for cases < 800 {
		a := leasedAlgorithms[r.IntN(len(leasedAlgorithms))]
		p := lease.Policy{Algorithm: a, Limit: pick(1, 3, 10, 100, 1000, 1+r.Int64N(1_000_000), lease.MaxLimit),
			Period: time.Duration(pick(1, 10, 1000, 60_000, 3_600_000, 1+r.Int64N(365*86_400_000))) * time.Millisecond}
		if a.HasBurst() {
			p.Burst = pick(0, 0, 1, p.Limit, 1+r.Int64N(lease.MaxLimit))
			if p.Validate() != nil {
				p.Burst = 0
			}
		}
		if p.Validate() != nil {
			continue
		}
		capacity := p.Capacity()
		want := min(pick(0, 1, 13, capacity/8+1, capacity, capacity+1, r.Int64N(capacity)+1), lease.MaxHits)
		need := min(want, pick(0, 1, 1, want, capacity+1, r.Int64N(want+1)))
		to := lease.Lessee{ID: []string{"m-a", "node-7", ""}[r.IntN(3)], Held: pick(0, 0, 5),
			TTL:  time.Duration(pick(1, 1000, 300_000, 86_400_000)) * time.Millisecond,
			Idle: time.Duration(pick(0, 0, 2000, r.Int64N(100_000))) * time.Millisecond, SpentBefore: pick(0, 0, 3)}
		if r.IntN(3) != 0 {
			to.Call = r.Uint32() | 1
		}
		if a.LeasesAhead() && r.IntN(3) != 0 {
			to.AheadWindows = min(pick(1, 2, 150, lease.MaxAheadWindows), int64(lease.MaxLeaseTTL/p.Period))
			to.AheadTokens = pick(0, 1, 3, p.Limit, p.Limit+5)
		}
		if lease.CheckLease(p, want, need, to) != nil {
			continue
		}
		// Anywhere in the window, now and then on its last µs.
		clock.Advance(time.Duration(r.Int64N(int64(time.Second))))
		if r.IntN(8) == 0 {
			now, pu := clock.Now().UnixMicro(), p.Period.Microseconds()
			clock.Advance(time.Duration(pu-now%pu-1) * time.Microsecond)
		}
		cases++
		viaScript, viaFirst := uniqueKey(t), uniqueKey(t)
		g1, err := s.Lease(ctx, viaScript, p, want, need, to)
		if err != nil {
			t.Fatalf("%+v: script: %v", p, err)
		}
		first := to
		first.First = true
		sampleClock(t, s) // the clock moved: a fresh sample, so that the first touch sets
		g2, err := s.Lease(ctx, viaFirst, p, want, need, first)
		if err != nil {
			t.Fatalf("%+v: first touch: %v", p, err)
		}
		if g1 != g2 {
			t.Fatalf("%+v want %d need %d %+v:\nscript      %+v\nfirst touch %+v", p, want, need, to, g1, g2)
		}
		v1, ttl1 := stored(t, s, viaScript, a)
		v2, ttl2 := stored(t, s, viaFirst, a)
		if v1 != v2 || ttl1 != ttl2 {
			t.Fatalf("%+v want %d need %d %+v: stored\nscript      %x (pttl %d)\nfirst touch %x (pttl %d)", p, want, need, to, v1, ttl1, v2, ttl2)
		}
		if v1 != "" && to.ID != "" { // a call without a holder runs the script
			written++
			byAlg[a]++
		}
	}
	// The script keys ran one script each; the first touches one each
	// only where the call writes nothing (SET NX cannot tell then) or
	// has no holder (its tokens are spent at once: see first.go).
	if got, want := scriptRuns(t, srv.Addr)-before, 2*cases-written; got != want {
		t.Errorf("%d cases, %d writing state: %d scripts ran, want %d", cases, written, got, want)
	}
	for _, a := range leasedAlgorithms {
		if byAlg[a] < 50 {
			t.Errorf("%v: %d cases wrote state, want at least 50", a, byAlg[a])
		}
	}
}

// TestFirstTouchKeyWithState: a first touch of a key another holder
// leased writes nothing and runs the script: the same answer and bytes as
// the call without First, on a twin key.
func TestFirstTouchKeyWithState(t *testing.T) {
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	s := newUnbatchedStore(t, srv.Addr)
	loadLeaseScripts(t, s)
	ctx := context.Background()
	for _, p := range []lease.Policy{
		{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Second},
		{Algorithm: lease.GCRA, Limit: 100, Period: time.Second},
		{Algorithm: lease.FixedWindow, Limit: 100, Period: time.Second},
		{Algorithm: lease.SlidingWindow, Limit: 100, Period: time.Second},
	} {
		other := lease.Lessee{ID: "m-b", TTL: time.Minute, Call: 5, AheadWindows: 3, AheadTokens: 4}
		me := lease.Lessee{ID: "m-a", TTL: time.Minute, Call: 9, AheadWindows: 3, AheadTokens: 4}
		k1, k2 := uniqueKey(t), uniqueKey(t)
		for _, k := range []string{k1, k2} {
			if _, err := s.Lease(ctx, k, p, 30, 1, other); err != nil {
				t.Fatal(err)
			}
		}
		clock.Advance(100 * time.Millisecond)
		runs := scriptRuns(t, srv.Addr)
		g1, err := s.Lease(ctx, k1, p, 20, 1, me)
		if err != nil {
			t.Fatal(err)
		}
		me.First = true
		g2, err := s.Lease(ctx, k2, p, 20, 1, me)
		if err != nil {
			t.Fatal(err)
		}
		if g1 != g2 || g2.Granted != 20 {
			t.Errorf("%v: without First %+v, with %+v, want the same, 20 granted", p.Algorithm, g1, g2)
		}
		v1, ttl1 := stored(t, s, k1, p.Algorithm)
		v2, ttl2 := stored(t, s, k2, p.Algorithm)
		if v1 != v2 || ttl1 != ttl2 {
			t.Errorf("%v: stored %x (pttl %d) without First, %x (pttl %d) with", p.Algorithm, v1, ttl1, v2, ttl2)
		}
		if got := scriptRuns(t, srv.Addr) - runs; got != 2 {
			t.Errorf("%v: %d scripts ran for the two calls, want 2 (the first touch falls back to it)", p.Algorithm, got)
		}
	}
}

// TestFirstTouchDating: the node's clock runs slow against Redis's by 80
// ppm, within the drift the Store allows for: a first touch still dates
// the state no earlier than Redis's now at the SET, and no later than the
// projection's width after it; and the answer waits until the node's
// clock is past that width (here the sample's round trip, 5ms), so that
// the Store's now lies between the call's send and its answer.
func TestFirstTouchDating(t *testing.T) {
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	s := newUnbatchedStore(t, srv.Addr)
	loadLeaseScripts(t, s)
	local := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // the node's clock: its own epoch
	var slept []time.Duration
	s.clock = redisClock{now: func() time.Time { return local }, drift: clockDrift, sleep: func(d time.Duration) { slept = append(slept, d) }}
	// A sample whose TIME took 5ms to come back.
	at := clock.Now().UnixMicro()
	s.clock.record([]string{strconv.FormatInt(at/1e6, 10), strconv.FormatInt(at%1e6, 10)}, local, local.Add(5*time.Millisecond))
	// 50ms on the node's clock, 4µs more on Redis's: 80 ppm.
	local = local.Add(50 * time.Millisecond)
	clock.Advance(50*time.Millisecond + 4*time.Microsecond)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Second}
	key := uniqueKey(t)
	m := local
	_, width, ok := s.clock.estimate(m)
	if !ok {
		t.Fatal("no estimate from a 50ms-old sample")
	}
	runs := scriptRuns(t, srv.Addr)
	g, err := s.Lease(context.Background(), key, p, 10, 1, lease.Lessee{ID: "m-a", TTL: time.Minute, First: true})
	if err != nil || g.Granted != 10 {
		t.Fatalf("Lease = %+v, %v, want 10 granted", g, err)
	}
	if got := scriptRuns(t, srv.Addr) - runs; got != 0 {
		t.Fatalf("%d scripts ran: the first touch did not take SET NX", got)
	}
	v, _ := stored(t, s, key, p.Algorithm)
	if len(v) < 16 {
		t.Fatalf("stored %x: too short for a token_bucket state", v)
	}
	var b [8]byte
	copy(b[:], v[9:16])
	u := int64(binary.LittleEndian.Uint64(b[:]))
	redisNow := clock.Now().UnixMicro()
	if u < redisNow || u > redisNow+width {
		t.Errorf("state dated %d, Redis's now %d: want within [now, now+%dµs]", u, redisNow, width)
	}
	// Redis read TIME after the SET at its now: the answer waits until
	// its clock reaches the state's, the node's clock standing still.
	if want := time.Duration(u-redisNow) * time.Microsecond; len(slept) != 1 || slept[0] != want || want <= 0 {
		t.Errorf("slept %v, want once %v (> 0: the state's time less Redis's)", slept, want)
	}
	// A sample older than firstMaxAge is not used: the first touch runs
	// the script, with a TIME in the same round trip for the next, which
	// sets.
	local = local.Add(firstMaxAge + time.Millisecond)
	clock.Advance(firstMaxAge + time.Millisecond)
	before := commandStats(t, srv.Addr)
	for i := range 2 {
		if _, err := s.Lease(context.Background(), uniqueKey(t), p, 10, 1, lease.Lessee{ID: "m-a", TTL: time.Minute, First: true}); err != nil {
			t.Fatal(err)
		}
		after := commandStats(t, srv.Addr)
		scripts, times := after["evalsha"]+after["eval"]-before["evalsha"]-before["eval"], after["time"]-before["time"]
		// The script's TIME and the sample's; then the SET's.
		if want, wantTimes := int64(1), []int64{2, 3}[i]; scripts != want || times != wantTimes {
			t.Errorf("first touch %d after a stale sample: %d scripts and %d TIMEs in all, want %d and %d", i+1, scripts, times, want, wantTimes)
		}
	}
}

// TestFirstTouchClockStep: Redis's clock steps 50ms forward, across a
// window's end, after the node's sample (the node's clock, here Redis's
// own before the step, does not see it). The TIME sent with the SET shows
// the step: the Store gives the misdated state's tokens back and leases
// through the script, at Redis's own now, so that a window keeps its
// limit: another holder then gets the limit less this grant, and the
// grant's Reset is the script's.
func TestFirstTouchClockStep(t *testing.T) {
	for _, c := range []struct {
		name  string
		start time.Time     // the node's sample, and its clock from then on
		step  time.Duration // of Redis's clock after the sample
		reset time.Duration // the grant's, in Redis's window
	}{
		// 10ms before a window's end, 50ms forward: 40ms into the next.
		{"forward", time.Date(2026, 6, 1, 12, 0, 0, 990_000_000, time.UTC), 50 * time.Millisecond, 960 * time.Millisecond},
		// 10ms into a window, 50ms back: 40ms before its start.
		{"back", time.Date(2026, 6, 1, 12, 0, 1, 10_000_000, time.UTC), -50 * time.Millisecond, 40 * time.Millisecond},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, clock := redistest.StartWithClock(t, c.start)
			s := newUnbatchedStore(t, srv.Addr)
			s.met = newFirstMetrics(metrics.NewSet())
			loadLeaseScripts(t, s)
			local := clock.Now()
			s.clock = redisClock{now: func() time.Time { return local }, sleep: func(time.Duration) {}}
			sampleClock(t, s)
			clock.Set(clock.Now().Add(c.step)) // the node's clock stays
			p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 100, Period: time.Second}
			key := uniqueKey(t)
			me := lease.Lessee{ID: "m-a", TTL: time.Minute, First: true, AheadWindows: 3, AheadTokens: 5}
			g, err := s.Lease(context.Background(), key, p, 30, 1, me)
			if err != nil || g.Granted != 30 {
				t.Fatalf("Lease = %+v, %v, want 30 granted", g, err)
			}
			if g.Reset != c.reset {
				t.Errorf("Reset %v, want %v: the window of Redis's now, not of the sample's", g.Reset, c.reset)
			}
			other, err := s.Lease(context.Background(), key, p, 100, 1, lease.Lessee{ID: "m-b", TTL: time.Minute})
			if err != nil || other.Granted != 70 {
				t.Errorf("the other holder got %+v, %v, want 70: the window's limit less the first grant", other, err)
			}
			if got := s.met.stepped.Get(); got != 1 {
				t.Errorf("clock_stepped %d, want 1", got)
			}
		})
	}
}

// TestFirstTouchNoScript: a first touch without a fresh sample on a
// server that lost its scripts (restarted, failed over) runs the lease
// script with EVAL after the EVALSHA's NOSCRIPT, and keeps the sample of
// the TIME sent with it.
func TestFirstTouchNoScript(t *testing.T) {
	addr := frozenRedis(t)
	s := newUnbatchedStore(t, addr)
	if _, err := redistest.Command(addr, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	before := commandStats(t, addr)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Second}
	g, err := s.Lease(context.Background(), uniqueKey(t), p, 10, 1, lease.Lessee{ID: "m-a", TTL: time.Minute, First: true})
	if err != nil || g.Granted != 10 {
		t.Fatalf("Lease = %+v, %v, want 10 granted", g, err)
	}
	after := commandStats(t, addr)
	if sha, eval := after["evalsha"]-before["evalsha"], after["eval"]-before["eval"]; sha != 1 || eval != 1 {
		t.Errorf("%d EVALSHA and %d EVAL, want one of each (NOSCRIPT, then the source)", sha, eval)
	}
	if _, _, ok := s.clock.estimate(s.clock.now()); !ok {
		t.Error("no fresh sample after the script's TIME")
	}
}

// TestRefused: the error replies that turn first touches off, and those
// that only fail the call.
func TestRefused(t *testing.T) {
	for msg, want := range map[string]bool{
		"ERR unknown command 'TIME', with args beginning with: ":        false, // not transient
		"NOPERM this user has no permissions to run the 'time' command": false,
		"ERR command not allowed":                                       false,
		"READONLY You can't write against a read only replica.":         true,
		"LOADING Redis is loading the dataset in memory":                true,
		"BUSY Redis is busy running a script.":                          true,
		"OOM command not allowed when used memory > 'maxmemory'.":       true,
		"MASTERDOWN Link with MASTER is down":                           true,
		"TRYAGAIN Multiple keys request during rehashing of slot":       true,
		"CLUSTERDOWN The cluster is down":                               true,
	} {
		if got := transient(msg); got != want {
			t.Errorf("transient(%q) = %v, want %v", msg, got, want)
		}
	}
}

// TestFirstTouchStoreCalls: through a Manager, the first check of each of
// 200 new keys runs no script (a SET NX each), where with first touches
// off each runs one.
func TestFirstTouchStoreCalls(t *testing.T) {
	addr := frozenRedis(t)
	for _, on := range []bool{true, false} {
		s := newUnbatchedStore(t, addr)
		s.firstOn.Store(on)
		set := metrics.NewSet()
		s.met = newFirstMetrics(set)
		loadLeaseScripts(t, s)
		sampleClock(t, s)
		m := newManager(t, s, lease.Config{StoreTimeout: testTimeout})
		p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Second}
		before := commandStats(t, addr)
		for i := range 200 {
			d, err := m.Take("k"+strconv.FormatBool(on)+strconv.Itoa(i), p, 1)
			if err != nil || !d.Allowed {
				t.Fatalf("Take = %+v, %v", d, err)
			}
		}
		after := commandStats(t, addr)
		scripts := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]
		sets := after["set"] - before["set"]
		want := int64(0)
		if !on {
			want = 200
		}
		if scripts != want || sets != 200 {
			t.Errorf("first touches %v: %d scripts and %d SETs for 200 new keys, want %d and 200", on, scripts, sets, want)
		}
		if got := s.met.wrote.Get(); got != uint64(200-want) {
			t.Errorf("first touches %v: sluice_redis_first_touches_total{result=\"wrote\"} %d, want %d", on, got, 200-want)
		}
	}
}

// TestFirstTouchBacksOff: first touches of keys that have state (another
// holder's) each cost a SET NX that writes nothing; once fewer than a
// quarter of the recent tries hit, the Store tries one in 16, and it
// tries them all again once new keys hit.
func TestFirstTouchBacksOff(t *testing.T) {
	addr := frozenRedis(t)
	s := newUnbatchedStore(t, addr)
	loadLeaseScripts(t, s)
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Second}
	other := lease.Lessee{ID: "m-b", TTL: time.Minute}
	me := lease.Lessee{ID: "m-a", TTL: time.Minute, First: true}
	// tries is the SET NX tries of n first touches: the SETs less those of
	// the scripts (each writes once here).
	tries := func(n int, fresh bool) int64 {
		t.Helper()
		keys := make([]string, n)
		for i := range keys {
			keys[i] = uniqueKey(t)
			if !fresh {
				if _, err := s.Lease(ctx, keys[i], p, 1, 1, other); err != nil {
					t.Fatal(err)
				}
			}
		}
		before := commandStats(t, addr)
		for _, k := range keys {
			if g, err := s.Lease(ctx, k, p, 1, 1, me); err != nil || g.Granted != 1 {
				t.Fatalf("Lease = %+v, %v", g, err)
			}
		}
		after := commandStats(t, addr)
		return (after["set"] - before["set"]) - (after["evalsha"] - before["evalsha"])
	}
	if got := tries(320, false); got > 64+320/16+1 {
		t.Errorf("320 first touches of keys with state tried SET NX %d times, want at most %d", got, 64+320/16+1)
	}
	if got := tries(320, true); got < 320-64 {
		t.Errorf("320 first touches of new keys after that tried SET NX %d times, want at least %d", got, 320-64)
	}
}

// TestFirstTouchUnanswered: a first touch whose SET NX reached Redis but
// whose answer did not (Redis paused past the call's timeout) fails the
// call; the holder's next call names it (Lessee.Unanswered), and the
// script gives its grant back, as for a script whose answer was lost:
// the SET NX wrote the call and its grant as the script would.
func TestFirstTouchUnanswered(t *testing.T) {
	start := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	srv, _ := redistest.StartWithClock(t, start)
	s := newUnbatchedStore(t, srv.Addr)
	loadLeaseScripts(t, s)
	sampleClock(t, s)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Hour} // nothing refills meanwhile
	key := uniqueKey(t)
	before := commandStats(t, srv.Addr)
	srv.Pause()
	// Long enough for the SET to be written to the paused server's socket
	// on a loaded machine; it cannot be answered.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	_, err := s.Lease(ctx, key, p, 30, 1, lease.Lessee{ID: "m-a", TTL: time.Minute, Call: 7, First: true})
	cancel()
	srv.Resume()
	if err == nil {
		t.Fatal("a first touch with Redis paused past its timeout answered")
	}
	// The SET was sent: Redis runs it once it reads it.
	deadline := time.Now().Add(10 * time.Second)
	for v, _ := stored(t, s, key, p.Algorithm); v == ""; v, _ = stored(t, s, key, p.Algorithm) {
		if time.Now().After(deadline) {
			t.Fatal("the first touch's SET never reached Redis")
		}
		runtime.Gosched()
	}
	after := commandStats(t, srv.Addr)
	if scripts := after["evalsha"] + after["eval"] - before["evalsha"] - before["eval"]; scripts != 0 || after["set"]-before["set"] != 1 {
		t.Fatalf("%d scripts and %d SETs for the lost first touch, want 0 and 1: a SET NX", scripts, after["set"]-before["set"])
	}
	g, err := s.Lease(context.Background(), key, p, 0, 0, lease.Lessee{ID: "m-a", TTL: time.Minute, Call: 9, Unanswered: 7})
	if err != nil || g.Lent != 0 || g.Remaining != 100 {
		t.Errorf("the next call naming the unanswered one = %+v, %v; want its 30 back: 0 lent, 100 remaining", g, err)
	}
}
