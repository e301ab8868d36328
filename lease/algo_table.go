package lease

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
// uint8, a lookup needs no bounds check on the hot path). A row names the algorithm, says how it is
// checked (its kind) and which optional Policy fields it reads, and holds
// its code: a zero-size type in the algorithm's own file (algo_<name>.go)
// with its policy bounds, its memory-store state and, for a leased
// algorithm, the Manager's view of the Store's answers. The Redis store
// keeps its own row per algorithm (its scripts) in package lua.
var algorithms = [256]algo{
	TokenBucket:   {name: "token_bucket", kind: kindRefill, code: tokenBucket{}},
	GCRA:          {name: "gcra", kind: kindRefill, code: gcra{}},
	FixedWindow:   {name: "fixed_window", kind: kindWindow, code: fixedWindow{}},
	SlidingWindow: {name: "sliding_window", kind: kindWindow, code: slidingWindow{}},
	SlidingLog:    {name: "sliding_log", kind: kindLog, minInterval: true, everyHit: true, code: slidingLog{}},
	Concurrency:   {name: "concurrency", kind: kindSlots, code: concurrency{}},
}

// algo is one row of the algorithm table.
type algo struct {
	// name is the configuration name ("token_bucket").
	name string
	kind kind
	// minInterval is whether Policy.MinInterval applies (otherwise it is
	// ignored). Policy.Burst applies to kindRefill.
	minInterval bool
	// everyHit is whether the Store keeps a record per admitted hit (so
	// that configurations bound its limit lower than MaxLimit).
	everyHit bool
	// code is the algorithm's code.
	code algoCode
}

// kind is how an algorithm is checked, and so which Store calls and which
// of the Manager's paths serve it.
type kind uint8

const (
	// kindRefill is leased (Store.Lease and Return; the Manager spends
	// batches locally), and the bucket refills continuously: Burst is its
	// capacity, a loan lasts LeaseTTL and is settled by each lease call
	// (Lessee.SpentBefore, Unanswered; see "Lent tokens" in the package
	// doc), and a saturated key waits for a batch (batchWait).
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

// algoCode is an algorithm's own code, held by its row: its policy
// bounds, its memory-store state and, for a leased algorithm, the
// Manager's view of the Store's answers, from which a bucket decides
// without a Store call (the bucket methods of the same names call these
// once the Store has answered). The exact algorithms have no view: they
// embed exactCode.
type algoCode interface {
	// validate checks p's bounds that are the algorithm's own, after
	// Policy.Validate checked the common ones (so p.Limit > 0 and
	// p.Period ≥ 1ms); an error names the field (a *FieldError).
	validate(p Policy) error
	// newState returns a key's memory-store state with no state yet: a
	// leasedState for a leased kind, a logState for kindLog, a slotState
	// for kindSlots.
	newState() algoState

	// expiry is until when tokens of grant g, asked for at now (Unix
	// ns, before the Store call), may be spent on the fast path; ttl is
	// Config.LeaseTTL.
	expiry(p Policy, now int64, g Grant, ttl time.Duration) int64
	// level is the Store's whole tokens at now, between the last answer
	// and its Reset (now < resetAt).
	level(b *bucket, now, resetAt int64) int64
	// coverAt is when the key will have need ≤ capacity tokens by the
	// last answer (Unix ns; 0: now), and how much later than the Store's
	// own time that may be (slack: the Store rounds Reset up to a whole
	// millisecond).
	coverAt(b *bucket, need, resetAt int64) (at, slack int64)
	// projected is the Store's whole tokens at now by the last answer,
	// as coverAt projects them.
	projected(b *bucket, now, resetAt int64) int64
}

// exactCode is the view of an exact algorithm: it has no buckets, so no
// view is ever asked for.
type exactCode struct{}

func (exactCode) expiry(Policy, int64, Grant, time.Duration) int64 { panic(errNoView) }
func (exactCode) level(*bucket, int64, int64) int64                { panic(errNoView) }
func (exactCode) coverAt(*bucket, int64, int64) (int64, int64)     { panic(errNoView) }
func (exactCode) projected(*bucket, int64, int64) int64            { panic(errNoView) }

var errNoView = errors.New("lease: an exact algorithm has no bucket")

// algoState is one key's state in the memory store.
type algoState interface {
	// Expiry is when the state equals no state (unix µs), as the Redis
	// store's PEXPIRE.
	Expiry(Policy) int64
}

// leasedState is the memory-store state of a leased algorithm.
type leasedState interface {
	algoState
	Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant
	Return(p Policy, now time.Time, n int64, holder string)
	// Refund gives back n tokens that calls without a Lessee ID were
	// granted (MemoryStore.Refund).
	Refund(p Policy, now time.Time, n int64)
}

// logState is the memory-store state of a kindLog algorithm.
type logState interface {
	algoState
	Check(p Policy, now time.Time, hits int64) Result
}

// slotState is the memory-store state of a kindSlots algorithm.
type slotState interface {
	algoState
	Acquire(p Policy, now time.Time, id string, hits int64) Result
	Release(now time.Time, id string) (held bool)
}

// valid reports whether a has a row.
func (a Algorithm) valid() bool { return algorithms[a].code != nil }

// kind is a's row's kind (0 for an invalid Algorithm).
func (a Algorithm) kind() kind { return algorithms[a].kind }

// leased returns the code of a, which must be leased.
func (a Algorithm) leased() algoCode { return algorithms[a].code }

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

// Leased reports whether the algorithm's tokens can be leased in batches
// (Store.Lease; Manager.Take spends them locally). Not leased: every check
// is a Store call.
func (a Algorithm) Leased() bool {
	k := a.kind()
	return k == kindRefill || k == kindWindow
}

// refills reports whether the algorithm's bucket refills over time
// (kindRefill) rather than counting per window.
func (a Algorithm) refills() bool { return a.kind() == kindRefill }

// HasBurst reports whether Policy.Burst applies to the algorithm (its
// bucket's capacity); the others ignore it.
func (a Algorithm) HasBurst() bool { return a.refills() }

// HasMinInterval reports whether Policy.MinInterval applies to the
// algorithm; the others ignore it.
func (a Algorithm) HasMinInterval() bool { return a.valid() && algorithms[a].minInterval }

// StoresEveryHit reports whether the Store keeps a record per admitted hit
// (one sorted-set member in Redis), so that a configuration should bound
// the limit well below MaxLimit.
func (a Algorithm) StoresEveryHit() bool { return a.valid() && algorithms[a].everyHit }

// Acquired reports whether the algorithm's slots are taken and freed with
// Manager.Acquire and Release (concurrency) rather than checked with Take.
func (a Algorithm) Acquired() bool { return a.kind() == kindSlots }
