package bench

import "errors"

// Outcome is the answer to one check.
type Outcome uint8

// The outcomes.
const (
	// Failed means no decision: a transport error, an unexpected status or
	// a per-item error in a batch.
	Failed Outcome = iota
	Allowed
	Denied
	// AllowedDegraded and DeniedDegraded are decisions the limiter made by
	// its failure mode because its Store was unavailable or too slow
	// ("degraded": true): outside the lease accuracy contract.
	AllowedDegraded
	DeniedDegraded
)

// IsAllowed reports whether the check was allowed.
func (o Outcome) IsAllowed() bool { return o == Allowed || o == AllowedDegraded }

// IsDegraded reports whether a failure mode made the decision.
func (o Outcome) IsDegraded() bool { return o == AllowedDegraded || o == DeniedDegraded }

// degrade returns the degraded form of an Allowed or Denied outcome.
func (o Outcome) degrade() Outcome {
	switch o {
	case Allowed:
		return AllowedDegraded
	case Denied:
		return DeniedDegraded
	}
	return o
}

// Driver sends checks to one limiter. Safe for concurrent use.
type Driver interface {
	// Name identifies the driver in reports ("http-single", "inproc", ...).
	Name() string
	// NewSession returns a sender for one worker.
	NewSession() (Session, error)
	// Close releases connections and goroutines; idempotent.
	Close() error
}

// Session sends one request at a time for one worker. Not safe for
// concurrent use.
type Session interface {
	// Do asks for the checks of keys (indices into the driver's key table)
	// as one request — one check for single-check drivers, a batch for
	// batch drivers — and sets out[i] for each. It returns an error when
	// the request as a whole failed (then out is all Failed).
	Do(keys []int32, out []Outcome) error
}

// Errors.
var (
	// ErrBadResponse means a limiter answered with a status or body the
	// driver cannot read as a decision.
	ErrBadResponse = errors.New("unexpected response")
)
