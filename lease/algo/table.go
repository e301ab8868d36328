package algo

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Algorithm names a rate-limit algorithm: a row of the algorithm table
// below, which everything that depends on the algorithm consults.
type Algorithm uint8

// The algorithms. The zero Algorithm is invalid.
const (
	TokenBucket Algorithm = iota + 1
	GCRA
	FixedWindow
	SlidingWindow
	SlidingLog
	Concurrency
)

// algorithms is the algorithm table: one row per Algorithm, in the order
// of the constants above (the rows past them are empty: indexed by any
// uint8, a lookup needs no bounds check on the hot path). A row names the
// algorithm, says how it is checked (its kind) and what else sets it
// apart that other code asks (its traits, each a method of Algorithm),
// and holds its code: a zero-size type in the algorithm's own file
// (<name>.go) with its policy bounds, its state in a Store and, for a
// leased algorithm, the holder's view of the Store's answers. Nothing
// outside this table names an algorithm to branch on it: a trait or the
// code answers (TestNoAlgorithmNamedOutsideTheTable in lease). The Redis
// store keeps its own row per algorithm (its scripts and how they pack
// the state) in package lua.
var algorithms = [256]row{
	TokenBucket:   {name: "token_bucket", kind: kindRefill, code: tokenBucket{}},
	GCRA:          {name: "gcra", kind: kindRefill, code: gcra{}},
	FixedWindow:   {name: "fixed_window", kind: kindWindow, ahead: true, windowReset: true, code: fixedWindow{}},
	SlidingWindow: {name: "sliding_window", kind: kindWindow, code: slidingWindow{}},
	SlidingLog:    {name: "sliding_log", kind: kindLog, minInterval: true, everyHit: true, code: slidingLog{}},
	Concurrency:   {name: "concurrency", kind: kindSlots, code: concurrency{}},
}

// row is one row of the algorithm table.
type row struct {
	// name is the configuration name ("token_bucket").
	name string
	kind kind
	// minInterval is whether Policy.MinInterval applies (otherwise it is
	// ignored). Policy.Burst applies to kindRefill.
	minInterval bool
	// everyHit is whether the Store keeps a record per admitted hit (so
	// that configurations bound its limit lower than MaxLimit).
	everyHit bool
	// ahead is whether a lease call may also lend shares of the windows
	// after the current one (Lessee.AheadWindows; kindWindow only).
	ahead bool
	// windowReset is whether a check's Reset is always the time to the
	// end of the current window, windows aligned on multiples of Period
	// since the Unix epoch.
	windowReset bool
	// code is the algorithm's code.
	code code
}

// kind is how an algorithm is checked, and so which Store calls and which
// of the Manager's paths serve it.
type kind uint8

const (
	// kindRefill is leased (Store.Lease and Return; the Manager spends
	// batches locally), and the bucket refills continuously: Burst is its
	// capacity, a loan lasts LeaseTTL and is settled by each lease call
	// (Lessee.SpentBefore, Unanswered; see "Lent tokens" in the lease
	// package doc), and a saturated key waits for a batch.
	kindRefill kind = iota + 1
	// kindWindow is leased, and counts what it grants per window of
	// Period: tokens granted in a window are spendable until its end, and
	// a loan bounds only returns.
	kindWindow
	// kindLog is exact: every check is one Store.Log call (Manager.Take).
	kindLog
	// kindSlots is exact: slots are taken and freed with Store.Acquire and
	// Release (Manager.Acquire, Release), not with Take.
	kindSlots
)

// code is an algorithm's own code, held by its row: its policy bounds,
// its state in a Store and, for a leased algorithm, the holder's view of
// the Store's answers, from which the lease Manager decides without a
// Store call (Policy's methods of the same names call these; view.go).
// The exact algorithms have no view: they embed exactCode.
type code interface {
	// validate checks p's bounds that are the algorithm's own, after
	// Policy.Validate checked the common ones (so p.Limit > 0 and
	// p.Period ≥ 1ms); an error names the field (a *FieldError).
	validate(p Policy) error
	// newState returns a key's state with no state yet: a LeasedState for
	// a leased kind, a LogState for kindLog, a SlotState for kindSlots.
	newState() State

	// expiry is until when tokens of grant g, asked for at now (Unix
	// ns, before the Store call), may be spent on the fast path; ttl is
	// the holder's lease TTL.
	expiry(p Policy, now int64, g Grant, ttl time.Duration) int64
	// level is the Store's whole tokens at now by the last answer a,
	// before its Reset (now < a.ResetAt).
	level(p Policy, a Answer, now int64) int64
	// coverAt is when the key will have need ≤ capacity tokens by the
	// last answer (Unix ns; 0: now), and how much later than the Store's
	// own time that may be (slack: the Store rounds Reset up to a whole
	// millisecond).
	coverAt(p Policy, a Answer, need int64) (at, slack int64)
	// projected is the Store's whole tokens at now by the last answer,
	// as coverAt projects them, before its Reset (now < a.ResetAt).
	projected(p Policy, a Answer, now int64) int64
	// answerTimed is whether the view reads when the last answer came
	// (Answer.At).
	answerTimed() bool
	// resetPast is how far past the end of the window of a grant's
	// tokens the grant's Reset runs (kindWindow).
	resetPast(p Policy) time.Duration
}

// exactCode is the view of an exact algorithm: it has no buckets, so no
// view is ever asked for.
type exactCode struct{}

func (exactCode) expiry(Policy, int64, Grant, time.Duration) int64 { panic(errNoView) }
func (exactCode) level(Policy, Answer, int64) int64                { panic(errNoView) }
func (exactCode) coverAt(Policy, Answer, int64) (int64, int64)     { panic(errNoView) }
func (exactCode) projected(Policy, Answer, int64) int64            { panic(errNoView) }
func (exactCode) answerTimed() bool                                { return false }
func (exactCode) resetPast(Policy) time.Duration                   { panic(errNoView) }

var errNoView = errors.New("algo: an exact algorithm has no view of a lease's answers")

// valid reports whether a has a row.
func (a Algorithm) valid() bool { return algorithms[a].code != nil }

// kind is a's row's kind (0 for an invalid Algorithm).
func (a Algorithm) kind() kind { return algorithms[a].kind }

// Algorithms returns every algorithm, in the table's order.
func Algorithms() []Algorithm {
	var as []Algorithm
	for a := range algorithms {
		if Algorithm(a).valid() {
			as = append(as, Algorithm(a))
		}
	}
	return as
}

// String returns the algorithm's configuration name, such as "token_bucket".
func (a Algorithm) String() string {
	if !a.valid() {
		return fmt.Sprintf("algorithm(%d)", a)
	}
	return algorithms[a].name
}

// ParseAlgorithm returns the Algorithm with the configuration name s.
func ParseAlgorithm(s string) (Algorithm, error) {
	for _, a := range Algorithms() {
		if a.String() == s {
			return a, nil
		}
	}
	return 0, fmt.Errorf("unknown algorithm %q (want %s)", s, JoinAlgorithms(Algorithms(), "or"))
}

// JoinAlgorithms lists the names of as for a message: "a, b or c" with
// conj "or".
func JoinAlgorithms(as []Algorithm, conj string) string {
	var b strings.Builder
	for i, a := range as {
		switch {
		case i == 0:
		case i == len(as)-1:
			b.WriteString(" " + conj + " ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(a.String())
	}
	return b.String()
}

// Only returns the algorithms that have trait has, in the table's order
// (Only(Algorithm.Leased): the leased ones).
func Only(has func(Algorithm) bool) []Algorithm {
	var as []Algorithm
	for _, a := range Algorithms() {
		if has(a) {
			as = append(as, a)
		}
	}
	return as
}

// NewState returns the state of a key of algorithm a that has no state
// yet in a Store: a LeasedState for a leased algorithm, a LogState for
// one checked by Store.Log, a SlotState for one whose slots are acquired
// (nil for an invalid Algorithm).
func (a Algorithm) NewState() State {
	if !a.valid() {
		return nil
	}
	return algorithms[a].code.newState()
}

// Leased reports whether the algorithm's tokens can be leased in batches
// (Store.Lease; Manager.Take spends them locally). Not leased: every check
// is a Store call.
func (a Algorithm) Leased() bool {
	k := a.kind()
	return k == kindRefill || k == kindWindow
}

// Refills reports whether the algorithm is leased and its bucket refills
// continuously (token_bucket, gcra), rather than counting per window: its
// capacity is Burst, its loans last the holder's lease TTL and are
// settled by each lease call (Lessee.SpentBefore, Idle, Call,
// Unanswered), its Store state caps the level by the loans, and a
// saturated key waits for a batch.
func (a Algorithm) Refills() bool { return a.kind() == kindRefill }

// Windowed reports whether the algorithm is leased and counts what it
// grants per window of Period (fixed_window, sliding_window): tokens
// granted in a window are spendable until its end, so a holder reads a
// precise clock to spend them.
func (a Algorithm) Windowed() bool { return a.kind() == kindWindow }

// Logged reports whether every check of the algorithm is one Store.Log
// call (sliding_log).
func (a Algorithm) Logged() bool { return a.kind() == kindLog }

// Acquired reports whether the algorithm's slots are taken and freed with
// Store.Acquire and Release (concurrency) rather than checked with Take.
func (a Algorithm) Acquired() bool { return a.kind() == kindSlots }

// HasBurst reports whether Policy.Burst applies to the algorithm (its
// bucket's capacity); the others ignore it.
func (a Algorithm) HasBurst() bool { return a.Refills() }

// HasMinInterval reports whether Policy.MinInterval applies to the
// algorithm; the others ignore it.
func (a Algorithm) HasMinInterval() bool { return a.valid() && algorithms[a].minInterval }

// StoresEveryHit reports whether the Store keeps a record per admitted hit
// (one sorted-set member in Redis), so that a configuration should bound
// the limit well below MaxLimit.
func (a Algorithm) StoresEveryHit() bool { return a.valid() && algorithms[a].everyHit }

// LeasesAhead reports whether a lease call of the algorithm may also lend
// shares of the windows after the current one (fixed_window; see
// Lessee.AheadWindows and Loan.Share): its Store calls take and answer
// them, and a holder may roll into a window on its share.
func (a Algorithm) LeasesAhead() bool { return a.valid() && algorithms[a].ahead }

// WindowReset reports whether a check's Reset is always the time to the
// end of the current window, the windows aligned on multiples of Period
// since the Unix epoch (fixed_window): a front end may compute it from its
// own clock, as envoyproxy/ratelimit does.
func (a Algorithm) WindowReset() bool { return a.valid() && algorithms[a].windowReset }
