package node

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/node/member"
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
	// help is the # HELP text of every family /metrics writes, by name
	// (see metricsHelp); read-only after newNodeMetrics.
	help map[string]string
}

func newNodeMetrics(n *Node) *nodeMetrics {
	m := &nodeMetrics{set: metrics.NewSet(), help: metricsHelp(n.cfg.MetricsHelp)}
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

// Help texts. VictoriaMetrics/metrics writes "# HELP family" with no text
// of its own; each package that registers metrics says what its families
// count, in which unit, in a MetricsHelp function beside its
// registrations, and the Node fills them in as it writes /metrics:
// nodeMetricsHelp (the node's own), runtimeMetricsHelp (the go_* and
// process_* families the library writes), the MetricsHelp of the packages
// whose metrics the Node's set or the process's holds (node/engine,
// node/forward, node/hot, node/member, lease), and Config.MetricsHelp for
// those the node does not import (lua, node/rls, node/upstream: the daemon
// passes them). A family without a text keeps a bare # HELP line;
// TestMetricsHelp in cmd/sluiced names it and where to add its text.

// nodeMetricsHelp is the text of the node's own families.
func nodeMetricsHelp() map[string]string {
	return map[string]string{
		"sluice_check_duration_seconds":          "Time to decide a check, in seconds: one check in 16 is timed, a batch is one observation of its mean per check.",
		"sluice_http_requests_total":             "HTTP requests answered, by endpoint (path) and status code.",
		"sluice_rules":                           "Rules in the installed rule set.",
		"sluice_rules_reload_errors_total":       "Rule sets refused on load or reload (a bad file, a stored set that does not validate or is refused): the node keeps its last good set.",
		"sluice_rules_store_refused_total":       "Stored rule sets this node refused, by reason: unsigned, bad_signature, rollback (a signed set of the past), version_range.",
		"sluice_members":                         "Members on this node's ring (the live members it sees), itself included.",
		"sluice_handoffs_total":                  "Ring changes after which this node returned the leases of keys it no longer owns or holds.",
		"sluice_http_tls_handshake_errors_total": "Connections to the HTTP port whose TLS handshake failed (a client without TLS, an unknown CA, a scanner): counted, and logged at most once every 10s with the count.",
		"sluice_tokens":                          "Tokens of a rule's keys held or lent by this node, by where they are: store (the Store's remaining of those keys, as of each key's last call), nodes (lent to this node), gateways and regions (lent by this node to holders outside the cluster).",
		"sluice_tokens_short_bound":              "Tokens of a rule lent now (to nodes, gateways, regions): the most its admissions could fall short of its limits were every holder to vanish now, until their loans end.",
	}
}

// metricsHelp combines the help texts /metrics fills in (see above), the
// node's own last, each escaped as the text format wants (a backslash as
// two, a line feed as \n).
func metricsHelp(extra []map[string]string) map[string]string {
	all := []map[string]string{runtimeMetricsHelp(), engine.MetricsHelp(), forward.MetricsHelp(), hot.MetricsHelp(),
		member.MetricsHelp(), lease.MetricsHelp()}
	all = append(append(all, extra...), nodeMetricsHelp())
	esc := strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	help := map[string]string{}
	for _, h := range all {
		for fam, text := range h {
			help[fam] = esc.Replace(text)
		}
	}
	return help
}

// MetricHelp returns the # HELP text /metrics gives family, as written
// (escaped); "" for a family it has no text for.
func (n *Node) MetricHelp(family string) string { return n.met.help[family] }

// writeMetrics writes /metrics: the Node's set, the process-wide one and
// the upstream's, with each family's help text.
func (n *Node) writeMetrics(w io.Writer) {
	var b bytes.Buffer
	n.met.set.WritePrometheus(&b)
	metrics.WritePrometheus(&b, true)
	writeTokenMetrics(&b, n.eng.TokenStats())
	if u := n.cfg.Upstream; u != nil {
		u.WriteMetrics(&b)
	}
	_, _ = w.Write(appendHelp(make([]byte, 0, b.Len()+b.Len()/2), b.Bytes(), n.met.help))
}

// appendHelp appends the exposition text src to dst, each bare
// "# HELP family" line given its text from help.
func appendHelp(dst, src []byte, help map[string]string) []byte {
	for len(src) > 0 {
		line, rest, _ := bytes.Cut(src, []byte{'\n'})
		src = rest
		dst = append(dst, line...)
		if fam, ok := bytes.CutPrefix(line, []byte("# HELP ")); ok && bytes.IndexByte(fam, ' ') < 0 {
			if h := help[string(fam)]; h != "" {
				dst = append(append(dst, ' '), h...)
			}
		}
		dst = append(dst, '\n')
	}
	return dst
}
