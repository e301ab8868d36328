package rules

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

const fullFile = `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 100
    period: 1m
    burst: 150
    key: header:X-API-Key
    match: {path_prefix: /api, methods: [get, POST], host: "*.Example.com"}
    on_store_failure: open
    shadow: true
    hot: {threshold: 20000, split: 3}
    overrides:
      - {key: "ent-*", limit: 10000}
      - {key: "ent-big", limit: 1}
      - {key: "slow-?", limit: 10, burst: 20, period: 1h}
  - name: login
    algorithm: sliding_log
    limit: 3
    period: 1m
    min_interval: 1s
    key: ip
  - name: combo
    algorithm: sliding_window
    limit: 10
    period: 10s
    key: "jwt:sub, query:tenant ,method"
    descriptor: user,tenant
  - name: explicit-only
    algorithm: concurrency
    limit: 2
    period: 30s
`

func TestParseFull(t *testing.T) {
	s, err := Parse([]byte(fullFile))
	if err != nil {
		t.Fatal(err)
	}
	if s.Len() != 4 {
		t.Fatalf("got %d rules", s.Len())
	}
	r := s.Get("per-key")
	wantPolicy := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Minute, Burst: 150, OnFailure: lease.FailOpen}
	if r.Policy != wantPolicy {
		t.Errorf("policy = %+v, want %+v", r.Policy, wantPolicy)
	}
	if !reflect.DeepEqual(r.Sources, []Source{{SourceHeader, "X-API-Key"}}) || !reflect.DeepEqual(r.Descriptors, []string{"x-api-key"}) {
		t.Errorf("sources %v descriptors %v", r.Sources, r.Descriptors)
	}
	if !reflect.DeepEqual(r.Match, Route{PathPrefix: "/api", Methods: []string{"GET", "POST"}, Host: "*.example.com"}) {
		t.Errorf("match = %+v", r.Match)
	}
	if !r.Shadow || r.Hot != (Hot{Threshold: 20000, Split: 3}) {
		t.Errorf("shadow %v hot %+v", r.Shadow, r.Hot)
	}
	if len(r.Overrides) != 3 {
		t.Fatalf("overrides = %+v", r.Overrides)
	}
	l := s.Get("login")
	if l.Policy.MinInterval != time.Second || l.Policy.Algorithm != lease.SlidingLog || l.Policy.OnFailure != lease.FailLocal {
		t.Errorf("login policy = %+v", l.Policy)
	}
	c := s.Get("combo")
	if !reflect.DeepEqual(c.Sources, []Source{{SourceJWT, "sub"}, {SourceQuery, "tenant"}, {SourceMethod, ""}}) ||
		!reflect.DeepEqual(c.Descriptors, []string{"user", "tenant"}) {
		t.Errorf("combo sources %v descriptors %v", c.Sources, c.Descriptors)
	}
	if c.Spec.Key != "jwt:sub,query:tenant,method" {
		t.Errorf("combo spec key = %q", c.Spec.Key)
	}
	e := s.Get("explicit-only")
	if len(e.Sources) != 0 || len(e.Descriptors) != 0 {
		t.Errorf("explicit-only sources %v descriptors %v", e.Sources, e.Descriptors)
	}
	if s.Get("nope") != nil {
		t.Error("Get of a missing rule is not nil")
	}
	names := []string{}
	for _, r := range s.Rules() {
		names = append(names, r.Name)
	}
	if strings.Join(names, " ") != "per-key login combo explicit-only" {
		t.Errorf("order = %v", names)
	}
}

func TestPolicyFor(t *testing.T) {
	s, err := Parse([]byte(fullFile))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Get("per-key")
	base := r.Policy
	tests := []struct {
		key                string
		limit, burst       int64
		period             time.Duration
		failure            lease.FailureMode
		wantDefaultsToBase bool
	}{
		{key: "user-1", wantDefaultsToBase: true},
		{key: "ent-acme", limit: 10000, burst: 0, period: time.Minute},
		{key: "ent-big", limit: 10000, burst: 0, period: time.Minute}, // first match wins
		{key: "ent-", limit: 10000, burst: 0, period: time.Minute},
		{key: "slow-é", limit: 10, burst: 20, period: time.Hour},
		{key: "slow-12", wantDefaultsToBase: true},
		{key: "xent-a", wantDefaultsToBase: true},
	}
	for _, tt := range tests {
		got := r.PolicyFor(tt.key)
		want := base
		if !tt.wantDefaultsToBase {
			want.Limit, want.Burst, want.Period = tt.limit, tt.burst, tt.period
		}
		if got != want {
			t.Errorf("PolicyFor(%q) = %+v, want %+v", tt.key, got, want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = r.PolicyFor("ent-acme") }); n != 0 {
		t.Errorf("PolicyFor allocates %v times", n)
	}
	plain := s.Get("login")
	if n := testing.AllocsPerRun(100, func() { _ = plain.PolicyFor("10.0.0.1") }); n != 0 {
		t.Errorf("PolicyFor without overrides allocates %v times", n)
	}
}

func TestGlob(t *testing.T) {
	tests := []struct {
		p, s string
		want bool
	}{
		{"*", "", true},
		{"*", "a/b/c", true},
		{"a*", "a/b", true},
		{"a*c", "abc", true},
		{"a*c", "abcd", false},
		{"a*b*c", "a-b-x-c", true},
		{"a*b*c", "a-c-b", false},
		{"?", "é", true},
		{"?", "ab", false},
		{"a?c", "a/c", true},
		{"a\\*", "a*", true},
		{"a\\*", "ab", false},
		{"\\?", "?", true},
		{"*.example.com", "api.example.com", true},
		{"*.example.com", "example.com", false},
		{"ent-*-eu", "ent-acme-eu", true},
		{"ent-*-eu", "ent-acme-us", false},
		{"**x", "aax", true},
		{"", "", true},
	}
	for _, tt := range tests {
		if got := globMatch(tt.p, tt.s); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tt.p, tt.s, got, tt.want)
		}
	}
	for _, bad := range []string{"", "a\\", "[ab]", "x\xff"} {
		if globMsg(bad) == "" {
			t.Errorf("globMsg(%q) accepts", bad)
		}
	}
}

// rule returns a one-rule file with body (indented YAML lines) under
// "- name: r".
func rule(lines ...string) string {
	return "rules:\n  - name: r\n    " + strings.Join(lines, "\n    ") + "\n"
}

func TestParseErrors(t *testing.T) {
	tb := []string{"algorithm: token_bucket", "limit: 10", "period: 1s"}
	with := func(extra ...string) string { return rule(append(append([]string{}, tb...), extra...)...) }
	tests := []struct {
		name, file       string
		rule, field, msg string
	}{
		{"yaml syntax", "rules: [", "", "", "invalid YAML"},
		{"not a mapping", "- a\n- b\n", "", "", "mapping with a rules"},
		{"unknown top-level", "rule: []\n", "", "rule", "unknown field"},
		{"rules not a list", "rules: {a: 1}\n", "", "rules", "must be a list"},
		{"rule not a mapping", "rules: [1]\n", "", "", "must be a mapping"},
		{"empty name", "rules:\n  - {algorithm: gcra, limit: 1, period: 1s}\n", "", "name", "required"},
		{"long name", "rules:\n  - {name: " + strings.Repeat("n", 65) + ", algorithm: gcra, limit: 1, period: 1s}\n", "", "name", "longer than 64"},
		{"bad name", "rules:\n  - {name: 'a b', algorithm: gcra, limit: 1, period: 1s}\n", "", "name", "may hold only"},
		{"duplicate name", "rules:\n  - {name: a, algorithm: gcra, limit: 1, period: 1s}\n  - {name: a, algorithm: gcra, limit: 1, period: 1s}\n", "a", "name", "duplicate"},
		{"missing algorithm", rule("limit: 1", "period: 1s"), "r", "algorithm", "required"},
		{"unknown algorithm", rule("algorithm: leaky", "limit: 1", "period: 1s"), "r", "algorithm", "unknown algorithm"},
		{"limit zero", rule("algorithm: gcra", "limit: 0", "period: 1s"), "r", "limit", "> 0"},
		{"limit missing", rule("algorithm: gcra", "period: 1s"), "r", "limit", "> 0"},
		{"limit negative", rule("algorithm: gcra", "limit: -5", "period: 1s"), "r", "limit", "> 0"},
		{"limit huge", rule("algorithm: gcra", "limit: 1099511627777", "period: 1s"), "r", "limit", "≤"},
		{"limit not int", rule("algorithm: gcra", "limit: ten", "period: 1s"), "r", "limit", "integer"},
		{"limit float", rule("algorithm: gcra", "limit: 1.5", "period: 1s"), "r", "limit", "integer"},
		{"period missing", rule("algorithm: gcra", "limit: 1"), "r", "period", "required"},
		{"period bad", rule("algorithm: gcra", "limit: 1", "period: 60"), "r", "period", "duration"},
		{"period tiny", rule("algorithm: gcra", "limit: 1", "period: 500us"), "r", "period", "≥ 1ms"},
		{"period huge", rule("algorithm: gcra", "limit: 1", "period: 9000h"), "r", "period", "8760h"},
		{"burst on fixed_window", rule("algorithm: fixed_window", "limit: 1", "period: 1s", "burst: 5"), "r", "burst", "only token_bucket and gcra"},
		{"burst negative", with("burst: -1"), "r", "burst", "between 0"},
		{"min_interval on gcra", rule("algorithm: gcra", "limit: 1", "period: 1s", "min_interval: 1ms"), "r", "min_interval", "only sliding_log"},
		{"min_interval > period", rule("algorithm: sliding_log", "limit: 1", "period: 1s", "min_interval: 2s"), "r", "min_interval", "between 0 and period"},
		{"min_interval bad", rule("algorithm: sliding_log", "limit: 1", "period: 1s", "min_interval: soon"), "r", "min_interval", "duration"},
		{"bad key source", with("key: cookie:x"), "r", "key", "not a key source"},
		{"empty key part", with("key: 'ip,'"), "r", "key", "not a key source"},
		{"header without name", with("key: 'header:'"), "r", "key", "header name"},
		{"ip with name", with("key: ip:x"), "r", "key", "takes no name"},
		{"bad descriptor", with("descriptor: 'a b'"), "r", "descriptor", "descriptor name"},
		{"dup descriptor", with("descriptor: a,a"), "r", "descriptor", "twice"},
		{"bad on_store_failure", with("on_store_failure: maybe"), "r", "on_store_failure", "unknown on_store_failure"},
		{"on_missing_key without key", with("on_missing_key: deny"), "r", "on_missing_key", "needs a key"},
		{"on_missing_key fallback without key", with("on_missing_key: ip"), "r", "on_missing_key", "needs a key"},
		{"bad on_missing_key", with("key: ip", "on_missing_key: allow"), "r", "on_missing_key", "want skip, deny or key sources"},
		{"bad on_missing_key source", with("key: ip", `on_missing_key: "header:"`), "r", "on_missing_key", "header:NAME"},
		{"on_missing_key not a string", with("key: ip", "on_missing_key: [deny]"), "r", "on_missing_key", "must be a string"},
		{"shadow not bool", with("shadow: yes"), "r", "shadow", "true or false"},
		{"hot threshold negative", with("hot: {threshold: -1}"), "r", "hot.threshold", "≥ 0"},
		{"hot split negative", with("hot: {split: -1}"), "r", "hot.split", "between 0"},
		{"hot unknown", with("hot: {limit: 1}"), "r", "hot.limit", "unknown field"},
		{"match prefix", with("match: {path_prefix: api}"), "r", "match.path_prefix", "begin with /"},
		{"match method", with("match: {methods: ['G T']}"), "r", "match.methods[0]", "not an HTTP method"},
		{"match host glob", with("match: {host: '[a]'}"), "r", "match.host", "character classes"},
		{"match unknown", with("match: {path: /x}"), "r", "match.path", "unknown field"},
		{"override bad glob", with("overrides: [{key: 'a\\', limit: 1}]"), "r", "overrides[0].key", "lone"},
		{"override empty glob", with("overrides: [{limit: 1}]"), "r", "overrides[0].key", "empty glob"},
		{"override limit", with("overrides: [{key: a, limit: 1}, {key: b, limit: 0}]"), "r", "overrides[1].limit", "> 0"},
		{"override period", with("overrides: [{key: a, limit: 1, period: x}]"), "r", "overrides[0].period", "duration"},
		{"override burst", rule("algorithm: fixed_window", "limit: 1", "period: 1s", "overrides: [{key: a, limit: 1, burst: 2}]"), "r", "overrides[0].burst", "only token_bucket"},
		{"override unknown", with("overrides: [{key: a, limit: 1, tier: gold}]"), "r", "overrides[0].tier", "unknown field"},
		{"overrides not list", with("overrides: {key: a}"), "r", "overrides", "must be a list"},
		{"unknown field", with("limits: 5"), "r", "limits", "unknown field"},
		{"match not a mapping", with("match: /api"), "r", "match", "must be a mapping"},
		{"hot not a mapping", with("hot: 5"), "r", "hot", "must be a mapping"},
		{"override not a mapping", with("overrides: [5]"), "r", "overrides[0]", "must be a mapping"},
		{"methods not a list", with("match: {methods: {a: b}}"), "r", "match.methods", "list of methods"},
		{"hot threshold string", with("hot: {threshold: lots}"), "r", "hot.threshold", "number"},
		{"too many sources", with("key: " + strings.Repeat("ip,", 16) + "ip"), "r", "key", "more than 16"},
		{"duplicate field", with("limit: 5"), "r", "limit", "given twice"},
		{"string is a map", with("key: {a: b}"), "r", "key", "must be a string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.file))
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrInvalid) {
				t.Fatalf("Parse = %v, want an *Error", err)
			}
			if e.Rule != tt.rule || e.Field != tt.field || !strings.Contains(e.Msg, tt.msg) {
				t.Fatalf("Parse = rule %q field %q msg %q (%v)\nwant rule %q field %q msg containing %q", e.Rule, e.Field, e.Msg, err, tt.rule, tt.field, tt.msg)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	_, err := Parse([]byte(rule("algorithm: gcra", "limit: 1", "period: 100us")))
	// The line of the offending value (period: on line 5), not the rule's.
	if got, want := err.Error(), `rule "r": period: must be ≥ 1ms (line 5)`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	_, err = Parse([]byte("rules:\n  - {algorithm: gcra}\n"))
	if got, want := err.Error(), `rules[0]: name: required (line 2)`; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestParseBounds(t *testing.T) {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := range MaxRules + 1 {
		fmt.Fprintf(&b, "  - {name: r%d, algorithm: gcra, limit: 1, period: 1s}\n", i)
	}
	_, err := Parse([]byte(b.String()))
	var e *Error
	if !errors.As(err, &e) || e.Field != "rules" || !strings.Contains(e.Msg, "more than 10000") {
		t.Fatalf("Parse(10001 rules) = %v", err)
	}
	_, err = Parse(make([]byte, MaxFileBytes+1))
	if !errors.As(err, &e) || !strings.Contains(e.Msg, "4 MiB") {
		t.Fatalf("Parse(4 MiB + 1) = %v", err)
	}
}

// TestParseEmpty: only an explicit "rules: []" is an empty set; a file
// that holds no rules without saying so (emptied, comments only, cut
// short) is refused, naming the field rules (finding 4 of issue 9).
func TestParseEmpty(t *testing.T) {
	for _, f := range []string{"rules: []\n", "# on purpose\nrules: []\n"} {
		s, err := Parse([]byte(f))
		if err != nil || s.Len() != 0 {
			t.Errorf("Parse(%q) = %v, %v; want an empty set", f, s, err)
		}
	}
	for _, f := range []string{"", "\n# nothing\n", "rules:\n", "null\n", "{}\n", "# rules\nrules:\n# - name: a\n"} {
		s, err := Parse([]byte(f))
		var e *Error
		if !errors.As(err, &e) || e.Field != "rules" || !strings.Contains(e.Msg, "rules: []") {
			t.Errorf("Parse(%q) = %v, %v; want an error on field rules saying how to ask for none", f, s, err)
		}
	}
	// A file cut short at any byte never loads as fewer rules than it
	// names: it is either refused or loads every rule it still holds.
	full := "rules:\n  - name: a\n    algorithm: gcra\n    limit: 1\n    period: 1s\n  - {name: b, algorithm: gcra, limit: 2, period: 1s}\n"
	for i := range len(full) {
		s, err := Parse([]byte(full[:i]))
		if err == nil && s.Len() == 0 {
			t.Errorf("Parse(first %d bytes) = an empty set", i)
		}
	}
}

// TestErrorLineOfValue: an error names the line of the offending value,
// for top-level, nested, list and override fields, and for a duplicate
// name (the line of the second name).
func TestErrorLineOfValue(t *testing.T) {
	tests := []struct {
		name, file, field string
		line              int
	}{
		{"limit", "rules:\n  - name: r\n    algorithm: gcra\n    limit: -1\n    period: 1s\n", "limit", 4},
		{"algorithm", "rules:\n  - name: r\n    limit: 1\n    algorithm: nope\n    period: 1s\n", "algorithm", 4},
		{"key", "rules:\n  - name: r\n    algorithm: gcra\n    limit: 1\n    period: 1s\n\n    key: cookie:x\n", "key", 7},
		{"match.path_prefix", "rules:\n  - name: r\n    algorithm: gcra\n    limit: 1\n    period: 1s\n    match:\n      host: a\n      path_prefix: api\n", "match.path_prefix", 8},
		{"match.methods[1]", "rules:\n  - name: r\n    algorithm: gcra\n    limit: 1\n    period: 1s\n    match:\n      methods:\n        - GET\n        - \"G T\"\n", "match.methods[1]", 9},
		{"overrides[1].period", "rules:\n  - name: r\n    algorithm: gcra\n    limit: 1\n    period: 1s\n    overrides:\n      - {key: a, limit: 2}\n      - key: b\n        limit: 3\n        period: soon\n", "overrides[1].period", 10},
		{"override without limit", "rules:\n  - name: r\n    algorithm: gcra\n    limit: 1\n    period: 1s\n    overrides:\n      - {key: a, limit: 2}\n      - {key: b}\n", "overrides[1].limit", 8},
		{"missing period", "rules:\n  - name: r\n    algorithm: gcra\n    limit: 1\n", "period", 2},
		{"duplicate name", "rules:\n  - {name: r, algorithm: gcra, limit: 1, period: 1s}\n  - algorithm: gcra\n    limit: 1\n    period: 1s\n    name: r\n", "name", 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.file))
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse = %v, want an *Error", err)
			}
			if e.Field != tt.field || e.Line != tt.line {
				t.Fatalf("Parse = %v (field %q line %d), want field %q line %d", err, e.Field, e.Line, tt.field, tt.line)
			}
		})
	}
}

func TestAliases(t *testing.T) {
	f := `
rules:
  - &base {name: a, algorithm: gcra, limit: 1, period: 1s}
  - name: b
    algorithm: gcra
    limit: 2
    period: 1s
    overrides: &ov [{key: "x*", limit: 5}]
  - {name: c, algorithm: gcra, limit: 3, period: 1s, overrides: *ov}
`
	s, err := Parse([]byte(f))
	if err != nil {
		t.Fatal(err)
	}
	if s.Get("c").PolicyFor("xy").Limit != 5 {
		t.Fatal("alias not followed")
	}
}

func TestSetEditing(t *testing.T) {
	s, err := Parse([]byte(fullFile))
	if err != nil {
		t.Fatal(err)
	}
	// Marshal round trip.
	out, err := s.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s2, err := Parse(out)
	if err != nil {
		t.Fatalf("Parse(Marshal) = %v\n%s", err, out)
	}
	if !s.Equal(s2) || !s2.Equal(s) {
		t.Fatalf("round trip differs:\n%s", out)
	}
	// With: replace and add.
	spec := s.Get("login").Spec
	spec.Limit = 5
	s3, err := s.With(spec)
	if err != nil {
		t.Fatal(err)
	}
	s3, err = s3.With(Spec{Name: "new", Algorithm: "gcra", Limit: 1, Period: "1s"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s3.With(Spec{Name: "bad", Algorithm: "gcra", Limit: 0, Period: "1s"}); err == nil {
		t.Fatal("With accepted an invalid rule")
	}
	s3, ok := s3.Without("combo")
	if !ok {
		t.Fatal("Without(combo) = false")
	}
	if _, ok := s3.Without("nope"); ok {
		t.Fatal("Without(nope) = true")
	}
	added, removed, changed := Diff(s, s3)
	if fmt.Sprint(added, removed, changed) != "[new] [combo] [login]" {
		t.Fatalf("Diff = %v %v %v", added, removed, changed)
	}
	if s.Get("login").Policy.Limit != 3 {
		t.Fatal("With modified the original set")
	}
	if s.Equal(s3) {
		t.Fatal("Equal of different sets")
	}
	// Spelling does not matter to Equal.
	a, _ := Parse([]byte(rule("algorithm: gcra", "limit: 1", "period: 60s")))
	b, _ := Parse([]byte(rule("algorithm: gcra", "limit: 1", "period: 1m")))
	if !a.Equal(b) {
		t.Fatal("period 60s != 1m")
	}
	// ParseSpec reads one rule as YAML or JSON.
	for _, body := range []string{`{"name":"j","algorithm":"gcra","limit":4,"period":"1s","key":"ip"}`, "name: j\nalgorithm: gcra\nlimit: 4\nperiod: 1s\nkey: ip\n"} {
		sp, err := ParseSpec([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		r, err := Compile(sp)
		if err != nil || r.Policy.Limit != 4 || r.Sources[0].Kind != SourceIP {
			t.Fatalf("Compile(%s) = %+v, %v", body, r, err)
		}
	}
	if _, err := ParseSpec([]byte(`{"name":"j","limit":"x"}`)); err == nil {
		t.Fatal("ParseSpec accepted limit \"x\"")
	}
}

func TestExampleFile(t *testing.T) {
	s, err := Load("../../deploy/rules.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]lease.Algorithm{
		"per-key": lease.TokenBucket, "login": lease.SlidingLog, "per-ip": lease.GCRA,
		"tenant-minute": lease.FixedWindow, "search-hourly": lease.SlidingWindow, "uploads": lease.Concurrency,
	}
	for name, alg := range want {
		if r := s.Get(name); r == nil || r.Policy.Algorithm != alg {
			t.Errorf("rule %s = %+v, want algorithm %v", name, r, alg)
		}
	}
	pk := s.Get("per-key")
	if pk.Policy.Limit != 5 || pk.Policy.Period != 10*time.Second || pk.Policy.Burst != 5 || len(pk.Overrides) == 0 {
		t.Errorf("per-key = %+v", pk)
	}
	if got := matches(s.MatchDescriptors([]api.Descriptor{{Name: "api_key", Value: "demo"}, {Name: "path", Value: "/api/search/x"}}, nil)); got != "per-key=demo search-hourly=demo|/api/search/x" {
		t.Errorf("descriptor matches = %q", got)
	}
	if l := s.Get("login"); l.Policy.Limit != 3 || l.Policy.MinInterval != time.Second || l.Sources[0].Kind != SourceIP {
		t.Errorf("login = %+v", l)
	}
	if u := s.Get("uploads"); u.Policy.Limit != 2 || u.Policy.Period != 30*time.Second {
		t.Errorf("uploads = %+v", u)
	}
	shadow := 0
	for _, r := range s.Rules() {
		if r.Shadow {
			shadow++
		}
	}
	if shadow == 0 {
		t.Error("no shadow rule")
	}
	if _, err := Load("does-not-exist.yaml"); err == nil {
		t.Error("Load of a missing file succeeded")
	}
}

// TestOnMissingKeyParse: on_missing_key's values, normalized in the Spec
// (skip is the default and written as nothing).
func TestOnMissingKeyParse(t *testing.T) {
	tests := []struct {
		value, spec string
		want        MissingKey
	}{
		{"", "", MissingKey{}},
		{"skip", "", MissingKey{}},
		{"deny", "deny", MissingKey{Action: MissingDeny}},
		{"ip", "ip", MissingKey{Action: MissingFallback, Fallback: []Source{{Kind: SourceIP}}}},
		{" header:X-Real-User , ip", "header:X-Real-User,ip", MissingKey{Action: MissingFallback, Fallback: []Source{{Kind: SourceHeader, Name: "X-Real-User"}, {Kind: SourceIP}}}},
	}
	for _, tt := range tests {
		f := "rules:\n  - {name: r, algorithm: gcra, limit: 1, period: 1s, key: header:X-User, on_missing_key: \"" + tt.value + "\"}\n"
		s, err := Parse([]byte(f))
		if err != nil {
			t.Fatalf("%q: %v", tt.value, err)
		}
		r := s.Get("r")
		if r.Spec.OnMissingKey != tt.spec || r.OnMissingKey.Action != tt.want.Action || len(r.OnMissingKey.Fallback) != len(tt.want.Fallback) {
			t.Fatalf("%q: spec %q, %+v; want %q, %+v", tt.value, r.Spec.OnMissingKey, r.OnMissingKey, tt.spec, tt.want)
		}
		for i, src := range tt.want.Fallback {
			if r.OnMissingKey.Fallback[i] != src {
				t.Errorf("%q: fallback %d = %v, want %v", tt.value, i, r.OnMissingKey.Fallback[i], src)
			}
		}
	}
}
