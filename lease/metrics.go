package lease

import (
	"github.com/VictoriaMetrics/metrics"
)

// Metrics of the lease package, registered in the default VictoriaMetrics
// set (these globals are the package's only mutable state). They sum over
// every Manager and Breaker of the process; per-Manager figures are in
// [Manager.Stats].

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

var (
	storeCalls   [numOps][numResults]*metrics.Counter
	storeLatency [numOps]*metrics.PrometheusHistogram

	// breakerState is the number of open (1) and half-open (0.5 each)
	// breakers of the process: 0 when every Store is healthy.
	breakerState = metrics.GetOrCreateGauge(`sluice_store_breaker_state`, nil)
	// breakerTransitions counts state changes by the state entered.
	breakerTransitions = [3]*metrics.Counter{
		BreakerClosed:   metrics.GetOrCreateCounter(`sluice_store_breaker_transitions_total{to="closed"}`),
		BreakerOpen:     metrics.GetOrCreateCounter(`sluice_store_breaker_transitions_total{to="open"}`),
		BreakerHalfOpen: metrics.GetOrCreateCounter(`sluice_store_breaker_transitions_total{to="half-open"}`),
	}

	decisionsStore    = metrics.GetOrCreateCounter(`sluice_lease_decisions_total{source="store"}`)
	decisionsDenyLoc  = metrics.GetOrCreateCounter(`sluice_lease_decisions_total{source="deny_until"}`)
	decisionsDegraded = metrics.GetOrCreateCounter(`sluice_lease_decisions_total{source="degraded"}`)
	localHits         = metrics.GetOrCreateCounter(`sluice_lease_local_hits_total`)
	tokensLeased      = metrics.GetOrCreateCounter(`sluice_lease_tokens_leased_total`)
	tokensReturned    = metrics.GetOrCreateCounter(`sluice_lease_tokens_returned_total`)
	prefetches        = metrics.GetOrCreateCounter(`sluice_lease_prefetches_total`)
	activeKeys        = metrics.GetOrCreateGauge(`sluice_lease_active_keys`, nil)

	// reconciledTokens are the hits local mode admitted during Store
	// outages, by what became of them when the Store came back: charged
	// to it, beyond what it had left (the outage's excess), or not charged
	// (the charge failed).
	reconciledTokens = [...]*metrics.Counter{
		reconcileCharged: metrics.GetOrCreateCounter(`sluice_lease_reconciled_tokens_total{result="charged"}`),
		reconcileExcess:  metrics.GetOrCreateCounter(`sluice_lease_reconciled_tokens_total{result="excess"}`),
		reconcileFailed:  metrics.GetOrCreateCounter(`sluice_lease_reconciled_tokens_total{result="failed"}`),
	}
)

// storeBuckets are the le buckets of sluice_store_call_duration_seconds:
// a healthy Redis on the LAN answers in 0.1–1ms; the timeout is 50ms by
// default.
var storeBuckets = []float64{1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1}

func init() {
	for op := range numOps {
		for r := range numResults {
			storeCalls[op][r] = metrics.GetOrCreateCounter(`sluice_store_calls_total{op="` + opNames[op] + `",result="` + resultNames[r] + `"}`)
		}
		storeLatency[op] = metrics.GetOrCreatePrometheusHistogramExt(`sluice_store_call_duration_seconds{op="`+opNames[op]+`"}`, storeBuckets)
	}
}
