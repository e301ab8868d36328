package lease

import (
	"github.com/VictoriaMetrics/metrics"
)

// Store operations, as labelled in metrics.
const (
	opLease = iota
	opReturn
	opLog
	opAcquire
	opRelease
	numOps
)

var opNames = [numOps]string{"lease", "return", "log", "acquire", "release"}

// Results of a Store call through the Breaker.
const (
	resultOK       = iota // the Store answered
	resultError           // the Store failed (not the caller's context)
	resultTimeout         // the per-call timeout passed
	resultRejected        // the breaker was open: no call was made
	resultCanceled        // the caller's context ended first (not counted by the breaker)
	numResults
)

// What became of local-mode admissions when the Store came back.
const (
	reconcileCharged = iota
	reconcileExcess
	reconcileFailed
)

var resultNames = [numResults]string{"ok", "error", "timeout", "rejected", "canceled"}

// leaseMetrics are the metrics of a Manager and its Breaker (or of a
// Breaker alone), in the set of Config.Metrics (BreakerConfig.Metrics):
// the process's default set when nil, where several Managers sum.
// Per-Manager figures are also in [Manager.Stats].
type leaseMetrics struct {
	storeCalls   [numOps][numResults]*metrics.Counter
	storeLatency [numOps]*metrics.PrometheusHistogram

	// breakerState is the number of open (1) and half-open (0.5 each)
	// breakers of the set: 0 when every Store is healthy.
	breakerState *metrics.Gauge
	// breakerTransitions counts state changes by the state entered.
	breakerTransitions [3]*metrics.Counter

	decisionsStore    *metrics.Counter
	decisionsDenyLoc  *metrics.Counter
	decisionsDegraded *metrics.Counter
	localHits         *metrics.Counter
	tokensLeased      *metrics.Counter
	tokensReturned    *metrics.Counter
	prefetches        *metrics.Counter
	aheadRolls        *metrics.Counter
	activeKeys        *metrics.Gauge

	// reconciledTokens are the hits local mode admitted during Store
	// outages, by what became of them when the Store came back: charged
	// to it, beyond what it had left (the outage's excess), or not charged
	// (the charge failed).
	reconciledTokens [3]*metrics.Counter
}

// MetricsHelp returns the # HELP text of each metric family the lease
// package registers, by family name: what it counts, in which unit. A
// node's /metrics writes them (node combines every package's).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_store_calls_total":               "Store calls, by operation (lease, return, log, acquire, release) and result (ok, error, timeout, rejected: the breaker was open, canceled: the caller gave up first).",
		"sluice_store_call_duration_seconds":     "Time of a Store call, in seconds, by operation.",
		"sluice_store_breaker_state":             "Store breakers open, a half-open one counting 0.5: 0 while every Store answers.",
		"sluice_store_breaker_transitions_total": "Store breaker state changes, by the state entered (closed, open, half-open).",
		"sluice_lease_decisions_total":           "Checks not decided from tokens held in memory, by source: store (a Store call: a lease, a check of an exact rule, or any check on the in-memory store), deny_until (denied from memory until the Store said a batch is due), degraded (by on_store_failure, the Store unreachable).",
		"sluice_lease_local_hits_total":          "Hits admitted from tokens leased and held in memory, with no Store call.",
		"sluice_lease_tokens_leased_total":       "Tokens the Store granted in leases.",
		"sluice_lease_tokens_returned_total":     "Unspent leased tokens given back to the Store (idle keys, keys that moved, shutdown).",
		"sluice_lease_prefetches_total":          "Leases called in the background before a key's tokens ran out.",
		"sluice_lease_ahead_rolls_total":         "fixed_window windows a key entered on a share leased ahead, with no Store call.",
		"sluice_lease_active_keys":               "Keys with a leased bucket in memory (on the in-memory store: keys the store holds state for).",
		"sluice_lease_reconciled_tokens_total":   "Hits admitted from memory while the Store was down (on_store_failure: local), by what became of them when it came back: charged, excess (beyond what the Store had left), failed (not charged).",
	}
}

// storeBuckets are the le buckets of sluice_store_call_duration_seconds:
// a healthy Redis on the LAN answers in 0.1–1ms; the timeout is 50ms by
// default.
var storeBuckets = []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1}

// newLeaseMetrics gets or creates the metrics in set (nil: the default
// set).
func newLeaseMetrics(set *metrics.Set) *leaseMetrics {
	if set == nil {
		set = metrics.GetDefaultSet()
	}
	m := &leaseMetrics{
		breakerState: set.GetOrCreateGauge(`sluice_store_breaker_state`, nil),
		breakerTransitions: [3]*metrics.Counter{
			BreakerClosed:   set.GetOrCreateCounter(`sluice_store_breaker_transitions_total{to="closed"}`),
			BreakerOpen:     set.GetOrCreateCounter(`sluice_store_breaker_transitions_total{to="open"}`),
			BreakerHalfOpen: set.GetOrCreateCounter(`sluice_store_breaker_transitions_total{to="half-open"}`),
		},
		decisionsStore:    set.GetOrCreateCounter(`sluice_lease_decisions_total{source="store"}`),
		decisionsDenyLoc:  set.GetOrCreateCounter(`sluice_lease_decisions_total{source="deny_until"}`),
		decisionsDegraded: set.GetOrCreateCounter(`sluice_lease_decisions_total{source="degraded"}`),
		localHits:         set.GetOrCreateCounter(`sluice_lease_local_hits_total`),
		tokensLeased:      set.GetOrCreateCounter(`sluice_lease_tokens_leased_total`),
		tokensReturned:    set.GetOrCreateCounter(`sluice_lease_tokens_returned_total`),
		prefetches:        set.GetOrCreateCounter(`sluice_lease_prefetches_total`),
		aheadRolls:        set.GetOrCreateCounter(`sluice_lease_ahead_rolls_total`),
		activeKeys:        set.GetOrCreateGauge(`sluice_lease_active_keys`, nil),
		reconciledTokens: [3]*metrics.Counter{
			reconcileCharged: set.GetOrCreateCounter(`sluice_lease_reconciled_tokens_total{result="charged"}`),
			reconcileExcess:  set.GetOrCreateCounter(`sluice_lease_reconciled_tokens_total{result="excess"}`),
			reconcileFailed:  set.GetOrCreateCounter(`sluice_lease_reconciled_tokens_total{result="failed"}`),
		},
	}
	for op := range numOps {
		for r := range numResults {
			m.storeCalls[op][r] = set.GetOrCreateCounter(`sluice_store_calls_total{op="` + opNames[op] + `",result="` + resultNames[r] + `"}`)
		}
		m.storeLatency[op] = set.GetOrCreatePrometheusHistogramExt(`sluice_store_call_duration_seconds{op="`+opNames[op]+`"}`, storeBuckets)
	}
	return m
}
