package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

const testRules = `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 3
    period: 1h
    key: header:X-API-Key
    descriptor: api_key
    overrides:
      - {key: "big-*", limit: 100}
  - name: login
    algorithm: sliding_log
    limit: 2
    period: 1m
    key: ip
  - name: global
    algorithm: fixed_window
    limit: 10
    period: 1h
    descriptor: api_key
  - name: tight
    algorithm: gcra
    limit: 1
    period: 1h
    descriptor: tenant
  - name: wide
    algorithm: token_bucket
    limit: 10
    period: 1h
    descriptor: tenant
  - name: watch
    algorithm: token_bucket
    limit: 1
    period: 1h
    shadow: true
    descriptor: user
  - name: uploads
    algorithm: concurrency
    limit: 2
    period: 30s
  - name: api
    algorithm: token_bucket
    limit: 2
    period: 1h
    key: header:X-API-Key
    match: {path_prefix: /api}
`

// wantHeaders checks the rate-limit headers of an answer: "" means the
// header must be absent, "*" that any value goes.
func wantHeaders(t *testing.T, r resp, policy, rl, limit, remaining, reset, retry string) {
	t.Helper()
	want := map[string]string{
		"Ratelimit-Policy":      policy,
		"Ratelimit":             rl,
		"X-Ratelimit-Limit":     limit,
		"X-Ratelimit-Remaining": remaining,
		"X-Ratelimit-Reset":     reset,
		"Retry-After":           retry,
	}
	for k, v := range want {
		if v == "*" {
			continue
		}
		if got, ok := r.hdr[k]; v == "" && ok {
			t.Errorf("header %s = %q, want none", k, got)
		} else if v != "" && got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
}

func num(t *testing.T, m map[string]any, k string) int64 {
	t.Helper()
	f, ok := m[k].(float64)
	if !ok {
		t.Fatalf("%s missing or not a number in %v", k, m)
	}
	return int64(f)
}

func TestCheckTokenBucket(t *testing.T) {
	tn := newTestNode(t, testRules)
	for i := range 3 {
		r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"user-42"}`)
		if r.status != 200 {
			t.Fatalf("check %d: status %d %s", i, r.status, r.body)
		}
		m := r.json(t)
		rem := strconv.Itoa(2 - i)
		if m["allowed"] != true || m["rule"] != "per-key" || m["key"] != "user-42" || num(t, m, "limit") != 3 || num(t, m, "remaining") != int64(2-i) {
			t.Errorf("check %d: body %s", i, r.body)
		}
		reset := strconv.FormatInt(ceilSeconds(time.Duration(num(t, m, "reset_ms"))*time.Millisecond), 10)
		wantHeaders(t, r, `"per-key";q=3;w=3600`, `"per-key";r=`+rem+`;t=`+reset, "3", rem, reset, "")
	}
	r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"user-42"}`)
	if r.status != 429 {
		t.Fatalf("4th check: status %d %s", r.status, r.body)
	}
	m := r.json(t)
	retry := num(t, m, "retry_after_ms")
	// One token refills in period/limit = 20 minutes.
	if m["allowed"] != false || num(t, m, "remaining") != 0 || retry <= 0 || retry > 20*60*1000 {
		t.Errorf("denied body %s", r.body)
	}
	retryS := strconv.FormatInt(ceilSeconds(time.Duration(retry)*time.Millisecond), 10)
	reset := strconv.FormatInt(ceilSeconds(time.Duration(num(t, m, "reset_ms"))*time.Millisecond), 10)
	wantHeaders(t, r, `"per-key";q=3;w=3600`, `"per-key";r=0;t=`+reset, "3", "0", reset, retryS)

	// Another key has its own bucket; an override gives big-* keys 100.
	if r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"user-43"}`); r.status != 200 {
		t.Errorf("other key: %d", r.status)
	}
	r = tn.do("POST", "/v1/check", `{"rule":"per-key","key":"big-1","hits":10}`)
	if m := r.json(t); r.status != 200 || num(t, m, "limit") != 100 || num(t, m, "remaining") != 90 {
		t.Errorf("override: %d %s", r.status, r.body)
	}
	if got := r.hdr["Ratelimit-Policy"]; got != `"per-key";q=100;w=3600` {
		t.Errorf("override policy header %q", got)
	}
	// hits 0 peeks without charging.
	r = tn.do("GET", "/v1/check?rule=per-key&key=user-43&hits=0", "")
	if m := r.json(t); r.status != 200 || num(t, m, "remaining") != 2 {
		t.Errorf("peek: %d %s", r.status, r.body)
	}
}

func TestCheckSlidingLogGet(t *testing.T) {
	tn := newTestNode(t, testRules)
	for i := range 2 {
		r := tn.do("GET", "/v1/check?rule=login&key=10.0.0.1", "")
		if r.status != 200 || r.json(t)["remaining"] != float64(1-i) {
			t.Fatalf("login %d: %d %s", i, r.status, r.body)
		}
		wantHeaders(t, r, `"login";q=2;w=60`, "*", "2", strconv.Itoa(1-i), "*", "")
	}
	r := tn.do("GET", "/v1/check?rule=login&key=10.0.0.1", "")
	if r.status != 429 {
		t.Fatalf("3rd login: %d %s", r.status, r.body)
	}
	m := r.json(t)
	if retry := num(t, m, "retry_after_ms"); retry <= 0 || retry > 60000 {
		t.Errorf("retry_after_ms %d", retry)
	}
	if r.hdr["Retry-After"] == "" || r.hdr["X-Ratelimit-Remaining"] != "0" {
		t.Errorf("headers %v", r.hdr)
	}
	// A minute later the stamps have left the window.
	tn.clock.Advance(61 * time.Second)
	if r := tn.do("GET", "/v1/check?rule=login&key=10.0.0.1", ""); r.status != 200 {
		t.Errorf("after the window: %d %s", r.status, r.body)
	}
}

func TestBatch(t *testing.T) {
	tn := newTestNode(t, testRules)
	body := `{"checks":[
		{"rule":"per-key","key":"a"},
		{"rule":"nope","key":"a"},
		{"rule":"per-key","key":"a","hits":2},
		{"rule":"per-key"},
		{"rule":"per-key","key":"a"},
		{"descriptors":{"api_key":"k1"}},
		{"rule":"uploads","key":"u","hits":1}
	]}`
	r := tn.do("POST", "/v1/checks", body)
	if r.status != 200 {
		t.Fatalf("status %d %s", r.status, r.body)
	}
	var got struct {
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal([]byte(r.body), &got); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"allowed rem=2",
		"error checks[1].rule",
		"allowed rem=0",
		"error checks[3].key",
		"denied rem=0",
		"allowed rem=2",
		"error checks[6].rule",
	}
	if len(got.Results) != len(want) {
		t.Fatalf("%d results, want %d: %s", len(got.Results), len(want), r.body)
	}
	for i, res := range got.Results {
		var s string
		switch {
		case res["error"] != nil:
			s = fmt.Sprintf("error %v", res["field"])
		case res["allowed"] == true:
			s = fmt.Sprintf("allowed rem=%v", res["remaining"])
		default:
			s = fmt.Sprintf("denied rem=%v", res["remaining"])
		}
		if s != want[i] {
			t.Errorf("result %d = %s, want %s (%v)", i, s, want[i], res)
		}
	}
}

func TestMultiRuleNoBurn(t *testing.T) {
	tn := newTestNode(t, testRules)
	// tenant matches tight (gcra, 1/h) and wide (token_bucket, 10/h).
	r := tn.do("POST", "/v1/check", `{"descriptors":{"tenant":"t1"}}`)
	if m := r.json(t); r.status != 200 || m["rule"] != "tight" || num(t, m, "remaining") != 0 {
		t.Fatalf("first: %d %s (want the rule with the least remaining)", r.status, r.body)
	}
	for range 3 {
		r = tn.do("POST", "/v1/check", `{"descriptors":{"tenant":"t1"}}`)
		if m := r.json(t); r.status != 429 || m["rule"] != "tight" {
			t.Fatalf("denied: %d %s", r.status, r.body)
		}
	}
	// wide was charged once only: the denied requests were refunded.
	r = tn.do("POST", "/v1/check", `{"rule":"wide","key":"t1","hits":0}`)
	if m := r.json(t); num(t, m, "remaining") != 9 {
		t.Errorf("wide after 3 denials: %s, want remaining 9", r.body)
	}
	// per-key and global both match api_key: global keeps counting.
	for range 4 {
		tn.do("POST", "/v1/check", `{"descriptors":{"api_key":"k9"}}`)
	}
	r = tn.do("POST", "/v1/check", `{"rule":"global","key":"k9","hits":0}`)
	if m := r.json(t); num(t, m, "remaining") != 7 {
		t.Errorf("global after 3 allowed + 1 denied: %s, want remaining 7", r.body)
	}
	// No rule matches: allowed, nothing reported.
	r = tn.do("POST", "/v1/check", `{"descriptors":{"nothing":"x"}}`)
	if m := r.json(t); r.status != 200 || m["allowed"] != true || r.hdr["Ratelimit"] != "" {
		t.Errorf("no match: %d %s %v", r.status, r.body, r.hdr)
	}
}

func TestShadow(t *testing.T) {
	tn := newTestNode(t, testRules)
	for i := range 3 {
		r := tn.do("POST", "/v1/check", `{"descriptors":{"user":"u1"}}`)
		if r.status != 200 || r.json(t)["allowed"] != true {
			t.Fatalf("shadow check %d: %d %s", i, r.status, r.body)
		}
	}
	r := tn.do("GET", "/metrics", "")
	for _, want := range []string{
		`sluice_checks_total{rule="watch",decision="shadow_denied"} 2`,
		`sluice_checks_total{rule="watch",decision="allowed"} 1`,
	} {
		if !strings.Contains(r.body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

func TestAcquireRelease(t *testing.T) {
	tn := newTestNode(t, testRules)
	var ids []string
	for i := range 2 {
		r := tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"user-1"}`)
		m := r.json(t)
		id, _ := m["lease_id"].(string)
		if r.status != 200 || id == "" || num(t, m, "remaining") != int64(1-i) {
			t.Fatalf("acquire %d: %d %s", i, r.status, r.body)
		}
		ids = append(ids, id)
	}
	r := tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"user-1"}`)
	if m := r.json(t); r.status != 429 || m["lease_id"] != nil || r.hdr["Retry-After"] == "" {
		t.Fatalf("3rd acquire: %d %s", r.status, r.body)
	}
	// A check may peek at a concurrency rule, not charge it.
	if r := tn.do("GET", "/v1/check?rule=uploads&key=user-1&hits=0", ""); r.status != 429 {
		t.Errorf("peek full: %d %s", r.status, r.body)
	}
	r = tn.do("POST", "/v1/release", `{"lease_id":"`+ids[0]+`"}`)
	if m := r.json(t); r.status != 200 || num(t, m, "remaining") != 1 || m["key"] != "user-1" {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	if r := tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"user-1"}`); r.status != 200 {
		t.Errorf("acquire after release: %d %s", r.status, r.body)
	}
	// A slot released already, or a lease_id no acquire made (forged:
	// it names a valid rule and key), holds nothing: 404, and nothing
	// is freed (the key is full again: 2 held).
	for _, lid := range []string{ids[0], "uploads~dXNlci0x~0123456789abcdef0123456789abcdef"} {
		if r := tn.do("POST", "/v1/release", `{"lease_id":"`+lid+`"}`); r.status != 404 || r.json(t)["field"] != "lease_id" {
			t.Errorf("release %s: %d %s, want 404 naming lease_id", lid, r.status, r.body)
		}
	}
	if r := tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"user-1"}`); r.status != 429 {
		t.Errorf("acquire after releases that freed nothing: %d %s, want 429", r.status, r.body)
	}

	// The longest key fits the lease_id: release by id alone, for every
	// byte of the key (here a 256-byte key with multi-byte characters).
	long := strings.Repeat("k", 250) + "üéé"
	if len(long) != api.MaxKeyLen {
		t.Fatalf("key of %d bytes", len(long))
	}
	r = tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"`+long+`"}`)
	id, _ := r.json(t)["lease_id"].(string)
	if r.status != 200 || id == "" || len(id) > api.MaxLeaseIDLen {
		t.Fatalf("acquire long key: %d %s", r.status, r.body)
	}
	if r := tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"`+long+`"}`); r.status != 200 {
		t.Fatalf("2nd acquire long key: %d %s", r.status, r.body)
	}
	if r := tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"`+long+`"}`); r.status != 429 {
		t.Fatalf("3rd acquire long key: %d %s", r.status, r.body)
	}
	r = tn.do("POST", "/v1/release", `{"lease_id":"`+id+`"}`)
	if m := r.json(t); r.status != 200 || num(t, m, "remaining") != 1 || m["key"] != long || m["rule"] != "uploads" {
		t.Errorf("release long key by id: %d %s", r.status, r.body)
	}
	r = tn.do("POST", "/v1/acquire", `{"rule":"uploads","key":"`+long+`"}`)
	if id, _ = r.json(t)["lease_id"].(string); r.status != 200 || id == "" {
		t.Fatalf("acquire after release by id: %d %s", r.status, r.body)
	}
	// Rule and key may be given too, and must agree with the lease_id.
	r = tn.do("POST", "/v1/release", `{"rule":"uploads","key":"`+long+`","lease_id":"`+id+`"}`)
	if r.status != 200 {
		t.Errorf("release with rule and key: %d %s", r.status, r.body)
	}
	for _, c := range []struct{ body, field string }{
		{`{"rule":"login","lease_id":"` + id + `"}`, "rule"},
		{`{"key":"other","lease_id":"` + id + `"}`, "key"},
		{`{"rule":"uploads","key":"user-1"}`, "lease_id"},
		{`{"lease_id":"uploads~~abc"}`, "lease_id"},
		{`{"lease_id":"uploads~!!~abc"}`, "lease_id"},
		{`{"lease_id":"nope~dTE~abc"}`, "lease_id"},
	} {
		if r := tn.do("POST", "/v1/release", c.body); r.status != 400 || r.json(t)["field"] != c.field {
			t.Errorf("release %s: %d %s, want 400 naming %q", c.body, r.status, r.body, c.field)
		}
	}
}

func TestBadInput(t *testing.T) {
	tn := newTestNode(t, testRules)
	cases := []struct {
		name, method, uri, body string
		status                  int
		field                   string
	}{
		{"not json", "POST", "/v1/check", `{`, 400, ""},
		{"no rule", "POST", "/v1/check", `{"key":"a"}`, 400, "key"},
		{"no key", "POST", "/v1/check", `{"rule":"per-key"}`, 400, "key"},
		{"unknown rule", "POST", "/v1/check", `{"rule":"nope","key":"a"}`, 400, "rule"},
		{"bad rule name", "POST", "/v1/check", `{"rule":"a b","key":"a"}`, 400, "rule"},
		{"negative hits", "POST", "/v1/check", `{"rule":"per-key","key":"a","hits":-1}`, 400, "hits"},
		{"fractional hits", "POST", "/v1/check", `{"rule":"per-key","key":"a","hits":1.5}`, 400, "hits"},
		{"huge hits", "POST", "/v1/check", `{"rule":"per-key","key":"a","hits":1e300}`, 400, "hits"},
		{"long key", "POST", "/v1/check", `{"rule":"per-key","key":"` + strings.Repeat("x", 300) + `"}`, 400, "key"},
		{"concurrency on check", "POST", "/v1/check", `{"rule":"uploads","key":"a"}`, 400, "rule"},
		{"get no key", "GET", "/v1/check?rule=per-key", "", 400, "key"},
		{"get bad hits", "GET", "/v1/check?rule=per-key&key=a&hits=x", "", 400, "hits"},
		{"batch empty", "POST", "/v1/checks", `{"checks":[]}`, 400, "checks"},
		{"batch too big", "POST", "/v1/checks", `{"checks":[` + strings.Repeat(`{"rule":"a","key":"b"},`, 1000) + `{"rule":"a","key":"b"}]}`, 400, "checks"},
		{"acquire unknown rule", "POST", "/v1/acquire", `{"rule":"nope","key":"a"}`, 400, "rule"},
		{"acquire on token bucket", "POST", "/v1/acquire", `{"rule":"per-key","key":"a"}`, 400, "rule"},
		{"release no id", "POST", "/v1/release", `{}`, 400, "lease_id"},
		{"release garbage id", "POST", "/v1/release", `{"lease_id":"garbage"}`, 400, "lease_id"},
		{"release bad key", "POST", "/v1/release", `{"lease_id":"uploads~%%%~abc"}`, 400, "lease_id"},
		{"release unknown rule", "POST", "/v1/release", `{"lease_id":"gone~YQ~abc"}`, 400, "lease_id"},
		{"release wrong rule", "POST", "/v1/release", `{"rule":"per-key","lease_id":"uploads~YQ~abc"}`, 400, "rule"},
		{"release not concurrency", "POST", "/v1/release", `{"lease_id":"per-key~YQ~abc"}`, 400, "lease_id"},
		{"unknown path", "GET", "/v2/nope", "", 404, ""},
		{"rules need the admin guard", "GET", "/v1/rules", "", 403, ""},
		{"wrong method", "PUT", "/v1/check", "", 405, ""},
		{"get checks", "GET", "/v1/checks", "", 405, ""},
		{"post metrics", "POST", "/metrics", "x", 405, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := tn.do(c.method, c.uri, c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			m := r.json(t)
			if m["error"] == nil || m["error"] == "" {
				t.Errorf("no error message: %s", r.body)
			}
			if f, _ := m["field"].(string); f != c.field {
				t.Errorf("field %q, want %q (%s)", f, c.field, r.body)
			}
		})
	}
}

func TestBodyTooLarge(t *testing.T) {
	tn := newTestNode(t, testRules)
	body := `{"checks":[` + strings.Repeat(" ", 70<<10) + `]}`
	r := tn.raw("POST /v1/checks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n" + body)
	if r.status != 413 || r.json(t)["error"] == nil {
		t.Errorf("oversize body: %d %s", r.status, r.body)
	}
	r = tn.raw("GET /v1/check HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("h", 10<<10) + "\r\n\r\n")
	if r.status != 431 || r.json(t)["error"] == nil {
		t.Errorf("oversize headers: %d %s", r.status, r.body)
	}
}

func TestReadyz(t *testing.T) {
	tn := newTestNode(t, "")
	if r := tn.do("GET", "/readyz", ""); r.status != 503 || r.json(t)["ready"] != false {
		t.Errorf("before rules: %d %s", r.status, r.body)
	}
	if r := tn.do("POST", "/v1/check", `{"rule":"a","key":"b"}`); r.status != 503 {
		t.Errorf("check before rules: %d %s", r.status, r.body)
	}
	if r := tn.do("GET", "/v1/auth", ""); r.status != 503 {
		t.Errorf("auth before rules: %d", r.status)
	}
	if r := tn.do("GET", "/healthz", ""); r.status != 200 {
		t.Errorf("healthz: %d", r.status)
	}
	tn.n.SetRules(mustParse(t, testRules))
	r := tn.do("GET", "/readyz", "")
	if m := r.json(t); r.status != 200 || m["ready"] != true || num(t, m, "rules") != 8 || m["last_reload_error"] != nil {
		t.Errorf("after rules: %d %s", r.status, r.body)
	}
	tn.n.SetRulesError(fmt.Errorf("rule %q: limit: must be > 0", "x"))
	r = tn.do("GET", "/readyz", "")
	if m := r.json(t); r.status != 200 || num(t, m, "rules") != 8 || m["last_reload_error"] == nil { // its text: TestReadyzHidesReloadError
		t.Errorf("after a bad reload: %d %s", r.status, r.body)
	}
	// The last good set still serves.
	if r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"a"}`); r.status != 200 {
		t.Errorf("check after bad reload: %d", r.status)
	}
	tn.do("POST", "/v1/checks", `{"checks":[{"rule":"per-key","key":"b"}]}`) // batches are always timed
	m := tn.do("GET", "/metrics", "").body
	for _, want := range []string{"sluice_rules 8", "sluice_rules_reload_errors_total 1", `sluice_http_requests_total{path="/v1/check",code="503"} 1`, "sluice_check_duration_seconds_bucket"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func TestReloadKeepsState(t *testing.T) {
	tn := newTestNode(t, testRules)
	tn.do("POST", "/v1/check", `{"rule":"per-key","key":"a","hits":2}`)
	tn.n.SetRules(mustParse(t, testRules)) // same rules, new Set
	r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"a","hits":0}`)
	if m := r.json(t); num(t, m, "remaining") != 1 {
		t.Errorf("after an identical reload: %s, want remaining 1", r.body)
	}
	// A changed limit takes effect.
	tn.n.SetRules(mustParse(t, strings.Replace(testRules, "limit: 3\n", "limit: 5\n", 1)))
	r = tn.do("POST", "/v1/check", `{"rule":"per-key","key":"a","hits":0}`)
	if m := r.json(t); num(t, m, "limit") != 5 || r.hdr["Ratelimit-Policy"] != `"per-key";q=5;w=3600` {
		t.Errorf("after a changed reload: %s %v", r.body, r.hdr)
	}
}

func TestLeaseID(t *testing.T) {
	const sid = "0123456789abcdef0123456789abcdef"
	longRule := strings.Repeat("r", api.MaxRuleNameLen)
	for _, c := range []struct{ rule, key string }{
		{"uploads", "a"}, {"uploads", "user-42"}, {"uploads", "with~tilde and spaces/ü"},
		{longRule, strings.Repeat("k", api.MaxKeyLen)}, {longRule, strings.Repeat("é", api.MaxKeyLen/2)},
	} {
		id, ok := encodeLeaseID(c.rule, c.key, sid)
		if !ok || len(id) > api.MaxLeaseIDLen {
			t.Errorf("lease_id of %q/%q: %q (%d bytes) ok=%v", c.rule, c.key, id, len(id), ok)
		}
		rule, k, gotID, err := decodeLeaseID(id)
		if err != nil || rule != c.rule || k != c.key || gotID != sid {
			t.Errorf("round trip of %q: %q %q %q %v", c.key, rule, k, gotID, err)
		}
	}
	if maxIDInLeaseID < len(sid) {
		t.Errorf("maxIDInLeaseID = %d, less than the Manager's ids", maxIDInLeaseID)
	}
	if _, ok := encodeLeaseID(longRule, strings.Repeat("k", api.MaxKeyLen), strings.Repeat("i", maxIDInLeaseID+1)); ok {
		t.Error("an id longer than maxIDInLeaseID was accepted")
	}
}

// TestShutdownBeforeServe: a Shutdown that runs before Serve has started
// (SIGTERM during start-up) still makes Serve return.
func TestShutdownBeforeServe(t *testing.T) {
	mgr := lease.NewManager(lease.NewMemoryStore(lease.MemoryStoreConfig{}), lease.DefaultConfig())
	defer mgr.Close()
	n := New(DefaultConfig(), mgr)
	if err := n.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve after Shutdown: %v", err)
		}
	case <-time.After(10 * time.Second):
		ln.Close()
		t.Fatal("Serve kept accepting after Shutdown")
	}
}
