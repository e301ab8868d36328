package rls_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/node/rls"
)

// TestConfigErrors: an invalid configuration is refused whole, with a
// message naming the file, the line, the domain, the descriptor path and
// the field.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yml string
		want      []string // all in the message
	}{
		{"empty", "", []string{"f.yaml", "empty file"}},
		{"not yaml", "domain: [", []string{"f.yaml", "not YAML"}},
		{"no domain", "descriptors: []", []string{"domain: required"}},
		{"empty domain", "domain: ''\ndescriptors: []", []string{"domain: required"}},
		{"unknown top field", "domain: d\nfoo: 1", []string{"f.yaml:2", "foo: unknown field"}},
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}", []string{"descriptors: must be a list"}},
		{"no key", "domain: d\ndescriptors:\n  - value: v", []string{`domain "d"`, "key: required"}},
		{"unknown descriptor field", "domain: d\ndescriptors:\n  - key: a\n    vaule: x", []string{"f.yaml:4", "descriptor a: vaule: unknown field"}},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    descriptors:\n      - key: c\n        rate_limit: {unit: fortnight, requests_per_unit: 1}",
			[]string{"f.yaml:7", "descriptor a_b.c:", "rate_limit.unit", "fortnight"}},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {requests_per_unit: 1}", []string{"rate_limit.unit: required"}},
		{"negative", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: -1}", []string{"rate_limit.requests_per_unit"}},
		{"too big", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 99999999999}", []string{"rate_limit.requests_per_unit"}},
		{"unlimited with a unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit: second}", []string{"rate_limit.unlimited"}},
		{"bad bool", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe", []string{"shadow_mode: must be true or false"}},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: b\n  - key: a\n    value: b", []string{"descriptor a_b: value: duplicate"}},
		{"duplicate key-only", "domain: d\ndescriptors:\n  - key: a\n  - key: a", []string{"duplicate"}},
		{"replaces without name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{}]}", []string{"rate_limit.replaces.name: required"}},
		{"bad algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: concurrency}", []string{"rate_limit.algorithm"}},
		{"two documents", "domain: d\n---\ndomain: e", []string{"more than one YAML document"}},
		{"deep", "domain: d\ndescriptors:\n" + deep(20), []string{"nested deeper than"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rls.Parse(rls.Doc{Name: "f.yaml", Data: []byte(tc.yml)})
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, rls.ErrInvalidConfig) {
				t.Errorf("error %v is not ErrInvalidConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
}

func deep(n int) string {
	var b strings.Builder
	for i := range n {
		ind := strings.Repeat("    ", i)
		b.WriteString(ind + "  - key: k\n" + ind + "    descriptors:\n")
	}
	return b.String()
}

// TestLoadDirectory: one domain per file; a domain in two files is refused
// naming both.
func TestLoadDirectory(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("ignored"), 0o644)
	c, err := rls.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Domains(); len(got) != 1 || got[0] != "a" {
		t.Fatalf("domains %v", got)
	}
	if n := c.Rules().Len(); n != 1 {
		t.Fatalf("%d rules, want 1", n)
	}
	if name := c.Rules().Rules()[0].Name; !strings.HasPrefix(name, "rls.a.k.") {
		t.Errorf("rule name %q", name)
	}
	os.WriteFile(filepath.Join(dir, "b.yaml"), []byte("domain: a\ndescriptors: []\n"), 0o644)
	_, err = rls.Load(dir)
	if err == nil || !strings.Contains(err.Error(), "b.yaml") || !strings.Contains(err.Error(), "a.yaml") {
		t.Fatalf("duplicate domain: %v", err)
	}
}

// FuzzParse: any input is a Config or an error, never a panic; a Config's
// rules are valid.
func FuzzParse(f *testing.F) {
	f.Add([]byte(messagingYAML))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: b*\n    rate_limit: {unit: year, requests_per_unit: 0, name: x, replaces: [{name: y}]}\n    shadow_mode: true\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - &a {key: a, descriptors: [*a]}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unlimited: true}}\n"))
	f.Add([]byte("domain: d\ndescriptors:\n  - key: a\n    value: x*y*z\n    share_threshold: yes\n    quota_mode: on\n    value_to_metric: true\n    metadata: {a: [1, 2.5, {b: ~}], <<: {c: d}}\n    rate_limit: &r {unit: minute, shadow_mode: true}\n  - key: b\n    rate_limit: {<<: *r, requests_per_unit: 3, requests_per_unit: 4}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := rls.Parse(rls.Doc{Name: "f.yaml", Data: data})
		if err != nil {
			return
		}
		for _, l := range c.Limits() {
			if l.Rule != "" && c.Rules().Get(l.Rule) == nil {
				t.Fatalf("limit %s has no rule", l.Rule)
			}
		}
	})
}
