package algo

import (
	"fmt"
	"time"
)

// Policy is the parameters of one limit. It is a small value, compared with
// == to tell whether a counter key's limit changed.
type Policy struct {
	// Algorithm is required.
	Algorithm Algorithm
	// Limit is the number of hits allowed per Period (for concurrency: the
	// maximum in flight). Must be > 0.
	Limit int64
	// Period is the window or refill period (for concurrency: the TTL of an
	// acquired slot). Must be ≥ 1ms.
	Period time.Duration
	// Burst is the bucket capacity of token_bucket and gcra. Zero means
	// Limit. Ignored by the other algorithms.
	Burst int64
	// MinInterval is sliding_log's minimum time between two admitted
	// requests. Zero means no minimum.
	MinInterval time.Duration
	// OnFailure is what the Manager does while the Store is unavailable.
	// Stores ignore it.
	OnFailure FailureMode
}

// Capacity is the largest number of hits a single check can ever be granted.
func (p Policy) Capacity() int64 {
	if p.Burst > 0 && p.Algorithm.HasBurst() {
		return p.Burst
	}
	return p.Limit
}

// Validate reports whether p is usable, naming the offending field.
func (p Policy) Validate() error {
	switch {
	case !p.Algorithm.valid():
		return &FieldError{Field: "algorithm", Msg: "unknown algorithm"}
	case p.Limit <= 0:
		return &FieldError{Field: "limit", Msg: "must be > 0"}
	case p.Limit > MaxLimit:
		return &FieldError{Field: "limit", Msg: fmt.Sprintf("must be ≤ %d", int64(MaxLimit))}
	case p.Period < time.Millisecond:
		return &FieldError{Field: "period", Msg: "must be ≥ 1ms"}
	case p.Period > MaxPeriod:
		return &FieldError{Field: "period", Msg: "must be ≤ 8760h"}
	case p.Burst < 0 || p.Burst > MaxLimit:
		return &FieldError{Field: "burst", Msg: fmt.Sprintf("must be between 0 and %d", int64(MaxLimit))}
	case p.MinInterval < 0 || p.MinInterval > p.Period:
		return &FieldError{Field: "min_interval", Msg: "must be between 0 and period"}
	}
	return algorithms[p.Algorithm].code.validate(p)
}

// MaxExact bounds capacity × period (µs) of gcra and sliding_window: their
// products of a count and a time stay integers float64 holds exactly.
const MaxExact = 1 << 52

// MaxRefill bounds burst × period / limit of token_bucket and gcra, in µs
// (about 142 years): see Policy.Validate.
const MaxRefill = 1 << 52

// Bounds on policies, so that all Store arithmetic stays exact in float64
// (Lua's number type).
const (
	MaxLimit  = 1 << 40
	MaxPeriod = 365 * 24 * time.Hour
	// MaxHits bounds the hits of one check.
	MaxHits = 1 << 40
)

// FieldError is a validation error that names the field at fault.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

// FailureMode is what a rule does while its Store is unavailable
// (on_store_failure): the lease Manager follows it, Stores ignore it.
type FailureMode uint8

const (
	// FailLocal (the default) keeps enforcing the limit from the node's own
	// memory and goes back to the Store when it returns.
	FailLocal FailureMode = iota
	// FailOpen allows every check and marks the decision Degraded.
	FailOpen
	// FailClosed denies every check and marks the decision Unavailable
	// (HTTP 503 with Retry-After).
	FailClosed
)

var failureModeNames = [...]string{FailLocal: "local", FailOpen: "open", FailClosed: "closed"}

func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return fmt.Sprintf("failure_mode(%d)", m)
}

// ParseFailureMode parses "local", "open" or "closed"; "" means local.
func ParseFailureMode(s string) (FailureMode, error) {
	if s == "" {
		return FailLocal, nil
	}
	for m, name := range failureModeNames {
		if name == s {
			return FailureMode(m), nil
		}
	}
	return 0, fmt.Errorf("unknown on_store_failure %q (want local, open or closed)", s)
}
