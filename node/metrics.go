package node

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/node/engine"
)

// Routes, the path label of sluice_http_requests_total (a fixed set, so
// that random paths cannot grow the metric's cardinality).
const (
	routeCheck = iota
	routeChecks
	routeAuth
	routeAcquire
	routeRelease
	routeMetrics
	routeHealthz
	routeReadyz
	routeMembers
	routeHotkeys
	routeStats
	routeUI
	routeRulesAdmin
	routeForward
	routeLease
	routeLeaseRules
	routeOther
	numRoutes
)

var routeNames = [numRoutes]string{
	routeCheck:      "/v1/check",
	routeChecks:     "/v1/checks",
	routeAuth:       "/v1/auth",
	routeAcquire:    "/v1/acquire",
	routeRelease:    "/v1/release",
	routeMetrics:    "/metrics",
	routeHealthz:    "/healthz",
	routeReadyz:     "/readyz",
	routeMembers:    "/v1/members",
	routeHotkeys:    "/v1/hotkeys",
	routeStats:      "/v1/stats",
	routeUI:         "/ui/",
	routeRulesAdmin: "/v1/rules",
	routeForward:    "/internal/v1/batch",
	routeLease:      "/v1/lease",
	routeLeaseRules: "/v1/lease/rules",
	routeOther:      "other",
}

// The status codes whose counters are created up front.
var commonCodes = [...]int{200, 400, 404, 405, 413, 429, 431, 500, 503}

// Decisions, the decision label of sluice_checks_total (counted by the
// engine).
const (
	decAllowed      = engine.DecAllowed
	decDenied       = engine.DecDenied
	decShadowDenied = engine.DecShadowDenied
	decUnavailable  = engine.DecUnavailable
	decDegraded     = engine.DecDegraded
	decLocal        = engine.DecLocal
	decShed         = engine.DecShed
	numDecisions    = engine.NumDecisions
)

// nodeMetrics are one Node's metrics. They live in the Node's own
// metrics.Set (two Nodes in one process, as in tests, do not mix counts);
// /metrics writes that set followed by the process-wide default set, which
// holds the lease package's metrics.
type nodeMetrics struct {
	set           *metrics.Set
	checkDuration *metrics.PrometheusHistogram
	reloadErrors  *metrics.Counter
	rules         atomic.Int64
	http          [numRoutes][len(commonCodes)]*metrics.Counter
}

func newNodeMetrics(_ *Node) *nodeMetrics {
	m := &nodeMetrics{set: metrics.NewSet()}
	m.checkDuration = m.set.NewPrometheusHistogramExt("sluice_check_duration_seconds", checkBuckets)
	m.reloadErrors = m.set.NewCounter("sluice_rules_reload_errors_total")
	m.set.NewGauge("sluice_rules", func() float64 { return float64(m.rules.Load()) })
	for r := range numRoutes {
		for i, code := range commonCodes {
			m.http[r][i] = m.set.NewCounter(httpMetricName(r, code))
		}
	}
	return m
}

func httpMetricName(route, code int) string {
	return fmt.Sprintf(`sluice_http_requests_total{path=%q,code="%d"}`, routeNames[route], code)
}

// countHTTP counts one answered request.
func (m *nodeMetrics) countHTTP(route, code int) {
	for i, c := range commonCodes {
		if c == code {
			m.http[route][i].Inc()
			return
		}
	}
	m.set.GetOrCreateCounter(httpMetricName(route, code)).Inc()
}

// checkBuckets are the le buckets of sluice_check_duration_seconds: a
// check decided from memory takes about a microsecond, one that waits for
// the Store up to the Store timeout (50ms), a forwarded one a loopback or
// LAN round trip.
var checkBuckets = []float64{1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1}

func init() {
	// # HELP and # TYPE lines for every metric (Prometheus text format).
	metrics.ExposeMetadata(true)
}

// write writes the Node's metrics and the process-wide ones.
func (m *nodeMetrics) write(w io.Writer) {
	m.set.WritePrometheus(w)
	metrics.WritePrometheus(w, true)
}
