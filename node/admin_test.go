package node

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/rules"
)

const adminRules = `rules:
  - name: per-key
    algorithm: token_bucket
    limit: 3
    period: 1h
    key: header:X-API-Key
  - name: login
    algorithm: sliding_log
    limit: 2
    period: 1m
    key: ip
`

// adminNode is a Node on a loopback TCP port (the admin guard looks at the
// peer's address), spoken to with net/http.
type adminNode struct {
	t     *testing.T
	n     *Node
	base  string
	token string
	logs  *strings.Builder
}

// newAdminNode starts a node with rules yml ("" = none) and the rule
// source rc; token is its admin token (sent by do unless the request sets
// Authorization).
func newAdminNode(t *testing.T, yml, token string, rc RulesConfig) *adminNode {
	t.Helper()
	clock := testClock()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	mcfg := lease.DefaultConfig()
	mcfg.Now = clock.Now
	mgr := lease.NewManager(store, mcfg)
	logs := &strings.Builder{}
	cfg := DefaultConfig()
	cfg.AdminToken = token
	cfg.Logger = slog.New(slog.NewTextHandler(&lockedWriter{w: logs}, nil))
	n := New(cfg, mgr)
	if yml != "" {
		n.SetRules(mustParse(t, yml))
	}
	if err := n.StartRules(rc); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		<-served
		n.CloseRules()
		mgr.Close()
		store.Close()
	})
	return &adminNode{t: t, n: n, base: "http://" + ln.Addr().String(), token: token, logs: logs}
}

// lockedWriter lets the node's logger write from any goroutine.
type lockedWriter struct {
	w  io.Writer
	mu chan struct{}
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	if l.mu == nil {
		l.mu = make(chan struct{}, 1)
	}
	l.mu <- struct{}{}
	defer func() { <-l.mu }()
	return l.w.Write(p)
}

type adminResp struct {
	status int
	etag   string
	body   string
}

func (r adminResp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

func (a *adminNode) do(method, path, body string, hdrs ...string) adminResp {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, strings.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	if a.token != "" {
		req.Header.Set("Authorization", "Bearer "+a.token)
	}
	for _, h := range hdrs {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return adminResp{status: res.StatusCode, etag: res.Header.Get("ETag"), body: string(b)}
}

// version reads GET /v1/rules's version and checks that the ETag agrees.
func (a *adminNode) version() float64 {
	a.t.Helper()
	r := a.do("GET", "/v1/rules", "")
	if r.status != 200 {
		a.t.Fatalf("GET /v1/rules: %d %s", r.status, r.body)
	}
	var body struct{ Version uint64 }
	if err := json.Unmarshal([]byte(r.body), &body); err != nil {
		a.t.Fatal(err)
	}
	if r.etag != `"`+strconv.FormatUint(body.Version, 10)+`"` {
		a.t.Errorf("ETag %s, body version %d", r.etag, body.Version)
	}
	return float64(body.Version)
}

func (a *adminNode) check(rule, key string) int {
	a.t.Helper()
	return a.do("POST", "/v1/check", `{"rule":"`+rule+`","key":"`+key+`"}`).status
}

func TestAdminRulesCRUD(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{})
	r := a.do("GET", "/v1/rules", "")
	m := r.json(t)
	if r.status != 200 || m["version"] != 1.0 || m["source"] != SourceMemory || len(m["rules"].([]any)) != 2 || r.etag != `"1"` {
		t.Fatalf("GET /v1/rules = %d %s %s", r.status, r.etag, r.body)
	}

	// Spend a token of per-key:a; the counter must survive the writes of
	// other rules below.
	if a.check("per-key", "a") != 200 {
		t.Fatal("first check denied")
	}

	// PUT a new rule: version 2, enforced at once.
	r = a.do("PUT", "/v1/rules/burst", `{"algorithm":"fixed_window","limit":1,"period":"1h"}`, "X-Sluice-Actor: alice@laptop")
	m = r.json(t)
	if r.status != 200 || m["version"] != 2.0 || m["previous_version"] != 1.0 || r.etag != `"2"` ||
		len(m["added"].([]any)) != 1 || m["added"].([]any)[0] != "burst" {
		t.Fatalf("PUT /v1/rules/burst = %d %s %s", r.status, r.etag, r.body)
	}
	if a.check("burst", "x") != 200 || a.check("burst", "x") != 429 {
		t.Error("the new rule is not enforced")
	}
	if !strings.Contains(a.logs.String(), "rules changed") || !strings.Contains(a.logs.String(), "alice@laptop") ||
		!strings.Contains(a.logs.String(), "old_version=1 new_version=2") {
		t.Errorf("the change is not logged with its caller and versions:\n%s", a.logs)
	}

	// GET one rule: its JSON, the YAML's fields.
	r = a.do("GET", "/v1/rules/burst", "")
	if r.status != 200 || r.etag != `"2"` || r.body != `{"name":"burst","algorithm":"fixed_window","limit":1,"period":"1h"}`+"\n" {
		t.Errorf("GET /v1/rules/burst = %d %s %q", r.status, r.etag, r.body)
	}
	if r := a.do("GET", "/v1/rules/nope", ""); r.status != 404 || r.etag != `"2"` {
		t.Errorf("GET unknown rule = %d %s", r.status, r.body)
	}

	// The same rule again (spelled differently): nothing changes.
	r = a.do("PUT", "/v1/rules/burst", `name: burst
algorithm: fixed_window
limit: 1
period: 60m`)
	if m := r.json(t); r.status != 200 || m["version"] != 2.0 || len(m["changed"].([]any)) != 0 {
		t.Errorf("identical PUT = %d %s", r.status, r.body)
	}

	// Change per-key's other rule: per-key:a keeps its counter.
	r = a.do("PUT", "/v1/rules/login", `{"algorithm":"sliding_log","limit":5,"period":"1m","key":"ip"}`)
	if m := r.json(t); r.status != 200 || m["version"] != 3.0 || m["changed"].([]any)[0] != "login" {
		t.Fatalf("PUT login = %d %s", r.status, r.body)
	}
	r = a.do("POST", "/v1/check", `{"rule":"per-key","key":"a","hits":0}`)
	if m := r.json(t); m["remaining"] != 2.0 {
		t.Errorf("per-key:a after another rule changed: %s, want remaining 2", r.body)
	}

	// DELETE: gone, version 4.
	r = a.do("DELETE", "/v1/rules/burst", "")
	if m := r.json(t); r.status != 200 || m["version"] != 4.0 || m["removed"].([]any)[0] != "burst" {
		t.Fatalf("DELETE = %d %s", r.status, r.body)
	}
	if a.check("burst", "x") != 400 {
		t.Error("a deleted rule still answers")
	}
	if r := a.do("DELETE", "/v1/rules/burst", ""); r.status != 404 || r.etag != `"4"` {
		t.Errorf("DELETE again = %d %s", r.status, r.body)
	}

	// Methods and paths.
	if r := a.do("POST", "/v1/rules/login", ""); r.status != 405 {
		t.Errorf("POST /v1/rules/login = %d", r.status)
	}
	if r := a.do("GET", "/v1/rulesx", ""); r.status != 404 {
		t.Errorf("GET /v1/rulesx = %d", r.status)
	}
}

// TestAdminRulesInvalid: invalid rules are refused with 400 naming the
// field, and nothing changes.
// TestAdminRulesAlgorithms: GET /v1/rules names every algorithm of
// lease's table, in its order, as the dashboard's editor needs it
// (leased, slots, the fields only some algorithms take).
func TestAdminRulesAlgorithms(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{})
	r := a.do("GET", "/v1/rules", "")
	var body struct {
		Algorithms []rules.Algorithm `json:"algorithms"`
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || r.status != 200 {
		t.Fatalf("GET /v1/rules = %d %s (%v)", r.status, r.body, err)
	}
	as := lease.Algorithms()
	if len(body.Algorithms) != len(as) {
		t.Fatalf("algorithms %+v, want %d", body.Algorithms, len(as))
	}
	for i, a := range as {
		got := body.Algorithms[i]
		has := func(f string) bool { return slices.Contains(got.Fields, f) }
		if got.Name != a.String() || got.Leased != a.Leased() || got.Slots != a.Acquired() ||
			has("burst") != a.HasBurst() || has("min_interval") != a.HasMinInterval() || has("max_holders") != a.Leased() {
			t.Errorf("algorithms[%d] = %+v, want %v's", i, got, a)
		}
	}
}

func TestAdminRulesInvalid(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{})
	before := a.do("GET", "/v1/rules", "").body
	cases := []struct {
		name, method, path, body, field string
	}{
		{"negative limit", "PUT", "/v1/rules/x", `{"algorithm":"token_bucket","limit":-1,"period":"1m"}`, "limit"},
		{"unknown algorithm", "PUT", "/v1/rules/x", `{"algorithm":"leaky","limit":1,"period":"1m"}`, "algorithm"},
		{"unknown field", "PUT", "/v1/rules/x", `{"algorithm":"token_bucket","limit":1,"period":"1m","colour":"red"}`, "colour"},
		{"bad period", "PUT", "/v1/rules/x", `{"algorithm":"token_bucket","limit":1,"period":"soon"}`, "period"},
		{"zero period", "PUT", "/v1/rules/x", `{"algorithm":"token_bucket","limit":1,"period":"0s"}`, "period"},
		{"limit not a number", "PUT", "/v1/rules/x", `{"algorithm":"token_bucket","limit":"many","period":"1m"}`, "limit"},
		{"bad override", "PUT", "/v1/rules/x", `{"algorithm":"token_bucket","limit":1,"period":"1m","overrides":[{"key":"a","limit":-2}]}`, "overrides[0].limit"},
		{"name mismatch", "PUT", "/v1/rules/x", `{"name":"y","algorithm":"token_bucket","limit":1,"period":"1m"}`, "name"},
		{"bad name", "PUT", "/v1/rules/no~pe", `{"algorithm":"token_bucket","limit":1,"period":"1m"}`, "name"},
		{"not JSON", "PUT", "/v1/rules/x", `{"algorithm":`, ""},
		{"file: second rule bad", "PUT", "/v1/rules", `{"rules":[{"name":"a","algorithm":"gcra","limit":1,"period":"1s"},{"name":"b","algorithm":"gcra","limit":-1,"period":"1s"}]}`, "rules[1].limit"},
		{"file: duplicate", "PUT", "/v1/rules", "rules:\n  - {name: a, algorithm: gcra, limit: 1, period: 1s}\n  - {name: a, algorithm: gcra, limit: 1, period: 1s}\n", "rules[1].name"},
		{"validate: unknown field", "POST", "/v1/rules:validate", `{"rules":[{"name":"a","algorithm":"gcra","limit":1,"period":"1s","x":1}]}`, "rules[0].x"},
		{"dry run too", "PUT", "/v1/rules/x?dry_run=1", `{"algorithm":"token_bucket","limit":-1,"period":"1m"}`, "limit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := a.do(c.method, c.path, c.body)
			m := r.json(t)
			field, _ := m["field"].(string)
			if r.status != 400 || field != c.field || m["error"] == "" || r.etag != `"1"` {
				t.Errorf("%s %s = %d %s, want 400 naming %q", c.method, c.path, r.status, r.body, c.field)
			}
		})
	}
	if after := a.do("GET", "/v1/rules", "").body; after != before {
		t.Errorf("rules changed by refused writes:\n%s\nwant\n%s", after, before)
	}
}

func TestAdminRulesIfMatch(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{})
	put := `{"algorithm":"gcra","limit":1,"period":"1s"}`
	if r := a.do("PUT", "/v1/rules/g", put, `If-Match: "1"`); r.status != 200 || r.etag != `"2"` {
		t.Fatalf("PUT with the current If-Match = %d %s", r.status, r.body)
	}
	// Stale: 412, nothing changed, the ETag says the current version.
	r := a.do("PUT", "/v1/rules/h", put, `If-Match: "1"`)
	if m := r.json(t); r.status != 412 || r.etag != `"2"` || m["field"] != "If-Match" {
		t.Errorf("stale If-Match = %d %s %s", r.status, r.etag, r.body)
	}
	if r := a.do("DELETE", "/v1/rules/g", "", `If-Match: 1`); r.status != 412 {
		t.Errorf("stale DELETE = %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/rules/h", ""); r.status != 404 {
		t.Errorf("a refused PUT installed its rule: %d", r.status)
	}
	// Other spellings of the current version, and *.
	for _, h := range []string{`2`, `"7", "2"`, `W/"2", "2"`} {
		if r := a.do("PUT", "/v1/rules/g", put, "If-Match: "+h); r.status != 200 {
			t.Errorf("If-Match %s = %d %s", h, r.status, r.body)
		}
	}
	// A weak tag never matches a write (If-Match compares strongly, RFC
	// 9110 §13.1.1), even one naming the current version.
	for _, h := range []string{`W/"2"`, `W/2`, `w/"2"`, `W/"7", W/"2"`} {
		if r := a.do("PUT", "/v1/rules/h", put, "If-Match: "+h); r.status != 412 || r.etag != `"2"` || r.json(t)["field"] != "If-Match" {
			t.Errorf("If-Match %s = %d %s %s; want 412 naming If-Match", h, r.status, r.etag, r.body)
		}
	}
	if r := a.do("GET", "/v1/rules/h", ""); r.status != 404 {
		t.Errorf("a PUT with a weak If-Match installed its rule: %d", r.status)
	}
	if r := a.do("DELETE", "/v1/rules/g", "", "If-Match: *"); r.status != 200 {
		t.Errorf("If-Match * = %d %s", r.status, r.body)
	}
	// Entity tags are opaque: one this node never gave does not match.
	if r := a.do("PUT", "/v1/rules/g", put, "If-Match: soon"); r.status != 412 {
		t.Errorf("If-Match soon = %d %s", r.status, r.body)
	}
}

func TestAdminRulesDryRun(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{})
	r := a.do("PUT", "/v1/rules/login?dry_run=1", `{"algorithm":"sliding_log","limit":9,"period":"1m","key":"ip"}`)
	if m := r.json(t); r.status != 200 || m["dry_run"] != true || m["version"] != 1.0 || m["changed"].([]any)[0] != "login" {
		t.Errorf("dry-run PUT = %d %s", r.status, r.body)
	}
	r = a.do("DELETE", "/v1/rules/per-key?dry_run=true", "")
	if m := r.json(t); r.status != 200 || m["removed"].([]any)[0] != "per-key" {
		t.Errorf("dry-run DELETE = %d %s", r.status, r.body)
	}
	r = a.do("POST", "/v1/rules:validate", "rules:\n  - {name: login, algorithm: sliding_log, limit: 2, period: 1m, key: ip}\n  - {name: new, algorithm: gcra, limit: 1, period: 1s}\n")
	m := r.json(t)
	if r.status != 200 || m["dry_run"] != true || m["added"].([]any)[0] != "new" || m["removed"].([]any)[0] != "per-key" || len(m["changed"].([]any)) != 0 {
		t.Errorf("validate = %d %s", r.status, r.body)
	}
	if v := a.version(); v != 1 {
		t.Errorf("a dry run changed the version to %v", v)
	}
	if a.check("per-key", "k") != 200 || a.check("new", "k") != 400 {
		t.Error("a dry run changed the rules")
	}
}

// TestAdminRulesApply: PUT /v1/rules installs a whole file as one version.
func TestAdminRulesApply(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{})
	r := a.do("PUT", "/v1/rules", "rules:\n  - {name: per-key, algorithm: token_bucket, limit: 3, period: 1h, key: 'header:X-API-Key'}\n  - {name: new, algorithm: gcra, limit: 1, period: 1s}\n")
	m := r.json(t)
	if r.status != 200 || m["version"] != 2.0 || m["added"].([]any)[0] != "new" || m["removed"].([]any)[0] != "login" {
		t.Fatalf("PUT /v1/rules = %d %s", r.status, r.body)
	}
	if r := a.do("GET", "/v1/rules", ""); !strings.Contains(r.body, `"name":"new"`) || strings.Contains(r.body, `"login"`) {
		t.Errorf("after apply: %s", r.body)
	}
}

func TestAdminRulesFileIsReadOnly(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{File: "/etc/sluice/rules.yaml"})
	for _, w := range []struct{ method, path, body string }{
		{"PUT", "/v1/rules/x", `{"algorithm":"gcra","limit":1,"period":"1s"}`},
		{"DELETE", "/v1/rules/login", ""},
		{"PUT", "/v1/rules", "rules: []\n"},
	} {
		r := a.do(w.method, w.path, w.body)
		if r.status != 409 || !strings.Contains(r.body, "/etc/sluice/rules.yaml") || r.etag != `"1"` {
			t.Errorf("%s %s on a file-backed node = %d %s", w.method, w.path, r.status, r.body)
		}
	}
	// Dry runs still answer (a CI job can diff a file against a node).
	if r := a.do("POST", "/v1/rules:validate", adminRules); r.status != 200 {
		t.Errorf("validate on a file-backed node = %d %s", r.status, r.body)
	}
	r := a.do("GET", "/v1/rules", "")
	if m := r.json(t); m["source"] != SourceFile || m["file"] != "/etc/sluice/rules.yaml" {
		t.Errorf("GET /v1/rules = %s", r.body)
	}
	// A reload of the file is a new version.
	a.n.SetRules(mustParse(t, adminRules))
	if v := a.version(); v != 2 {
		t.Errorf("version after a reload = %v, want 2", v)
	}
}

func TestAdminRulesGuard(t *testing.T) {
	a := newAdminNode(t, adminRules, "s3cret", RulesConfig{})
	a.token = ""
	cases := []struct {
		auth string
		want int
	}{
		{"", 401},
		{"Bearer wrong", 403},
		{"Basic s3cret", 403},
		{"Bearer s3cret", 200},
	}
	for _, c := range cases {
		for _, p := range []struct{ method, path string }{
			{"GET", "/v1/rules"}, {"GET", "/v1/rules/login"}, {"DELETE", "/v1/rules/login?dry_run=1"},
			{"POST", "/v1/rules:test"},
		} {
			var hdrs []string
			if c.auth != "" {
				hdrs = append(hdrs, "Authorization: "+c.auth)
			}
			body := ""
			if p.path == "/v1/rules:test" {
				body = `{"path":"/"}`
			}
			if r := a.do(p.method, p.path, body, hdrs...); r.status != c.want {
				t.Errorf("%s %s with %q = %d %s, want %d", p.method, p.path, c.auth, r.status, r.body, c.want)
			}
		}
	}
	// Without a token, only loopback.
	n := New(Config{}, nil)
	ctx := newCtx("GET", "/v1/rules", "", "10.1.2.3")
	n.handle(ctx)
	if ctx.Response.StatusCode() != 403 {
		t.Errorf("no token, from 10.1.2.3: %d, want 403", ctx.Response.StatusCode())
	}
}

func TestAdminRulesTest(t *testing.T) {
	a := newAdminNode(t, adminRules, "", RulesConfig{})
	r := a.do("POST", "/v1/rules:test", `{"method":"POST","path":"/login","ip":"10.0.0.7","headers":{"X-API-Key":"k1"}}`)
	var body struct {
		Matches []struct{ Rule, Key string }
	}
	if err := json.Unmarshal([]byte(r.body), &body); err != nil || r.status != 200 {
		t.Fatalf("rules:test = %d %s", r.status, r.body)
	}
	got := []string{}
	for _, m := range body.Matches {
		got = append(got, m.Rule+"="+m.Key)
	}
	if strings.Join(got, ",") != "per-key=k1,login=10.0.0.7" {
		t.Errorf("matches = %v", got)
	}
	if r := a.do("POST", "/v1/rules:test", `{"ip":"nope"}`); r.status != 400 || r.json(t)["field"] != "ip" {
		t.Errorf("bad ip = %d %s", r.status, r.body)
	}
}

// TestAdminRulesDataDir: rules written through the API survive a restart
// (a new node on the same directory loads them, with their version), and
// the file is replaced atomically (no temporary file left behind).
func TestAdminRulesDataDir(t *testing.T) {
	dir := t.TempDir()
	ds, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := newAdminNode(t, "", "", RulesConfig{Store: ds, Source: SourceDataDir})
	if r := a.do("GET", "/v1/rules", ""); r.status != 200 || r.json(t)["source"] != SourceDataDir || r.json(t)["version"] != 0.0 {
		t.Fatalf("fresh data dir: %d %s", r.status, r.body)
	}
	if r := a.do("PUT", "/v1/rules/g", `{"algorithm":"gcra","limit":1,"period":"1h"}`); r.status != 200 || r.etag != `"1"` {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	if r := a.do("PUT", "/v1/rules/h", `{"algorithm":"gcra","limit":2,"period":"1h"}`); r.status != 200 || r.etag != `"2"` {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 || entries[0].Name() != DirRulesFile {
		t.Errorf("data dir holds %v, want only %s", entries, DirRulesFile)
	}

	ds2, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := newAdminNode(t, "", "", RulesConfig{Store: ds2, Source: SourceDataDir})
	r := b.do("GET", "/v1/rules", "")
	var got struct {
		Version uint64
		Rules   []rules.Spec
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil || got.Version != 2 || len(got.Rules) != 2 ||
		got.Rules[0].Name != "g" || got.Rules[1].Name != "h" {
		t.Errorf("after restart: %s", r.body)
	}
	if b.check("g", "k") != 200 || b.check("g", "k") != 429 {
		t.Error("the restored rule is not enforced")
	}

	// A corrupt file keeps the node from starting with it.
	if err := os.WriteFile(filepath.Join(dir, DirRulesFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewDirStore(dir); err == nil {
		t.Error("NewDirStore accepted a corrupt file")
	}
}

// TestAdminRulesSharedStore: two nodes on one store (a DirStore stands in
// for Redis; no gossip and no poll here). A write on a node that has not
// seen the other's change is built on the stored set (no lost update);
// with a stale If-Match it is refused.
func TestAdminRulesSharedStore(t *testing.T) {
	ds, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rc := RulesConfig{Store: ds, Poll: time.Hour}
	a := newAdminNode(t, "", "", rc)
	b := newAdminNode(t, "", "", rc)
	put := func(n *adminNode, name string, hdrs ...string) adminResp {
		return n.do("PUT", "/v1/rules/"+name, `{"algorithm":"gcra","limit":1,"period":"1h"}`, hdrs...)
	}
	if r := put(a, "one"); r.status != 200 || r.etag != `"1"` {
		t.Fatalf("PUT on a = %d %s", r.status, r.body)
	}
	// b still holds version 0: with If-Match 0 it is refused, and it has
	// now loaded version 1.
	if r := put(b, "two", `If-Match: "0"`); r.status != 412 || r.etag != `"1"` {
		t.Errorf("stale If-Match on b = %d %s %s", r.status, r.etag, r.body)
	}
	// Both hold version 1. a writes version 2; b, still at 1, writes
	// without If-Match: its change is built on version 2, nothing lost.
	if r := put(a, "three"); r.status != 200 || r.etag != `"2"` {
		t.Fatalf("PUT three on a = %d %s", r.status, r.body)
	}
	r := put(b, "two")
	if r.status != 200 || r.etag != `"3"` {
		t.Fatalf("PUT two on b = %d %s", r.status, r.body)
	}
	_, specs, _, err := ds.LoadRules(context.Background())
	if err != nil || len(specs) != 3 {
		t.Fatalf("stored: %q %v, want one, three and two", specs, err)
	}
	if b.check("three", "k") != 200 || b.check("two", "k") != 200 {
		t.Error("b does not enforce the merged set")
	}
}

// TestAdminRulesBadStore: a stored set that does not validate is not
// installed (the node keeps its rules); a write replaces it. A store that lost its data (version 0) is not installed
// either; the next write stores this node's rules again.
func TestAdminRulesBadStore(t *testing.T) {
	dir := t.TempDir()
	ds, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	a := newAdminNode(t, "", "", RulesConfig{Store: ds, Poll: time.Hour})
	if r := a.do("PUT", "/v1/rules/one", `{"algorithm":"gcra","limit":1,"period":"1h"}`); r.status != 200 {
		t.Fatalf("PUT = %d %s", r.status, r.body)
	}
	// Someone writes an invalid set (version 7) behind the API's back.
	bad := `{"version":7,"rules":[{"name":"x","algorithm":"gcra","limit":-1,"period":"1h"}]}`
	if err := os.WriteFile(filepath.Join(dir, DirRulesFile), []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := a.n.loadStore(); err == nil || !strings.Contains(err.Error(), "version 7") {
		t.Fatalf("loading an invalid stored set: %v", err)
	}
	if a.check("one", "k") != 200 {
		t.Error("the node dropped its rules for an invalid stored set")
	}
	// A write without If-Match replaces the invalid set.
	r := a.do("PUT", "/v1/rules/two", `{"algorithm":"gcra","limit":1,"period":"1h"}`)
	if r.status != 200 || r.etag != `"8"` {
		t.Fatalf("PUT over an invalid set = %d %s %s", r.status, r.etag, r.body)
	}
	if _, specs, _, _ := ds.LoadRules(context.Background()); len(specs) != 2 {
		t.Errorf("stored after the repair: %q", specs)
	}

	// The store loses its data.
	if err := os.Remove(filepath.Join(dir, DirRulesFile)); err != nil {
		t.Fatal(err)
	}
	if err := a.n.loadStore(); err != nil {
		t.Fatal(err)
	}
	if v, _ := a.n.RulesVersion(); v != 8 || a.check("two", "k") != 200 {
		t.Errorf("after the store lost its data: version %d; the rules must stay", v)
	}
	if !strings.Contains(a.logs.String(), "the rule store is empty") {
		t.Error("no warning for an empty store")
	}
	// Stored again as version 9, not 1: a version (an ETag) never gets a
	// second meaning.
	r = a.do("PUT", "/v1/rules/three", `{"algorithm":"gcra","limit":1,"period":"1h"}`)
	if r.status != 200 || r.etag != `"9"` {
		t.Fatalf("PUT on an emptied store = %d %s %s", r.status, r.etag, r.body)
	}
	if _, specs, _, _ := ds.LoadRules(context.Background()); len(specs) != 3 {
		t.Errorf("stored after the store lost its data: %q, want all three rules", specs)
	}
}
