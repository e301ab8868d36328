package node

import (
	"strings"
	"testing"
)

// TestStoreDownVisible: with the Store down, /readyz stays 200 (checks are
// answered; local rules enforce) and says the breaker is open, and the
// decisions of a local rule are counted as local_fallback, not allowed
// (finding 5).
func TestStoreDownVisible(t *testing.T) {
	tn := newTestNodeStore(t, failureRules, downStore{}, testClock())
	if r := tn.do("GET", "/readyz", ""); r.status != 200 || !strings.Contains(r.body, `"store":{"state":"closed"}`) {
		t.Errorf("/readyz before the outage: %d %s", r.status, r.body)
	}
	for range 3 {
		tn.do("POST", "/v1/check", `{"rule":"local","key":"a"}`)
	}
	for range 5 { // the breaker opens after 5 failed round trips
		tn.do("POST", "/v1/check", `{"rule":"open","key":"b"}`)
	}
	if r := tn.do("GET", "/readyz", ""); r.status != 200 || !strings.Contains(r.body, `"store":{"state":"open"}`) {
		t.Errorf("/readyz with the Store down: %d %s, want 200 and the store open", r.status, r.body)
	}
	m := tn.do("GET", "/metrics", "").body
	for _, want := range []string{
		`sluice_checks_total{rule="local",decision="local_fallback"} 2`,
		`sluice_checks_total{rule="local",decision="denied"} 1`,
		`sluice_checks_total{rule="local",decision="allowed"} 0`,
		`sluice_checks_total{rule="open",decision="degraded"} 5`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// TestMetricsPrometheusFormat: /metrics is Prometheus text with # HELP and
// # TYPE lines, and the latency histograms have le buckets that Prometheus'
// histogram_quantile reads (VictoriaMetrics vmrange buckets were empty
// panels on Prometheus; finding 6).
func TestMetricsPrometheusFormat(t *testing.T) {
	tn := newTestNode(t, failureRules)
	for range 20 {
		tn.do("POST", "/v1/check", `{"rule":"local","key":"a"}`)
	}
	m := tn.do("GET", "/metrics", "").body
	for _, want := range []string{
		"# TYPE sluice_checks_total counter\n",
		"# TYPE sluice_check_duration_seconds histogram\n",
		`sluice_check_duration_seconds_bucket{le="+Inf"}`,
		`sluice_check_duration_seconds_bucket{le="0.001"}`,
		"# TYPE sluice_store_call_duration_seconds histogram\n",
		`sluice_store_call_duration_seconds_bucket{op="lease",le="0.05"}`,
		"# TYPE sluice_store_breaker_state gauge\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if strings.Contains(m, "vmrange") {
		t.Error("metrics still have vmrange buckets")
	}
}
