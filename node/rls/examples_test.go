package rls_test

import (
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/node/rls"
)

// step is one ShouldRateLimit call and the codes envoyproxy/ratelimit
// gives for it ("OVERALL: per-descriptor codes"); advance moves the clock
// first.
type step struct {
	advance time.Duration
	domain  string
	hits    uint32
	descs   []*ratelimitv3.RateLimitDescriptor
	want    string
}

// TestDocumentedExamples runs the configuration examples of
// envoyproxy/ratelimit's README (section "Configuration", examples 1 to 9,
// written here from the documentation with smaller limits so that the
// sequences reach them), each file loaded unchanged, over a real gRPC
// connection, and checks each call's codes against what
// envoyproxy/ratelimit documents or does for fixed windows.
func TestDocumentedExamples(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yml   string
		steps []step
	}{
		{
			// Example 1: two values of one key, each with its own limit.
			name: "1 mongo_cps",
			yml: `
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 3

  - key: database
    value: default
    rate_limit:
      unit: second
      requests_per_unit: 3
`,
			steps: []step{
				{domain: "mongo_cps", descs: d1("database=users"), want: "OK: OK"},
				{domain: "mongo_cps", descs: d1("database=users"), want: "OK: OK"},
				{domain: "mongo_cps", descs: d1("database=users"), want: "OK: OK"},
				{domain: "mongo_cps", descs: d1("database=users"), want: "OVER: OVER"},
				{domain: "mongo_cps", descs: d1("database=default"), want: "OK: OK"}, // counted apart
				{domain: "mongo_cps", descs: d1("database=other"), want: "OK: OK"},   // no limit
				{advance: time.Second, domain: "mongo_cps", descs: d1("database=users"), want: "OK: OK"},
			},
		},
		{
			// Example 2: nested descriptors, a key-only descriptor counting
			// each value apart, and two descriptors in one request (all
			// charged: envoy adds every descriptor's hits).
			name: "2 messaging",
			yml: `
domain: messaging
descriptors:
  # Only allow 2 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 2

  # Only allow 4 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 4
`,
			steps: []step{
				{domain: "messaging", descs: marketing("2061111111"), want: "OK: OK OK"},
				{domain: "messaging", descs: marketing("2061111111"), want: "OK: OK OK"},
				{domain: "messaging", descs: marketing("2061111111"), want: "OVER: OVER OK"}, // 3rd to the number: still charged
				{domain: "messaging", descs: marketing("2062222222"), want: "OK: OK OK"},     // another number: its own counters
				{domain: "messaging", descs: d1("to_number=2061111111"), want: "OK: OK"},     // 4th
				{domain: "messaging", descs: d1("to_number=2061111111"), want: "OVER: OVER"}, // 5th > 4
				{domain: "messaging", descs: d1("message_type=marketing"), want: "OK: OK"},   // placeholder: no limit
			},
		},
		{
			// Example 3: the exact value beats the key-only descriptor;
			// requests_per_unit 0 blocks.
			name: "3 edge_proxy_per_ip",
			yml: `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 2

  # Black list IP
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`,
			steps: []step{
				{domain: "edge_proxy_per_ip", descs: d1("remote_address=50.0.0.1"), want: "OK: OK"},
				{domain: "edge_proxy_per_ip", descs: d1("remote_address=50.0.0.1"), want: "OK: OK"},
				{domain: "edge_proxy_per_ip", descs: d1("remote_address=50.0.0.1"), want: "OVER: OVER"},
				{domain: "edge_proxy_per_ip", descs: d1("remote_address=50.0.0.5"), want: "OVER: OVER"},
				{domain: "edge_proxy_per_ip", descs: d1("remote_address=50.0.0.2"), want: "OK: OK"},
			},
		},
		{
			// Example 4: a two-entry request does not match a one-level
			// configuration.
			name: "4 levels, no match",
			yml: `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 1
      unit: second
`,
			steps: []step{
				{domain: "example4", descs: d1("key=value", "subkey=subvalue"), want: "OK: OK"},
				{domain: "example4", descs: d1("key=value", "subkey=subvalue"), want: "OK: OK"},
				{domain: "example4", descs: d1("key=value"), want: "OK: OK"},
				{domain: "example4", descs: d1("key=value"), want: "OVER: OVER"},
			},
		},
		{
			name: "4 levels, match",
			yml: `
domain: example4
descriptors:
  - key: key
    value: value
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 1
          unit: second
`,
			steps: []step{
				{domain: "example4", descs: d1("key=value", "subkey=subvalue"), want: "OK: OK"},
				{domain: "example4", descs: d1("key=value", "subkey=subvalue"), want: "OVER: OVER"},
				{domain: "example4", descs: d1("key=value", "subkey=other"), want: "OK: OK"},
				{domain: "example4", descs: d1("key=value"), want: "OK: OK"}, // no limit at the first level
			},
		},
		{
			// Example 5: unlimited.
			name: "5 internal",
			yml: `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true

  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 1
`,
			steps: []step{
				{domain: "internal", descs: d1("ldap=a"), want: "OK: OK"},
				{domain: "internal", descs: d1("ldap=a"), want: "OK: OK"},
				{domain: "internal", hits: 1000, descs: d1("ldap=a"), want: "OK: OK"},
				{domain: "internal", descs: d1("azure=a"), want: "OK: OK"},
				{domain: "internal", descs: d1("azure=a"), want: "OVER: OVER"},
			},
		},
		{
			// Example 6: shadow_mode always answers OK.
			name: "6 shadow_mode",
			yml: `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 1
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 2
          unit: second
`,
			steps: []step{
				{domain: "example6", descs: d1("service=auth-service", "user=user-a"), want: "OK: OK"},
				{domain: "example6", descs: d1("service=auth-service", "user=user-a"), want: "OK: OK"},
				{domain: "example6", descs: d1("service=auth-service", "user=user-a"), want: "OK: OK"},
				{domain: "example6", descs: d1("service=auth-service", "user=user-b"), want: "OK: OK"},
				{domain: "example6", descs: d1("service=auth-service", "user=user-b"), want: "OK: OK"},
				{domain: "example6", descs: d1("service=auth-service", "user=user-b"), want: "OVER: OVER"},
			},
		},
		{
			// Example 7: replaces.
			name: "7 replaces",
			yml: `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 1
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 2
          unit: second
`,
			steps: []step{
				{domain: "example7", descs: both7(), want: "OK: OK OK"},
				{domain: "example7", descs: both7(), want: "OK: OK OK"},
				{domain: "example7", descs: both7(), want: "OVER: OK OVER"},
				// The replaced limit was not charged: its 1/s is still whole.
				{domain: "example7", descs: d1("key_1=value_1", "user=bkthomps"), want: "OK: OK"},
				{domain: "example7", descs: d1("key_1=value_1", "user=bkthomps"), want: "OVER: OVER"},
			},
		},
		{
			// Example 8: detailed_metric changes metrics, not limits.
			name: "8 detailed_metric",
			yml: `
domain: example8
descriptors:
  - key: key1
    detailed_metric: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: key1
    value: value1
    rate_limit:
      unit: minute
      requests_per_unit: 2
`,
			steps: []step{
				{domain: "example8", descs: d1("key1=unspecified_value"), want: "OK: OK"},
				{domain: "example8", descs: d1("key1=unspecified_value"), want: "OVER: OVER"},
				{domain: "example8", descs: d1("key1=unspecified_value2"), want: "OK: OK"},
				{domain: "example8", descs: d1("key1=value1"), want: "OK: OK"},
				{domain: "example8", descs: d1("key1=value1"), want: "OK: OK"},
				{domain: "example8", descs: d1("key1=value1"), want: "OVER: OVER"},
			},
		},
		{
			// Example 9: a value ending in '*' matches by prefix; each value
			// is counted apart (envoy's cache key holds the request's value).
			name: "9 wildcard",
			yml: `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 2
`,
			steps: []step{
				{domain: "example9", descs: d1("key1=value_1"), want: "OK: OK"},
				{domain: "example9", descs: d1("key1=value_1"), want: "OK: OK"},
				{domain: "example9", descs: d1("key1=value_1"), want: "OVER: OVER"},
				{domain: "example9", descs: d1("key1=value_2"), want: "OK: OK"},
				{domain: "example9", descs: d1("key1=other"), want: "OK: OK"},
			},
		},
		{
			// hits_addend: envoy adds the hits even when over the limit, so
			// a window once over stays over (Sluice takes what was left).
			name: "hits_addend",
			yml: `
domain: hits
descriptors:
  - key: k
    rate_limit: {unit: hour, requests_per_unit: 5}
`,
			steps: []step{
				{domain: "hits", hits: 3, descs: d1("k=a"), want: "OK: OK"},
				{domain: "hits", hits: 3, descs: d1("k=a"), want: "OVER: OVER"}, // 6 > 5
				{domain: "hits", hits: 1, descs: d1("k=a"), want: "OVER: OVER"}, // envoy's counter is at 7
				{domain: "hits", descs: d1("k=b", "+5"), want: "OK: OK"},        // per-descriptor hits_addend
				{domain: "hits", hits: 1, descs: d1("k=b", "+0"), want: "OK: OK"},
				{domain: "hits", descs: d1("k=b"), want: "OVER: OVER"},
				{advance: time.Hour, domain: "hits", hits: 5, descs: d1("k=a"), want: "OK: OK"}, // a new window
			},
		},
		{
			// Counter keys escape '|' and '\': these two descriptors count apart.
			name: "escaped keys",
			yml: `
domain: esc
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: hour, requests_per_unit: 1}
`,
			steps: []step{
				{domain: "esc", descs: d1("a=x|y", "b=z"), want: "OK: OK"},
				{domain: "esc", descs: d1("a=x", "b=y|z"), want: "OK: OK"},
				{domain: "esc", descs: d1("a=x\\", "b=|z"), want: "OK: OK"},
				{domain: "esc", descs: d1("a=x|y", "b=z"), want: "OVER: OVER"},
			},
		},
		{
			name: "units and unknown domain",
			yml: `
domain: units
descriptors:
  - {key: w, rate_limit: {unit: week, requests_per_unit: 1}}
  - {key: m, rate_limit: {unit: MONTH, requests_per_unit: 1}}
  - {key: y, rate_limit: {unit: year, requests_per_unit: 1}}
`,
			steps: []step{
				{domain: "units", descs: ds(d1("w=1"), d1("m=1"), d1("y=1")), want: "OK: OK OK OK"},
				{domain: "units", descs: ds(d1("w=1"), d1("m=1"), d1("y=1")), want: "OVER: OVER OVER OVER"},
				{advance: 7 * 24 * time.Hour, domain: "units", descs: ds(d1("w=1"), d1("y=1")), want: "OVER: OK OVER"},
				{domain: "nobody", descs: d1("w=1"), want: "OK: OK"},
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachTransport(t, func(t *testing.T, tr rls.Transport) {
				r := newRig(t, tc.yml, withTransport(tr))
				for i, s := range tc.steps {
					if s.advance > 0 {
						r.clock.Advance(s.advance)
					}
					if got, _ := r.call(t, s.domain, s.hits, s.descs...); got != s.want {
						t.Fatalf("call %d: %s, want %s", i+1, got, s.want)
					}
				}
			})
		})
	}
}

func d1(entries ...string) []*ratelimitv3.RateLimitDescriptor {
	return []*ratelimitv3.RateLimitDescriptor{desc(entries...)}
}

func ds(groups ...[]*ratelimitv3.RateLimitDescriptor) []*ratelimitv3.RateLimitDescriptor {
	var all []*ratelimitv3.RateLimitDescriptor
	for _, g := range groups {
		all = append(all, g...)
	}
	return all
}

func marketing(number string) []*ratelimitv3.RateLimitDescriptor {
	return ds(d1("message_type=marketing", "to_number="+number), d1("to_number="+number))
}

func both7() []*ratelimitv3.RateLimitDescriptor {
	return ds(d1("key_1=value_1", "user=bkthomps"), d1("key_2=value_2", "user=bkthomps"))
}
