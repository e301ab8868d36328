package lua

import (
	"context"
	"errors"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/algo"
)

// First touches. A lease call of a key that has no state in Redis runs
// the lease script on nothing: it reads TIME, finds no value, and writes
// the state of a fresh key with the caller's loan, which depends only on
// the call's arguments and the time. A node makes that call for every key
// it has never been granted (lease.Lessee.First), and in a workload of new
// keys (the first seconds of 10k uniform keys, Zipf over 1M keys) such
// calls are most of the scripts Redis runs. So for a Lessee.First call
// the Store computes that state itself, with the lease package's math
// (the Go mirror of the scripts, operation for operation), packs it in
// the scripts' format (leased.lua) and writes it with SET NX PX: one
// small command instead of a script (in INFO commandstats about 3µs
// against some 30; with the round trip, about 28µs of Redis CPU against
// 50 in the bench suite: docs/performance.md). If the key has state
// after all (another holder, a dropped and
// recreated bucket), SET NX writes nothing and the call runs the script
// as any other: a wasted round trip, no harm.
//
// The time. A script dates the state by Redis TIME; the Store dates it by
// Redis's clock as last sampled (a TIME sent with each SET NX, and with
// the script of a first touch that finds the sample older than
// firstMaxAge: no round trip of its own), projected by the node's own
// clock since, and pushed later by the uncertainty of that projection:
// the sample's round trip (at most firstMaxRTT) and clockDrift of its
// age. So the state's time is never before Redis's clock when the node
// computed it, and since the key had no state at the SET, nothing was
// granted from it in between; it is at most that uncertainty after, which
// counts the loan a little longer and refills a little later than the
// script would have (never more tokens). The answer then waits, if need
// be, until Redis's clock has surely passed the state's time (a few µs as
// a rule), so that, as for a script, the Store's now lies between the
// call's send and its answer (the Manager dates windows from that:
// lease/manager_ahead.go). A call without a holder (Lessee.ID "") runs
// the script: no loan of its own caps what others see of the key while
// its SET is on the way. A first touch never finds loans (SET NX writes
// only a key without state), so the bound on a key's holders
// (Lessee.MaxHolders) never crowds it out: where a key has loans, the
// script decides.
//
// A step of Redis's clock since the sample (or a Sentinel failover to a
// master whose clock reads otherwise) shows in the TIME read after the
// SET: outside what the projection allows, the Store forgets the sample,
// takes the misdated state back (deletes the key while it holds the bytes
// written, else returns the whole loan) and runs the script, which
// leases at Redis's own now.
//
// A first touch that finds state costs a round trip more than the script
// alone (a node restarted under a new holder id, keys moved to it, a hot
// key split): while fewer than a quarter of the recent tries find no
// state (firstOdds), the Store tries one first touch in 16 and runs the
// script for the others, until one of those hits.
//
// Not on a Redis Cluster (each shard has its own clock, and a TIME goes
// to any of them): there every first touch runs the script. Off by
// default with batching (Config.FirstTouch), where each command costs.
// And off once the server refuses SET or TIME as commands of their own
// (any error reply but a transient one: a proxy that passes scripts
// only).

// firstMaxAge bounds the age of the Redis clock sample a first touch is
// dated by: older, the first touch runs the script and samples anew.
const firstMaxAge = 100 * time.Millisecond

// firstMaxRTT bounds the round trip of that sample, and so how far after
// Redis's now a first touch may date its state: a Redis farther away
// than that (or a sample slowed down by a busy node) leaves first touches
// to the script.
const firstMaxRTT = 5 * time.Millisecond

// clockDrift is the margin for the rates of the node's clock and Redis's,
// as a fraction of the sample's age: 100 ppm, the lease package's margin
// for the same (aheadDrift), 10 µs at firstMaxAge.
const clockDrift = 1e-4

// firstMetrics count first touches in the node's metrics: tries that
// wrote the state, tries that found state, first touches the odds left to
// the script, states taken back because Redis's clock stepped (also
// counted as wrote), Stores that turned first touches off because Redis
// refused them, and TIME commands sent with a script.
type firstMetrics struct {
	wrote, hadState, skipped, stepped, off, samples *metrics.Counter
}

// MetricsHelp returns the # HELP text of each metric family the Redis
// Store registers, by family name: what it counts. sluiced passes them to
// the node, whose /metrics writes them (node.Config.MetricsHelp).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_redis_first_touches_total":            "First leases of keys without state in Redis, by result: wrote (the state written with SET NX, no script), had_state (the key had state: the script ran), skipped (left to the script while most tries found state), clock_stepped (taken back, Redis's clock having stepped; counted in wrote too).",
		"sluice_redis_first_touches_turned_off_total": "Redis Stores that turned first touches off because Redis refused SET or TIME while it answered scripts (a proxy).",
		"sluice_redis_clock_samples_total":            "TIME commands sent beside a script to sample Redis's clock.",
	}
}

func newFirstMetrics(set *metrics.Set) firstMetrics {
	if set == nil {
		set = metrics.GetDefaultSet()
	}
	return firstMetrics{
		wrote:    set.GetOrCreateCounter(`sluice_redis_first_touches_total{result="wrote"}`),
		hadState: set.GetOrCreateCounter(`sluice_redis_first_touches_total{result="had_state"}`),
		skipped:  set.GetOrCreateCounter(`sluice_redis_first_touches_total{result="skipped"}`),
		stepped:  set.GetOrCreateCounter(`sluice_redis_first_touches_total{result="clock_stepped"}`),
		off:      set.GetOrCreateCounter(`sluice_redis_first_touches_turned_off_total`),
		samples:  set.GetOrCreateCounter(`sluice_redis_clock_samples_total`),
	}
}

// firstOdds counts the recent first touches that wrote state (hits) and
// that found some (misses), over about the last 64. Safe for concurrent
// use.
type firstOdds struct {
	mu           sync.Mutex
	hits, misses int
	skipped      int
}

// try reports whether a first touch should try SET NX: while at least a
// quarter of the recent tries hit, and one in 16 otherwise (a hit of
// those starts the count anew: see record).
func (o *firstOdds) try() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if 3*o.hits >= o.misses {
		return true
	}
	o.skipped++
	return o.skipped%16 == 0
}

func (o *firstOdds) record(hit bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if hit && 3*o.hits < o.misses {
		o.hits, o.misses = 1, 0 // a probe hit: new keys again, try them all
		return
	}
	if hit {
		o.hits++
	} else {
		o.misses++
	}
	if o.hits+o.misses > 64 {
		o.hits, o.misses = o.hits/2, o.misses/2
	}
}

// redisClock is the Store's sample of Redis's clock: TIME answered at at
// (unix µs) between the node's send and recv. Safe for concurrent use.
type redisClock struct {
	now   func() time.Time    // the node's clock (Config.Clock; time.Now)
	drift float64             // clockDrift; 0 when now is Redis's own clock (tests)
	sleep func(time.Duration) // pause

	mu         sync.Mutex
	at         int64
	send, recv time.Time
}

// record keeps a sample of TIME's answer v, sent at send and answered at
// recv, if it was sent after the one it has. It returns the time v reads
// (unix µs), -1 if v is not one.
func (c *redisClock) record(v []string, send, recv time.Time) int64 {
	if len(v) != 2 {
		return -1
	}
	sec, err1 := strconv.ParseInt(v[0], 10, 64)
	usec, err2 := strconv.ParseInt(v[1], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	at := sec*1_000_000 + usec
	if recv.Before(send) {
		return at // the node's clock went back meanwhile: no bound
	}
	c.mu.Lock()
	// The sample sent last bounds Redis's clock the most tightly; one
	// from before a step back of the node's clock (a test's) gives way.
	if c.send.IsZero() || !send.Before(c.send) || c.send.After(recv) {
		c.at, c.send, c.recv = at, send, recv
	}
	c.mu.Unlock()
	return at
}

// forget drops the sample: Redis's clock was seen to step.
func (c *redisClock) forget() {
	c.mu.Lock()
	c.send, c.recv = time.Time{}, time.Time{}
	c.mu.Unlock()
}

// estimate is Redis's clock at the node's m, unix µs, never before Redis's
// own reading then, and width, how far after it it may be (µs); ok is
// false without a sample younger than firstMaxAge whose round trip took
// at most firstMaxRTT.
func (c *redisClock) estimate(m time.Time) (now, width int64, ok bool) {
	c.mu.Lock()
	at, send, recv := c.at, c.send, c.recv
	c.mu.Unlock()
	if send.IsZero() {
		return 0, 0, false
	}
	age := m.Sub(send)
	if age < 0 || age > firstMaxAge || recv.Sub(send) > firstMaxRTT {
		return 0, 0, false
	}
	// Redis read TIME between send and recv: at m its clock reads between
	// at + (m − recv) and at + (m − send), give or take the drift.
	drift := int64(math.Ceil(float64(age.Nanoseconds()) * c.drift / 1e3))
	now = at + ceilMicros(age) + drift
	width = ceilMicros(recv.Sub(send)) + 2*drift
	return now, width, true
}

func ceilMicros(d time.Duration) int64 { return (d.Nanoseconds() + 999) / 1000 }

// first is a first touch of key (see above): the Grant, done true when
// SET NX wrote the state; done false when the call must run the script
// (the key has state, there is no fresh sample to date it, the call
// writes no state, the odds say skip it, or Redis's clock stepped and
// the state was taken back), with errRefused when Redis refused the SET
// for good.
func (s *Store) first(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (g lease.Grant, done bool, err error) {
	if !s.odds.try() {
		s.met.skipped.Inc()
		return g, false, nil
	}
	m := s.clock.now()
	now, width, ok := s.clock.estimate(m)
	if !ok {
		return g, false, nil // the script, with a TIME: see leaseSampling
	}
	to.ID = holderOf(to.ID) // as the scripts know it
	v, exp, g := freshLease(p, time.UnixMicro(now), want, need, to)
	if v == nil {
		return g, false, nil // nothing written: the script answers
	}
	ttl := ttlMillis(exp - now + width)
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	send := s.clock.now()
	res := s.client.DoMulti(ctx,
		s.client.B().Set().Key(key).Value(rueidis.BinaryString(v)).Nx().PxMilliseconds(ttl).Build(),
		s.client.B().Time().Build())
	recv := s.clock.now()
	t2 := int64(-1) // Redis's clock just after the SET, unix µs
	if t, err := res[1].AsStrSlice(); err == nil {
		t2 = s.clock.record(t, send, recv)
	} else if refused(err) && res[0].Error() == nil {
		s.turnOff() // SET works, TIME does not: no sample to date by
	}
	if err := res[0].Error(); err != nil {
		if rueidis.IsRedisNil(err) {
			s.odds.record(false)
			s.met.hadState.Inc()
			return g, false, nil // the key has state
		}
		if refused(err) {
			return g, false, errRefused
		}
		return g, false, unavailable("lease", err)
	}
	s.odds.record(true)
	s.met.wrote.Inc()
	// Redis read t2 after the SET: between its now at m (≥ now − width)
	// and at recv. Outside that, its clock stepped since the sample (or a
	// failover put another clock there): the state is misdated, which a
	// window's holders would not survive. Its tokens go back, and the
	// script leases at Redis's own now.
	if t2 >= 0 {
		span := ceilMicros(time.Duration(float64(recv.Sub(m)) * (1 + s.clock.drift)))
		if t2 < now-width-1 || t2 > now+span+1 {
			s.clock.forget()
			s.met.stepped.Inc()
			return g, false, s.undoFirst(ctx, key, p, v, to.ID)
		}
	}
	// The Store's now (the state's) must lie before the answer: Redis's
	// clock reads it by the node's m + width, and (it read t2 after the
	// SET, by recv) by recv + (now − t2). Wait for the earlier.
	wait := m.Add(time.Duration(width) * time.Microsecond)
	if t2 >= 0 {
		if at := recv.Add(time.Duration(now-t2) * time.Microsecond); at.Before(wait) {
			wait = at
		}
	}
	if d := wait.Sub(s.clock.now()); d > 0 {
		s.clock.sleep(d)
	}
	return g, true, nil
}

// undoFirst takes back a first touch's state v of key, misdated: it
// deletes the key while it holds v (the key had no state before), else
// (another call changed it since) returns the whole loan of holder, the
// scripts' digest.
func (s *Store) undoFirst(ctx context.Context, key string, p lease.Policy, v []byte, holder string) error {
	n, err := s.undo.Exec(ctx, s.client, []string{key}, []string{string(v)}).AsInt64()
	if err != nil {
		return unavailable("lease", err)
	}
	if n == 1 {
		return nil
	}
	args := []string{itoa(p.Limit), itoa(micros(p.Period)), itoa(p.Capacity()), holder, itoa(lease.MaxHits)}
	_, err = s.leased(ctx, "return", p.Algorithm, false, key, args)
	return err
}

// errRefused is first's error when Redis refused SET NX for good (see
// refused): the call runs the script, and if that answers, first touches
// turn off.
var errRefused = errors.New("lua: first touch refused")

// turnOff turns first touches off for good: Redis refuses them but
// answers scripts.
func (s *Store) turnOff() {
	if s.firstOn.CompareAndSwap(true, false) {
		s.met.off.Inc()
	}
}

// pause waits d, a few µs as a rule: spinning up to 200µs, where a
// timer would take a millisecond.
func pause(d time.Duration) {
	if d > 200*time.Microsecond {
		time.Sleep(d)
		return
	}
	for start := time.Now(); time.Since(start) < d; {
		runtime.Gosched()
	}
}

// leaseSampling runs the lease script of algorithm a on key with a TIME
// in the same round trip, whose answer becomes the clock sample: a first
// touch without a fresh sample runs the script, and leaves one for the
// next. (Not batched: first touches are off with batching.)
func (s *Store) leaseSampling(ctx context.Context, a lease.Algorithm, key string, args []string) (rueidis.RedisMessage, error) {
	if err := ctx.Err(); err != nil {
		return rueidis.RedisMessage{}, unavailable("lease", err)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	send := s.clock.now()
	res := s.client.DoMulti(ctx,
		s.client.B().Evalsha().Sha1(s.scripts[a].leaseSha).Numkeys(1).Key(key).Arg(args...).Build(),
		s.client.B().Time().Build())
	recv := s.clock.now()
	s.met.samples.Inc()
	if t, err := res[1].AsStrSlice(); err == nil {
		s.clock.record(t, send, recv)
	} else if refused(err) && res[0].Error() == nil {
		s.turnOff() // the script answers, TIME is refused
	}
	m, err := res[0].ToMessage()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		// A server without the script (restarted, failed over): EVAL
		// loads it.
		m, err = s.client.Do(ctx, s.client.B().Eval().Script(s.scripts[a].leaseSrc).Numkeys(1).Key(key).Arg(args...).Build()).ToMessage()
	}
	if err != nil {
		return m, unavailable("lease", err)
	}
	return m, nil
}

// refused reports whether Redis refused a command for good: any error
// reply but those a healthy server gives for a while (transient), say a
// proxy in front of it that passes scripts but not TIME or SET as
// commands of their own. A lost connection or a transient reply fails the
// call as a script's would.
func refused(err error) bool {
	var re *rueidis.RedisError
	if !errors.As(err, &re) || rueidis.IsRedisNil(err) {
		return false
	}
	return !transient(re.Error())
}

// transient reports whether Redis error reply msg is one a healthy server
// gives for a while: a replica or a failover (READONLY, MASTERDOWN,
// NOREPLICAS), a server loading its data, running a slow script or unable
// to save (LOADING, BUSY, MISCONF), out of memory (OOM), a Cluster
// reshaping (MOVED, ASK, TRYAGAIN, CLUSTERDOWN), credentials changing
// under a reconnect (NOAUTH, WRONGPASS). A refusal turns first touches
// off only once a script then answers (errRefused): a server that fails
// everything for a while is not a server that refuses first touches.
func transient(msg string) bool {
	code, _, _ := strings.Cut(msg, " ")
	switch code {
	case "READONLY", "MASTERDOWN", "LOADING", "BUSY", "OOM", "MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN",
		"NOREPLICAS", "MISCONF", "NOAUTH", "WRONGPASS":
		return true
	}
	return false
}

// ttlMillis is the scripts' ttl (prelude.lua): us in whole milliseconds,
// rounded up, plus 1ms so that the key outlives its state.
func ttlMillis(us int64) int64 {
	if us <= 0 {
		return 1
	}
	return (us+999)/1000 + 1
}

// freshLease runs a lease call at now on a key without state, with the
// lease package's math (what the script computes), and returns the state
// the call writes packed as the scripts pack it (nil: it writes none),
// when that state expires (unix µs), and the answer.
func freshLease(p lease.Policy, now time.Time, want, need int64, to lease.Lessee) (v []byte, exp int64, g lease.Grant) {
	st := p.Algorithm.NewState().(algo.LeasedState) // CheckLease admits only the leased algorithms
	g = st.Lease(p, now, want, need, to)
	return algorithms[p.Algorithm].pack(st), st.Expiry(p), g
}
