// Package storetest is the conformance suite that every lease.Store passes:
// the in-memory store with a fake clock (exact), and the Redis store with
// the real clock (time-derived values within a slack).
//
// The suite checks the semantics written in the lease package doc and the
// choices documented in package lease/algo. Every failure message says what
// was called, what came back, what was expected and why.
//
// Policies are chosen so that real time passing between calls cannot
// change a whole-token count: counting cases use periods of an hour, and
// cases that move the clock use periods of 200-300ms with every
// whole-token or window boundary at least 70ms of accumulated drift away
// from where the suite looks. Time-derived values are compared within
// Harness.Slack; 20ms is enough on an idle machine, 50ms survives a loaded
// one (and -race). The whole suite sleeps for about 6.5s with a real
// clock.
//
// Subtests run one after another (never in parallel: with a real clock,
// parallel tests would add to the drift). Each calls Harness.New once.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// Harness is what the suite needs from a Store under test.
type Harness struct {
	// New returns the Store under test. Keys used by each subtest are
	// unique (prefixed with a per-run random id), so one shared server is
	// fine.
	New func(t *testing.T) lease.Store
	// Advance moves the Store's clock forward by d: a fake clock for the
	// memory store, time.Sleep for Redis.
	Advance func(t *testing.T, d time.Duration)
	// Slack is the tolerance for time-derived values (0 with a fake clock;
	// ~20ms for a real one, since real time passes between calls).
	Slack time.Duration
}

// Run runs the whole suite as subtests of t.
func Run(t *testing.T, h Harness) {
	if h.New == nil || h.Advance == nil {
		t.Fatal("storetest: Harness.New and Harness.Advance are required")
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	run := "storetest:" + hex.EncodeToString(b[:]) + ":"
	for _, c := range append(cases[:len(cases):len(cases)], holderCases...) {
		t.Run(c.name, func(t *testing.T) {
			e := &env{t: t, h: h, s: h.New(t), ctx: context.Background(), prefix: run + c.name + ":"}
			c.fn(e)
		})
	}
}

var cases = []struct {
	name string
	fn   func(*env)
}{
	{"token_bucket/counting", func(e *env) { bucketCounting(e, lease.TokenBucket) }},
	{"token_bucket/burst", func(e *env) { bucketBurst(e, lease.TokenBucket) }},
	{"token_bucket/refill", func(e *env) { bucketRefill(e, lease.TokenBucket) }},
	{"gcra/counting", func(e *env) { bucketCounting(e, lease.GCRA) }},
	{"gcra/burst", func(e *env) { bucketBurst(e, lease.GCRA) }},
	{"gcra/refill", func(e *env) { bucketRefill(e, lease.GCRA) }},
	{"fixed_window/counting", fixedCounting},
	{"fixed_window/roll", fixedRoll},
	{"fixed_window/ahead", fixedAhead},
	{"sliding_window/counting", slidingCounting},
	{"sliding_window/weights", slidingWeights},
	{"sliding_log/counting", logCounting},
	{"sliding_log/sliding", logSliding},
	{"sliding_log/min_interval", logMinInterval},
	{"concurrency/acquire_release", concAcquireRelease},
	{"concurrency/expiry", concExpiry},
	{"errors/wrong_algorithm", wrongAlgorithm},
	{"errors/invalid_arguments", invalidArguments},
	{"errors/canceled_context", canceledContext},
	{"lent/bounded_return", lentBoundedReturn},
	{"lent/token_bucket_cap", func(e *env) { lentCap(e, lease.TokenBucket) }},
	{"lent/gcra_cap", func(e *env) { lentCap(e, lease.GCRA) }},
	{"lent/token_bucket_cap_spends", func(e *env) { lentCapSpends(e, lease.TokenBucket) }},
	{"lent/gcra_cap_spends", func(e *env) { lentCapSpends(e, lease.GCRA) }},
	{"lent/token_bucket_unanswered_after_spend", func(e *env) { lentUnansweredAfterSpend(e, lease.TokenBucket) }},
	{"lent/gcra_unanswered_after_spend", func(e *env) { lentUnansweredAfterSpend(e, lease.GCRA) }},
	{"lent/token_bucket_spent_before", func(e *env) { lentSpentBefore(e, lease.TokenBucket) }},
	{"lent/gcra_spent_before", func(e *env) { lentSpentBefore(e, lease.GCRA) }},
	{"lent/token_bucket_unanswered", func(e *env) { lentUnanswered(e, lease.TokenBucket) }},
	{"lent/gcra_unanswered", func(e *env) { lentUnanswered(e, lease.GCRA) }},
	{"lent/token_bucket_expiry", func(e *env) { lentExpiry(e, lease.TokenBucket) }},
	{"lent/gcra_expiry", func(e *env) { lentExpiry(e, lease.GCRA) }},
	{"policy_change", policyChange},
	{"concurrent/leased", concurrentLeased},
	{"concurrent/exact", concurrentExact},
}

// env is one subtest's Store and helpers.
type env struct {
	t      *testing.T
	h      Harness
	s      lease.Store
	ctx    context.Context
	prefix string
	n      int
}

// key returns a new key unique to this run and subtest.
func (e *env) key() string {
	e.n++
	return fmt.Sprintf("%sk%d", e.prefix, e.n)
}

func (e *env) advance(d time.Duration) {
	e.t.Helper()
	if d > 0 {
		e.h.Advance(e.t, d)
	}
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

func describe(p lease.Policy) string {
	s := fmt.Sprintf("%s limit=%d period=%v", p.Algorithm, p.Limit, p.Period)
	if p.Burst != 0 {
		s += fmt.Sprintf(" burst=%d", p.Burst)
	}
	if p.MinInterval != 0 {
		s += fmt.Sprintf(" min_interval=%v", p.MinInterval)
	}
	return s
}

// anyDur and anyInt mark an expectation that is not checked.
const (
	anyDur = time.Duration(-1)
	anyInt = int64(-1)
)

// durOK reports whether got is want within the slack (want == anyDur
// always matches).
func (e *env) durOK(got, want time.Duration) bool {
	if want == anyDur {
		return true
	}
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= e.h.Slack
}

// grantExp is an expected Grant; anyInt/anyDur fields are not checked.
type grantExp struct {
	granted, remaining int64
	wait, reset        time.Duration
}

func fmtGrant(g lease.Grant) string {
	return fmt.Sprintf("granted=%d remaining=%d wait=%v reset=%v", g.Granted, g.Remaining, g.Wait, g.Reset)
}

func fmtGrantExp(x grantExp) string {
	f := func(n int64) string {
		if n == anyInt {
			return "(any)"
		}
		return fmt.Sprint(n)
	}
	d := func(v time.Duration) string {
		if v == anyDur {
			return "(any)"
		}
		return v.String()
	}
	return fmt.Sprintf("granted=%s remaining=%s wait=%s reset=%s", f(x.granted), f(x.remaining), d(x.wait), d(x.reset))
}

// lease calls Lease and checks the answer against x; why explains the
// expectation.
func (e *env) lease(key string, p lease.Policy, want, need int64, x grantExp, why string) lease.Grant {
	e.t.Helper()
	return e.leaseAs(key, p, want, need, lease.Lessee{}, x, why)
}

// leaseAs is lease for lessee to.
func (e *env) leaseAs(key string, p lease.Policy, want, need int64, to lease.Lessee, x grantExp, why string) lease.Grant {
	e.t.Helper()
	call := fmt.Sprintf("Lease(%s; want=%d need=%d", describe(p), want, need)
	if to.ID != "" {
		call += fmt.Sprintf("; as %s holding %d, ttl %v", to.ID, to.Held, to.TTL)
	}
	call += ")"
	g, err := e.s.Lease(e.ctx, key, p, want, need, to)
	if err != nil {
		e.t.Fatalf("%s: unexpected error: %v\n  why the call should succeed: %s", call, err, why)
	}
	ok := (x.granted == anyInt || g.Granted == x.granted) &&
		(x.remaining == anyInt || g.Remaining == x.remaining) &&
		e.durOK(g.Wait, x.wait) && e.durOK(g.Reset, x.reset)
	if !ok {
		e.t.Fatalf("%s\n  got:  %s\n  want: %s (durations ±%v)\n  why:  %s", call, fmtGrant(g), fmtGrantExp(x), e.h.Slack, why)
	}
	return g
}

// leaseH is lease as holder "h", holding nothing (Held 0), with a lease
// TTL of an hour.
func (e *env) leaseH(key string, p lease.Policy, want, need int64, x grantExp, why string) lease.Grant {
	e.t.Helper()
	return e.leaseAs(key, p, want, need, lease.Lessee{ID: "h", TTL: time.Hour}, x, why)
}

// ret calls Return as holder "h" and fails on error.
func (e *env) ret(key string, p lease.Policy, tokens int64, why string) {
	e.t.Helper()
	if err := e.s.Return(e.ctx, key, p, tokens, "h"); err != nil {
		e.t.Fatalf("Return(%s; tokens=%d): unexpected error: %v (%s)", describe(p), tokens, err, why)
	}
}

// resultExp is an expected Result; anyInt/anyDur fields are not checked.
type resultExp struct {
	allowed     bool
	remaining   int64
	retry, rset time.Duration
}

func fmtResult(r lease.Result) string {
	return fmt.Sprintf("allowed=%t remaining=%d retry_after=%v reset=%v", r.Allowed, r.Remaining, r.RetryAfter, r.Reset)
}

func fmtResultExp(x resultExp) string {
	s := fmt.Sprintf("allowed=%t remaining=", x.allowed)
	if x.remaining == anyInt {
		s += "(any)"
	} else {
		s += fmt.Sprint(x.remaining)
	}
	for _, f := range []struct {
		n string
		v time.Duration
	}{{"retry_after", x.retry}, {"reset", x.rset}} {
		if f.v == anyDur {
			s += " " + f.n + "=(any)"
		} else {
			s += " " + f.n + "=" + f.v.String()
		}
	}
	return s
}

func (e *env) checkResult(call string, r lease.Result, x resultExp, why string) {
	e.t.Helper()
	ok := r.Allowed == x.allowed && (x.remaining == anyInt || r.Remaining == x.remaining) &&
		e.durOK(r.RetryAfter, x.retry) && e.durOK(r.Reset, x.rset)
	if !ok {
		e.t.Fatalf("%s\n  got:  %s\n  want: %s (durations ±%v)\n  why:  %s", call, fmtResult(r), fmtResultExp(x), e.h.Slack, why)
	}
}

// log calls Log and checks the answer.
func (e *env) log(key string, p lease.Policy, hits int64, x resultExp, why string) {
	e.t.Helper()
	call := fmt.Sprintf("Log(%s; hits=%d)", describe(p), hits)
	r, err := e.s.Log(e.ctx, key, p, hits)
	if err != nil {
		e.t.Fatalf("%s: unexpected error: %v\n  why the call should succeed: %s", call, err, why)
	}
	e.checkResult(call, r, x, why)
}

// acquire calls Acquire and checks the answer.
func (e *env) acquire(key string, p lease.Policy, id string, hits int64, x resultExp, why string) {
	e.t.Helper()
	call := fmt.Sprintf("Acquire(%s; id=%q hits=%d)", describe(p), id, hits)
	r, err := e.s.Acquire(e.ctx, key, p, id, hits)
	if err != nil {
		e.t.Fatalf("%s: unexpected error: %v\n  why the call should succeed: %s", call, err, why)
	}
	e.checkResult(call, r, x, why)
}

func (e *env) release(key string, p lease.Policy, id, why string) {
	e.t.Helper()
	if err := e.s.Release(e.ctx, key, p, id); err != nil {
		e.t.Fatalf("Release(%s; id=%q): unexpected error: %v\n  why the call should succeed: %s", describe(p), id, err, why)
	}
}

// releaseNone releases an id that holds no slot: the Store answers
// lease.ErrNoSlot (and frees nothing).
func (e *env) releaseNone(key string, p lease.Policy, id, why string) {
	e.t.Helper()
	if err := e.s.Release(e.ctx, key, p, id); !errors.Is(err, lease.ErrNoSlot) {
		e.t.Fatalf("Release(%s; id=%q): %v, want lease.ErrNoSlot\n  why: %s", describe(p), id, err, why)
	}
}

// windowLeft returns the time to the end of the current window of length
// period (windows are aligned on multiples of the period since the Unix
// epoch), read with a fixed_window peek on a scratch key. If fewer than
// minLeft remain, it first advances into the next window, so that the
// caller has at least minLeft (minus slack) before the next boundary.
func (e *env) windowLeft(period, minLeft time.Duration) time.Duration {
	e.t.Helper()
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 1, Period: period}
	peek := func() time.Duration {
		g, err := e.s.Lease(e.ctx, e.key(), p, 0, 0, lease.Lessee{})
		if err != nil {
			e.t.Fatalf("fixed_window peek to find the window boundary: %v", err)
		}
		if g.Reset <= 0 || g.Reset > period {
			e.t.Fatalf("fixed_window peek (%s): reset=%v, want in (0, %v]: the time to the end of the current window", describe(p), g.Reset, period)
		}
		return g.Reset
	}
	left := peek()
	if left < minLeft {
		e.advance(left)
		left = peek()
	}
	return left
}

// alignWindow advances to the start of a window of length period (within
// the slack): the caller is then at elapsed ≈ 0 in that window.
func (e *env) alignWindow(period time.Duration) {
	e.t.Helper()
	e.advance(e.windowLeft(period, 0))
}

// --- token_bucket and gcra: the same limits, the same answers ---

func bucketCounting(e *env, alg lease.Algorithm) {
	k := e.key()
	p := lease.Policy{Algorithm: alg, Limit: 10, Period: time.Hour, Burst: 10}
	// One token every 6 minutes: real time passing between calls cannot add
	// a whole token.
	tok := 6 * time.Minute
	e.lease(k, p, 0, 0, grantExp{0, 10, 0, 0}, "a key without state is a full bucket; a peek (want=need=0) grants nothing; reset 0 when full")
	e.lease(k, p, 0, 0, grantExp{0, 10, 0, 0}, "the previous peek must not have changed anything")
	e.lease(k, p, 3, 3, grantExp{3, 7, 0, 3 * tok}, "10 available ≥ need 3: grant min(want 3, 10); reset = 3 tokens × 6m to refill")
	e.leaseH(k, p, 10, 1, grantExp{7, 0, 0, time.Hour}, "7 available ≥ need 1: grant min(want 10, available 7) = 7 (lent to h); reset = 10 tokens × 6m")
	e.lease(k, p, 1, 1, grantExp{0, 0, tok, time.Hour}, "0 available < need 1: nothing granted; wait = 1 token × 6m")
	e.lease(k, p, 5, 0, grantExp{0, 0, 0, time.Hour}, "need 0 is always met: grant min(want 5, available 0) = 0, wait 0")
	e.ret(k, p, 4, "4 of h's 7 unspent tokens go back")
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, 6 * tok}, "after returning 4 to an empty bucket, 4 remain; reset = 6 missing tokens × 6m")
	e.lease(k, p, 6, 5, grantExp{0, 4, tok, 6 * tok}, "4 available < need 5: nothing granted (not even 4); wait = 1 missing token × 6m")
	e.ret(k, p, 100, "a second return: h's loan ended with the first")
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, 6 * tok}, "a return never gives back more than was lent to the holder: still 4")
	e.lease(k, p, 11, 11, grantExp{0, 4, time.Hour, 6 * tok}, "need 11 > capacity 10 can never be met: nothing granted, wait = one period")
	e.lease(k, p, 4, 4, grantExp{4, 0, 0, time.Hour}, "the 4 are granted")

	k2 := e.key()
	e.ret(k2, p, 5, "a return to a key without state")
	e.lease(k2, p, 0, 0, grantExp{0, 10, 0, 0}, "returning to a key without state (a full bucket) is a no-op: still capacity 10")
}

func bucketBurst(e *env, alg lease.Algorithm) {
	k := e.key()
	p := lease.Policy{Algorithm: alg, Limit: 10, Period: time.Hour, Burst: 4}
	tok := 6 * time.Minute
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, 0}, "capacity is Burst (4), not Limit (10)")
	e.leaseH(k, p, 10, 1, grantExp{4, 0, 0, 4 * tok}, "grant min(want 10, available 4) to h; reset = 4 tokens × 6m (rate is Limit/Period)")
	e.lease(k, p, 5, 5, grantExp{0, 0, time.Hour, 4 * tok}, "need 5 > capacity 4: wait one period")
	e.lease(k, p, 4, 4, grantExp{0, 0, 4 * tok, 4 * tok}, "need 4 = capacity: wait until 4 tokens refill, 4 × 6m")
	e.ret(k, p, 9, "return more than capacity")
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, 0}, "a return gives back at most what was lent to the holder (4)")
	p0 := lease.Policy{Algorithm: alg, Limit: 10, Period: time.Hour}
	e.lease(e.key(), p0, 20, 1, grantExp{10, 0, 0, time.Hour}, "Burst 0 means Burst = Limit = 10")
}

func bucketRefill(e *env, alg lease.Algorithm) {
	k := e.key()
	// One token per 100ms, capacity 2. The suite looks at 1.3 tokens: the
	// next whole-token boundary is 70ms of real-clock drift away.
	p := lease.Policy{Algorithm: alg, Limit: 2, Period: 200 * time.Millisecond}
	e.lease(k, p, 2, 2, grantExp{2, 0, 0, ms(200)}, "a full bucket of 2 is granted; reset = 2 tokens × 100ms")
	e.advance(ms(130))
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, ms(70)}, "130ms refill 1.3 tokens: 1 whole token available; full again in 0.7 × 100ms")
	e.lease(k, p, 2, 2, grantExp{0, 1, ms(70), ms(70)}, "1.3 tokens < need 2: wait (2 - 1.3) × 100ms = 70ms")
	e.leaseH(k, p, 2, 1, grantExp{1, 0, 0, ms(170)}, "1 whole token ≥ need 1: grant 1 to h; 0.3 left, full in 1.7 × 100ms")
	e.lease(k, p, 1, 1, grantExp{0, 0, ms(70), ms(170)}, "0.3 tokens < need 1: wait 0.7 × 100ms")
	e.ret(k, p, 1, "return the token")
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, ms(70)}, "0.3 + 1 returned = 1.3 tokens")
	e.advance(ms(300))
	e.lease(k, p, 0, 0, grantExp{0, 2, 0, 0}, "refill stops at capacity 2 however long the key idles")
}

// --- fixed_window ---

func fixedCounting(e *env) {
	k := e.key()
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 5, Period: time.Hour}
	left := e.windowLeft(time.Hour, 10*time.Second)
	e.lease(k, p, 0, 0, grantExp{0, 5, 0, left}, "an empty window has all 5; reset is the end of the current window even when nothing was used")
	e.lease(k, p, 3, 3, grantExp{3, 2, 0, left}, "5 available ≥ need 3: grant 3; reset is the end of the window")
	e.leaseH(k, p, 5, 2, grantExp{2, 0, 0, left}, "2 available ≥ need 2: grant min(want 5, 2) to h")
	e.lease(k, p, 1, 1, grantExp{0, 0, left, left}, "window used up: wait until the window ends")
	e.ret(k, p, 1, "return one token")
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, left}, "a return lowers the window's count: 1 available")
	e.ret(k, p, 10, "return more than was lent")
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, left}, "h's loan ended with its first return: still 1 available")
	e.lease(k, p, 6, 6, grantExp{0, 1, time.Hour, left}, "need 6 > limit 5 can never be met: wait one period")
}

func fixedRoll(e *env) {
	k := e.key()
	const P = 200
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 3, Period: ms(P)}
	e.alignWindow(p.Period)
	e.lease(k, p, 3, 3, grantExp{3, 0, 0, ms(P)}, "at the start of a window: grant all 3; reset = end of window")
	e.lease(k, p, 1, 1, grantExp{0, 0, ms(P), ms(P)}, "window used up: wait until its end")
	e.advance(ms(100))
	e.lease(k, p, 1, 1, grantExp{0, 0, ms(100), ms(100)}, "100ms into the window: 100ms left")
	e.advance(ms(100))
	e.leaseH(k, p, 3, 1, grantExp{3, 0, 0, ms(P)}, "a new window starts with a count of 0 (windows aligned on multiples of the period since the epoch)")
	e.advance(ms(2 * P))
	e.ret(k, p, 2, "return into a later window, after the state expired")
	e.lease(k, p, 0, 0, grantExp{0, 3, 0, ms(P)}, "two windows later the count is 0 and a return cannot push availability above the limit")
}

// fixedAhead: shares of the next windows, counted in each from its start,
// capped by the other holders' shares, ended by a return or by a call
// asking none; the key outlives its window while a share covers a later
// one.
func fixedAhead(e *env) {
	const P = 300
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 10, Period: ms(P)}
	a := lease.Lessee{ID: "a", TTL: time.Hour, AheadWindows: 2, AheadTokens: 4}
	b := lease.Lessee{ID: "b", TTL: time.Hour, AheadWindows: 3, AheadTokens: 10}
	shares := func(g lease.Grant, tokens, windows int64, why string) {
		e.t.Helper()
		if g.AheadTokens != tokens || g.AheadWindows != windows {
			e.t.Fatalf("shares ahead: got %d tokens for %d windows, want %d for %d: %s", g.AheadTokens, g.AheadWindows, tokens, windows, why)
		}
	}
	k, k2 := e.key(), e.key()
	e.alignWindow(p.Period)
	e.advance(ms(50)) // every call 50ms into its window: 250ms of drift to the next boundary
	g := e.leaseAs(k, p, 2, 1, a, grantExp{2, 8, 0, ms(P - 50)}, "a: grant 2 of 10 in this window, ask 4 of each of the next 2")
	shares(g, 4, 2, "no other holder has shares: a gets the 4 it asked")
	if g.Lent != 2 {
		e.t.Fatalf("a's grant: lent %d, want 2 (the share is not lent in the current window)", g.Lent)
	}
	g = e.leaseAs(k, p, 0, 0, b, grantExp{0, 8, 0, ms(P - 50)}, "b grants nothing now and asks the whole limit ahead")
	shares(g, 6, 3, "b gets what a's share of 4 leaves of the limit of 10")
	g = e.leaseAs(k2, p, 1, 1, b, grantExp{1, 9, 0, ms(P - 50)}, "b on a second key: 1 now, 10 of each of the next 3 windows")
	shares(g, 10, 3, "no other holder: the whole limit")
	b2 := b
	b2.AheadWindows, b2.Held = 0, 1
	g = e.leaseAs(k2, p, 0, 0, b2, grantExp{0, 9, 0, ms(P - 50)}, "b asks none ahead: its shares end after this window")
	shares(g, 0, 0, "a call asking none lends none")

	e.advance(ms(P)) // window 1
	e.lease(k, p, 1, 1, grantExp{0, 0, ms(P - 50), ms(P - 50)}, "window 1 starts with a's 4 and b's 6 counted: nothing left, wait for its end")
	e.lease(k2, p, 0, 0, grantExp{0, 10, 0, ms(P - 50)}, "the second key's shares ended with b's call asking none")
	if err := e.s.Return(e.ctx, k, p, 4, "a"); err != nil {
		e.t.Fatalf("Return of a's 4: %v", err)
	}
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, ms(P - 50)}, "a returned its whole share of window 1: 4 back")

	e.advance(ms(P)) // window 2
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, ms(P - 50)}, "window 2: b's share of 6 alone (a's return ended its shares)")
	e.advance(ms(P)) // window 3: three windows after the key's last write
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, ms(P - 50)}, "window 3: b's last share, still counted (the key outlives its window while a share covers a later one)")
	e.advance(ms(P)) // window 4
	e.lease(k, p, 0, 0, grantExp{0, 10, 0, ms(P - 50)}, "window 4: every share ended")
}

// --- sliding_window ---

func slidingCounting(e *env) {
	k := e.key()
	p := lease.Policy{Algorithm: lease.SlidingWindow, Limit: 10, Period: time.Hour}
	left := e.windowLeft(time.Hour, 10*time.Second)
	e.lease(k, p, 0, 0, grantExp{0, 10, 0, 0}, "no state: 10 available, reset 0 (nothing to recover)")
	e.lease(k, p, 4, 4, grantExp{4, 6, 0, left + time.Hour}, "grant 4 into the current window; reset = end of the next window (when the 4 stop weighing)")
	// cur 4 + need 7 > 10, so it cannot happen in this window; in the next
	// one prev = 4 must weigh ≤ 10 - 7 = 3: 4 × (1 - e/P) ≤ 3 at e = P/4.
	e.lease(k, p, 10, 7, grantExp{0, 6, left + 15*time.Minute, left + time.Hour}, "6 available < need 7: wait until the end of this window plus a quarter of the next (when prev=4 weighs 3)")
	e.leaseH(k, p, 10, 6, grantExp{6, 0, 0, left + time.Hour}, "6 available ≥ need 6 (lent to h)")
	e.lease(k, p, 10, 10, grantExp{0, 0, left + time.Hour, left + time.Hour}, "cur=10, need=10: possible only when prev=10 weighs 0: end of the next window")
	e.ret(k, p, 3, "return 3")
	e.lease(k, p, 0, 0, grantExp{0, 3, 0, left + time.Hour}, "a return lowers cur: 3 available")
	e.ret(k, p, 50, "return more than lent")
	e.lease(k, p, 0, 0, grantExp{0, 3, 0, left + time.Hour}, "h's loan ended with its first return: still 3")
	e.lease(k, p, 11, 11, grantExp{0, 3, time.Hour, left + time.Hour}, "need 11 > limit 10: wait one period")
}

func slidingWeights(e *env) {
	k := e.key()
	const P = 300
	p := lease.Policy{Algorithm: lease.SlidingWindow, Limit: 4, Period: ms(P)}
	e.alignWindow(p.Period)
	e.lease(k, p, 4, 4, grantExp{4, 0, 0, ms(2 * P)}, "at a window start: grant 4; reset = end of the next window")
	e.advance(ms(P))
	e.lease(k, p, 0, 0, grantExp{0, 0, 0, ms(P)}, "next window start: prev=4 weighs 4×(1-0/300) = 4, nothing available; reset = end of this window (only prev > 0)")
	// 80ms in: prev=4 weighs 4×220/300 = 2.93, rounded up to 3, until
	// e = 150ms: 70ms of real-clock drift away.
	e.advance(ms(80))
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, ms(P - 80)}, "80ms in: prev=4 weighs 4×220/300 = 2.93, est rounds up: 4 - 3 = 1 available")
	e.lease(k, p, 4, 2, grantExp{0, 1, ms(70), ms(P - 80)}, "need 2: prev must weigh ≤ 2, i.e. e ≥ 300 - 2×300/4 = 150ms: wait 70ms")
	e.leaseH(k, p, 4, 1, grantExp{1, 0, 0, ms(2*P - 80)}, "need 1 ≤ 1 available: grant 1 into cur (to h); reset = end of the next window")
	e.lease(k, p, 4, 4, grantExp{0, 0, ms(2*P - 80), ms(2*P - 80)}, "cur=1 + need 4 > 4: not in this window; in the next, prev=1 must weigh 0: end of the next window")
	e.lease(k, p, 4, 3, grantExp{0, 0, ms(P - 80), ms(2*P - 80)}, "cur=1 + need 3 = 4 leaves no room for prev's weight: next window start, where prev=1 weighs 1 and 1 + 3 ≤ 4")
	e.ret(k, p, 1, "return the granted token")
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, ms(P - 80)}, "a return lowers cur to 0: back to 1 available, reset at the end of this window")
	e.lease(k, p, 1, 1, grantExp{1, 0, 0, ms(2*P - 80)}, "take it again")
	e.advance(ms(P - 80))
	e.lease(k, p, 0, 0, grantExp{0, 3, 0, ms(P)}, "next window start: prev=1 weighs 1: 3 available; reset = end of this window")
	e.advance(ms(P))
	e.lease(k, p, 0, 0, grantExp{0, 4, 0, 0}, "two windows later nothing weighs: 4 available, reset 0")
}

// --- sliding_log ---

func logCounting(e *env) {
	k := e.key()
	p := lease.Policy{Algorithm: lease.SlidingLog, Limit: 3, Period: time.Hour}
	e.log(k, p, 0, resultExp{true, 3, 0, 0}, "a peek (hits 0) of an empty log: allowed, 3 remaining, reset 0")
	e.log(k, p, 0, resultExp{true, 3, 0, 0}, "a peek records nothing")
	e.log(k, p, 1, resultExp{true, 2, 0, time.Hour}, "first hit recorded; reset = when the newest stamp leaves the window (one period)")
	e.log(k, p, 2, resultExp{true, 0, 0, time.Hour}, "1 + 2 ≤ 3: both recorded")
	e.log(k, p, 1, resultExp{false, 0, time.Hour, time.Hour}, "3 + 1 > 3: denied, retry when the oldest stamp leaves the window")
	e.log(k, p, 0, resultExp{true, 0, 0, time.Hour}, "a peek at the limit: count + 0 ≤ limit, so allowed, 0 remaining")
	e.log(k, p, 4, resultExp{false, 0, time.Hour, time.Hour}, "hits 4 > limit 3 can never be admitted: retry one period")
	e.log(e.key(), p, 4, resultExp{false, 3, time.Hour, 0}, "hits > limit is denied even on an empty log, and records nothing")
}

func logSliding(e *env) {
	k := e.key()
	p := lease.Policy{Algorithm: lease.SlidingLog, Limit: 3, Period: ms(300)}
	e.log(k, p, 1, resultExp{true, 2, 0, ms(300)}, "stamp A at t0")
	e.advance(ms(100))
	e.log(k, p, 2, resultExp{true, 0, 0, ms(300)}, "two stamps B at t0+100; reset = when they leave, 300ms")
	e.log(k, p, 1, resultExp{false, 0, ms(200), ms(300)}, "full: one stamp must leave; A leaves at t0+300, 200ms from now")
	e.log(k, p, 2, resultExp{false, 0, ms(300), ms(300)}, "full: two stamps must leave; the 2nd oldest (a B) leaves at t0+400, 300ms from now")
	e.advance(ms(200))
	e.log(k, p, 1, resultExp{true, 0, 0, ms(300)}, "at t0+300 stamp A (exactly one period old) has left the window: allowed")
	e.advance(ms(100))
	e.log(k, p, 0, resultExp{true, 2, 0, ms(200)}, "at t0+400 both B stamps have left; the stamp of t0+300 remains and leaves in 200ms")
	e.advance(ms(200))
	e.log(k, p, 0, resultExp{true, 3, 0, 0}, "at t0+600 every stamp has left: empty log, reset 0")
}

func logMinInterval(e *env) {
	k := e.key()
	p := lease.Policy{Algorithm: lease.SlidingLog, Limit: 3, Period: ms(300), MinInterval: ms(100)}
	e.log(k, p, 1, resultExp{true, 2, 0, ms(300)}, "first request at t0")
	e.log(k, p, 1, resultExp{false, 2, ms(100), ms(300)}, "the newest stamp is 0ms old < min_interval 100ms: denied, retry in 100ms")
	e.log(k, p, 0, resultExp{true, 2, 0, ms(300)}, "a peek is never denied, even within min_interval; it records nothing")
	e.advance(ms(60))
	e.log(k, p, 1, resultExp{false, 2, ms(40), ms(240)}, "60ms after the newest stamp: retry in 40ms")
	e.advance(ms(40))
	e.log(k, p, 1, resultExp{true, 1, 0, ms(300)}, "100ms after the newest stamp: allowed")
	e.advance(ms(100))
	e.log(k, p, 1, resultExp{true, 0, 0, ms(300)}, "t0+200: third stamp")
	e.advance(ms(100))
	e.log(k, p, 1, resultExp{true, 0, 0, ms(300)}, "t0+300: the t0 stamp left, 100ms since the newest: allowed")

	k2 := e.key()
	p2 := lease.Policy{Algorithm: lease.SlidingLog, Limit: 2, Period: ms(300), MinInterval: ms(200)}
	e.log(k2, p2, 1, resultExp{true, 1, 0, ms(300)}, "limit 2: stamp at t0")
	e.advance(ms(200))
	e.log(k2, p2, 1, resultExp{true, 0, 0, ms(300)}, "stamp at t0+200, min_interval after the first")
	e.advance(ms(10))
	e.log(k2, p2, 1, resultExp{false, 0, ms(190), ms(290)}, "full and too soon: the t0 stamp leaves in 90ms but min_interval needs 190ms more: retry_after is the longer, 190ms")
	p3 := lease.Policy{Algorithm: lease.SlidingLog, Limit: 2, Period: ms(300)}
	e.log(e.key(), p3, 2, resultExp{true, 0, 0, ms(300)}, "without min_interval, two hits at the same instant are allowed")
}

// --- concurrency ---

func concAcquireRelease(e *env) {
	k := e.key()
	p := lease.Policy{Algorithm: lease.Concurrency, Limit: 2, Period: time.Hour}
	e.acquire(k, p, "", 0, resultExp{true, 2, 0, 0}, "a peek (hits 0) with nothing held: allowed, 2 remaining")
	e.acquire(k, p, "a", 0, resultExp{true, 2, 0, 0}, "a peek with an id records nothing")
	e.acquire(k, p, "a", 1, resultExp{true, 1, 0, time.Hour}, "acquire a: 1 of 2 held; reset = when the last slot expires (one TTL)")
	e.acquire(k, p, "a", 1, resultExp{true, 1, 0, time.Hour}, "acquiring a held id renews it and holds no second slot")
	e.acquire(k, p, "b", 1, resultExp{true, 0, 0, time.Hour}, "acquire b: 2 of 2 held")
	e.acquire(k, p, "c", 1, resultExp{false, 0, time.Hour, time.Hour}, "full: retry when the earliest slot expires")
	e.acquire(k, p, "", 0, resultExp{false, 0, time.Hour, time.Hour}, "a peek when full is denied like an acquire would be")
	e.acquire(k, p, "a", 1, resultExp{true, 0, 0, time.Hour}, "a held id is renewed even when full")
	e.release(k, p, "a", "release a")
	e.acquire(k, p, "c", 1, resultExp{true, 0, 0, time.Hour}, "after releasing a, c gets its slot")
	e.releaseNone(k, p, "nobody", "an unknown id holds no slot")
	e.releaseNone(e.key(), p, "nobody", "a key without state holds no slot")
	e.release(k, p, "b", "release b")
	e.release(k, p, "c", "release c")
	e.acquire(k, p, "", 0, resultExp{true, 2, 0, 0}, "all released: 2 remaining, reset 0")
}

func concExpiry(e *env) {
	k := e.key()
	p := lease.Policy{Algorithm: lease.Concurrency, Limit: 1, Period: ms(300)}
	e.acquire(k, p, "a", 1, resultExp{true, 0, 0, ms(300)}, "acquire a with a 300ms TTL")
	e.advance(ms(100))
	e.acquire(k, p, "b", 1, resultExp{false, 0, ms(200), ms(200)}, "full: a expires in 200ms")
	e.advance(ms(200))
	e.acquire(k, p, "b", 1, resultExp{true, 0, 0, ms(300)}, "a's TTL has passed: a is reaped and b is admitted")
	e.releaseNone(k, p, "a", "a reaped id holds no slot")
	e.acquire(k, p, "", 0, resultExp{false, 0, ms(300), ms(300)}, "b is still held")
	e.release(k, p, "b", "release b")
	e.acquire(k, p, "", 0, resultExp{true, 1, 0, 0}, "nothing held")
}

// --- errors ---

func wrongAlgorithm(e *env) {
	k := e.key()
	log := lease.Policy{Algorithm: lease.SlidingLog, Limit: 3, Period: time.Hour}
	conc := lease.Policy{Algorithm: lease.Concurrency, Limit: 3, Period: time.Hour}
	tb := lease.Policy{Algorithm: lease.TokenBucket, Limit: 3, Period: time.Hour}
	check := func(call string, err error) {
		e.t.Helper()
		if !errors.Is(err, lease.ErrWrongAlgorithm) {
			e.t.Errorf("%s: got error %v, want one wrapping lease.ErrWrongAlgorithm (the algorithm does not support the call)", call, err)
		}
	}
	for _, p := range []lease.Policy{log, conc} {
		_, err := e.s.Lease(e.ctx, k, p, 1, 1, lease.Lessee{})
		check("Lease("+describe(p)+")", err)
		check("Return("+describe(p)+")", e.s.Return(e.ctx, k, p, 1, ""))
	}
	for _, p := range []lease.Policy{tb, conc} {
		_, err := e.s.Log(e.ctx, k, p, 1)
		check("Log("+describe(p)+")", err)
	}
	for _, p := range []lease.Policy{tb, log} {
		_, err := e.s.Acquire(e.ctx, k, p, "a", 1)
		check("Acquire("+describe(p)+")", err)
		check("Release("+describe(p)+")", e.s.Release(e.ctx, k, p, "a"))
	}
}

func invalidArguments(e *env) {
	k := e.key()
	tb := lease.Policy{Algorithm: lease.TokenBucket, Limit: 3, Period: time.Hour}
	log := lease.Policy{Algorithm: lease.SlidingLog, Limit: 3, Period: time.Hour}
	conc := lease.Policy{Algorithm: lease.Concurrency, Limit: 3, Period: time.Hour}
	check := func(call, field string, err error) {
		e.t.Helper()
		var fe *lease.FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			e.t.Errorf("%s: got error %v, want a *lease.FieldError naming %q", call, err, field)
		}
	}
	_, err := e.s.Lease(e.ctx, k, tb, 1, 2, lease.Lessee{})
	check("Lease(want=1 need=2)", "need", err)
	_, err = e.s.Lease(e.ctx, k, tb, -1, 0, lease.Lessee{})
	check("Lease(want=-1)", "want", err)
	_, err = e.s.Lease(e.ctx, k, lease.Policy{Algorithm: lease.TokenBucket, Limit: 0, Period: time.Hour}, 1, 1, lease.Lessee{})
	check("Lease(limit=0)", "limit", err)
	_, err = e.s.Lease(e.ctx, k, lease.Policy{Algorithm: lease.GCRA, Limit: 1, Period: time.Microsecond}, 1, 1, lease.Lessee{})
	check("Lease(period=1µs)", "period", err)
	check("Return(tokens=-1)", "tokens", e.s.Return(e.ctx, k, tb, -1, ""))
	_, err = e.s.Log(e.ctx, k, log, -1)
	check("Log(hits=-1)", "hits", err)
	_, err = e.s.Acquire(e.ctx, k, conc, "", 1)
	check(`Acquire(id="" hits=1)`, "id", err)
	_, err = e.s.Acquire(e.ctx, k, conc, "a", 2)
	check("Acquire(hits=2)", "hits", err)
	check(`Release(id="")`, "id", e.s.Release(e.ctx, k, conc, ""))
	_, err = e.s.Lease(e.ctx, k, tb, 1, 1, lease.Lessee{ID: "h", TTL: time.Hour, MaxHolders: -1})
	check("Lease(max_holders=-1)", "max_holders", err)
	_, err = e.s.Lease(e.ctx, k, tb, 1, 1, lease.Lessee{ID: "h", TTL: time.Hour, MaxHolders: lease.MaxKeyHolders + 1})
	check("Lease(max_holders=MaxKeyHolders+1)", "max_holders", err)
	// None of these may have touched the key.
	e.lease(k, tb, 0, 0, grantExp{0, 3, 0, 0}, "invalid calls must not change any state")
}

func canceledContext(e *env) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	k := e.key()
	tb := lease.Policy{Algorithm: lease.TokenBucket, Limit: 3, Period: time.Hour}
	if _, err := e.s.Lease(ctx, k, tb, 1, 1, lease.Lessee{}); err == nil {
		e.t.Errorf("Lease with a canceled context: got no error, want one (a canceled call must not run)")
	}
	e.lease(k, tb, 0, 0, grantExp{0, 3, 0, 0}, "a call with a canceled context must not have taken tokens")
}

// policyChange checks that a key whose policy changes algorithm starts
// fresh instead of failing or misreading the old state.
func policyChange(e *env) {
	k := e.key()
	tb := lease.Policy{Algorithm: lease.TokenBucket, Limit: 5, Period: time.Hour}
	e.lease(k, tb, 5, 5, grantExp{5, 0, 0, time.Hour}, "empty the token bucket")
	e.windowLeft(time.Hour, 10*time.Second)
	for _, p := range []lease.Policy{
		{Algorithm: lease.GCRA, Limit: 5, Period: time.Hour},
		{Algorithm: lease.FixedWindow, Limit: 5, Period: time.Hour},
		{Algorithm: lease.SlidingWindow, Limit: 5, Period: time.Hour},
	} {
		e.lease(k, p, 0, 0, grantExp{0, 5, 0, anyDur}, "the key's algorithm changed: its state starts fresh with all 5 available")
	}
	e.log(k, lease.Policy{Algorithm: lease.SlidingLog, Limit: 5, Period: time.Hour}, 1, resultExp{true, 4, 0, time.Hour}, "the key's algorithm changed to sliding_log: a fresh log")
	e.acquire(k, lease.Policy{Algorithm: lease.Concurrency, Limit: 5, Period: time.Hour}, "a", 1, resultExp{true, 4, 0, time.Hour}, "the key's algorithm changed to concurrency: nothing held")
}

// --- concurrent use ---

// concurrentLeased runs 8 goroutines × 40 leases of 1 on one key with a
// limit of 100 per hour: exactly 100 must be granted, whatever the
// interleaving (each lease is atomic).
func concurrentLeased(e *env) {
	const workers, each, limit = 8, 40, 100
	e.windowLeft(time.Hour, 30*time.Second)
	for _, alg := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		k := e.key()
		p := lease.Policy{Algorithm: alg, Limit: limit, Period: time.Hour}
		var granted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for range workers {
			wg.Go(func() {
				for range each {
					g, err := e.s.Lease(e.ctx, k, p, 1, 1, lease.Lessee{})
					if err != nil {
						errs <- err
						return
					}
					granted.Add(g.Granted)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			e.t.Fatalf("%s: concurrent Lease: %v", describe(p), err)
		}
		if got := granted.Load(); got != limit {
			e.t.Errorf("%s: %d goroutines × %d leases of 1 granted %d in total, want exactly the limit %d (each lease must be atomic)", describe(p), workers, each, got, limit)
		}
	}
}

// concurrentExact does the same for sliding_log and concurrency.
func concurrentExact(e *env) {
	const workers, each, limit = 8, 20, 50
	logp := lease.Policy{Algorithm: lease.SlidingLog, Limit: limit, Period: time.Hour}
	concp := lease.Policy{Algorithm: lease.Concurrency, Limit: limit, Period: time.Hour}
	kl, kc := e.key(), e.key()
	var logAllowed, concAllowed atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 2*workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				r, err := e.s.Log(e.ctx, kl, logp, 1)
				if err != nil {
					errs <- err
					return
				}
				if r.Allowed {
					logAllowed.Add(1)
				}
				r, err = e.s.Acquire(e.ctx, kc, concp, fmt.Sprintf("w%d-%d", w, i), 1)
				if err != nil {
					errs <- err
					return
				}
				if r.Allowed {
					concAllowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatalf("concurrent Log/Acquire: %v", err)
	}
	if got := logAllowed.Load(); got != limit {
		e.t.Errorf("%s: %d goroutines × %d checks of 1 allowed %d, want exactly the limit %d", describe(logp), workers, each, got, limit)
	}
	if got := concAllowed.Load(); got != limit {
		e.t.Errorf("%s: %d goroutines × %d acquires of distinct ids allowed %d, want exactly the limit %d", describe(concp), workers, each, got, limit)
	}
}

// lentBoundedReturn: a return gives back at most what the Store lent that
// holder (in the current window for windowed algorithms), ends the loan,
// and a holder it lent nothing gets nothing back.
func lentBoundedReturn(e *env) {
	for _, alg := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		k := e.key()
		p := lease.Policy{Algorithm: alg, Limit: 10, Period: time.Hour}
		if alg == lease.FixedWindow || alg == lease.SlidingWindow {
			p.Period = quietHours(e)
		}
		g := e.leaseH(k, p, 4, 4, grantExp{4, 6, 0, anyDur}, "grant 4 to h")
		if g.Lent != 4 {
			e.t.Fatalf("%s: Lent = %d after a grant of 4 to a holder that held nothing, want 4", alg, g.Lent)
		}
		if err := e.s.Return(e.ctx, k, p, 100, "stranger"); err != nil {
			e.t.Fatal(err)
		}
		e.lease(k, p, 0, 0, grantExp{0, 6, 0, anyDur}, "a return by a holder the Store lent nothing gives nothing back")
		e.ret(k, p, 100, "h returns 100 of the 4 it was lent")
		e.lease(k, p, 0, 0, grantExp{0, 10, 0, anyDur}, "only the 4 lent to h came back")
		e.ret(k, p, 100, "h returns again: its loan ended")
		e.lease(k, p, 0, 0, grantExp{0, 10, 0, anyDur}, "nothing more")
	}
}

// quietHours is a period of whole hours whose current window has at least
// a minute left (windows are aligned on the epoch).
func quietHours(e *env) time.Duration {
	e.t.Helper()
	g, err := e.s.Lease(e.ctx, e.key(), lease.Policy{Algorithm: lease.FixedWindow, Limit: 1, Period: time.Hour}, 0, 0, lease.Lessee{})
	if err != nil {
		e.t.Fatal(err)
	}
	if g.Reset > time.Minute {
		return time.Hour
	}
	return 2 * time.Hour // the current 2h window has at least an hour left
}

// lentSpentBefore: a call that grants nothing keeps the tokens the holder
// reports spent since its previous call lent (it may refund them), and
// the next call's SpentBefore counts those it did not refund as spent by
// the previous call's last spend, not by its own.
func lentSpentBefore(e *env, alg lease.Algorithm) {
	k := e.key()
	p := lease.Policy{Algorithm: alg, Limit: 10, Period: time.Second} // burst 10, a token per 100ms
	e.leaseH(k, p, 10, 10, grantExp{10, 0, 0, time.Second}, "h takes the whole burst")
	e.advance(time.Second)
	h := lease.Lessee{ID: "h", Held: 2, TTL: time.Hour}
	g := e.leaseAs(k, p, 1, 1, h, grantExp{0, 0, anyDur, anyDur}, "h holds 2 and spent 8 just now (Idle 0): they refill from now, nothing available")
	if g.Lent != 10 {
		e.t.Fatalf("Lent = %d after a grant of nothing, want 10 (the 8 spent since the previous call stay lent: h may refund them)", g.Lent)
	}
	e.advance(time.Second)
	h.Held, h.SpentBefore = 1, 8
	g = e.leaseAs(k, p, 5, 5, h, grantExp{5, 3, 0, anyDur}, "h holds 1, spent 1 just now and the 8 before its previous call: those refilled for a second, 10 − 1 − 1 = 8 available")
	if g.Lent != 6 {
		e.t.Fatalf("Lent = %d after a grant of 5 holding 1, want 6", g.Lent)
	}
}

// lentCap: tokens lent to a holder count against the burst: the refill
// stops at capacity − lent until the holder says they are spent (a grant
// settles min(lent, held)) or gives them back.
func lentCap(e *env, alg lease.Algorithm) {
	k := e.key()
	p := lease.Policy{Algorithm: alg, Limit: 2, Period: ms(200)} // burst 2, a token per 100ms
	e.leaseH(k, p, 2, 2, grantExp{2, 0, 0, ms(200)}, "h takes the whole burst")
	e.advance(ms(250))
	e.lease(k, p, 0, 0, grantExp{0, 0, 0, anyDur}, "250ms later the refill would give 2.5, but h's 2 still count: capped at 2 − 2 = 0")
	g := e.leaseAs(k, p, 1, 1, lease.Lessee{ID: "h", Held: 1, TTL: time.Hour}, grantExp{0, 0, anyDur, anyDur}, "h holds 1: a grant would settle, but the cap holds until then: nothing available")
	if g.Lent != 2 {
		e.t.Fatalf("Lent = %d after a grant of nothing, want 2 (only a grant settles)", g.Lent)
	}
	e.ret(k, p, 1, "h gives back the 1 it holds: its loan ends")
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, anyDur}, "1 back; the token h spent counts as spent now, and refills from here")
}

// lentCapSpends: tokens spent with no loan (a call without a Lessee ID)
// while another holder's loan caps the level come off what that cap
// leaves, even when the refill alone would have filled the bucket: the
// calls of one second admit capacity − lent, not more. (Such a spend
// bakes the cap into the level, as a fifth ended loan does: see "Lent
// tokens" in the lease package doc.)
func lentCapSpends(e *env, alg lease.Algorithm) {
	k := e.key()
	p := lease.Policy{Algorithm: alg, Limit: 5, Period: time.Second} // burst 5, a token per 200ms
	e.leaseH(k, p, 3, 3, grantExp{3, 2, 0, ms(600)}, "h takes 3 of 5")
	e.advance(time.Second)
	e.lease(k, p, 0, 0, grantExp{0, 2, 0, anyDur}, "a second later the refill would fill the bucket, but h's 3 still count: 5 − 3 = 2")
	e.lease(k, p, 1, 1, grantExp{1, 1, 0, anyDur}, "one of the 2")
	e.lease(k, p, 1, 1, grantExp{1, 0, 0, anyDur}, "the other")
	e.lease(k, p, 1, 1, grantExp{0, 0, anyDur, anyDur}, "none left while h's loan runs and no time passes")
	e.ret(k, p, 3, "h gives back its 3")
	e.lease(k, p, 0, 0, grantExp{0, 3, 0, anyDur}, "h's 3 are back: 5 − the 2 spent")
}

// unansweredCall starts the unanswered cases: on a new key of 10 an hour
// (burst 10, a token per 6 minutes), holder h takes 4 with call 1, then 3
// more with call 2, whose answer h never gets. It returns the key, the
// policy and h as its call 2 left it (holding 4).
func unansweredCall(e *env, alg lease.Algorithm) (string, lease.Policy, lease.Lessee) {
	e.t.Helper()
	k := e.key()
	p := lease.Policy{Algorithm: alg, Limit: 10, Period: time.Hour}
	h := lease.Lessee{ID: "h", TTL: time.Hour, Call: 1}
	e.leaseAs(k, p, 4, 4, h, grantExp{4, 6, 0, anyDur}, "h takes 4 (call 1, answered)")
	h.Held, h.Call = 4, 2
	e.leaseAs(k, p, 3, 3, h, grantExp{3, 3, 0, anyDur}, "h asks for 3 more (call 2): granted, but its answer is lost on the way")
	return k, p, h
}

// lentUnansweredAfterSpend: a call without a Lessee ID settles no loan,
// so it leaves the key's last call as it was: a holder's unanswered grant
// still comes back after such a spend.
func lentUnansweredAfterSpend(e *env, alg lease.Algorithm) {
	k, p, h := unansweredCall(e, alg)
	e.lease(k, p, 1, 1, grantExp{1, 2, 0, anyDur}, "a spend without a holder")
	h.Call, h.Unanswered = 3, 2
	g := e.leaseAs(k, p, 0, 0, h, grantExp{0, 5, 0, anyDur}, "h says call 2 went unanswered: it is still the last call that settled a loan, its 3 come back")
	if g.Lent != 4 {
		e.t.Fatalf("Lent = %d after the unanswered grant came back, want 4", g.Lent)
	}
}

// lentExpiry: a loan that ends counts as spent at its expiry; the refill
// goes on from there (a crashed holder's tokens come back, never lost).
func lentExpiry(e *env, alg lease.Algorithm) {
	k := e.key()
	p := lease.Policy{Algorithm: alg, Limit: 2, Period: ms(200)} // burst 2, a token per 100ms
	e.leaseAs(k, p, 2, 2, lease.Lessee{ID: "h", TTL: ms(100)}, grantExp{2, 0, 0, ms(200)}, "h takes the whole burst, lent for 100ms")
	e.advance(ms(250))
	e.lease(k, p, 0, 0, grantExp{0, 1, 0, anyDur}, "the loan ended at 100ms: from 0 then, 150ms of refill = 1.5 tokens")
	g := e.leaseAs(k, p, 0, 0, lease.Lessee{ID: "h", TTL: ms(100)}, grantExp{0, 1, 0, anyDur}, "h's peek")
	if g.Lent != 0 {
		e.t.Fatalf("Lent = %d after the loan ended, want 0", g.Lent)
	}
}

// lentUnanswered: a call that says the holder's previous call went
// unanswered (Lessee.Unanswered, that call's Lessee.Call) gets that call's
// grant back to the key, once, and only if it was the last call to settle
// a loan of the key.
func lentUnanswered(e *env, alg lease.Algorithm) {
	k, p, h := unansweredCall(e, alg)
	h.Call, h.Unanswered = 3, 2
	g := e.leaseAs(k, p, 0, 0, h, grantExp{0, 6, 0, anyDur}, "h holds 4 and says call 2 went unanswered: its 3 come back to the key")
	if g.Lent != 4 {
		e.t.Fatalf("Lent = %d after the unanswered grant came back, want 4 (what h holds)", g.Lent)
	}
	h.Call, h.Unanswered = 4, 2
	e.leaseAs(k, p, 0, 0, h, grantExp{0, 6, 0, anyDur}, "call 2 again: its grant came back already (and call 3 settled the loan since)")
	h.Call, h.Unanswered = 5, 4
	e.leaseAs(k, p, 0, 0, h, grantExp{0, 6, 0, anyDur}, "call 4 granted nothing: nothing comes back")
	h.Call, h.Unanswered = 6, 0
	e.leaseAs(k, p, 2, 2, h, grantExp{2, 4, 0, anyDur}, "call 6 takes 2 (answer lost)")
	h.Call, h.Unanswered = 7, 5
	e.leaseAs(k, p, 0, 0, h, grantExp{0, 4, 0, anyDur}, "h names call 5 while call 6 ran last (reordered, or call 6 is the one it missed): nothing comes back")
	h.Call, h.Unanswered = 8, 0
	e.leaseAs(k, p, 1, 1, h, grantExp{1, 3, 0, anyDur}, "call 8 takes 1 (answer lost)")
	e.leaseAs(k, p, 1, 1, lease.Lessee{ID: "other", TTL: time.Hour, Call: 9}, grantExp{1, 2, 0, anyDur}, "another holder's call settles a loan since")
	h.Call, h.Unanswered = 10, 8
	e.leaseAs(k, p, 0, 0, h, grantExp{0, 2, 0, anyDur}, "h names call 8, no longer the key's last call: nothing comes back")
}
