package rls_test

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/node/rls"
)

const messagingYAML = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          name: marketing
          unit: day
          requests_per_unit: 2
  - key: to_number
    detailed_metric: true
    rate_limit:
      unit: day
      requests_per_unit: 4
  - key: vip
    rate_limit:
      unlimited: true
`

// TestStatuses checks the fields of each status, in descriptor order, over
// a real TCP connection.
func TestStatuses(t *testing.T) { eachTransport(t, testStatuses) }

func testStatuses(t *testing.T, tr rls.Transport) {
	r := newRig(t, messagingYAML, withTransport(tr))
	_, resp := r.call(t, "messaging", 0,
		desc("message_type=marketing", "to_number=1"), desc("to_number=1"), desc("vip=x"), desc("nothing=here"))
	if got := codesOf(resp); got != "OK: OK OK OK OK" {
		t.Fatalf("codes %s", got)
	}
	s := resp.Statuses
	if l := s[0].CurrentLimit; l.GetRequestsPerUnit() != 2 || l.GetUnit() != rlsv3.RateLimitResponse_RateLimit_DAY || l.GetName() != "marketing" {
		t.Errorf("status 0 current_limit %v", l)
	}
	if s[0].LimitRemaining != 1 || s[1].LimitRemaining != 3 {
		t.Errorf("limit_remaining %d, %d; want 1, 3", s[0].LimitRemaining, s[1].LimitRemaining)
	}
	// The clock is 1ms into the day's window: envoyproxy/ratelimit's whole
	// seconds, 86400 - now%86400.
	if d := s[0].DurationUntilReset; d.GetSeconds() != 86400 || d.GetNanos() != 0 {
		t.Errorf("duration_until_reset %v, want 86400s", d)
	}
	if s[2].CurrentLimit != nil || s[2].LimitRemaining != math.MaxUint32 {
		t.Errorf("unlimited status %v, want no current_limit and remaining 2^32-1", s[2])
	}
	if s[3].CurrentLimit != nil || s[3].LimitRemaining != 0 {
		t.Errorf("status of a descriptor without a limit %v", s[3])
	}
	if len(resp.ResponseHeadersToAdd) != 0 {
		t.Errorf("headers without ResponseHeaders: %v", resp.ResponseHeadersToAdd)
	}
}

// TestResponseHeaders: with ResponseHeaders, the headers of the status with
// the least remaining.
func TestResponseHeaders(t *testing.T) { eachTransport(t, testResponseHeaders) }

func testResponseHeaders(t *testing.T, tr rls.Transport) {
	r := newRig(t, messagingYAML, withTransport(tr), func(c *rls.ServerConfig) { c.ResponseHeaders = true })
	_, resp := r.call(t, "messaging", 0, desc("to_number=1"), desc("message_type=marketing", "to_number=1"))
	h := map[string]string{}
	for _, hv := range resp.ResponseHeadersToAdd {
		h[hv.Key] = hv.Value
	}
	want := map[string]string{
		"RateLimit-Limit":     "2",
		"RateLimit-Remaining": "1",
		"RateLimit-Reset":     "86400",
		"RateLimit-Policy":    `"marketing";q=2;w=86400`,
		"RateLimit":           `"marketing";r=1;t=86400`,
	}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("%s: %q, want %q (all: %v)", k, h[k], v, h)
		}
	}
}

// TestBadRequests: bad input is INVALID_ARGUMENT naming the field, never a
// panic, and the server keeps serving.
func TestBadRequests(t *testing.T) { eachTransport(t, testBadRequests) }

func testBadRequests(t *testing.T, tr rls.Transport) {
	r := newRig(t, messagingYAML, withTransport(tr))
	many := make([]*ratelimitv3.RateLimitDescriptor, 10000)
	for i := range many {
		many[i] = desc("to_number=1")
	}
	manyEntries := &ratelimitv3.RateLimitDescriptor{}
	for range 10000 {
		manyEntries.Entries = append(manyEntries.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: "k", Value: "v"})
	}
	for _, tc := range []struct {
		name string
		req  *rlsv3.RateLimitRequest
		want string // in the message
	}{
		{"empty domain", &rlsv3.RateLimitRequest{Descriptors: many[:1]}, "domain"},
		{"no descriptors", &rlsv3.RateLimitRequest{Domain: "messaging"}, "descriptors"},
		{"10k descriptors", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: many}, "descriptors: more than"},
		{"10k entries", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{manyEntries}}, "descriptors[0].entries"},
		{"no entries", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{{}}}, "descriptors[0].entries"},
		{"empty key", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("=v")}}, "descriptors[0].entries[0].key"},
		{"huge value", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("to_number=" + strings.Repeat("9", 100000))}}, "value"},
		{"huge domain", &rlsv3.RateLimitRequest{Domain: strings.Repeat("d", 5000), Descriptors: many[:1]}, "domain"},
		// Values must be what a key may hold (one key validation for
		// every front end), past the digest of a long key too.
		{"NUL in a value", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("to_number=1\x002")}}, "descriptors[0].entries[0].value: must not hold control characters"},
		{"newline in a value", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("to_number=1\n2")}}, "descriptors[0].entries[0].value"},
		{"empty value", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("to_number=")}}, "descriptors[0]: key: required"},
		{"newline in a long value", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("to_number=" + strings.Repeat("9", 3000) + "\n")}}, "descriptors[0].entries[0].value"},
		{"huge hits", &rlsv3.RateLimitRequest{Domain: "messaging", Descriptors: []*ratelimitv3.RateLimitDescriptor{{
			Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "to_number", Value: "1"}}, HitsAddend: wrapperspb.UInt64(math.MaxUint64)}}}, "hits_addend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := r.client.ShouldRateLimit(ctx, tc.req)
			st, _ := status.FromError(err)
			if st.Code() != codes.InvalidArgument && st.Code() != codes.ResourceExhausted {
				t.Fatalf("error %v, want INVALID_ARGUMENT", err)
			}
			if st.Code() == codes.InvalidArgument && !strings.Contains(st.Message(), tc.want) {
				t.Errorf("message %q does not name %q", st.Message(), tc.want)
			}
		})
	}
	// A value just under the bound is fine, and long keys are shortened.
	if got, _ := r.call(t, "messaging", 0, desc("to_number="+strings.Repeat("9", rls.MaxEntryValueLen))); got != "OK: OK" {
		t.Errorf("a long value: %s", got)
	}
	if got, _ := r.call(t, "messaging", 0, desc("to_number=1")); got != "OK: OK" {
		t.Errorf("after bad requests: %s", got)
	}
}

// TestHealthAndNoConfig: NOT_SERVING and UNAVAILABLE until a configuration
// is loaded, SERVING after.
func TestHealthAndNoConfig(t *testing.T) { eachTransport(t, testHealthAndNoConfig) }

func testHealthAndNoConfig(t *testing.T, tr rls.Transport) {
	r := newRig(t, "", withTransport(tr))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := healthpb.NewHealthClient(r.conn)
	res, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || res.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health before a configuration: %v %v", res, err)
	}
	_, err = r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{desc("k=v")}})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("call before a configuration: %v, want UNAVAILABLE", err)
	}
	c, err := rls.Parse(rls.Doc{Name: "x.yaml", Data: []byte(messagingYAML)})
	if err != nil {
		t.Fatal(err)
	}
	r.srv.SetConfig(c)
	res, err = h.Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health after: %v %v", res, err)
	}
}

// TestMetrics: per domain and descriptor, like envoy's statistics.
func TestMetrics(t *testing.T) { eachTransport(t, testMetrics) }

func testMetrics(t *testing.T, tr rls.Transport) {
	r := newRig(t, messagingYAML, withTransport(tr))
	for range 3 {
		r.call(t, "messaging", 0, desc("message_type=marketing", "to_number=1"))
	}
	r.call(t, "messaging", 0, desc("to_number=7"))
	var b bytes.Buffer
	r.node.MetricsSet().WritePrometheus(&b)
	out := b.String()
	for _, want := range []string{
		`sluice_rls_total_hits{domain="messaging",descriptor="message_type_marketing.to_number"} 3`,
		`sluice_rls_over_limit{domain="messaging",descriptor="message_type_marketing.to_number"} 1`,
		`sluice_rls_near_limit{domain="messaging",descriptor="message_type_marketing.to_number"} 1`,
		`sluice_rls_total_hits{domain="messaging",descriptor="to_number_7"} 1`, // detailed_metric
		`sluice_rls_calls_total{code="OK"} 3`,
		`sluice_rls_calls_total{code="OVER_LIMIT"} 1`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Log(out)
	}
}

// TestReload: a changed directory is reloaded; an invalid one is refused
// whole and the last good configuration stays.
func TestReload(t *testing.T) { eachTransport(t, testReload) }

func testReload(t *testing.T, tr rls.Transport) {
	r := newRig(t, "", withTransport(tr))
	dir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	write("b.yml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	write(".hidden.yaml", "not: [valid")
	rl := rls.NewReloader(r.srv, dir)
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	if got := r.srv.Config().Domains(); len(got) != 2 {
		t.Fatalf("domains %v", got)
	}
	if got, _ := r.call(t, "a", 0, desc("k=1")); got != "OK: OK" {
		t.Fatal(got)
	}
	if got, _ := r.call(t, "a", 0, desc("k=1")); got != "OVER: OVER" {
		t.Fatal(got)
	}
	if rl.Check() {
		t.Fatal("reloaded an unchanged directory")
	}
	// Invalid: refused whole.
	write("b.yml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	if rl.Check() {
		t.Fatal("installed an invalid configuration")
	}
	if got, _ := r.call(t, "b", 0, desc("k=1")); got != "OK: OK" {
		t.Fatalf("the last good configuration is gone: %s", got)
	}
	// Valid again, with a higher limit for a: a's counts are kept only for
	// unchanged limits (here changed: its window starts afresh).
	write("b.yml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	write("a.yaml", "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1}\n  - key: j\n    rate_limit: {unit: hour, requests_per_unit: 1}\n")
	if !rl.Check() {
		t.Fatal("did not reload a changed directory")
	}
	if got, _ := r.call(t, "a", 0, desc("k=1")); got != "OVER: OVER" {
		t.Errorf("an unchanged limit lost its count on reload: %s", got)
	}
	if got, _ := r.call(t, "a", 0, desc("j=1")); got != "OK: OK" {
		t.Errorf("new descriptor: %s", got)
	}
	for range 5 {
		r.call(t, "b", 0, desc("k=2"))
	}
	if got, _ := r.call(t, "b", 0, desc("k=2")); got != "OVER: OVER" {
		t.Errorf("b's new limit of 5: %s", got)
	}
}

// TestLeanHealthWatch: TransportLean serves no streaming call: the health
// service's Watch is UNIMPLEMENTED (grpc-go's transport serves it).
func TestLeanHealthWatch(t *testing.T) {
	r := newRig(t, messagingYAML, withTransport(rls.TransportLean))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := healthpb.NewHealthClient(r.conn).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err == nil {
		_, err = w.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("Watch: %v, want UNIMPLEMENTED", err)
	}
}
