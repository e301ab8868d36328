package lease

import "time"

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
