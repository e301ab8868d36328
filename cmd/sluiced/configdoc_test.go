package main

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// helpLine is a setting's line in `sluiced -h`.
var helpLine = regexp.MustCompile(`(?m)^  -(\S+) \(env (\S+), default (.*)\)$`)

// docRow is a setting's row in docs/configuration.md:
// | `SLUICE_X` | `-x` | default | meaning |.
var docRow = regexp.MustCompile("(?m)^\\| `(SLUICE_[A-Z_]+)` \\| `-([a-z-]+)` \\| ([^|]*) \\| ([^|]*) \\|$")

// TestConfigurationDoc: docs/configuration.md has one row per flag of
// `sluiced -h`, with its variable and the default -h prints (`value`, or
// none), and no row of a flag sluiced does not have.
func TestConfigurationDoc(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-h"}, env(nil), &out); code != 0 {
		t.Fatalf("-h: exit %d", code)
	}
	type flagDoc struct{ env, def string }
	help := map[string]flagDoc{}
	for _, m := range helpLine.FindAllStringSubmatch(out.String(), -1) {
		help[m[1]] = flagDoc{m[2], m[3]}
	}
	if len(help) != len(settings()) {
		t.Fatalf("-h lists %d settings, want %d:\n%s", len(help), len(settings()), out.String())
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := docRow.FindAllStringSubmatch(string(doc), -1)
	seen := map[string]bool{}
	for _, m := range rows {
		env, flag, def, meaning := m[1], m[2], strings.TrimSpace(m[3]), strings.TrimSpace(m[4])
		h, ok := help[flag]
		switch {
		case !ok:
			t.Errorf("docs/configuration.md: -%s: no such flag", flag)
			continue
		case seen[flag]:
			t.Errorf("docs/configuration.md: -%s has two rows", flag)
		case env != h.env:
			t.Errorf("docs/configuration.md: -%s: variable %s, -h says %s", flag, env, h.env)
		case h.def == "none" && def != "none", h.def != "none" && def != "`"+h.def+"`":
			t.Errorf("docs/configuration.md: -%s: default %s, -h says %s", flag, def, h.def)
		case meaning == "":
			t.Errorf("docs/configuration.md: -%s: no meaning", flag)
		}
		seen[flag] = true
	}
	for flag := range help {
		if !seen[flag] {
			t.Errorf("docs/configuration.md lacks -%s (a row | `%s` | `-%s` | default | meaning |)", flag, help[flag].env, flag)
		}
	}
	// A row this test cannot read is a row it does not check.
	if n := strings.Count(string(doc), "\n| `SLUICE_"); n != len(rows) {
		t.Errorf("docs/configuration.md: %d rows start with a variable, %d read as | `SLUICE_X` | `-x` | default | meaning |", n, len(rows))
	}
}

// envLine is a variable's line in deploy/sluiced.env.example, commented
// out (its default, or an example when it has none) or set.
var envLine = regexp.MustCompile(`(?m)^(#?)(SLUICE_[A-Z_]+)=(.*)$`)

// TestEnvExample: deploy/sluiced.env.example has every variable once, and
// a variable left commented out shows its default (an example value only
// for one whose default is none).
func TestEnvExample(t *testing.T) {
	b, err := os.ReadFile("../../deploy/sluiced.env.example")
	if err != nil {
		t.Fatal(err)
	}
	lines := map[string][]string{} // variable: [comment mark, value]
	for _, m := range envLine.FindAllStringSubmatch(string(b), -1) {
		if _, dup := lines[m[2]]; dup {
			t.Errorf("sluiced.env.example: %s twice", m[2])
		}
		lines[m[2]] = []string{m[1], m[3]}
	}
	known := map[string]bool{}
	for _, s := range settings() {
		known[s.env] = true
		l, ok := lines[s.env]
		switch {
		case !ok:
			t.Errorf("sluiced.env.example lacks %s (default %q)", s.env, s.def)
		case l[0] == "#" && s.def != "" && l[1] != s.def:
			t.Errorf("sluiced.env.example: #%s=%s, its default is %s", s.env, l[1], s.def)
		}
	}
	for env := range lines {
		if !known[env] {
			t.Errorf("sluiced.env.example: %s: sluiced reads no such variable", env)
		}
	}
}
