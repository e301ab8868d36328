package algo

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// base is a round instant: a multiple of every period used below.
var base = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func msd(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }

// leasedMath is what the four leased state types have in common.
type leasedMath interface {
	Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant
	Return(p Policy, now time.Time, n int64, holder string)
	Expiry(Policy) int64
}

type leaseStep struct {
	at         time.Duration // since base
	ret        int64         // > 0: Return(ret) at `at` before the lease
	want, need int64
	exp        Grant
	why        string
}

// runLeaseSteps runs steps as an anonymous lessee (nothing lent), or as
// holder "h" holding all it was granted for the windowed algorithms, whose
// tables return tokens.
func runLeaseSteps(t *testing.T, st leasedMath, p Policy, steps []leaseStep) {
	t.Helper()
	for i, s := range steps {
		now := base.Add(s.at)
		to := Lessee{}
		if !p.Algorithm.Refills() {
			to = Lessee{ID: "h", Held: MaxHits}
		}
		if s.ret > 0 {
			st.Return(p, now, s.ret, to.ID)
		}
		got := st.Lease(p, now, s.want, s.need, to)
		got.Lent = 0 // checked by TestLentAccounting
		if got != s.exp {
			t.Fatalf("step %d at +%v (return %d, want %d, need %d):\n got  %+v\n want %+v\n why: %s", i, s.at, s.ret, s.want, s.need, got, s.exp, s.why)
		}
	}
}

// TestBucketMath runs the same table on token_bucket and gcra: they express
// the same limits and must give the same answers.
func TestBucketMath(t *testing.T) {
	// 10/s, capacity 5: one token per 100ms.
	steps := []leaseStep{
		{0, 0, 0, 0, Grant{0, 5, 0, 0, 0, 0, 0, false, false}, "no state is a full bucket; peek"},
		{0, 0, 3, 3, Grant{3, 2, 0, msd(300), 0, 0, 0, false, false}, "grant 3 of 5; full again in 3 × 100ms"},
		{0, 0, 5, 3, Grant{0, 2, msd(100), msd(300), 0, 0, 0, false, false}, "2 < need 3: wait for 1 token"},
		{msd(50), 0, 0, 0, Grant{0, 2, 0, msd(250), 0, 0, 0, false, false}, "2.5 tokens: 2 whole"},
		{msd(50), 0, 6, 6, Grant{0, 2, time.Second, msd(250), 0, 0, 0, false, false}, "need 6 > capacity 5: wait one period"},
		{msd(150), 0, 5, 3, Grant{3, 0, 0, msd(450), 0, 0, 0, false, false}, "3.5 tokens: grant min(5, 3); 0.5 left"},
		{msd(150), 0, 1, 1, Grant{0, 0, msd(50), msd(450), 0, 0, 0, false, false}, "0.5 < 1: wait 50ms"},
		{msd(150.5), 0, 1, 1, Grant{0, 0, msd(50), msd(450), 0, 0, 0, false, false}, "0.505 tokens: wait 49.5ms, rounded up to 50ms; reset 449.5 → 450ms"},
		{msd(150.5), 0, 4, 0, Grant{0, 0, 0, msd(450), 0, 0, 0, false, false}, "need 0 always met: grant min(want 4, 0 available) = 0"},
		{5 * time.Second, 2, 0, 0, Grant{0, 5, 0, 0, 0, 0, 0, false, false}, "refill stops at capacity; a return never exceeds it"},
		{5 * time.Second, 0, 5, 5, Grant{5, 0, 0, msd(500), 0, 0, 0, false, false}, "take all"},
		{5 * time.Second, 2, 0, 0, Grant{0, 0, 0, msd(500), 0, 0, 0, false, false}, "a return of tokens never lent to the holder gives nothing back"},
		{msd(5200), 0, 4, 4, Grant{0, 2, msd(200), msd(300), 0, 0, 0, false, false}, "2 refilled < 4"},
		{msd(5200), 100, 0, 0, Grant{0, 2, 0, msd(300), 0, 0, 0, false, false}, "still nothing lent to give back"},
	}
	for _, alg := range []Algorithm{TokenBucket, GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			p := Policy{Algorithm: alg, Limit: 10, Period: time.Second, Burst: 5}
			var st leasedMath = &TokenBucketState{}
			if alg == GCRA {
				st = &GCRAState{}
			}
			runLeaseSteps(t, st, p, steps)
		})
	}
}

func TestBucketReturnWithoutState(t *testing.T) {
	p := Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Second}
	var tb TokenBucketState
	tb.Return(p, base, 3, "h")
	if tb.Tokens != 0 || tb.Updated != 0 || tb.Loans != nil {
		t.Fatalf("Return on no state wrote %+v, want no state", tb)
	}
	var g GCRAState
	g.Return(p, base, 3, "h")
	if g.TAT != 0 || g.Loans != nil {
		t.Fatalf("Return on no state wrote %+v, want no state", g)
	}
}

func TestBucketWritesOnlyOnGrant(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow} {
		p := Policy{Algorithm: alg, Limit: 2, Period: time.Second}
		var st leasedMath
		switch alg {
		case TokenBucket:
			st = &TokenBucketState{Tokens: 1, Updated: base.UnixMicro()}
		case GCRA:
			st = &GCRAState{TAT: base.Add(time.Second).UnixMicro()}
		case FixedWindow:
			st = &FixedWindowState{Start: base.UnixMicro(), Count: 2}
		case SlidingWindow:
			st = &SlidingWindowState{Start: base.UnixMicro(), Prev: 1, Cur: 1}
		}
		before := st.Expiry(p)
		snapshot := func() any {
			switch s := st.(type) {
			case *TokenBucketState:
				return *s
			case *GCRAState:
				return *s
			case *FixedWindowState:
				return *s
			case *SlidingWindowState:
				return *s
			}
			return nil
		}
		s0 := snapshot()
		now := base.Add(10 * time.Millisecond)
		st.Lease(p, now, 0, 0, Lessee{}) // peek
		st.Lease(p, now, 2, 2, Lessee{}) // denied
		st.Lease(p, now, 3, 3, Lessee{}) // need > capacity
		if s1 := snapshot(); fmt.Sprint(s1) != fmt.Sprint(s0) || st.Expiry(p) != before {
			t.Errorf("%s: peeks and denials changed the state from %+v to %+v", alg, s0, s1)
		}
	}
}

func TestFixedWindowMath(t *testing.T) {
	p := Policy{Algorithm: FixedWindow, Limit: 5, Period: time.Second}
	runLeaseSteps(t, &FixedWindowState{}, p, []leaseStep{
		{msd(200), 0, 0, 0, Grant{0, 5, 0, msd(800), 0, 0, 0, false, false}, "peek: reset is the end of the window even when unused"},
		{msd(200), 0, 3, 3, Grant{3, 2, 0, msd(800), 0, 0, 0, false, false}, "grant 3"},
		{msd(500), 0, 3, 3, Grant{0, 2, msd(500), msd(500), 0, 0, 0, false, false}, "2 < 3: wait for the window's end"},
		{msd(500), 0, 3, 2, Grant{2, 0, 0, msd(500), 0, 0, 0, false, false}, "grant min(3, 2)"},
		{msd(999.9), 0, 1, 1, Grant{0, 0, msd(1), msd(1), 0, 0, 0, false, false}, "0.1ms left rounds up to 1ms"},
		{time.Second, 0, 5, 5, Grant{5, 0, 0, time.Second, 0, 0, 0, false, false}, "at the boundary a new window starts at 0"},
		{time.Second, 2, 0, 0, Grant{0, 2, 0, time.Second, 0, 0, 0, false, false}, "a return lowers the count"},
		{time.Second, 10, 0, 0, Grant{0, 2, 0, time.Second, 0, 0, 0, false, false}, "the holder's loan ended with its first return: nothing more comes back"},
		{time.Second, 0, 6, 6, Grant{0, 2, time.Second, time.Second, 0, 0, 0, false, false}, "need 6 > limit 5: one period"},
		{msd(1500), 0, 2, 2, Grant{2, 0, 0, msd(500), 0, 0, 0, false, false}, "take 2"},
		{msd(2100), 3, 0, 0, Grant{0, 5, 0, msd(900), 0, 0, 0, false, false}, "a return does not reach into a past window's count"},
	})
}

func TestSlidingWindowMath(t *testing.T) {
	p := Policy{Algorithm: SlidingWindow, Limit: 10, Period: time.Second}
	runLeaseSteps(t, &SlidingWindowState{}, p, []leaseStep{
		{0, 0, 0, 0, Grant{0, 10, 0, 0, 0, 0, 0, false, false}, "no state: reset 0"},
		{0, 0, 6, 6, Grant{6, 4, 0, 2 * time.Second, 0, 0, 0, false, false}, "cur 6: reset end of next window"},
		{time.Second, 0, 0, 0, Grant{0, 4, 0, time.Second, 0, 0, 0, false, false}, "prev 6 weighs 6 at e=0; only prev: reset end of this window"},
		{msd(1250), 0, 0, 0, Grant{0, 5, 0, msd(750), 0, 0, 0, false, false}, "prev weighs 6×0.75 = 4.5, rounded up: 5 available"},
		{msd(1250), 0, 8, 7, Grant{0, 5, msd(250), msd(750), 0, 0, 0, false, false}, "need 7: prev must weigh ≤ 3: e ≥ 1 - 3/6 = 0.5s: wait 250ms"},
		{msd(1500), 0, 8, 7, Grant{7, 0, 0, msd(1500), 0, 0, 0, false, false}, "prev weighs 3: grant 7"},
		{msd(1500), 0, 1, 1, Grant{0, 0, msd(167), msd(1500), 0, 0, 0, false, false}, "room 2: e ≥ 1 - 2/6: 166.67ms → 167ms"},
		{msd(1500), 0, 4, 4, Grant{0, 0, msd(643), msd(1500), 0, 0, 0, false, false}, "cur 7 + 4 > 10: next window, prev=7 must weigh ≤ 6: 500 + 1000×(1 - 6/7) = 642.86ms → 643ms"},
		{msd(1500), 0, 3, 3, Grant{0, 0, msd(500), msd(1500), 0, 0, 0, false, false}, "room 0: at the window's end prev=7 weighs 7 and 7 + 3 ≤ 10"},
		{msd(1500), 2, 0, 0, Grant{0, 2, 0, msd(1500), 0, 0, 0, false, false}, "return 2: cur 5"},
		{msd(1500), 20, 0, 0, Grant{0, 2, 0, msd(1500), 0, 0, 0, false, false}, "the holder's loan ended with its first return: nothing more comes back"},
		{3 * time.Second, 0, 0, 0, Grant{0, 10, 0, 0, 0, 0, 0, false, false}, "two windows later: nothing weighs"},
		{3 * time.Second, 0, 11, 11, Grant{0, 10, time.Second, 0, 0, 0, 0, false, false}, "need 11 > limit: one period"},
	})
}

type logStep struct {
	at   time.Duration
	hits int64
	exp  Result
	why  string
}

func runLogSteps(t *testing.T, p Policy, steps []logStep) {
	t.Helper()
	var st SlidingLogState
	for i, s := range steps {
		got := st.Check(p, base.Add(s.at), s.hits)
		if got != s.exp {
			t.Fatalf("step %d at +%v (hits %d):\n got  %+v\n want %+v\n why: %s", i, s.at, s.hits, got, s.exp, s.why)
		}
	}
}

func TestSlidingLogMath(t *testing.T) {
	p := Policy{Algorithm: SlidingLog, Limit: 3, Period: time.Second}
	runLogSteps(t, p, []logStep{
		{0, 1, Result{true, 2, 0, time.Second}, "first"},
		{msd(100), 1, Result{true, 1, 0, time.Second}, "second"},
		{msd(200), 1, Result{true, 0, 0, time.Second}, "third"},
		{msd(300), 1, Result{false, 0, msd(700), msd(900)}, "full: the stamp of 0 leaves at 1s"},
		{msd(300), 3, Result{false, 0, msd(900), msd(900)}, "3 must leave: the third oldest (200ms) leaves at 1.2s"},
		{msd(300), 4, Result{false, 0, time.Second, msd(900)}, "hits > limit: one period"},
		{time.Second, 0, Result{true, 1, 0, msd(200)}, "the stamp of 0 is exactly one period old: gone"},
		{msd(1000.5), 2, Result{false, 1, msd(100), msd(200)}, "oldest (100ms) leaves in 99.5ms → 100ms; reset 199.5 → 200ms"},
		{msd(2200), 0, Result{true, 3, 0, 0}, "all gone"},
		{msd(2200), 2, Result{true, 1, 0, time.Second}, "two stamps at once"},
		{msd(2200), 1, Result{true, 0, 0, time.Second}, "a third at the same instant"},
		{msd(2300), 1, Result{false, 0, msd(900), msd(900)}, "the oldest of the three at 2.2s leaves at 3.2s"},
		{msd(2300), 3, Result{false, 0, msd(900), msd(900)}, "all three at 2.2s leave at 3.2s"},
	})
}

func TestSlidingLogMinIntervalMath(t *testing.T) {
	p := Policy{Algorithm: SlidingLog, Limit: 5, Period: time.Second, MinInterval: 100 * time.Millisecond}
	runLogSteps(t, p, []logStep{
		{0, 1, Result{true, 4, 0, time.Second}, "first"},
		{msd(50), 1, Result{false, 4, msd(50), msd(950)}, "50ms after: 50ms to go"},
		{msd(50), 0, Result{true, 4, 0, msd(950)}, "a peek is never denied (issue 9): it records nothing"},
		{msd(99.9), 1, Result{false, 4, msd(1), msd(901)}, "0.1ms to go rounds up to 1ms"},
		{msd(100), 2, Result{true, 2, 0, time.Second}, "exactly min_interval later: allowed"},
		{msd(150), 3, Result{false, 2, msd(850), msd(950)}, "count: the stamp of 0 leaves at 1s, in 850ms > min_interval's 50ms"},
	})
}

func TestConcurrencyMath(t *testing.T) {
	p := Policy{Algorithm: Concurrency, Limit: 2, Period: time.Second}
	var st ConcurrencyState
	type step struct {
		at      time.Duration
		release string
		id      string
		hits    int64
		exp     Result
		why     string
	}
	for i, s := range []step{
		{0, "", "", 0, Result{true, 2, 0, 0}, "peek on nothing held"},
		{0, "", "a", 1, Result{true, 1, 0, time.Second}, "a expires at 1s"},
		{msd(100), "", "b", 1, Result{true, 0, 0, time.Second}, "b expires at 1.1s, 1s from now"},
		{msd(200), "", "c", 1, Result{false, 0, msd(800), msd(900)}, "full: a expires in 800ms, b in 900ms"},
		{msd(200), "", "", 0, Result{false, 0, msd(800), msd(900)}, "peek: full"},
		{msd(300), "", "a", 1, Result{true, 0, 0, time.Second}, "renewing a held id is allowed when full; a now expires at 1.3s"},
		{msd(300), "", "c", 1, Result{false, 0, msd(800), time.Second}, "earliest is now b at 1.1s"},
		{msd(1100), "", "c", 1, Result{true, 0, 0, time.Second}, "b's expiry is not after now: reaped"},
		{msd(1100), "a", "", 0, Result{true, 1, 0, time.Second}, "a released"},
		{msd(1100), "zzz", "", 0, Result{true, 1, 0, time.Second}, "unknown id released: nothing changes"},
		{msd(2100), "", "", 0, Result{true, 2, 0, 0}, "c expired"},
	} {
		now := base.Add(s.at)
		if s.release != "" {
			st.Release(now, s.release)
		}
		if got := st.Acquire(p, now, s.id, s.hits); got != s.exp {
			t.Fatalf("step %d at +%v (release %q, acquire %q hits %d):\n got  %+v\n want %+v\n why: %s", i, s.at, s.release, s.id, s.hits, got, s.exp, s.why)
		}
	}
}

func TestCheckArguments(t *testing.T) {
	tb := Policy{Algorithm: TokenBucket, Limit: 1, Period: time.Second}
	sl := Policy{Algorithm: SlidingLog, Limit: 1, Period: time.Second}
	cc := Policy{Algorithm: Concurrency, Limit: 1, Period: time.Second}
	tests := []struct {
		name  string
		err   error
		field string // "" with wrong: ErrWrongAlgorithm; "" and !wrong: nil
		wrong bool
	}{
		{"lease ok", CheckLease(tb, 2, 1, Lessee{}), "", false},
		{"lease need>want", CheckLease(tb, 1, 2, Lessee{}), "need", false},
		{"lease need<0", CheckLease(tb, 1, -1, Lessee{}), "need", false},
		{"lease want<0", CheckLease(tb, -1, 0, Lessee{}), "want", false},
		{"lease want>max", CheckLease(tb, MaxHits+1, 0, Lessee{}), "want", false},
		{"lease bad policy", CheckLease(Policy{Algorithm: TokenBucket, Limit: 1}, 1, 1, Lessee{}), "period", false},
		{"lease sliding_log", CheckLease(sl, 1, 1, Lessee{}), "", true},
		{"return ok", CheckReturn(tb, 0, ""), "", false},
		{"return <0", CheckReturn(tb, -1, ""), "tokens", false},
		{"return concurrency", CheckReturn(cc, 1, ""), "", true},
		{"log ok", CheckLog(sl, 0), "", false},
		{"log <0", CheckLog(sl, -1), "hits", false},
		{"log token_bucket", CheckLog(tb, 1), "", true},
		{"acquire ok", CheckAcquire(cc, "a", 1), "", false},
		{"acquire peek without id", CheckAcquire(cc, "", 0), "", false},
		{"acquire no id", CheckAcquire(cc, "", 1), "id", false},
		{"acquire hits 2", CheckAcquire(cc, "a", 2), "hits", false},
		{"acquire sliding_log", CheckAcquire(sl, "a", 1), "", true},
		{"release ok", CheckRelease(cc, "a"), "", false},
		{"release no id", CheckRelease(cc, ""), "id", false},
		{"release gcra", CheckRelease(Policy{Algorithm: GCRA, Limit: 1, Period: time.Second}, "a"), "", true},
	}
	for _, tt := range tests {
		var fe *FieldError
		switch {
		case tt.wrong:
			if !errors.Is(tt.err, ErrWrongAlgorithm) {
				t.Errorf("%s: got %v, want ErrWrongAlgorithm", tt.name, tt.err)
			}
		case tt.field != "":
			if !errors.As(tt.err, &fe) || fe.Field != tt.field {
				t.Errorf("%s: got %v, want a FieldError for %q", tt.name, tt.err, tt.field)
			}
		case tt.err != nil:
			t.Errorf("%s: got %v, want nil", tt.name, tt.err)
		}
	}
}

func TestCeilMillis(t *testing.T) {
	tests := []struct {
		us   float64
		want time.Duration
	}{
		{-5, 0}, {0, 0}, {0.001, time.Millisecond}, {1, time.Millisecond}, {999.999, time.Millisecond},
		{1000, time.Millisecond}, {1000.001, 2 * time.Millisecond}, {math.Inf(1), time.Duration(maxReportMillis) * time.Millisecond},
		{math.NaN(), 0},
	}
	for _, tt := range tests {
		if got := ceilMillis(tt.us); got != tt.want {
			t.Errorf("ceilMillis(%v) = %v, want %v", tt.us, got, tt.want)
		}
	}
}

// --- properties over long random sequences ---

// randPolicy returns a random policy of alg with small numbers, so that
// limits are hit often.
func randPolicy(r *rand.Rand, alg Algorithm) Policy {
	p := Policy{
		Algorithm: alg,
		Limit:     1 + r.Int64N(20),
		Period:    time.Duration(1+r.Int64N(2000)) * time.Millisecond,
	}
	if r.IntN(2) == 0 {
		p.Burst = 1 + r.Int64N(30)
	}
	if alg == SlidingLog && r.IntN(2) == 0 {
		p.MinInterval = time.Duration(r.Int64N(int64(p.Period)/time.Microsecond.Nanoseconds()/4+1)) * time.Microsecond
	}
	return p
}

// randStep is a random time step in µs: often 0, sometimes tiny, sometimes
// a good part of the period.
func randStep(r *rand.Rand, pu int64) time.Duration {
	switch r.IntN(4) {
	case 0:
		return 0
	case 1:
		return time.Duration(r.Int64N(50)) * time.Microsecond
	default:
		return time.Duration(r.Int64N(pu/3+1)) * time.Microsecond
	}
}

type grantEvent struct {
	t int64 // unix µs
	n int64
}

// cloneLeased returns a copy of a leased state.
func cloneLeased(st leasedMath) leasedMath {
	switch s := st.(type) {
	case *TokenBucketState:
		c := *s
		return &c
	case *GCRAState:
		c := *s
		return &c
	case *FixedWindowState:
		c := *s
		return &c
	case *SlidingWindowState:
		c := *s
		return &c
	}
	panic("unknown state")
}

func newLeased(alg Algorithm) leasedMath {
	switch alg {
	case TokenBucket:
		return &TokenBucketState{}
	case GCRA:
		return &GCRAState{}
	case FixedWindow:
		return &FixedWindowState{}
	}
	return &SlidingWindowState{}
}

// TestLeasedProperties drives each leased algorithm with long random
// sequences and checks that (1) the admitted tokens never exceed what the
// policy allows, and (2) Wait is tight: need is available at now + Wait
// and not at now + Wait - 1ms.
func TestLeasedProperties(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			for seed := range uint64(40) {
				r := rand.New(rand.NewPCG(seed, uint64(alg)))
				p := randPolicy(r, alg)
				pu := periodMicros(p)
				st := newLeased(alg)
				now := base.Add(time.Duration(r.Int64N(1e6)) * time.Microsecond)
				var events []grantEvent
				for i := 0; i < 1500; i++ {
					now = now.Add(randStep(r, pu))
					want := r.Int64N(p.Capacity() + 3)
					need := r.Int64N(want + 1)
					probe := cloneLeased(st)
					g := st.Lease(p, now, want, need, Lessee{})
					if g.Granted > 0 {
						events = append(events, grantEvent{now.UnixMicro(), g.Granted})
					}
					switch {
					case g.Granted > 0 && (g.Granted < need || g.Granted > want):
						t.Fatalf("seed %d %+v: granted %d outside [need %d, want %d]", seed, p, g.Granted, need, want)
					case g.Granted == 0 && need > 0 && g.Wait == 0:
						t.Fatalf("seed %d %+v: need %d denied with Wait 0", seed, p, need)
					case g.Granted == 0 && g.Wait > 0 && need <= p.Capacity():
						// Wait is tight (probe has the state before the call).
						at := probe.Lease(p, now.Add(g.Wait).Add(time.Microsecond), 0, 0, Lessee{})
						if at.Remaining < need {
							t.Fatalf("seed %d %+v at %v: Wait %v for need %d, but only %d available then", seed, p, now.Sub(base), g.Wait, need, at.Remaining)
						}
						// Not more than 1ms late beyond the rounding up: a float
						// result a hair above a whole ms rounds up once more.
						before := cloneLeased(probe).Lease(p, now.Add(g.Wait-2*time.Millisecond), 0, 0, Lessee{})
						if g.Wait >= 2*time.Millisecond && before.Remaining >= need {
							t.Fatalf("seed %d %+v at %v: Wait %v for need %d, but %d were available 2ms earlier", seed, p, now.Sub(base), g.Wait, need, before.Remaining)
						}
					}
				}
				checkAdmitted(t, p, events)
			}
		})
	}
}

// checkAdmitted checks the grant history against the policy's bound.
func checkAdmitted(t *testing.T, p Policy, ev []grantEvent) {
	t.Helper()
	pu := periodMicros(p)
	switch p.Algorithm {
	case TokenBucket, GCRA:
		// In any interval [ti, tj]: admitted ≤ capacity + refill.
		for i := range ev {
			var sum int64
			for j := i; j < len(ev); j++ {
				sum += ev[j].n
				allowed := float64(p.Capacity()) + float64(ev[j].t-ev[i].t)*float64(p.Limit)/float64(pu)
				if float64(sum) > allowed+1e-6 {
					t.Fatalf("%+v: %d admitted in [%d, %d]µs, bound %.3f", p, sum, ev[i].t, ev[j].t, allowed)
				}
			}
		}
	case FixedWindow:
		per := map[int64]int64{}
		for _, e := range ev {
			ws := windowStart(e.t, pu)
			if per[ws] += e.n; per[ws] > p.Limit {
				t.Fatalf("%+v: %d admitted in the window at %d", p, per[ws], ws)
			}
		}
	case SlidingWindow:
		// After every grant: prev × (1 - e/P) + cur ≤ limit, recomputed
		// from the history.
		per := map[int64]int64{}
		for _, e := range ev {
			ws := windowStart(e.t, pu)
			per[ws] += e.n
			est := float64(per[ws-pu])*float64(pu-(e.t-ws))/float64(pu) + float64(per[ws])
			if est > float64(p.Limit)+1e-9 {
				t.Fatalf("%+v: estimate %.3f > limit after a grant at %d", p, est, e.t)
			}
		}
	}
}

// TestSlidingLogProperties compares Check with a naive model over random
// sequences: allowed exactly when the rolling window (t-P, t] has room and
// min_interval has passed, and RetryAfter is tight.
func TestSlidingLogProperties(t *testing.T) {
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 99))
		p := randPolicy(r, SlidingLog)
		pu, mi := periodMicros(p), p.MinInterval.Microseconds()
		var st SlidingLogState
		var admitted []int64 // one entry per hit
		now := base
		for i := 0; i < 1500; i++ {
			now = now.Add(randStep(r, pu))
			hits := r.Int64N(p.Limit + 2)
			tu := now.UnixMicro()
			var inWindow, newest int64
			for _, a := range admitted {
				if a > tu-pu {
					inWindow++
					newest = a
				}
			}
			want := hits == 0 || hits <= p.Limit && inWindow+hits <= p.Limit && !(mi > 0 && inWindow > 0 && tu-newest < mi)
			probe := SlidingLogState{Stamps: append([]LogStamp(nil), st.Stamps...)}
			got := st.Check(p, now, hits)
			if got.Allowed != want {
				t.Fatalf("seed %d %+v at %v: hits %d with %d in window: allowed=%t, model says %t", seed, p, now.Sub(base), hits, inWindow, got.Allowed, want)
			}
			if got.Allowed {
				for range hits {
					admitted = append(admitted, tu)
				}
				continue
			}
			if hits > p.Limit {
				continue
			}
			later := SlidingLogState{Stamps: append([]LogStamp(nil), probe.Stamps...)}
			if !later.Check(p, now.Add(got.RetryAfter), hits).Allowed {
				t.Fatalf("seed %d %+v: denied with RetryAfter %v, but still denied then", seed, p, got.RetryAfter)
			}
			if got.RetryAfter >= time.Millisecond && probe.Check(p, now.Add(got.RetryAfter-time.Millisecond), hits).Allowed {
				t.Fatalf("seed %d %+v: RetryAfter %v, but allowed 1ms earlier", seed, p, got.RetryAfter)
			}
		}
	}
}

// TestConcurrencyProperties checks that random acquires and releases never
// hold more than the limit and match a naive model.
func TestConcurrencyProperties(t *testing.T) {
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 7))
		p := randPolicy(r, Concurrency)
		pu := periodMicros(p)
		var st ConcurrencyState
		model := map[string]int64{}
		now := base
		for i := 0; i < 1500; i++ {
			now = now.Add(randStep(r, pu))
			tu := now.UnixMicro()
			id := string(rune('a' + r.IntN(30)))
			for k, exp := range model {
				if exp <= tu {
					delete(model, k)
				}
			}
			if r.IntN(3) == 0 {
				st.Release(now, id)
				delete(model, id)
				continue
			}
			_, held := model[id]
			want := held || int64(len(model)) < p.Limit
			got := st.Acquire(p, now, id, 1)
			if got.Allowed != want {
				t.Fatalf("seed %d: acquire %q with %d held: allowed=%t, model says %t", seed, id, len(model), got.Allowed, want)
			}
			if got.Allowed {
				model[id] = tu + pu
			}
			if int64(len(st.Held)) > p.Limit || got.Remaining != p.Limit-int64(len(model)) {
				t.Fatalf("seed %d: %d held, remaining %d; limit %d, model holds %d", seed, len(st.Held), got.Remaining, p.Limit, len(model))
			}
		}
	}
}

// FuzzLeasedMath drives the leased algorithms with arbitrary (valid)
// policies, including the validation bounds, and arbitrary call sequences:
// no panic, answers within their ranges, and an immediate peek agrees with
// what a grant reported.
func FuzzLeasedMath(f *testing.F) {
	f.Add(uint8(1), int64(10), int64(1000), int64(0), []byte{5, 5, 0, 3, 9, 200, 1})
	f.Add(uint8(2), int64(MaxLimit), int64(MaxPeriod/time.Millisecond), int64(MaxLimit), []byte{255, 255, 255, 0, 1})
	f.Add(uint8(2), int64(1), int64(MaxPeriod/time.Millisecond), int64(MaxLimit), []byte{255, 255, 7, 7})
	f.Add(uint8(3), int64(3), int64(1), int64(0), []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Add(uint8(4), int64(7), int64(333), int64(0), []byte{9, 1, 9, 1, 0, 0, 255})
	f.Fuzz(func(t *testing.T, a uint8, limit, periodMs, burst int64, ops []byte) {
		p := Policy{
			Algorithm: Algorithm(1 + a%4),
			Limit:     limit,
			Period:    time.Duration(periodMs) * time.Millisecond,
			Burst:     burst,
		}
		if periodMs <= 0 || periodMs > int64(MaxPeriod/time.Millisecond) || p.Validate() != nil {
			return
		}
		st := newLeased(p.Algorithm)
		now := base
		c := p.Capacity()
		for i := 0; i+2 < len(ops); i += 3 {
			now = now.Add(time.Duration(ops[i]) * time.Duration(ops[i]) * time.Millisecond)
			want := int64(ops[i+1]) * c / 128
			need := min(want, int64(ops[i+2])*c/128)
			if ops[i+2]%7 == 0 {
				st.Return(p, now, want, "")
				continue
			}
			g := st.Lease(p, now, want, need, Lessee{})
			switch {
			case g.Granted != 0 && (g.Granted < need || g.Granted > want):
				t.Fatalf("%+v: granted %d outside [%d, %d]", p, g.Granted, need, want)
			case g.Remaining < 0 || g.Remaining > c || g.Wait < 0 || g.Reset < 0:
				t.Fatalf("%+v: out of range answer %+v", p, g)
			case g.Granted == 0 && need > 0 && g.Wait == 0:
				t.Fatalf("%+v: need %d denied without a wait: %+v", p, need, g)
			}
			if peek := st.Lease(p, now, 0, 0, Lessee{}); peek.Remaining != g.Remaining {
				t.Fatalf("%+v: lease said %d remain, an immediate peek says %d", p, g.Remaining, peek.Remaining)
			}
		}
	})
}

// FuzzExactMath drives sliding_log and concurrency with arbitrary valid
// policies and call sequences: no panic, counts within the limit.
func FuzzExactMath(f *testing.F) {
	f.Add(int64(3), int64(1000), int64(100), []byte{1, 1, 1, 0, 50, 2, 200, 3})
	f.Add(int64(MaxLimit), int64(MaxPeriod/time.Millisecond), int64(0), []byte{255, 255, 255})
	f.Fuzz(func(t *testing.T, limit, periodMs, minMs int64, ops []byte) {
		p := Policy{Algorithm: SlidingLog, Limit: limit, Period: time.Duration(periodMs) * time.Millisecond,
			MinInterval: time.Duration(minMs) * time.Millisecond}
		if periodMs <= 0 || periodMs > int64(MaxPeriod/time.Millisecond) || minMs < 0 || p.Validate() != nil {
			return
		}
		pc := Policy{Algorithm: Concurrency, Limit: limit, Period: p.Period}
		var log SlidingLogState
		var conc ConcurrencyState
		now := base
		for i := 0; i+1 < len(ops); i += 2 {
			now = now.Add(time.Duration(ops[i]) * time.Duration(ops[i]) * time.Millisecond)
			hits := int64(ops[i+1]) * limit / 128
			r := log.Check(p, now, hits)
			if r.Remaining < 0 || r.Remaining > limit || r.RetryAfter < 0 || r.Reset < 0 || (!r.Allowed && r.RetryAfter == 0) {
				t.Fatalf("%+v: hits %d: out of range %+v", p, hits, r)
			}
			if n := log.count(); n > limit {
				t.Fatalf("%+v: %d stamps in the window, limit %d", p, n, limit)
			}
			id := string(rune('a' + ops[i+1]%16))
			if ops[i]%5 == 0 {
				conc.Release(now, id)
				continue
			}
			rc := conc.Acquire(pc, now, id, 1)
			if int64(len(conc.Held)) > limit || rc.Remaining < 0 || (!rc.Allowed && rc.RetryAfter <= 0) {
				t.Fatalf("%+v: %d held, answer %+v", pc, len(conc.Held), rc)
			}
		}
	})
}

// BenchmarkAlgoLease measures the pure math of one grant, without the
// store's map and lock (each goroutine has its own state).
func BenchmarkAlgoLease(b *testing.B) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow} {
		b.Run(alg.String(), func(b *testing.B) {
			p := Policy{Algorithm: alg, Limit: MaxLimit, Period: time.Hour}
			if alg == TokenBucket || alg == GCRA {
				p.Limit, p.Burst = 1, MaxLimit
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				st := newLeased(alg)
				now := base
				for pb.Next() {
					now = now.Add(time.Microsecond)
					st.Lease(p, now, 100, 1, Lessee{})
				}
			})
		})
	}
}
