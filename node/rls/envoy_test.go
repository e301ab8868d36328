package rls_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluicehq/sluice/node/rls"
)

// TestEnvoyIntegration replays envoyproxy/ratelimit's integration test
// (test/integration/integration_test.go: testBasicBaseConfig,
// testConfigReload, testShareThreshold) and the behaviours its service
// tests hold (quota_mode, shadow_mode, unlimited, replaces, hits_addend),
// on a configuration directory of the same shapes (testdata/envoy: one
// domain per file, loaded unchanged by a Reloader as sluiced -rls-config
// DIR loads it), against each transport and each Store (memory; Redis,
// with its clock frozen at the node's), over a real TCP connection. Each
// response is compared whole, as envoy's test compares it (proto.Equal),
// duration_until_reset exactly (see envoyT0), and the per-descriptor
// metrics as envoy's test reads its statistics.
func TestEnvoyIntegration(t *testing.T) {
	for _, kind := range envoyStores {
		for _, tr := range transports {
			t.Run(kind+"/"+string(tr), func(t *testing.T) {
				e := newEnvoyEnv(t, kind, tr)
				n := e.start()
				t.Run("basic", func(t *testing.T) { envoyBasic(t, e, n) })
				t.Run("reload", func(t *testing.T) { envoyReload(t, e, n) })
				t.Run("share_threshold", func(t *testing.T) { envoyShareThreshold(t, n) })
				t.Run("quota_mode", func(t *testing.T) { envoyQuotaMode(t, n) })
				t.Run("shadow_unlimited_replaces", func(t *testing.T) { envoyModes(t, n) })
				t.Run("hits_addend", func(t *testing.T) { envoyHitsAddend(t, n) })
			})
		}
	}
}

// envoyBasic is testBasicBaseConfig: an unknown domain; a per-second key;
// a per-minute key counted down past its limit; two descriptors in one
// request, both charged whatever the other's code; duration_until_reset
// ticking down. The clock stands at envoyT0 until the last step, which
// moves it 2 s.
func envoyBasic(t *testing.T, e *envoyEnv, n *envoyNode) {
	n.expect(t, "unknown domain", "nowhere", 1, one("hello=world"), response(ok, unmatched()))

	n.expect(t, "per-second key", "counting", 1, one("caller=foo"), response(ok, limited(ok, 40, second, 39, 1)))
	n.wantMetric(t, `sluice_rls_total_hits{domain="counting",descriptor="caller"}`, 1)

	// A per-minute key past its limit of 15.
	for i := range 20 {
		code, left := ok, uint32(15-(i+1))
		if i >= 15 {
			code, left = over, 0
		}
		n.expect(t, fmt.Sprintf("per-minute call %d", i), "counting", 1, one("tenant=t-1"), response(code, limited(code, 15, minute, left, 47)))
		n.wantMetric(t, `sluice_rls_total_hits{domain="counting",descriptor="tenant"}`, i+1)
		n.wantMetric(t, `sluice_rls_over_limit{domain="counting",descriptor="tenant"}`, max(0, i-14))
	}

	// Two descriptors: the hourly one (6) goes over first; the per-minute
	// one is charged on every call regardless.
	for i := range 10 {
		code, left2 := ok, uint32(6-(i+1))
		if i >= 6 {
			code, left2 = over, 0
		}
		n.expect(t, fmt.Sprintf("two descriptors, call %d", i), "counting", 1, descs([]string{"tenant=t-2"}, []string{"region=t-2"}),
			response(code, limited(ok, 15, minute, uint32(15-(i+1)), 47), limited(code, 6, hour, left2, 3167)))
		n.wantMetric(t, `sluice_rls_total_hits{domain="counting",descriptor="tenant"}`, 20+i+1)
		n.wantMetric(t, `sluice_rls_over_limit{domain="counting",descriptor="tenant"}`, 5)
		n.wantMetric(t, `sluice_rls_total_hits{domain="counting",descriptor="region"}`, i+1)
		n.wantMetric(t, `sluice_rls_over_limit{domain="counting",descriptor="region"}`, max(0, i-5))
	}

	// duration_until_reset ticks down with the clock, in whole seconds.
	n.expect(t, "daily key", "counting", 1, one("device=d-1"), response(ok, limited(ok, 30, day, 29, 67967)))
	e.advance(2 * time.Second)
	n.expect(t, "daily key 2 s later", "counting", 1, one("device=d-1"), response(ok, limited(ok, 30, day, 28, 67965)))
}

// envoyReload is testConfigReload: a domain that a file added to the
// directory brings (its per-second key, its requests_per_unit 0), and
// that removing the file takes away; each reload counted. The clock is
// envoyT0 + 2 s.
func envoyReload(t *testing.T, e *envoyEnv, n *envoyNode) {
	const loads = `sluice_rls_config_loads_total`
	n.expect(t, "before the file", "reloaded", 1, one("blocked=foo"), response(ok, unmatched()))
	before := n.metric(t, loads)
	copyFile(t, filepath.Join("testdata", "envoy", "reload.yaml"), filepath.Join(e.dir, "reload.yaml"))
	if !n.rl.Check() {
		t.Fatal("the added file was not loaded")
	}
	n.wantMetric(t, loads, before+1)
	n.expect(t, "per-second key of the added file", "reloaded", 1, one("caller=foo"), response(ok, limited(ok, 40, second, 39, 1)))
	n.expect(t, "requests_per_unit 0", "reloaded", 1, one("blocked=foo"), response(over, limited(over, 0, second, 0, 1)))

	if err := os.Remove(filepath.Join(e.dir, "reload.yaml")); err != nil {
		t.Fatal(err)
	}
	if !n.rl.Check() {
		t.Fatal("the removal was not loaded")
	}
	n.wantMetric(t, loads, before+2)
	n.expect(t, "after the removal", "reloaded", 1, one("caller=foo"), response(ok, unmatched()))
}

// envoyShareThreshold is testShareThreshold: values matching a
// share_threshold wildcard share one counter, those of a plain wildcard
// count apart; a wildcard inside a value matches (and shares) too.
func envoyShareThreshold(t *testing.T, n *envoyNode) {
	for i := range 8 {
		n.expect(t, fmt.Sprintf("docs/a.pdf, call %d", i), "pooled", 1, one("doc=docs/a.pdf"), response(ok, limited(ok, 8, hour, uint32(8-(i+1)), 3165)))
	}
	n.expect(t, "another value of the shared wildcard", "pooled", 1, one("doc=docs/b.csv"), response(over, limited(over, 8, hour, 0, 3165)))
	for i := range 8 {
		n.expect(t, fmt.Sprintf("apart/%d", i), "pooled", 1, one(fmt.Sprintf("doc_apart=apart/%d", i)), response(ok, limited(ok, 8, hour, 7, 3165)))
	}
	// route: api*v2, shared; 3 a minute.
	n.expect(t, "api-x-v2", "pooled", 1, one("route=api-x-v2"), response(ok, limited(ok, 3, minute, 2, 45)))
	n.expect(t, "api/y/v2", "pooled", 1, one("route=api/y/v2"), response(ok, limited(ok, 3, minute, 1, 45)))
	n.expect(t, "apiv2 (an empty middle)", "pooled", 1, one("route=apiv2"), response(ok, limited(ok, 3, minute, 0, 45)))
	n.expect(t, "api-z-v2", "pooled", 1, one("route=api-z-v2"), response(over, limited(over, 3, minute, 0, 45)))
	n.expect(t, "api-x-v3 (no match)", "pooled", 1, one("route=api-x-v3"), response(ok, unmatched()))
	n.expect(t, "xapi-v2 (no match)", "pooled", 1, one("route=xapi-v2"), response(ok, unmatched()))
	// value_to_metric with share_threshold names the metric by the
	// pattern, as envoy does.
	n.wantMetric(t, `sluice_rls_total_hits{domain="pooled",descriptor="route_api*v2"}`, 4)
	n.wantMetric(t, `sluice_rls_over_limit{domain="pooled",descriptor="doc_docs/*"}`, 1)
}

// envoyQuotaMode: a quota_mode descriptor over its limit is OVER_LIMIT in
// its status, but makes the request OVER_LIMIT only when every quota_mode
// descriptor of it is over (and always when an ordinary one is).
func envoyQuotaMode(t *testing.T, n *envoyNode) {
	plan := func(code rlsv3.RateLimitResponse_Code, left uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, 2, minute, left, 45)
	}
	credits := func(code rlsv3.RateLimitResponse_Code, left uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, 4, minute, left, 45)
	}
	ordinary := func(code rlsv3.RateLimitResponse_Code, left uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return limited(code, 5, minute, left, 45)
	}
	n.expect(t, "quota 1", "modes", 1, one("plan=p"), response(ok, plan(ok, 1)))
	n.expect(t, "quota 2", "modes", 1, one("plan=p"), response(ok, plan(ok, 0)))
	n.expect(t, "the only quota descriptor, over", "modes", 1, one("plan=p"), response(over, plan(over, 0)))
	n.expect(t, "one quota descriptor over, another not", "modes", 1, descs([]string{"plan=p"}, []string{"credits=c"}),
		response(ok, plan(over, 0), credits(ok, 3)))
	n.expect(t, "every quota descriptor over", "modes", 4, descs([]string{"plan=p"}, []string{"credits=c"}),
		response(over, plan(over, 0), credits(over, 0)))
	n.expect(t, "an ordinary one within, the quota one over", "modes", 1, descs([]string{"ordinary=o"}, []string{"plan=p"}),
		response(over, ordinary(ok, 4), plan(over, 0)))
	n.expect(t, "an ordinary one over, a quota one within", "modes", 1, descs([]string{"ordinary=o", "+5"}, []string{"credits=c2"}),
		response(over, ordinary(over, 0), credits(ok, 3)))
}

// envoyModes: shadow_mode (over, but OK), unlimited (no current_limit,
// limit_remaining 2^32−1), replaces (the replaced limit neither applied nor
// charged).
func envoyModes(t *testing.T, n *envoyNode) {
	n.expect(t, "shadow 1", "modes", 1, one("trial=a"), response(ok, limited(ok, 1, minute, 0, 45)))
	n.expect(t, "shadow, over", "modes", 1, one("trial=a"), response(ok, limited(ok, 1, minute, 0, 45)))
	n.wantMetric(t, `sluice_rls_over_limit{domain="modes",descriptor="trial"}`, 1)
	n.wantMetric(t, `sluice_rls_shadow_mode{domain="modes",descriptor="trial"}`, 1)

	n.expect(t, "unlimited", "modes", 1, descs([]string{"internal=x"}, []string{"nothing=here"}), response(ok, unlimitedStatus(), unmatched()))

	team := func(left uint32) *rlsv3.RateLimitResponse_DescriptorStatus {
		return named("per-team", limited(ok, 3, hour, left, 3165))
	}
	n.expect(t, "the named limit alone", "modes", 1, one("team=a"), response(ok, team(2)))
	n.expect(t, "replaced", "modes", 1, descs([]string{"team=a"}, []string{"team_boost=a"}), response(ok, unmatched(), limited(ok, 9, hour, 8, 3165)))
	n.expect(t, "not charged while replaced", "modes", 1, one("team=a"), response(ok, team(1)))
}

// envoyHitsAddend: the request's hits_addend (0 is 1), a descriptor's own
// (0 peeks), and a denial with room left taking that room, as envoy's
// counter goes past the limit.
func envoyHitsAddend(t *testing.T, n *envoyNode) {
	bulk := func(code rlsv3.RateLimitResponse_Code, left uint32) *rlsv3.RateLimitResponse {
		return response(code, limited(code, 8, hour, left, 3165))
	}
	n.expect(t, "hits_addend 3", "modes", 3, one("bulk=b"), bulk(ok, 5))
	n.expect(t, "a descriptor's hits_addend 0: a peek", "modes", 3, one("bulk=b", "+0"), bulk(ok, 5))
	n.expect(t, "a descriptor's own hits_addend 2", "modes", 3, one("bulk=b", "+2"), bulk(ok, 3))
	n.expect(t, "5 with 3 left", "modes", 5, one("bulk=b"), bulk(over, 0))
	n.expect(t, "1 after", "modes", 0, one("bulk=b"), bulk(over, 0))
	n.wantMetric(t, `sluice_rls_total_hits{domain="modes",descriptor="bulk"}`, 3+0+2+5+1)
}

// TestEnvoyRestartKeepsWindow: a node that served a per-second key and
// stopped cleanly (as on SIGTERM) two windows later gives back what it
// held of the window of its stop, its share of that window included (a
// fixed_window lease lends shares of the windows ahead): the next node on
// the same Redis finds the whole window.
func TestEnvoyRestartKeepsWindow(t *testing.T) {
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) {
			e := newEnvoyEnv(t, "redis", tr)
			a := e.start()
			a.expect(t, "first node", "counting", 1, one("caller=foo"), response(ok, limited(ok, 40, second, 39, 1)))
			e.advance(2 * time.Second)
			a.stop()
			b := e.start()
			b.expect(t, "the next node, two windows later", "counting", 1, one("caller=foo"), response(ok, limited(ok, 40, second, 39, 1)))
			for range 39 {
				b.call(t, &rlsv3.RateLimitRequest{Domain: "counting", Descriptors: one("caller=foo")})
			}
			b.expect(t, "past the whole window", "counting", 1, one("caller=foo"), response(over, limited(over, 40, second, 0, 1)))
		})
	}
}

// TestEnvoyResetEveryUnit: duration_until_reset for each unit, as
// envoyproxy/ratelimit computes it (unit − now % unit in whole seconds,
// now in whole seconds; a month is 30 days, a year 365), inside windows
// and at a window's first instant (the whole unit).
func TestEnvoyResetEveryUnit(t *testing.T) {
	const yml = `
domain: units
descriptors:
  - {key: s, rate_limit: {unit: second, requests_per_unit: 9}}
  - {key: m, rate_limit: {unit: minute, requests_per_unit: 9}}
  - {key: h, rate_limit: {unit: hour, requests_per_unit: 9}}
  - {key: d, rate_limit: {unit: day, requests_per_unit: 9}}
  - {key: w, rate_limit: {unit: week, requests_per_unit: 9}}
  - {key: mo, rate_limit: {unit: month, requests_per_unit: 9}}
  - {key: y, rate_limit: {unit: year, requests_per_unit: 9}}
  - {key: zero, rate_limit: {unit: hour, requests_per_unit: 0}}
  - {key: tb, rate_limit: {unit: minute, requests_per_unit: 9, algorithm: token_bucket}}
`
	keys := []string{"s", "m", "h", "d", "w", "mo", "y", "zero"}
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, yml, withTransport(tr))
		for _, at := range []struct {
			name string
			t    time.Time
			want []int64
		}{
			{"a window's last nanosecond", time.Unix(56*365*86400, 0).Add(-1), []int64{1, 1, 1, 1, 1, 1728001, 1, 1}},
			{"a window's first instant", time.Unix(56*365*86400, 0), []int64{1, 60, 3600, 86400, 604800, 1728000, 31536000, 3600}},
			{"mid-window", envoyT0, []int64{1, 47, 3167, 67967, 586367, 1709567, 31517567, 3167}},
		} {
			r.clock.Set(at.t)
			for i, k := range keys {
				_, resp := r.call(t, "units", 1, desc(k+"=x"))
				if d := resp.Statuses[0].DurationUntilReset; d.GetSeconds() != at.want[i] || d.GetNanos() != 0 {
					t.Errorf("%s, unit of %q: duration_until_reset %v, want %ds", at.name, k, d, at.want[i])
				}
			}
		}
		// Sluice's own algorithms: their reset, rounded up to a second.
		r.clock.Set(envoyT0)
		_, resp := r.call(t, "units", 1, desc("tb=x"))
		if d := resp.Statuses[0].DurationUntilReset; d.GetNanos() != 0 || d.GetSeconds() < 1 || d.GetSeconds() > 60 {
			t.Errorf("token_bucket: duration_until_reset %v, want whole seconds within the minute", d)
		}
	})
}

// TestEnvoyWildcardInValue: a '*' anywhere in a value matches any run of
// bytes there (an empty one too), as envoyproxy/ratelimit's wildcards do;
// without share_threshold each matching value counts apart.
func TestEnvoyWildcardInValue(t *testing.T) {
	const yml = `
domain: wild
descriptors:
  - key: route
    value: api*v2
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: path
    value: a*b*c
    rate_limit: {unit: hour, requests_per_unit: 1}
`
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, yml, withTransport(tr))
		for _, tc := range []struct {
			value string
			want  string // the codes of two calls
		}{
			{"route=api-x-v2", "OVER: OVER"},
			{"route=apiv2", "OVER: OVER"},
			{"route=api-y-v2", "OVER: OVER"}, // its own counter
			{"route=api-x-v3", "OK: OK"},     // no match
			{"route=xapi-v2", "OK: OK"},
			{"path=a1b2c", "OVER: OVER"},
			{"path=abc", "OVER: OVER"},
			{"path=acb", "OK: OK"}, // b after c: no match
		} {
			r.call(t, "wild", 0, desc(tc.value))
			if got, _ := r.call(t, "wild", 0, desc(tc.value)); got != tc.want {
				t.Errorf("%s, second call: %s, want %s", tc.value, got, tc.want)
			}
		}
	})
}
