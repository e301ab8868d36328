package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/node/rls"
)

// TestEnvoyFieldsAccepted: every field envoyproxy/ratelimit accepts (its
// validKeys), each where envoy reads it, loads with no warning, and so
// does testdata/envoy/config (a directory in the shapes of envoy's own
// integration test directory).
func TestEnvoyFieldsAccepted(t *testing.T) {
	const yml = `
domain: all
descriptors:
  - key: route
    value: api/*
    share_threshold: true
    value_to_metric: true
    descriptors:
      - key: user
        detailed_metric: true
        shadow_mode: true
        quota_mode: true
        metadata:
          team: {name: edge, ids: [1, 2.5, "x"]}
          enabled: yes
        rate_limit:
          name: per-user
          replaces: [{name: other}]
          unit: minute
          requests_per_unit: 5
  - key: free
    rate_limit: {unlimited: true}
`
	c, err := rls.Parse(rls.Doc{Name: "all.yaml", Data: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %q", w)
	}
	l := c.Limits()[0]
	if !l.Shadow || !l.Quota || l.Name != "per-user" || len(l.Replaces) != 1 || l.Metadata == nil {
		t.Errorf("limit %+v: want shadow, quota, name, replaces, metadata", l)
	}
	if got := l.Metadata.Fields["enabled"].GetBoolValue(); !got {
		t.Errorf("metadata enabled: yes: %v, want true (YAML 1.1, as envoy reads it)", l.Metadata.Fields["enabled"])
	}
	if ids := l.Metadata.Fields["team"].GetStructValue().Fields["ids"].GetListValue().GetValues(); len(ids) != 3 || ids[1].GetNumberValue() != 2.5 || ids[2].GetStringValue() != "x" {
		t.Errorf("metadata team.ids: %v", ids)
	}
	dc, err := rls.Load(filepath.Join("testdata", "envoy", "config"))
	if err != nil {
		t.Fatal(err)
	}
	if w := dc.Warnings(); len(w) != 0 {
		t.Errorf("testdata/envoy/config warnings: %q", w)
	}
}

// TestEnvoyFieldsIgnored: what envoyproxy/ratelimit accepts but ignores
// (one of its fields where it means nothing, a field given twice, a
// requests_per_unit left out) loads with one warning naming the field, and
// counts as envoy counts it.
func TestEnvoyFieldsIgnored(t *testing.T) {
	for _, tc := range []struct {
		name, yml string
		warn      []string // all in the one warning
		check     func(t *testing.T, c *rls.Config)
	}{
		{"shadow_mode inside rate_limit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: true}",
			[]string{"f.yaml:4", "descriptor a", "rate_limit.shadow_mode", "belongs to the descriptor"},
			func(t *testing.T, c *rls.Config) {
				if c.Limits()[0].Shadow {
					t.Error("the limit is in shadow mode; envoy ignores shadow_mode in rate_limit")
				}
			}},
		{"unit on a descriptor", "domain: d\ndescriptors:\n  - key: a\n    unit: second", []string{"descriptor a", "unit", "belongs in rate_limit"}, nil},
		{"a field of envoy's at the top", "domain: d\nname: x\ndescriptors: []", []string{"f.yaml:2", "name", "ignored"}, nil},
		{"a replaces entry's other field", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: b, unit: x}]}",
			[]string{"rate_limit.replaces.unit"}, nil},
		{"requests_per_unit left out", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}", []string{"rate_limit.requests_per_unit", "every request over"},
			func(t *testing.T, c *rls.Config) {
				if l := c.Limits()[0]; l.RequestsPerUnit != 0 || l.Rule != "" {
					t.Errorf("limit %+v, want requests_per_unit 0", l)
				}
			}},
		{"unlimited with requests_per_unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, requests_per_unit: 5}", []string{"rate_limit.unlimited", "ignored"},
			func(t *testing.T, c *rls.Config) {
				if !c.Limits()[0].Unlimited {
					t.Error("not unlimited")
				}
			}},
		{"a field given twice", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, requests_per_unit: 7}", []string{"requests_per_unit", "given twice", "the last one counts"},
			func(t *testing.T, c *rls.Config) {
				if l := c.Limits()[0]; l.RequestsPerUnit != 7 {
					t.Errorf("requests_per_unit %d, want the last one, 7", l.RequestsPerUnit)
				}
			}},
		{"quota_mode without rate_limit", "domain: d\ndescriptors:\n  - key: a\n    quota_mode: true", []string{"quota_mode", "no effect"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := rls.Parse(rls.Doc{Name: "f.yaml", Data: []byte(tc.yml)})
			if err != nil {
				t.Fatal(err)
			}
			w := c.Warnings()
			if len(w) != 1 {
				t.Fatalf("warnings %q, want one", w)
			}
			for _, s := range tc.warn {
				if !strings.Contains(w[0], s) {
					t.Errorf("warning %q lacks %q", w[0], s)
				}
			}
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// TestEnvoyReadsYAMLAsEnvoy: YAML as envoyproxy/ratelimit's library reads
// it: YAML 1.1 booleans, merge keys, a null value (no value).
func TestEnvoyReadsYAMLAsEnvoy(t *testing.T) {
	const yml = `
domain: d
descriptors:
  - key: a
    shadow_mode: yes
    rate_limit: &lim {unit: minute, requests_per_unit: 3}
  - key: b
    value:
    rate_limit:
      <<: *lim
      requests_per_unit: 4
`
	c, err := rls.Parse(rls.Doc{Name: "f.yaml", Data: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	ls := c.Limits()
	if !ls[0].Shadow {
		t.Error("shadow_mode: yes is not true")
	}
	if ls[1].Period.Minutes() != 1 || ls[1].RequestsPerUnit != 4 || ls[1].StatKey != "b" {
		t.Errorf("the merged limit: %+v, want a minute, 4, key-only b", ls[1])
	}
	if len(c.Warnings()) != 0 {
		t.Errorf("warnings %q", c.Warnings())
	}
}

// TestEnvoyRefusals: what envoyproxy/ratelimit refuses, Sluice refuses,
// naming the field; a reload to such a file keeps the last good
// configuration.
func TestEnvoyRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, yml string
		want      []string
	}{
		{"an unknown field", "domain: d\ndescriptors:\n  - key: a\n    limit: 1", []string{"f.yaml:4", "limit: unknown field"}},
		{"an unknown field inside an ignored one", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, shadow_mode: {x: 1}}", []string{"rate_limit.shadow_mode.x: unknown field"}},
		{"a list of scalars inside an ignored field", "domain: d\ndescriptors:\n  - key: a\n    unit: [a]", []string{"unit", "a list of anything but mappings"}},
		{"a number with a fraction", "domain: d\ndescriptors:\n  - key: a\n    value: 1.5", []string{"value", "a number with a fraction"}},
		{"share_threshold without a wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true", []string{"descriptor a_b", "share_threshold", "wildcard"}},
		{"replaces naming itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {name: x, unit: second, requests_per_unit: 1, replaces: [{name: x}]}", []string{"rate_limit.replaces", "itself"}},
		{"one composite key twice", "domain: d\ndescriptors:\n  - key: a_b\n  - key: a\n    value: b", []string{"duplicate", `"a_b"`}},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: hour}", []string{"rate_limit.unlimited"}},
		{"metadata not a mapping", "domain: d\ndescriptors:\n  - key: a\n    metadata: [x]", []string{"metadata", "mapping"}},
		{"a field name not a string", "domain: d\ndescriptors:\n  - key: a\n    1: x", []string{"must be strings"}},
		{"a quoted yes", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: \"yes\"", []string{"shadow_mode: must be true or false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rls.Parse(rls.Doc{Name: "f.yaml", Data: []byte(tc.yml)})
			if !errors.Is(err, rls.ErrInvalidConfig) {
				t.Fatalf("error %v, want a refusal", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
	r := newRig(t, "")
	dir := t.TempDir()
	good := "domain: d\ndescriptors:\n  - key: a\n    value: b*\n    share_threshold: true\n    rate_limit: {unit: hour, requests_per_unit: 1}\n"
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	rl := rls.NewReloader(r.srv, dir)
	if err := rl.Load(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "d.yaml"), []byte(strings.Replace(good, "b*", "bb", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if rl.Check() {
		t.Fatal("installed a configuration envoy refuses")
	}
	r.call(t, "d", 0, desc("a=b1"))
	if got, _ := r.call(t, "d", 0, desc("a=b2")); got != "OVER: OVER" {
		t.Errorf("the last good configuration (b* shared, 1 an hour): %s", got)
	}
}
