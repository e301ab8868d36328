// Package modeltest is the model-based test of lease.Manager: a seeded,
// reproducible harness that drives one to three Managers sharing one
// lease.Store through random sequences of checks, time jumps, refunds,
// returns and idle sweeps, and after every step checks what they decided
// against an exact reference model of what was admitted, written from the
// accuracy contract (the lease package doc, docs/architecture.md),
// not from the Manager's code.
//
// It is a non-test package, like lease/storetest, so that the lease tests
// run it on a MemoryStore with a fake clock, the lua tests on a Redis
// whose clock is frozen (lua/redistest.StartWithClock), and the
// node/client tests on the gateway tier (each holder a gateway whose
// Store is a node's lease protocol over a MemoryStore) and on the region
// tier (each holder a region's node leasing from a global-tier node).
//
// # What is checked
//
// Safety, across all holders of a key, after every admission (hits net of
// refunds, at the instant the Manager decided):
//
//   - token_bucket, gcra: for every interval [t, now], admitted ≤ burst +
//     rate × (now − t) (each new admission against all earlier ones);
//   - fixed_window: admitted in one window ≤ limit;
//   - sliding_window: prev × (1 − elapsed/period) + cur ≤ limit, over the
//     windows' actual admissions;
//   - sliding_log: the decision is exactly the log's (count + hits ≤ limit
//     over the rolling window, and min_interval);
//   - concurrency: in flight ≤ limit, and the decision is exactly the
//     model's (at an expiry instant either answer is accepted).
//
// Under-admission: hits = 0 is never denied (concurrency's peek aside),
// and a denied check of hits h is justified by one of the contract's
// clauses (the lease package doc): (a) an answer the holder had from the
// Store, taken from the model at that instant and projected to now, cannot
// cover h (one token of slack where the Store floors); (b) the model's
// level now, less what the other holders hold (or the Store still lends
// them, spent and unsettled), less the holder's own spent and unsettled
// tokens, cannot cover h (the level counting spent tokens from when the
// holder's calls say, or, for the tokens lent when a loan ended whose cap
// the Store baked into the key's level, from that end: BakingStore); (c) after a Store denial, until its Wait plus a
// horizon, h plus a batch is not covered; (d) on a tier that splits a
// saturated key among its holders (SharedStore: the region tier), after
// an answer from the holder's share, h is more than the holder has on
// hand, until the answer's Wait plus a horizon, or while the answer's
// Remaining (what its share could be granted) grown at the key's whole
// rate since cannot cover it. What each holder holds is
// measured, not guessed: every Manager talks to the Store through a
// recording wrapper, which also sees each loan's TTL (a loan that ends
// unspent counts as spent then; a bucket dropped without a return, as
// spent when dropped). Refunds are bounded by what the Store lends the
// holder (Grant.Lent), as the Manager documents.
//
// fixed_window's shares ahead (Lessee.AheadWindows, AheadTokens) are read
// from each answer (Grant.AheadTokens, AheadWindows): each counts in every
// window it covers from the window's start, as its holder's loan there,
// until the holder's return, or after the window of its call that asks
// for none; the shares lent into one window never pass the limit. A
// holder holds its share in a window only if its Manager asked for it,
// and spends it only in the span the Manager dates from the lending call
// (the lease package doc), until a lease call shows it the Store's window:
// at the window's start and end, spells where the share is lent to it
// and not usable. With Options.Ahead the harness asks for shares in the
// Managers' place and hides them, so that the Store lends tokens that
// only it knows. A denial is then excused by the others' shares and by
// the holder's own that it cannot spend, and by no more.
//
// # Ops
//
// Take and TakeMany (hits 0, 1, a few, many, about and above the
// capacity, several keys, the same key from several Managers), refunds
// of what was just admitted, clock jumps from a millisecond to a day,
// idle spells with the idle sweep, ReturnKeys (ownership moves), and
// crashes (a Manager stops without returning anything; a new holder
// replaces it).
//
// # Determinism
//
// Each seed gives one scenario: the number of holders, the keys and their
// policies, and the op list; nothing in it depends on the outcomes. The
// clock moves only by the harness (a fake clock, or the frozen Redis
// clock, first moved to the same offset past a day boundary), the
// Managers run without a sweeper and with one batch worker, and the
// harness calls Manager.Settle after every op, so that prefetches finish
// before the next one. (Within one TakeMany, a prefetch may race with the
// batch's other checks of its key: TakeMany does not order them, so only
// the safety side is checked for a key that is in a batch twice.) A
// failing seed is replayed with the op list cut down by delta debugging
// (keeping the violation's kind), and the shortest failing sequence is
// printed with each op's outcome and Store calls, the seed and the
// command that replays it.
//
// # Concurrency
//
// Run and RunSeed use the Harness from one goroutine; a Harness must not
// be shared by parallel tests.
package modeltest

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// Harness is what the model test needs from the Store under test.
type Harness struct {
	// NewStore returns a Store that reads the clock Now. It is called once
	// per replay of a seed (many times while shrinking); keys are unique
	// per call, so one shared server is fine.
	NewStore func(t testing.TB) lease.Store
	// Now is the Store's clock, and the Managers'. Advance moves it
	// forward by d.
	Now     func() time.Time
	Advance func(d time.Duration)
	// Package is the package path the test runs in ("./lease/"), for the
	// replay command printed with a failure.
	Package string
	// Config, when set, adjusts each Manager's configuration after the
	// harness has set its own (clock, holder id, no sweeper, one batch
	// worker, Idle): for Managers configured as another tier's are, such
	// as a gateway's, whose LeaseTTL its Limiter bounds. It must leave
	// those settings alone.
	Config func(*lease.Config)
}

// SharedStore is implemented by a Store under test whose tier may answer
// a lease call from the holder's share of a key rather than from the
// key's level: the region tier, whose global tier splits a saturated key
// among the regions by their demand and answers a region out of credit
// with a wait, asking the Store below for no tokens (only to renew and
// settle the region's loan, as any call does). Such a denial is the
// contract's clause (d): the holder may deny what it cannot cover until
// that wait and a horizon have passed, and while the answer's Remaining
// (what its share could be granted then), grown at the key's whole rate
// (a share grows no faster), cannot cover it. The answer is otherwise
// the model's as any other (its Lent, the loan renewed).
type SharedStore interface {
	lease.Store
	// ShareWait reports whether the last answer to holder's lease call
	// of key that granted nothing was such a wait. The harness asks it
	// right after the call, from the goroutine that made it.
	ShareWait(key, holder string) bool
}

// CheckingStore is implemented by a Store under test whose tier bounds
// what one holder may hold of a key: the lease protocol's owner, by a
// rule's gateway_share. Room is what a holder that says it holds held
// may still be lent of a key of policy p. A call that needs more than
// that is decided as a check (lease.Grant.Checked: the need granted to no
// holder, spent at once, the loan renewed, nothing lent), and one that
// needs no more is granted no more: the model checks both.
type CheckingStore interface {
	lease.Store
	Room(p lease.Policy, held int64) int64
}

// BakingStore is implemented by a Store under test that reports its
// bakes: a token_bucket or gcra key keeps at most 3 ended loans capping
// its level, and beyond, applies the oldest one's cap to the stored level
// for good, which counts the tokens lent at that loan's end as spent then
// (at most those, until the bucket is full again: the package doc's
// clause (b)); a grant without a Lessee ID while the loans' caps hold the
// level applies those caps the same way, reported as a bake of a loan
// that ended then. The model then counts those that a later call reports
// spent earlier, up to what each holder was lent at the bake, as spent at
// the loan's end; without the report it credits them from when they were
// spent, and may find a denial unjustified that the contract allows.
type BakingStore interface {
	lease.Store
	// Baked returns, and forgets, the bakes of the calls on key since
	// the last Baked of key. The harness asks it right after each Lease
	// and Return, from the goroutine that made it.
	Baked(key string) []Bake
}

// Bake is one bake (BakingStore): the ended loan ended at End, and Lent
// tokens were lent then (the loans that ended at or after End, running
// ones included).
type Bake struct {
	End  time.Time
	Lent int64
}

// Options says what to run. The environment overrides it (see FromEnv).
type Options struct {
	// Seed is the first seed; Seeds how many consecutive seeds to run.
	Seed  uint64
	Seeds int
	// Steps is the number of ops per seed.
	Steps int
	// Holders is the number of Managers sharing the Store, 1 to 3 (to
	// MaxHolders(MaxHolders)); 0 picks 1 to 3 per seed.
	Holders int
	// Algorithms are the algorithms the keys use; nil means all of
	// lease.Algorithms().
	Algorithms []lease.Algorithm
	// SafetyOnly checks only the safety side (the inequalities, the exact
	// algorithms' admissions), not that denials are justified.
	SafetyOnly bool
	// Ahead has the harness ask for fixed_window shares ahead
	// (Lessee.AheadWindows, AheadTokens) in the Manager's place in the
	// lease calls of about half of the seeds (in half the calls where the
	// Manager asks for shares itself, in most where it asks for none), and
	// hide them from the Manager: tokens the Store lends that the Manager
	// cannot spend, whose denials the model must excuse, and no more.
	Ahead bool
	// Duration, when positive, runs seeds from Seed on until this much
	// wall time has passed (at least Seeds of them): the long form.
	Duration time.Duration
	// MaxHolders, when positive, bounds each key's holders: the harness
	// sets lease.Lessee.MaxHolders in the Managers' lease calls (as a
	// node does for the holders of the lease protocol), runs up to twice
	// as many holders (Holders 0: 1 to 2×MaxHolders, at most 8), and adds
	// holders leaving every key and vanishing to the ops. The model
	// counts each key's holders with a running loan: a call of a holder
	// without one, when MaxHolders hold one, must be crowded out
	// (Grant.Crowded: lent nothing, granted exactly its need or nothing),
	// and is a spend with no holder; any other must not be.
	MaxHolders int
}

// MaxHolders is the most Managers a run with Options.MaxHolders m has:
// twice m, at most 8; 3 without a bound.
func MaxHolders(m int) int {
	if m <= 0 {
		return 3
	}
	return min(2*m, 8)
}

// The environment variables that override Options, so that a failure can
// be replayed and the long form selected without editing a test.
const (
	EnvSeed  = "SLUICE_MODEL_SEED"  // run only this seed
	EnvSeeds = "SLUICE_MODEL_SEEDS" // number of seeds
	EnvSteps = "SLUICE_MODEL_STEPS" // ops per seed
	EnvTime  = "SLUICE_MODEL_TIME"  // a duration per Run: the long form, from a new first seed
	// EnvStrict=1 fails a short run on a violation that does not replay.
	EnvStrict = "SLUICE_MODEL_STRICT"
)

// FromEnv returns o with the fields the environment sets replaced. An
// unparsable value is reported on t.
func FromEnv(t testing.TB, o Options) Options {
	t.Helper()
	if v := os.Getenv(EnvSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvSeed, v, err)
		}
		o.Seed, o.Seeds, o.Duration = n, 1, 0
		return o
	}
	if v := os.Getenv(EnvSeeds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", EnvSeeds, v)
		}
		o.Seeds = n
	}
	if v := os.Getenv(EnvSteps); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", EnvSteps, v)
		}
		o.Steps = n
	}
	if v := os.Getenv(EnvTime); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s=%q: %v", EnvTime, v, err)
		}
		o.Duration = d
		// The long form explores new seeds on every run; a failure
		// prints its seed.
		o.Seed += longFormBase(time.Now())
		t.Logf("%s=%v: seeds from %d", EnvTime, d, o.Seed)
	}
	return o
}

// longFormBase is what the long form adds to a run's first seed at now:
// the clock to about a second (2^30 ns), so that runs a second apart or
// more explore different seeds, and the offsets a test gives its runs'
// first seeds (up to millions) stay far below a second's step.
func longFormBase(now time.Time) uint64 {
	return uint64(now.UnixNano()) &^ (1<<30 - 1)
}

// Summary counts what a Run checked.
type Summary struct {
	Seeds, Steps int
	// Checks is the number of decisions checked against the model.
	Checks int
	// Crowded is the number of lease calls crowded out
	// (Options.MaxHolders).
	Crowded int
}

// Run runs o.Seeds seeds (or seeds for o.Duration) of o.Steps ops each
// against h. The first failing seed fails t with its minimal reproduction;
// Run then stops.
func Run(t testing.TB, h Harness, o Options) Summary {
	t.Helper()
	if h.NewStore == nil || h.Now == nil || h.Advance == nil {
		t.Fatal("modeltest: Harness.NewStore, Now and Advance are required")
	}
	if o.Seeds < 1 {
		o.Seeds = 1
	}
	if o.Steps < 1 {
		o.Steps = 100
	}
	if raceEnabled && os.Getenv(EnvSeeds) == "" && os.Getenv(EnvSeed) == "" {
		o.Seeds = max(1, o.Seeds/5)
	}
	var sum Summary
	start := time.Now()
	for i := 0; ; i++ {
		if i >= o.Seeds && (o.Duration <= 0 || time.Since(start) >= o.Duration) {
			break
		}
		seed := o.Seed + uint64(i)
		sc := generate(seed, o)
		res := h.exec(t, sc, sc.ops, false)
		sum.Seeds++
		sum.Steps += res.steps
		sum.Checks += res.checks
		sum.Crowded += res.crowded
		if res.fail != nil {
			msg, replays := h.report(t, sc, res)
			if !replays && o.Duration <= 0 && !strictReplay() {
				// A violation that the same ops do not show again comes
				// from an interleaving the harness does not control (a
				// background call racing with a batch): the long form
				// fails on it; make test, which must not be flaky, says
				// so and goes on.
				t.Logf("NOT REPRODUCIBLE (fails only in the long form or with %s=1):\n%s", EnvStrict, msg)
				continue
			}
			t.Errorf("%s", msg)
			return sum
		}
	}
	return sum
}

// RunSeed runs one seed with o's other settings (for fuzz targets).
func RunSeed(t testing.TB, h Harness, o Options, seed uint64) {
	t.Helper()
	o.Seed, o.Seeds, o.Duration = seed, 1, 0
	Run(t, h, o)
}

// report shrinks a failing scenario and describes it.
func (h Harness) report(t testing.TB, sc *scenario, first result) (msg string, replays bool) {
	ops := h.shrink(t, sc, sc.ops)
	res := h.exec(t, sc, ops, true)
	replays = true
	if res.fail == nil { // not reproducible when replayed: print the original
		ops, res = sc.ops, h.exec(t, sc, sc.ops, true)
		if res.fail == nil {
			res, replays = first, false
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "model violation, seed %d (%d ops, shrunk to %d):\n", sc.seed, len(sc.ops), len(ops))
	if !replays {
		fmt.Fprintf(&b, "  (the same ops replayed did not fail: an interleaving the harness does not control)\n")
	}
	fmt.Fprintf(&b, "  %s\n\n", first.fail)
	fmt.Fprintf(&b, "minimal reproduction: %d holder(s) sharing one Store, Idle %v, the clock moved only by the ops\n", sc.holders, idle)
	if sc.ahead {
		fmt.Fprintf(&b, "  (the harness asks for shares ahead in the Managers' fixed_window lease calls: Options.Ahead)\n")
	}
	if sc.maxHolders > 0 {
		fmt.Fprintf(&b, "  (the harness bounds each key's holders to %d in the Managers' lease calls: Options.MaxHolders)\n", sc.maxHolders)
	}
	used := make(map[int]bool)
	for _, o := range ops {
		for _, it := range o.items {
			used[it.key] = true
		}
	}
	for i, k := range sc.keys {
		if used[i] {
			fmt.Fprintf(&b, "  k%d: %s\n", i, describe(k))
		}
	}
	n := 0
	for _, line := range res.trace {
		if strings.HasPrefix(line, " ") { // a Store call of the op above
			fmt.Fprintf(&b, "       %s\n", line)
			continue
		}
		n++
		fmt.Fprintf(&b, "  %3d. %s\n", n, line)
	}
	if res.fail != nil {
		fmt.Fprintf(&b, "  FAILS at op %d: %s\n", res.fail.step+1, res.fail.msg)
	}
	pkg := h.Package
	if pkg == "" {
		pkg = "."
	}
	// The environment that shapes the run goes with the replay (the
	// steps make the op list; a test may read more SLUICE_MODEL_ vars).
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "SLUICE_MODEL_") && name != EnvSeed && name != EnvSeeds && name != EnvTime {
			env = append(env, kv+" ")
		}
	}
	sort.Strings(env)
	fmt.Fprintf(&b, "\nreplay: %s%s=%d go test -count=1 -run '^%s$' %s\n", strings.Join(env, ""), EnvSeed, sc.seed, t.Name(), pkg)
	return b.String(), replays
}

// describe writes a policy as a rule would.
func describe(p lease.Policy) string {
	s := fmt.Sprintf("%s limit %d per %v", p.Algorithm, p.Limit, p.Period)
	if (p.Algorithm == lease.TokenBucket || p.Algorithm == lease.GCRA) && p.Burst > 0 {
		s += fmt.Sprintf(" burst %d", p.Burst)
	}
	if p.MinInterval > 0 {
		s += fmt.Sprintf(" min_interval %v", p.MinInterval)
	}
	return s
}

func strictReplay() bool { return os.Getenv(EnvStrict) == "1" }
