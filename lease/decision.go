package lease

import (
	"fmt"
	"time"
)

// FailureMode is what a rule does while its Store is unavailable
// (on_store_failure).
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

// Decision is the Manager's answer to one check.
type Decision struct {
	Allowed bool
	// Limit is the policy's limit (for concurrency: max in flight).
	Limit int64
	// Remaining is the node's best knowledge of the hits still allowed now
	// (local leased tokens plus what the Store reported at the last lease).
	Remaining int64
	// Reset is the time until the limit would be fully available again.
	Reset time.Duration
	// RetryAfter is, on denial, the time until the check could succeed.
	RetryAfter time.Duration
	// Degraded means the Store was unavailable and the decision was made
	// by the rule's failure mode (open: allowed; local: from node memory).
	Degraded bool
	// Unavailable means the Store was unavailable and the rule's failure
	// mode is closed: the check is denied and should be answered with 503.
	Unavailable bool
}
