package forward

import (
	"strings"

	"github.com/VictoriaMetrics/metrics"
)

// handlerMetrics are a handler's counters, in its HandlerConfig.Metrics
// set. A Forwarder's are peerMetrics and its lateRefunds.
type handlerMetrics struct {
	served   *metrics.Counter             // items answered
	rejected [numRejects]*metrics.Counter // requests refused, by reason
	// refused are the items answered with an error without deciding
	// them, by reason, and refusedHits the hits of refunds beyond what
	// was lent.
	refused     [numRefuses]*metrics.Counter
	refusedHits *metrics.Counter
	// lateRefunds are the allowed checks of batches decided after their
	// sender's timeout, refunded (see lateness): by the handler that
	// noticed, or by the Forwarder that had the late reply.
	lateRefunds *metrics.Counter
}

const lateRefundsName = `sluice_forward_late_refunded_items_total`

func newHandlerMetrics(set *metrics.Set) *handlerMetrics {
	m := &handlerMetrics{
		served:      set.GetOrCreateCounter(`sluice_forward_served_items_total`),
		refusedHits: set.GetOrCreateCounter(`sluice_forward_refused_refund_hits_total`),
		lateRefunds: set.GetOrCreateCounter(lateRefundsName),
	}
	for r, name := range [numRejects]string{
		rejectMethod:         "method",
		rejectAuth:           "auth",
		rejectStale:          "stale",
		rejectReplay:         "replay",
		rejectNonceCacheFull: "nonce_cache_full",
		rejectTooLarge:       "too_large",
		rejectMalformed:      "malformed",
		rejectLate:           "late",
	} {
		m.rejected[r] = set.GetOrCreateCounter(`sluice_forward_rejected_requests_total{reason="` + name + `"}`)
	}
	for r, name := range [numRefuses]string{refuseInvalid: "invalid", refuseRefund: "refund_over_lent"} {
		m.refused[r] = set.GetOrCreateCounter(`sluice_forward_refused_items_total{reason="` + name + `"}`)
	}
	return m
}

// MetricsHelp returns the # HELP text of each metric family the
// forwarding protocol registers, by family name: what it counts. A node's
// /metrics writes them (node combines every package's).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_forward_served_items_total":        "Items of forwarded batches this node answered as their owner.",
		"sluice_forward_rejected_requests_total":   "Forwarding requests refused undecided, by reason: method, auth (signature), stale, replay, nonce_cache_full, too_large, malformed, late (after the sender's timeout).",
		"sluice_forward_refused_items_total":       "Forwarded items answered with an error undecided, by reason: invalid (a rule or key the API refuses), refund_over_lent.",
		"sluice_forward_refused_refund_hits_total": "Hits of peers' refunds beyond what this node had lent them, refused.",
		"sluice_forward_late_refunded_items_total": "Allowed items of forwarded batches decided after their sender's timeout, refunded (by the owner, or by the sender on a late reply).",
		"sluice_forward_items_total":               "Items sent to a peer (the key's owner) and answered, by peer.",
		"sluice_forward_requests_total":            "Forwarding requests a peer answered, by peer.",
		"sluice_forward_failed_requests_total":     "Forwarding requests to a peer that failed (no answer in time, refused, an error status), by peer.",
		"sluice_forward_unavailable_items_total":   "Items for a peer whose request failed (decided here from the Store, or shed), by peer.",
	}
}

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

func newPeerMetrics(set *metrics.Set, addr string) peerMetrics {
	l := `{peer="` + labelSafe(addr) + `"}`
	return peerMetrics{
		items:       set.GetOrCreateCounter(peerMetricNames[0] + l),
		requests:    set.GetOrCreateCounter(peerMetricNames[1] + l),
		failures:    set.GetOrCreateCounter(peerMetricNames[2] + l),
		unavailable: set.GetOrCreateCounter(peerMetricNames[3] + l),
	}
}

// dropPeerMetrics unregisters addr's per-peer series, so that peers that
// come and go (pod churn) do not grow /metrics forever. A peer that comes
// back starts its counters from zero, which rate() handles as a reset.
func dropPeerMetrics(set *metrics.Set, addr string) {
	l := `{peer="` + labelSafe(addr) + `"}`
	for _, n := range peerMetricNames {
		set.UnregisterMetric(n + l)
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
