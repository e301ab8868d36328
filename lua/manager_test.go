package lua

// Tests of lease.Manager over the Redis store: what the design promises
// end to end (accuracy with several nodes, failure modes, Redis operations
// per decision).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua/redistest"
)

func newManager(t testing.TB, s lease.Store, cfg lease.Config) *lease.Manager {
	t.Helper()
	m := lease.NewManager(s, cfg)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// TestTwoManagersShareLimit: two Managers (two nodes) leasing from one
// Redis never admit more than the limit together, and admit at least 97%
// of it when both are busy. Redis and the Managers share a frozen clock:
// nothing refills and no window ends during the run, whatever the
// machine's load, so the limit is exact.
func TestTwoManagersShareLimit(t *testing.T) {
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	const limit, workers = 3000, 3
	for _, alg := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			p := lease.Policy{Algorithm: alg, Limit: limit, Period: time.Hour}
			key := uniqueKey(t)
			var admitted atomic.Int64
			var wg sync.WaitGroup
			for node := 0; node < 2; node++ {
				m := newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						denied := 0
						// Bounded: stop after 200 denials in a row, or
						// 3× the limit of checks.
						for i := 0; i < 3*limit && denied < 200; i++ {
							d, err := m.Take(key, p, 1)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Degraded || d.Unavailable {
								t.Errorf("decision degraded (%+v): Redis should be healthy", d)
								return
							}
							if d.Allowed {
								admitted.Add(1)
								denied = 0
							} else {
								denied++
							}
						}
					}()
				}
			}
			wg.Wait()
			got := admitted.Load()
			t.Logf("%v: two managers admitted %d of limit %d", alg, got, limit)
			if got > limit {
				t.Errorf("admitted %d > limit %d: leasing over-admitted", got, limit)
			}
			if got < limit*97/100 {
				t.Errorf("admitted %d < 97%% of %d with both managers busy", got, limit)
			}
		})
	}
}

// TestManagerStoreFailure kills (and pauses) Redis under load: checks keep
// being answered within the store timeout, each failure mode is honoured,
// and enforcement resumes when Redis is back.
func TestManagerStoreFailure(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, srv.Addr)
	// testTimeout (2s) rather than the default 50ms: what is tested is
	// that checks are answered within the timeout, whatever it is, and
	// that each failure mode is honoured; the healthy phases need every
	// call of a healthy Redis to beat it. 200ms did not: in a -race run at
	// load ~17 the breaker opened before the outage (timed-out calls of
	// the background load) and "before the outage: check 1 of 5" was
	// Unavailable. A paused Redis is still found out, a timeout later.
	const storeTimeout = testTimeout
	m := newManager(t, s, lease.Config{
		StoreTimeout: storeTimeout,
		Breaker:      lease.BreakerConfig{Failures: 3, Cooldown: 100 * time.Millisecond},
	})
	pol := func(mode lease.FailureMode) lease.Policy {
		return lease.Policy{Algorithm: lease.TokenBucket, Limit: 5, Period: time.Hour, OnFailure: mode}
	}
	// How long a check takes is reported, not asserted: on a loaded
	// machine scheduling can add anything. That a hung Store costs a
	// check at most the timeout is tested in lease (TestFailureOnHungStore
	// would hang otherwise).
	var slowest atomic.Int64
	take := func(key string, p lease.Policy) lease.Decision {
		t.Helper()
		start := time.Now()
		d, err := m.Take(key, p, 1)
		if took := time.Since(start); took > time.Duration(slowest.Load()) {
			slowest.Store(int64(took))
		}
		if err != nil {
			t.Fatalf("Take(%s): %v", key, err)
		}
		return d
	}

	// Background load on other keys the whole time, bounded.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for w := 0; w < 2; w++ {
		bg.Add(1)
		go func() {
			defer bg.Done()
			p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1 << 30, Period: time.Second}
			for i := 0; i < 5_000_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := m.Take("bg-"+strconv.Itoa(i%64), p, 1); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	defer func() { close(stop); bg.Wait() }()

	healthy := func(phase string) {
		t.Helper()
		key := uniqueKey(t)
		for i := 0; i < 5; i++ {
			if d := take(key, pol(lease.FailClosed)); !d.Allowed || d.Degraded || d.Unavailable {
				t.Fatalf("%s: check %d of 5 = %+v, want allowed from the Store", phase, i+1, d)
			}
		}
		if d := take(key, pol(lease.FailClosed)); d.Allowed || d.Degraded || d.Unavailable {
			t.Fatalf("%s: check 6 of limit 5 = %+v, want denied by the Store", phase, d)
		}
	}
	healthy("before the outage")

	outage := func(name string, down, up func()) {
		down()
		// Open the breaker with a few failing checks.
		for i := 0; i < 5; i++ {
			take(uniqueKey(t), pol(lease.FailOpen))
		}
		if d := take(uniqueKey(t), pol(lease.FailOpen)); !d.Allowed || !d.Degraded {
			t.Errorf("%s, open: %+v, want allowed and degraded", name, d)
		}
		if d := take(uniqueKey(t), pol(lease.FailClosed)); d.Allowed || !d.Unavailable || d.RetryAfter <= 0 {
			t.Errorf("%s, closed: %+v, want denied, unavailable, with a retry-after", name, d)
		}
		key := uniqueKey(t)
		for i := 0; i < 5; i++ {
			if d := take(key, pol(lease.FailLocal)); !d.Allowed || !d.Degraded {
				t.Errorf("%s, local: check %d of 5 = %+v, want allowed from node memory", name, i+1, d)
			}
		}
		if d := take(key, pol(lease.FailLocal)); d.Allowed || !d.Degraded {
			t.Errorf("%s, local: check 6 of limit 5 = %+v, want denied from node memory", name, d)
		}
		up()
		// The breaker probes after its cool-down (100ms, real time: the
		// Manager runs on the real clock against a real redis-server);
		// enforcement by the Store resumes. Each poll takes first (a
		// check is what probes a breaker that nothing else probes) and
		// then looks at the breaker.
		clocktest.Eventually(t, 30*time.Second, name+": the Store back in use", func() bool {
			d := take(uniqueKey(t), pol(lease.FailClosed))
			return !d.Unavailable && m.StoreHealthy()
		})
		healthy("after " + name)
	}
	outage("Redis killed", srv.Kill, srv.Restart)
	// The pause phase used to wait for health before taking: with nothing
	// else probing the breaker it never closed.
	outage("Redis paused", srv.Pause, srv.Resume)
	t.Logf("slowest check: %v (store timeout %v)", time.Duration(slowest.Load()), storeTimeout)
}

// commandStats returns the calls of each command from INFO commandstats.
func commandStats(t testing.TB, addr string) map[string]int64 {
	t.Helper()
	stats, err := redistest.CommandStats(addr)
	if err != nil {
		t.Fatal(err)
	}
	return stats
}

// opsPerDecision runs decisions checks through one Manager, choosing each
// key with next, and returns the Redis round trips (script calls) and all
// commands (including those the scripts ran) per decision.
func opsPerDecision(t testing.TB, decisions int, next func(r *rand.Rand) string) (scripts, commands float64) {
	addr := redistest.Start(t)
	s := newUnbatchedStore(t, addr)
	m := newManager(t, s, lease.Config{StoreTimeout: testTimeout})
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1 << 40, Period: time.Second}
	before := commandStats(t, addr)
	const workers = 4
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for i := 0; i < decisions/workers; i++ {
				if d, err := m.Take(next(r), p, 1); err != nil || !d.Allowed {
					t.Errorf("Take = %+v, %v; want allowed", d, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	after := commandStats(t, addr)
	var sc, all int64
	for name, n := range after {
		n -= before[name]
		switch name {
		case "info", "hello", "client|setname", "client|setinfo", "ping", "select":
			continue // the test's own and connection setup
		case "evalsha", "eval":
			sc += n
		}
		all += n
	}
	return float64(sc) / float64(decisions), float64(all) / float64(decisions)
}

// TestRedisOpsPerDecision measures the Redis operations (script calls:
// leases and returns) per decision, against the design's targets: ≤ 0.1%
// for one hot key, ≤ 1% for Zipf-distributed keys (1M keys at 1M
// decisions/s; here the same keys-to-rate ratio, scaled down, on simulated
// time).
//
// The Zipf target holds in steady state: every key's first lease is a
// Store call, so a run that starts cold pays one call per distinct key it
// sees (the first simulated second alone: about 20%). The test warms up
// until nearly every key has been seen, then asserts ≤ 1% on average.
// With the idle return on (keys unchecked for 10s are dropped) the Zipf
// tail, keys checked less often than every 10s, keeps its small loans
// (Config.KeepIdle): the same ≤ 1%. Without kept loans it pays a lease per
// visit (~2.6% here; the design target is not met at this keys-to-rate
// ratio with a 10s Idle): that figure is reported, and bounded loosely.
func TestRedisOpsPerDecision(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	const decisions = 400_000
	sc, all := opsPerDecision(t, decisions, func(*rand.Rand) string { return "hot" })
	t.Logf("one hot key, %d decisions: %.4f%% script calls per decision (%.4f%% commands incl. those inside scripts)", decisions, 100*sc, 100*all)
	if sc > 0.001 {
		t.Errorf("hot key: %.4f%% Redis script calls per decision, want ≤ 0.1%%", 100*sc)
	}

	const keys, rate = 20_000, 20_000
	t.Run("zipf steady state", func(t *testing.T) {
		warm, fracs := zipfOps(t, keys, rate, 20, 5, lease.Config{SweepInterval: -1})
		t.Logf("zipf(s=1.1) over %d keys at %d decisions/s (simulated), no idle return: warm-up 20s %.2f%% (first second %.1f%%), then per second: %s; target ≤ 1%%",
			keys, rate, 100*avg(warm), 100*warm[0], percents(fracs))
		if f := avg(fracs); f > 0.01 {
			t.Errorf("steady state: %.2f%% script calls per decision, want ≤ 1%%", 100*f)
		}
	})
	t.Run("zipf with idle return", func(t *testing.T) {
		// The sweeper runs on a real ticker and judges idleness on the
		// simulated clock: every few hundred simulated ms.
		warm, fracs := zipfOps(t, keys, rate, 20, 5, lease.Config{SweepInterval: 20 * time.Millisecond})
		t.Logf("zipf(s=1.1) over %d keys at %d decisions/s (simulated), idle return after 10s, slow loans kept: warm-up 20s %.2f%%, then per second: %s; target ≤ 1%%",
			keys, rate, 100*avg(warm), percents(fracs))
		if f := avg(fracs); f > 0.01 {
			t.Errorf("steady state with idle return: %.2f%% script calls per decision, want ≤ 1%%", 100*f)
		}
	})
	t.Run("zipf with idle return, no kept loans", func(t *testing.T) {
		warm, fracs := zipfOps(t, keys, rate, 20, 5, lease.Config{SweepInterval: 20 * time.Millisecond, KeepIdle: -1})
		t.Logf("zipf(s=1.1) over %d keys at %d decisions/s (simulated), idle return after 10s, every idle key dropped: warm-up 20s %.2f%%, then per second: %s",
			keys, rate, 100*avg(warm), percents(fracs))
		// The tail's lease per visit, ~2.6% here (its return is skipped:
		// by then the Store's bucket has refilled). Bounded loosely.
		if f := avg(fracs); f > 0.04 {
			t.Errorf("steady state with idle return: %.2f%% script calls per decision, want ≤ 4%%", 100*f)
		}
	})
}

// zipfOps runs Zipf(1.1)-distributed checks over keys at rate per second
// through one Manager (cfg, with the clock set) on a frozen Redis clock
// shared with the Manager and moved 1ms at a time: warm simulated seconds,
// then measure more. It returns the script calls per decision of each
// second of both phases.
func zipfOps(t *testing.T, keys, rate, warm, measure int, cfg lease.Config) (warmFracs, fracs []float64) {
	t.Helper()
	srv, clock := redistest.StartWithClock(t, time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC))
	cfg.Now, cfg.StoreTimeout = clock.Now, testTimeout
	m := newManager(t, newUnbatchedStore(t, srv.Addr), cfg)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1 << 40, Period: time.Second}
	z := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.1, 1, uint64(keys-1))
	scripts := func() int64 {
		st := commandStats(t, srv.Addr)
		return st["evalsha"] + st["eval"]
	}
	var buf []byte
	for s := 0; s < warm+measure; s++ {
		before := scripts()
		for ms := 0; ms < 1000; ms++ {
			for i := 0; i < rate/1000; i++ {
				buf = strconv.AppendUint(append(buf[:0], 'z'), z.Uint64(), 10)
				if d, err := m.Take(string(buf), p, 1); err != nil || !d.Allowed {
					t.Fatalf("Take = %+v, %v; want allowed", d, err)
				}
			}
			clock.Advance(time.Millisecond)
		}
		f := float64(scripts()-before) / float64(rate)
		if s < warm {
			warmFracs = append(warmFracs, f)
		} else {
			fracs = append(fracs, f)
		}
	}
	st := m.Stats()
	t.Logf("manager: %d keys, %d sync leases, %d prefetches, %d returns, %d degraded decisions",
		st.ActiveKeys, st.Leases, st.Prefetches, st.Returns, st.DegradedDecisions)
	return warmFracs, fracs
}

func avg(fs []float64) float64 {
	var sum float64
	for _, f := range fs {
		sum += f
	}
	return sum / float64(len(fs))
}

func percents(fs []float64) string {
	ps := make([]string, len(fs))
	for i, f := range fs {
		ps[i] = fmt.Sprintf("%.2f%%", 100*f)
	}
	return strings.Join(ps, ", ")
}

// TestTwoManagersRefillAccuracy: two Managers and Redis share one frozen
// clock that the test moves 1ms at a time, for 10 simulated seconds of a
// token_bucket of 1000/s (burst 100) with both Managers asking 3 times
// faster than the limit. Together they must admit at most burst + rate ×
// time, and at least 97% of it (under-admission is bounded by the tokens a
// Manager holds when the run ends).
func TestTwoManagersRefillAccuracy(t *testing.T) {
	start := time.Date(2026, 4, 1, 8, 0, 0, 0, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 1000, Period: time.Second, Burst: 100}
	const (
		steps       = 10_000 // of 1ms
		checksEach  = 3      // per Manager per ms: 6000/s asked, 1000/s allowed
		wantMaximum = 100 + steps*1000/1000
	)
	var ms [2]*lease.Manager
	for i := range ms {
		ms[i] = newManager(t, newTestStore(t, srv.Addr), lease.Config{Now: clock.Now, StoreTimeout: testTimeout, SweepInterval: -1})
	}
	var admitted [2]int64
	for step := 0; step < steps; step++ {
		for k := 0; k < 2; k++ {
			i := (k + step) % 2 // alternate which Manager checks first
			m := ms[i]
			for c := 0; c < checksEach; c++ {
				d, err := m.Take("refill", p, 1)
				if err != nil || d.Degraded || d.Unavailable {
					t.Fatalf("Take: %+v %v", d, err)
				}
				if d.Allowed {
					admitted[i]++
				}
			}
		}
		clock.Advance(time.Millisecond)
	}
	total := admitted[0] + admitted[1]
	t.Logf("10s of token_bucket 1000/s burst 100, two managers: admitted %d (%d + %d) of at most %d (%.2f%%)",
		total, admitted[0], admitted[1], wantMaximum, 100*float64(total)/wantMaximum)
	if total > wantMaximum {
		t.Errorf("admitted %d > burst + rate × time = %d: over-admission", total, wantMaximum)
	}
	if total < wantMaximum*97/100 {
		t.Errorf("admitted %d < 97%% of %d with both managers busy", total, wantMaximum)
	}
	if admitted[0] == 0 || admitted[1] == 0 {
		t.Errorf("one manager admitted nothing (%d, %d): the limit is not shared", admitted[0], admitted[1])
	}
}

// TestBreakerPausedRedisIsOneRoundTrip: 40 calls in flight to a paused
// (SIGSTOP) Redis all time out together; for the breaker that is one
// failed round trip, not 40 failures, and it stays closed. Before the
// breaker counted calls: a 100ms freeze under load opened it (finding 1).
func TestBreakerPausedRedisIsOneRoundTrip(t *testing.T) {
	srv := redistest.StartServer(t)
	b := lease.NewBreaker(newTestStore(t, srv.Addr), lease.BreakerConfig{
		Timeout: 300 * time.Millisecond, MaxTimeout: 300 * time.Millisecond, Failures: 3, Cooldown: time.Hour,
	})
	t.Cleanup(b.Close)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Hour}
	if _, err := b.Lease(context.Background(), uniqueKey(t), p, 1, 1, lease.Lessee{}); err != nil {
		t.Fatal(err)
	}
	srv.Pause()
	start := make(chan struct{})
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 40 {
		wg.Go(func() {
			<-start
			if _, err := b.Lease(context.Background(), "paused-"+strconv.Itoa(i), p, 1, 1, lease.Lessee{}); errors.Is(err, lease.ErrStoreUnavailable) {
				failed.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	srv.Resume()
	if failed.Load() != 40 {
		t.Fatalf("%d of 40 calls to a paused Redis failed, want 40", failed.Load())
	}
	if b.State() != lease.BreakerClosed {
		t.Fatalf("40 calls failing in one stall opened the breaker (state %v): counted as calls, not round trips", b.State())
	}
}
