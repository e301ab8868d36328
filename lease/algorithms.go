package lease

import "github.com/sluicehq/sluice/lease/algo"

// The algorithms, policies and the Store's call types are package algo's
// (lease/algo: the algorithm table and each algorithm's pure math); this
// package re-exports them, so that its users need not import algo.
type (
	// Algorithm names a rate-limit algorithm: a row of algo's table.
	Algorithm = algo.Algorithm
	// Policy is the parameters of one limit.
	Policy = algo.Policy
	// FailureMode is what a rule does while its Store is unavailable.
	FailureMode = algo.FailureMode
	// FieldError is a validation error that names the field at fault.
	FieldError = algo.FieldError
	// Grant is the answer of a lease call.
	Grant = algo.Grant
	// Result is the answer of an exact check.
	Result = algo.Result
	// Lessee is who a lease call lends tokens to, and what it still holds.
	Lessee = algo.Lessee
	// Loan is what a Store lent to one holder of a key.
	Loan = algo.Loan

	// The algorithms' states in a Store (the MemoryStore's; the Redis
	// Store's first touches).
	TokenBucketState   = algo.TokenBucketState
	GCRAState          = algo.GCRAState
	FixedWindowState   = algo.FixedWindowState
	SlidingWindowState = algo.SlidingWindowState
	SlidingLogState    = algo.SlidingLogState
	ConcurrencyState   = algo.ConcurrencyState
	LogStamp           = algo.LogStamp
)

// The algorithms (algo's table). The zero Algorithm is invalid.
const (
	TokenBucket   = algo.TokenBucket
	GCRA          = algo.GCRA
	FixedWindow   = algo.FixedWindow
	SlidingWindow = algo.SlidingWindow
	SlidingLog    = algo.SlidingLog
	Concurrency   = algo.Concurrency
)

// The failure modes.
const (
	FailLocal  = algo.FailLocal
	FailOpen   = algo.FailOpen
	FailClosed = algo.FailClosed
)

// Bounds on policies and on a Store's calls (see algo).
const (
	MaxLimit        = algo.MaxLimit
	MaxPeriod       = algo.MaxPeriod
	MaxHits         = algo.MaxHits
	MaxExact        = algo.MaxExact
	MaxRefill       = algo.MaxRefill
	MaxKeyHolders   = algo.MaxKeyHolders
	MaxAheadWindows = algo.MaxAheadWindows
	MaxLeaseTTL     = algo.MaxLeaseTTL
	MaxHolderLen    = algo.MaxHolderLen
)

// Algorithms returns every algorithm, in the table's order.
func Algorithms() []Algorithm { return algo.Algorithms() }

// ParseAlgorithm returns the Algorithm with the configuration name s.
func ParseAlgorithm(s string) (Algorithm, error) { return algo.ParseAlgorithm(s) }

// JoinAlgorithms lists the names of as for a message: "a, b or c" with
// conj "or".
func JoinAlgorithms(as []Algorithm, conj string) string { return algo.JoinAlgorithms(as, conj) }

// ParseFailureMode parses "local", "open" or "closed"; "" means local.
func ParseFailureMode(s string) (FailureMode, error) { return algo.ParseFailureMode(s) }

// CheckLease reports whether a Lease call with these arguments is valid
// (algo.CheckLease). Both Stores call it before any state is touched.
func CheckLease(p Policy, want, need int64, to Lessee) error {
	return algo.CheckLease(p, want, need, to)
}

// CheckReturn reports whether a Return call with these arguments is valid
// (algo.CheckReturn).
func CheckReturn(p Policy, tokens int64, holder string) error {
	return algo.CheckReturn(p, tokens, holder)
}

// CheckLog reports whether a Log call with these arguments is valid
// (algo.CheckLog).
func CheckLog(p Policy, hits int64) error { return algo.CheckLog(p, hits) }

// CheckAcquire reports whether an Acquire call with these arguments is
// valid (algo.CheckAcquire).
func CheckAcquire(p Policy, id string, hits int64) error { return algo.CheckAcquire(p, id, hits) }

// CheckRelease reports whether a Release call with these arguments is
// valid (algo.CheckRelease).
func CheckRelease(p Policy, id string) error { return algo.CheckRelease(p, id) }

// samePolicy reports whether p and q are equal: the fast path's
// comparison, field by field (the generated == compares the middle fields
// with a call to memequal, several times the cost).
func samePolicy(p, q *Policy) bool {
	return p.Limit == q.Limit && p.Period == q.Period && p.Algorithm == q.Algorithm &&
		p.Burst == q.Burst && p.MinInterval == q.MinInterval && p.OnFailure == q.OnFailure
}
