package rls_test

import (
	"bytes"
	"strings"
	"testing"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/node/rls"
)

// TestEnvoyMetricNames: the descriptor label of the per-descriptor metrics
// is the name envoyproxy/ratelimit gives its statistics (less the domain)
// with detailed_metric and value_to_metric, wildcards and share_threshold.
func TestEnvoyMetricNames(t *testing.T) {
	const yml = `
domain: names
descriptors:
  - key: site
    value_to_metric: true
    descriptors:
      - key: verb
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 50}
      - key: lang
        rate_limit: {unit: minute, requests_per_unit: 50}
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - key: resource
            rate_limit: {unit: minute, requests_per_unit: 50}
  - key: service
    value: svc/*
    share_threshold: true
    descriptors:
      - key: endpoint
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 50}
  - key: path
    value: p/*
    descriptors:
      - key: kind
        value: k*
        rate_limit: {unit: minute, requests_per_unit: 50}
  - key: plain
    value: x
    descriptors:
      - key: id
        rate_limit: {unit: minute, requests_per_unit: 50}
  - key: empty
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 50}
`
	r := newRig(t, yml)
	for _, tc := range []struct {
		entries []string
		want    string
	}{
		// detailed_metric (which overrides value_to_metric): every
		// entry's key_value.
		{[]string{"site=s1", "verb=GET"}, "site_s1.verb_GET"},
		// value_to_metric on the key-only parent, not on the leaf.
		{[]string{"site=s1", "lang=en"}, "site_s1.lang"},
		// value_to_metric on a wildcard: the request's value.
		{[]string{"user=alice", "action=readfile", "resource=docs"}, "user_alice.action_readfile.resource"},
		// detailed_metric under a share_threshold wildcard: its pattern.
		{[]string{"service=svc/api", "endpoint=users"}, "service_svc/*.endpoint_users"},
		// no flags: the patterns and the configured values.
		{[]string{"path=p/1", "kind=kx"}, "path_p/*.kind_k*"},
		{[]string{"plain=x", "id=7"}, "plain_x.id"},
		// detailed_metric on a key-only descriptor: its value.
		{[]string{"empty=v"}, "empty_v"},
	} {
		r.call(t, "names", 0, desc(tc.entries...))
		var b bytes.Buffer
		r.node.MetricsSet().WritePrometheus(&b)
		if series := `sluice_rls_total_hits{domain="names",descriptor="` + tc.want + `"} 1`; !strings.Contains(b.String(), series) {
			t.Errorf("%v: no series %s in\n%s", tc.entries, series, grepLines(b.String(), `domain="names"`))
		}
	}
}

func grepLines(s, sub string) string {
	var out strings.Builder
	for line := range strings.Lines(s) {
		if strings.Contains(line, sub) {
			out.WriteString(line)
		}
	}
	return out.String()
}

// TestEnvoyDynamicMetadata: with ServerConfig.DynamicMetadata, the
// response's dynamic_metadata is envoyproxy/ratelimit's (with its
// RESPONSE_DYNAMIC_METADATA): the domain, each descriptor's entries and
// hits_addend, the request's hits_addend, and the metadata of the limits
// of the descriptors not over them, merged (the first of a key counts,
// structs merged). Without it, none.
func TestEnvoyDynamicMetadata(t *testing.T) {
	const yml = `
domain: meta
descriptors:
  - key: plan
    metadata: {owner: billing, limits: {plan: monthly}}
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: edge
    metadata: {owner: edge, limits: {edge: hourly}}
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: free
    metadata: {owner: nobody}
    rate_limit: {unlimited: true}
`
	eachTransport(t, func(t *testing.T, tr rls.Transport) {
		r := newRig(t, yml, withTransport(tr), func(c *rls.ServerConfig) { c.DynamicMetadata = true })
		entries := func(es ...string) *structpb.Value {
			vs := make([]any, len(es))
			for i, e := range es {
				vs[i] = e
			}
			return mustValue(t, map[string]any{"entries": vs})
		}
		want := func(meta map[string]any, ds ...*structpb.Value) *structpb.Struct {
			s := &structpb.Struct{Fields: map[string]*structpb.Value{
				"domain":      structpb.NewStringValue("meta"),
				"descriptors": structpb.NewListValue(&structpb.ListValue{Values: ds}),
				"hitsAddend":  structpb.NewNumberValue(2),
			}}
			if meta != nil {
				s.Fields["metadata"] = mustValue(t, meta)
			}
			return s
		}
		call := func() *rlsv3.RateLimitResponse {
			ds := descs([]string{"plan=a", "+1"}, []string{"edge=a"}, []string{"free=a"})
			_, resp := r.call(t, "meta", 2, ds...)
			return resp
		}
		withHits := mustValue(t, map[string]any{"entries": []any{"plan=a"}, "hitsAddend": 1})
		first := want(map[string]any{"owner": "billing", "limits": map[string]any{"plan": "monthly", "edge": "hourly"}},
			withHits, entries("edge=a"), entries("free=a"))
		if got := call().GetDynamicMetadata(); !proto.Equal(got, first) {
			t.Errorf("dynamic_metadata:\n got: %s\nwant: %s", prototext.Format(got), prototext.Format(first))
		}
		// plan is over now: its metadata is left out.
		second := want(map[string]any{"owner": "edge", "limits": map[string]any{"edge": "hourly"}},
			withHits, entries("edge=a"), entries("free=a"))
		if got := call().GetDynamicMetadata(); !proto.Equal(got, second) {
			t.Errorf("dynamic_metadata with plan over:\n got: %s\nwant: %s", prototext.Format(got), prototext.Format(second))
		}
		// The configuration's metadata is not changed by the merges.
		if got := call().GetDynamicMetadata(); !proto.Equal(got, second) {
			t.Errorf("dynamic_metadata, third call:\n got: %s\nwant: %s", prototext.Format(got), prototext.Format(second))
		}
	})
	r := newRig(t, yml)
	if _, resp := r.call(t, "meta", 0, desc("plan=a")); resp.DynamicMetadata != nil {
		t.Errorf("dynamic_metadata without the option: %v", resp.DynamicMetadata)
	}
}

func mustValue(t *testing.T, v any) *structpb.Value {
	t.Helper()
	x, err := structpb.NewValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return x
}
