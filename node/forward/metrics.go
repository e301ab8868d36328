package forward

import (
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// Metrics of the forward package, registered in the default VictoriaMetrics
// set (these globals are the package's only mutable state). They sum over
// every Forwarder and handler of the process; per-Forwarder figures are in
// [Forwarder.Stats].
var (
	servedItems = metrics.NewCounter(`sluice_forward_served_items_total`)

	rejectedRequests = [numRejects]*metrics.Counter{
		rejectMethod:         metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="method"}`),
		rejectAuth:           metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="auth"}`),
		rejectStale:          metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="stale"}`),
		rejectReplay:         metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="replay"}`),
		rejectNonceCacheFull: metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="nonce_cache_full"}`),
		rejectTooLarge:       metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="too_large"}`),
		rejectMalformed:      metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="malformed"}`),
		rejectLate:           metrics.NewCounter(`sluice_forward_rejected_requests_total{reason="late"}`),
	}
)

// Items a handler answers with an error without deciding them, by reason,
// and the hits of refunds beyond what was lent (refused).
var (
	refusedItems = [numRefuses]*metrics.Counter{
		refuseInvalid: metrics.NewCounter(`sluice_forward_refused_items_total{reason="invalid"}`),
		refuseRefund:  metrics.NewCounter(`sluice_forward_refused_items_total{reason="refund_over_lent"}`),
	}
	refusedRefundHits = metrics.NewCounter(`sluice_forward_refused_refund_hits_total`)
	// lateRefunds: allowed checks of batches decided after their sender's
	// timeout, refunded (see lateness).
	lateRefunds = metrics.NewCounter(`sluice_forward_late_refunded_items_total`)
)

// Reasons a handler refuses an item.
const (
	refuseInvalid = iota // a rule or key the public API refuses
	refuseRefund         // a refund (partly) beyond what was lent
	numRefuses
)

// Reasons a handler refuses a request.
const (
	rejectMethod = iota
	rejectAuth   // missing, malformed or wrong signature
	rejectStale
	rejectReplay
	rejectNonceCacheFull
	rejectTooLarge
	rejectMalformed
	rejectLate // arrived after the sender's timeout (see lateness)
	numRejects
)

func rejected(reason int) { rejectedRequests[reason].Inc() }

// peerMetrics are one peer's counters on the sending side.
type peerMetrics struct {
	items       *metrics.Counter // items sent and answered
	requests    *metrics.Counter // requests answered
	failures    *metrics.Counter // requests that failed
	unavailable *metrics.Counter // items answered with ErrPeerUnavailable
}

// peerMetricNames are the per-peer metrics' names, without labels.
var peerMetricNames = [...]string{
	`sluice_forward_items_total`,
	`sluice_forward_requests_total`,
	`sluice_forward_failed_requests_total`,
	`sluice_forward_unavailable_items_total`,
}

func newPeerMetrics(addr string) peerMetrics {
	l := `{peer="` + labelSafe(addr) + `"}`
	return peerMetrics{
		items:       metrics.GetOrCreateCounter(peerMetricNames[0] + l),
		requests:    metrics.GetOrCreateCounter(peerMetricNames[1] + l),
		failures:    metrics.GetOrCreateCounter(peerMetricNames[2] + l),
		unavailable: metrics.GetOrCreateCounter(peerMetricNames[3] + l),
	}
}

// dropPeerMetrics unregisters addr's per-peer series, so that peers that
// come and go (pod churn) do not grow /metrics forever. A peer that comes
// back starts its counters from zero, which rate() handles as a reset.
func dropPeerMetrics(addr string) {
	l := `{peer="` + labelSafe(addr) + `"}`
	for _, n := range peerMetricNames {
		metrics.UnregisterMetric(n + l)
	}
}

// labelSafe replaces the bytes of s that have no place in a host:port
// with '_', so that a metric name built from it is always valid.
func labelSafe(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9',
			r == '.', r == ':', r == '-', r == '_', r == '[', r == ']', r == '%':
			return r
		}
		return '_'
	}, s)
}
