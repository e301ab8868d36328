package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/member/netsim"
	"github.com/sluicehq/sluice/node/upstream"
)

// The global tier's rules: g and h are global (counted for every region
// by the global tier).
const globalRules = `rules:
  - name: g
    algorithm: token_bucket
    limit: 100
    period: 1h
    scope: global
    regional_floor: 0.1
  - name: h
    algorithm: token_bucket
    limit: 100
    period: 1h
    scope: global
`

// A region's rules: g as the global tier has it, and r its own.
const regionRules = globalRules + `  - name: r
    algorithm: token_bucket
    limit: 5
    period: 1h
`

const upstreamToken = "upstream-client-token"

// regionNode is one sluiced started in-process by a regions test.
type regionNode struct {
	d     *daemon
	base  string
	rules string // its rule file
}

// startRegionNode starts a single sluiced with rules and args (in this
// process: the tests cut its link to the global tier with a proxy).
func startRegionNode(t *testing.T, rules string, args ...string) (*regionNode, error) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, rules)
	o, err := parseOptions(append([]string{"-listen", "127.0.0.1:0", "-rules", path}, args...), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	d, err := start(o, log, hooks{upstream: func(c *upstream.Config) { c.Probe, c.RulesPoll = 50*time.Millisecond, 50*time.Millisecond }})
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { d.stop(true) })
	return &regionNode{d: d, base: "http://" + d.ln.Addr().String(), rules: path}, nil
}

// check sends one check and returns its status.
func (n *regionNode) check(t *testing.T, rule, key string, hits int) (int, map[string]any) {
	t.Helper()
	res, err := http.Post(n.base+"/v1/check", "application/json",
		strings.NewReader(`{"rule":"`+rule+`","key":"`+key+`","hits":`+strconv.Itoa(hits)+`}`))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

// admit sends n checks of one hit and counts the allowed ones; any answer
// but 200 and 429 fails the test.
func (n *regionNode) admit(t *testing.T, rule, key string, count int) int {
	t.Helper()
	ok := 0
	for range count {
		switch st, m := n.check(t, rule, key, 1); st {
		case http.StatusOK:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("check %s %s: %d %v, want 200 or 429", rule, key, st, m)
		}
	}
	return ok
}

func (n *regionNode) get(t *testing.T, path string) (int, string) {
	t.Helper()
	res, err := http.Get(n.base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// startTiers starts the global tier and, behind a cuttable proxy each,
// regions regional nodes whose keys return their tokens after idle.
func startTiers(t *testing.T, regions int, idle string) (global *regionNode, nodes []*regionNode, proxies []*netsim.Proxy) {
	t.Helper()
	global, err := startRegionNode(t, globalRules, "-client-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	for i := range regions {
		p, err := netsim.NewProxy(global.d.ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		n, err := startRegionNode(t, regionRules, "-upstream", "http://"+p.Addr(), "-upstream-token", upstreamToken,
			"-region", "region-"+strconv.Itoa(i), "-lease-idle", idle)
		if err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
		proxies = append(proxies, p)
	}
	return global, nodes, proxies
}

// A global rule is counted once for all regions; a region rule by each
// region alone.
func TestRegionsGlobalLimit(t *testing.T) {
	// A short idle: a region that stopped checking a key gives its
	// tokens back at once, for the next region's checks.
	_, nodes, _ := startTiers(t, 2, "200ms")
	a, b := nodes[0], nodes[1]
	if got := a.admit(t, "g", "k", 60); got != 60 {
		t.Fatalf("region a admitted %d of 60 checks of a global key with limit 100 untouched", got)
	}
	lentMetric := func(n *regionNode) string {
		_, met := n.get(t, "/metrics")
		for line := range strings.SplitSeq(met, "\n") {
			if v, ok := strings.CutPrefix(line, `sluice_upstream_tokens_lent{rule="g"} `); ok {
				return v
			}
		}
		return ""
	}
	if v := lentMetric(a); v == "" || v == "0" {
		t.Errorf("sluice_upstream_tokens_lent{rule=\"g\"} in a: %q, want what it holds of k", v)
	}
	// a may hold the rest of the key's tokens (its lease) until it has
	// not checked the key for -lease-idle; then it gives them back, for b.
	// (sluice_upstream_tokens_lent then drops the rule).
	clocktest.Eventually(t, waitBound, "a to give its tokens back", func() bool {
		return a.d.upstream.Manager().Stats().ActiveKeys == 0 && lentMetric(a) == ""
	})
	gotB := 0
	gotB += b.admit(t, "g", "k", 100)
	if total := 60 + gotB; total > 100 || total < 95 {
		t.Fatalf("global key: regions admitted 60 + %d, want the limit 100 in all, within 5%%", gotB)
	}
	if got := a.admit(t, "r", "k", 10); got != 5 {
		t.Fatalf("region rule in a: %d admitted, want its limit 5", got)
	}
	if got := b.admit(t, "r", "k", 10); got != 5 {
		t.Fatalf("region rule in b: %d admitted, want its own limit 5 (counted in b alone)", got)
	}
	st, body := a.get(t, "/readyz")
	if st != http.StatusOK || !strings.Contains(body, `"upstream":{"reachable":true}`) {
		t.Fatalf("/readyz: %d %s, want ready with the upstream reachable", st, body)
	}
	_, met := a.get(t, "/metrics")
	for _, want := range []string{"sluice_upstream_reachable 1", "sluice_upstream_rtt_seconds "} {
		if !strings.Contains(met, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A region cut off from the global tier answers no 5xx, admits at most
// the rule's regional floor beyond what it holds, and charges what it
// admitted to the global tier when the link returns; the other region
// is not affected.
func TestRegionsCutOff(t *testing.T) {
	// An idle longer than the test: a key that goes idle during the cut
	// leaves the Manager, and its local admissions with it (their charge
	// fails while cut off).
	global, nodes, proxies := startTiers(t, 2, "1m")
	a, b := nodes[0], nodes[1]
	if got := a.admit(t, "g", "k", 1); got != 1 {
		t.Fatal("the first check was denied")
	}
	proxies[0].Cut()
	// Cut off: what a holds (its lease), then at most the floor (10% of
	// 100) from its own memory.
	cutAdmitted := a.admit(t, "g", "k", 60)
	lent := float64(100)
	_, m := global.check(t, "g", "k", 0)
	lent -= m["remaining"].(float64) // what the global tier lent a
	t.Logf("cut off: admitted %d of 60 checks, holding %v lent before the cut (1 spent)", cutAdmitted, lent)
	if max := int(lent) - 1 + 10; cutAdmitted > max {
		t.Fatalf("cut off: admitted %d, want at most the %v it held less the first check, plus the floor 10", cutAdmitted, lent)
	}
	if got := b.admit(t, "h", "k", 5); got != 5 {
		t.Fatalf("region b, cut off from nothing: %d of 5 admitted", got)
	}
	clocktest.Eventually(t, waitBound, "/readyz to show the upstream unreachable", func() bool {
		st, body := a.get(t, "/readyz")
		return st == http.StatusOK && strings.Contains(body, `"reachable":false`)
	})
	proxies[0].Restore()
	// Once the link is back, a's local admissions are charged to the
	// global tier (when the breaker closes, or at the key's next lease):
	// then what remains there plus what it lends is the limit less all a
	// admitted (without the charge, 10 more: the floor a admitted). One
	// token of slack: the key refills one token per 36s meanwhile.
	admitted := 1 + cutAdmitted
	clocktest.Eventually(t, waitBound, "a's admissions to be charged upstream", func() bool {
		admitted += a.admit(t, "g", "k", 1)
		_, m := global.check(t, "g", "k", 0)
		return m["remaining"].(float64)+lentOf(t, global, "g") <= float64(100-admitted+1)
	})
	// The other region was not affected.
	if got := b.admit(t, "h", "k", 5); got != 5 {
		t.Fatalf("region b after the cut: %d of 5 admitted", got)
	}
}

// lentOf is what n lends gateways and regions of rule, by its /v1/stats.
func lentOf(t *testing.T, n *regionNode, rule string) float64 {
	t.Helper()
	_, body := n.get(t, "/v1/stats")
	var st struct {
		Gateway map[string]struct {
			Lent float64 `json:"lent"`
		} `json:"gateway"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/v1/stats: %v: %s", err, body)
	}
	return st.Gateway[rule].Lent
}

// A wrong upstream is an error at start, naming the fault; so is a
// global rule the global tier does not have as written.
func TestRegionsStartFailures(t *testing.T) {
	global, err := startRegionNode(t, globalRules, "-client-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	notSluice := httptest.NewServer(http.NotFoundHandler())
	defer notSluice.Close()
	up := "http://" + global.d.ln.Addr().String()
	changed := strings.Replace(regionRules, "limit: 100", "limit: 200", 1)
	missing := strings.Replace(regionRules, "name: g", "name: g2", 1)
	for _, c := range []struct {
		name, rules, url, token, want string
	}{
		{"wrong token", regionRules, up, "nope", "refused the token"},
		{"unreachable", regionRules, "http://127.0.0.1:1", upstreamToken, "cannot be reached"},
		{"not sluice", regionRules, notSluice.URL, upstreamToken, "not a Sluice cluster"},
		{"rule differs", changed, up, upstreamToken, `rule "g": scope: global, but the global tier's rule differs`},
		{"rule missing", missing, up, upstreamToken, `rule "g2": scope: global, but the global tier (-upstream) has no rule`},
	} {
		_, err := startRegionNode(t, c.rules, "-upstream", c.url, "-upstream-token", c.token)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: start: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// In a region of several nodes, each key of a global rule is leased by
// its owner; when a node joins and keys move to it, their former owner
// gives their tokens back to the global tier at once.
func TestRegionsClusterHandoff(t *testing.T) {
	global, err := startRegionNode(t, globalRules, "-client-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	tc := newTestCluster(t, regionRules)
	tc.member = steadyMembership
	// An idle longer than the test: only the handoff returns tokens.
	tc.args = []string{"-upstream", "http://" + global.d.ln.Addr().String(), "-upstream-token", upstreamToken,
		"-region", "eu", "-lease-idle", "1m"}
	a := tc.start("a")
	tc.converge("a", a)
	const keys = 20
	for i := range keys {
		res, err := tc.http.Post(a.base+"/v1/check", "application/json", strings.NewReader(`{"rule":"g","key":"k`+strconv.Itoa(i)+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Fatalf("check k%d: %d", i, res.StatusCode)
		}
	}
	up := a.d.upstream.Manager()
	if n := up.Stats().ActiveKeys; n != keys {
		t.Fatalf("a holds leases of %d keys, want %d", n, keys)
	}
	b := tc.start("b", a)
	tc.converge("a,b", a, b)
	kept := 0
	for i := range keys {
		if a.d.node.Ring().Owner("g:k"+strconv.Itoa(i)) == "a" {
			kept++
		}
	}
	if kept == keys {
		t.Fatal("no key moved to b")
	}
	clocktest.Eventually(t, waitBound, "a to give back the keys that moved", func() bool {
		return up.Stats().ActiveKeys == int64(kept)
	})
}

// A regional node lends its region rules to gateways, never a global
// rule (it holds those of the global tier): 400 naming the op's rule.
func TestRegionsGatewayLease(t *testing.T) {
	global, err := startRegionNode(t, globalRules, "-client-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	n, err := startRegionNode(t, regionRules, "-upstream", "http://"+global.d.ln.Addr().String(),
		"-upstream-token", upstreamToken, "-client-token", "region-client-token")
	if err != nil {
		t.Fatal(err)
	}
	lease := func(rule string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, n.base+"/v1/lease", strings.NewReader(
			`{"holder":"0123456789abcdef0123456789abcdef","ops":[{"op":"lease","rule":"`+rule+`","key":"k","want":2,"need":1,"ttl_ms":1000}]}`))
		req.Header.Set("Authorization", "Bearer region-client-token")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if st, body := lease("g"); st != http.StatusBadRequest || !strings.Contains(body, "ops[0].rule") || !strings.Contains(body, "global") {
		t.Errorf("lease of a global rule from a regional node: %d %s, want 400 naming ops[0].rule", st, body)
	}
	if st, body := lease("r"); st != http.StatusOK || !strings.Contains(body, `"granted":1`) {
		t.Errorf("lease of a region rule: %d %s, want 1 granted (a quarter of its capacity 5)", st, body)
	}
}

// When the global tier changes a global rule, a region whose copy now
// differs says so (/readyz, sluice_upstream_rules_differ, the log) until
// they agree again.
func TestRegionsRulesDiffer(t *testing.T) {
	global, err := startRegionNode(t, globalRules, "-client-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	n, err := startRegionNode(t, regionRules, "-upstream", "http://"+global.d.ln.Addr().String(), "-upstream-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	differ := func() bool {
		_, body := n.get(t, "/readyz")
		_, met := n.get(t, "/metrics")
		return strings.Contains(body, `"reachable":true,"error":"rule \"g\": scope: global, but the global tier's rule differs`) &&
			strings.Contains(met, "sluice_upstream_rules_differ 1")
	}
	if differ() {
		t.Fatal("the rules differ before any change")
	}
	writeFile(t, global.rules, strings.Replace(globalRules, "limit: 100", "limit: 200", 1))
	global.d.rl.reload(true) // as SIGHUP does (in-process nodes poll no file)
	clocktest.Eventually(t, waitBound, "the region to report that g differs", differ)
	writeFile(t, global.rules, globalRules)
	global.d.rl.reload(true)
	clocktest.Eventually(t, waitBound, "the region to agree again", func() bool {
		_, body := n.get(t, "/readyz")
		_, met := n.get(t, "/metrics")
		return strings.Contains(body, `"upstream":{"reachable":true}`) && strings.Contains(met, "sluice_upstream_rules_differ 0")
	})
}
