package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

const (
	testClientToken = "client-secret"
	testAdminToken  = "admin-secret"
	holderA         = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	holderB         = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

const gatewayRules = `rules:
  - name: per-key
    algorithm: token_bucket
    limit: 100
    period: 1m
  - name: logged
    algorithm: sliding_log
    limit: 10
    period: 1m
  - name: half
    algorithm: gcra
    limit: 100
    period: 1m
    gateway_share: 0.5
`

var clientAuth = "Authorization: Bearer " + testClientToken

// newGatewayNode starts a node with the client and admin tokens set, over
// a MemoryStore on a frozen clock (so that nothing refills).
func newGatewayNode(t *testing.T) (*testNode, *lease.MemoryStore) {
	t.Helper()
	clock := testClock()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	cfg := DefaultConfig()
	cfg.ClientToken = testClientToken
	cfg.AdminToken = testAdminToken
	tn := newTestNodeConfig(t, gatewayRules, store, clock, cfg)
	// The flood limit on the same frozen clock: the tests that do not
	// look at it never exhaust it, the one that does sees no refill.
	tn.n.gw.now = clock.Now
	return tn, store
}

type leaseReply struct {
	Results []struct {
		Granted, Remaining, Lent int64
		WaitMS                   int64 `json:"wait_ms"`
		Checked, Crowded         int
		Error                    string
	}
}

func leaseBody(holder string, ops ...string) string {
	return `{"holder":"` + holder + `","ops":[` + strings.Join(ops, ",") + `]}`
}

func leaseOpJSON(rule, key string, want int64) string {
	return fmt.Sprintf(`{"op":"lease","rule":%q,"key":%q,"want":%d,"need":1,"ttl_ms":10000}`, rule, key, want)
}

func returnOpJSON(rule, key string, tokens int64) string {
	return fmt.Sprintf(`{"op":"return","rule":%q,"key":%q,"tokens":%d}`, rule, key, tokens)
}

func decodeLeaseReply(t *testing.T, r resp) leaseReply {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("lease: %d %s", r.status, r.body)
	}
	var lr leaseReply
	if err := json.Unmarshal([]byte(r.body), &lr); err != nil {
		t.Fatalf("lease reply %q: %v", r.body, err)
	}
	return lr
}

func TestLeaseProtocolOffWithoutClientToken(t *testing.T) {
	tn := newTestNode(t, gatewayRules)
	r := tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k", 1)), clientAuth)
	if r.status != 404 || !strings.Contains(r.body, "client-token") {
		t.Fatalf("without a client token: %d %s, want 404 naming -client-token", r.status, r.body)
	}
}

func TestLeaseClientTokenRequiredAndNeverAdmin(t *testing.T) {
	tn, _ := newGatewayNode(t)
	body := leaseBody(holderA, leaseOpJSON("per-key", "k", 1))
	if r := tn.do("POST", LeasePath, body); r.status != 401 {
		t.Errorf("no token: %d %s, want 401", r.status, r.body)
	}
	if r := tn.do("POST", LeasePath, body, "Authorization: Bearer wrong"); r.status != 403 {
		t.Errorf("wrong token: %d %s, want 403", r.status, r.body)
	}
	if r := tn.do("POST", LeasePath, body, "Authorization: Bearer "+testAdminToken); r.status != 403 {
		t.Errorf("admin token on the lease protocol: %d %s, want 403", r.status, r.body)
	}
	if r := tn.do("GET", LeaseRulesPath, ""); r.status != 401 {
		t.Errorf("rules without a token: %d %s, want 401", r.status, r.body)
	}
	// The client token administers nothing.
	for _, path := range []string{"/v1/rules", "/v1/stats", "/v1/hotkeys"} {
		if r := tn.do("GET", path, "", clientAuth); r.status != 403 {
			t.Errorf("GET %s with the client token: %d %s, want 403", path, r.status, r.body)
		}
	}
	if r := tn.do("PUT", "/v1/rules/x", `{"name":"x","algorithm":"token_bucket","limit":1,"period":"1s"}`, clientAuth); r.status != 403 {
		t.Errorf("PUT /v1/rules/x with the client token: %d %s, want 403", r.status, r.body)
	}
	if r := tn.do("POST", LeasePath, body, clientAuth); r.status != 200 {
		t.Errorf("client token: %d %s, want 200", r.status, r.body)
	}
}

// A gateway's loan counts against capacity like a node's: what gateways
// hold is not there for checks, and a holder's share is bounded.
func TestLeaseCountsAgainstCapacityWithShareBound(t *testing.T) {
	tn, _ := newGatewayNode(t)
	// Asking for far more than the capacity gets the share (100/4), not
	// an error.
	lr := decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k", 1000)), clientAuth))
	if g := lr.Results[0]; g.Granted != 25 || g.Lent != 25 || g.Remaining != 75 || g.Error != "" {
		t.Fatalf("first lease: %+v, want 25 granted (the share), 25 lent, 75 remaining", g)
	}
	// Holding its share, the holder is lent no more: the check that
	// asked is decided as a check (its token spent at once), and the
	// loan stays at the share.
	lr = decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA,
		`{"op":"lease","rule":"per-key","key":"k","want":50,"need":1,"held":25,"ttl_ms":10000}`), clientAuth))
	if g := lr.Results[0]; g.Granted != 1 || g.Lent != 25 || g.Checked != 1 {
		t.Fatalf("lease while holding the share: %+v, want 1 granted as a check, 25 lent", g)
	}
	// A rule's gateway_share sets the bound.
	lr = decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("half", "k", 1000)), clientAuth))
	if g := lr.Results[0]; g.Granted != 50 {
		t.Fatalf("lease of a rule with gateway_share 0.5: %+v, want 50 granted", g)
	}
	// The node's own checks see only what the gateway does not hold.
	if r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"k","hits":75}`); !strings.Contains(r.body, `"allowed":false`) {
		t.Fatalf("a check of 75 while a gateway holds 25 of 100 and spent 1: %s, want denied", r.body)
	}
	if r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"k","hits":74}`); !strings.Contains(r.body, `"allowed":true`) {
		t.Fatalf("a check of the 74 left: %s, want allowed", r.body)
	}
}

// A peek lends nothing, and leaves the holder's loan as it was.
func TestLeasePeekLendsNothing(t *testing.T) {
	tn, _ := newGatewayNode(t)
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k", 10)), clientAuth))
	for range 3 {
		lr := decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA,
			`{"op":"peek","rule":"per-key","key":"k"}`), clientAuth))
		if g := lr.Results[0]; g.Granted != 0 || g.Remaining != 90 || g.Error != "" {
			t.Fatalf("peek: %+v, want nothing granted and the 90 not lent remaining", g)
		}
	}
	// The holder still holds its 10: a lease of 1 more says so.
	lr := decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA,
		`{"op":"lease","rule":"per-key","key":"k","want":1,"need":1,"held":10,"ttl_ms":10000}`), clientAuth))
	if g := lr.Results[0]; g.Granted != 1 || g.Lent != 11 || g.Remaining != 89 {
		t.Fatalf("lease after the peeks: %+v, want 1 granted, 11 lent, 89 remaining", g)
	}
}

// A holder acts on its own loans only: another holder's return gives
// back nothing of them.
func TestLeaseHolderIsolation(t *testing.T) {
	tn, store := newGatewayNode(t)
	lr := decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k", 25)), clientAuth))
	if lr.Results[0].Granted != 25 {
		t.Fatalf("lease: %+v", lr.Results[0])
	}
	remaining := func() int64 {
		g, err := store.Lease(t.Context(), "per-key:k", lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Minute}, 1, 0, lease.Lessee{})
		if err != nil {
			t.Fatal(err)
		}
		return g.Remaining + g.Granted
	}
	// B returns "A's" tokens: nothing comes back.
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderB, returnOpJSON("per-key", "k", 25)), clientAuth))
	if got := remaining(); got != 75 {
		t.Fatalf("after another holder's return: %d available, want 75 (A's loan untouched)", got)
	}
	// A node's holder ids are out of reach: a gateway's are namespaced.
	if !strings.HasPrefix(tn.n.gw.ns, "gw.") {
		t.Fatalf("namespace %q", tn.n.gw.ns)
	}
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, returnOpJSON("per-key", "k", 25)), clientAuth))
	if got := remaining(); got != 99 { // the probe above took 1
		t.Fatalf("after A's return: %d available, want 99", got)
	}
}

func TestLeaseBadInput(t *testing.T) {
	tn, _ := newGatewayNode(t)
	for _, c := range []struct{ body, field, msg string }{
		{leaseBody(holderA, `{"op":"lease","rule":"per-key","key":"k","want":-1,"ttl_ms":10000}`), "ops[0].want", ""},
		{leaseBody(holderA, leaseOpJSON("per-key", "k", 0)), "ops[0].need", "must be ≤ want"},
		{leaseBody("nothex", leaseOpJSON("per-key", "k", 1)), "holder", ""},
		{leaseBody(holderA, leaseOpJSON("per-key", "k", 1), leaseOpJSON("nope", "k", 1)), "ops[1].rule", "unknown rule"},
		{leaseBody(holderA, leaseOpJSON("logged", "k", 1)), "ops[0].rule", "is exact (sliding_log): send its checks"},
		{leaseBody(holderA, `{"op":"lease","rule":"per-key","key":"k","want":1,"ttl_ms":600000}`), "ops[0].ttl_ms", ""},
	} {
		r := tn.do("POST", LeasePath, c.body, clientAuth)
		m := map[string]any{}
		_ = json.Unmarshal([]byte(r.body), &m)
		if r.status != 400 || m["field"] != c.field || !strings.Contains(r.body, c.msg) {
			t.Errorf("%.70s…: %d %s, want 400 naming %s (%q)", c.body, r.status, r.body, c.field, c.msg)
		}
	}
	// Nothing half applied: a request with a bad second op leased nothing.
	lr := decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k", 25)), clientAuth))
	if lr.Results[0].Remaining != 75 {
		t.Fatalf("a refused request was half applied: %+v", lr.Results[0])
	}
}

// The flood bound counts ops, not requests (a busy gateway sends many
// small requests): a request past it is refused whole, nothing applied.
func TestLeaseFloodIsLimited(t *testing.T) {
	tn, store := newGatewayNode(t)
	tn.n.gw.flood = rate.NewLimiter(3, 3) // 3 ops, a burst of 3, on a frozen clock
	two := leaseBody(holderA, leaseOpJSON("per-key", "a", 1), leaseOpJSON("per-key", "b", 1))
	if r := tn.do("POST", LeasePath, two, clientAuth); r.status != 200 {
		t.Fatalf("two ops of three: %d %s", r.status, r.body)
	}
	r := tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "c", 1), leaseOpJSON("per-key", "d", 1)), clientAuth)
	if r.status != 429 || r.hdr["Retry-After"] == "" {
		t.Fatalf("two more ops with one left: %d %v %s, want 429 with Retry-After", r.status, r.hdr, r.body)
	}
	if got := available(t, store, "per-key:c"); got != 100 {
		t.Fatalf("a refused request was applied: per-key:c has %d, want 100", got)
	}
	if r := tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "e", 1)), clientAuth); r.status != 200 {
		t.Fatalf("the one op left: %d %s", r.status, r.body)
	}
}

func TestLeaseRulesAndETag(t *testing.T) {
	tn, _ := newGatewayNode(t)
	r := tn.do("GET", LeaseRulesPath, "", clientAuth)
	if r.status != 200 || !strings.Contains(r.body, `"per-key"`) || !strings.Contains(r.body, `"sliding_log"`) {
		t.Fatalf("lease rules: %d %s", r.status, r.body)
	}
	etag := r.hdr["Etag"]
	if etag == "" {
		t.Fatalf("no ETag: %v", r.hdr)
	}
	if r := tn.do("GET", LeaseRulesPath, "", clientAuth, "If-None-Match: "+etag); r.status != 304 {
		t.Fatalf("If-None-Match of the current version: %d", r.status)
	}
	tn.n.SetRules(mustParse(t, gatewayRules+`  - name: more
    algorithm: gcra
    limit: 5
    period: 1s
`))
	r = tn.do("GET", LeaseRulesPath, "", clientAuth, "If-None-Match: "+etag)
	if r.status != 200 || r.hdr["Etag"] == etag || !strings.Contains(r.body, `"more"`) {
		t.Fatalf("after a reload: %d %s (etag %s → %s)", r.status, r.body, etag, r.hdr["Etag"])
	}
}

func TestLeaseStatsAndMetrics(t *testing.T) {
	tn, _ := newGatewayNode(t)
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k", 10)), clientAuth))
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA,
		`{"op":"lease","rule":"per-key","key":"k","want":5,"need":1,"held":4,"spent_before":6,"ttl_ms":10000}`), clientAuth))
	st := tn.n.eng.LeaseStats()["per-key"]
	if st.Granted != 15 || st.Reported != 6 || st.Gateways != 9 {
		t.Fatalf("gateway stats %+v, want 15 granted, 6 reported, 9 lent (4 held + 5)", st)
	}
	r := tn.do("GET", "/metrics", "")
	for _, want := range []string{`sluice_gateway_tokens_lent{rule="per-key"} 9`, `sluice_gateway_decisions_reported_total{rule="per-key"} 6`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if r := tn.do("GET", "/v1/stats?scope=node", "", "Authorization: Bearer "+testAdminToken); !strings.Contains(r.body, `"gateway":{"per-key":{"gateways":9`) {
		t.Errorf("/v1/stats: %s", r.body)
	}
}

// /v1/stats lists the holders a node lends to, with what each holds by
// rule, the most first; a holder that returned everything is gone.
func TestLeaseStatsListHolders(t *testing.T) {
	tn, _ := newGatewayNode(t)
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA,
		leaseOpJSON("per-key", "k1", 10), leaseOpJSON("per-key", "k2", 5), leaseOpJSON("half", "k1", 20)), clientAuth))
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderB, leaseOpJSON("per-key", "k1", 3)), clientAuth))
	holders := func() statsBody {
		t.Helper()
		r := tn.do("GET", "/v1/stats?scope=node", "", "Authorization: Bearer "+testAdminToken)
		var b statsBody
		if err := json.Unmarshal([]byte(r.body), &b); err != nil || r.status != 200 {
			t.Fatalf("/v1/stats: %d %s: %v", r.status, r.body, err)
		}
		return b
	}
	b := holders()
	if len(b.GatewayHolders) != 2 {
		t.Fatalf("holders %+v, want A and B", b.GatewayHolders)
	}
	a, bh := b.GatewayHolders[0], b.GatewayHolders[1]
	if a.Holder != api.HolderPublicID(holderA) || a.Lent != 35 || a.Keys != 3 || a.Rules["per-key"] != 15 || a.Rules["half"] != 20 || a.Node != b.Self || a.UntilMS <= 0 {
		t.Errorf("first holder %+v, want A: 35 lent on 3 keys, per-key 15, half 20, lent by %s", a, b.Self)
	}
	if bh.Holder != api.HolderPublicID(holderB) || bh.Lent != 3 || bh.Rules["per-key"] != 3 {
		t.Errorf("second holder %+v, want B: 3 lent of per-key", bh)
	}
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA,
		returnOpJSON("per-key", "k1", 10), returnOpJSON("per-key", "k2", 5), returnOpJSON("half", "k1", 20)), clientAuth))
	if b := holders(); len(b.GatewayHolders) != 1 || b.GatewayHolders[0].Holder != api.HolderPublicID(holderB) {
		t.Errorf("holders after A returned all: %+v, want B alone", b.GatewayHolders)
	}
}

// In a cluster whose nodes each keep their own memory Store, a lease call
// is served by the key's owner, whichever node the gateway asked.
func TestLeaseRoutedToOwner(t *testing.T) {
	stores := map[string]*lease.MemoryStore{}
	for _, name := range []string{"a", "b"} {
		stores[name] = lease.NewMemoryStore(lease.MemoryStoreConfig{})
		t.Cleanup(func() { stores[name].Close() })
	}
	nodes := newClusterNodesWith(t, func(name string) lease.Store { return stores[name] }, map[string]string{"a": gatewayRules, "b": gatewayRules})
	owner := nodes["a"].n.eng.Routes().Ring.Owner("per-key:k")
	other := "a"
	if owner == "a" {
		other = "b"
	}
	post := func(cn *clusterNode, holder string) leaseReply {
		req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(res)
		req.SetRequestURI("http://" + cn.addr + LeasePath)
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer "+testClientToken)
		req.SetBodyString(leaseBody(holder, leaseOpJSON("per-key", "k", 100)))
		if err := cn.client.DoTimeout(req, res, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		return decodeLeaseReply(t, resp{status: res.StatusCode(), body: string(res.Body())})
	}
	// Four holders take the whole capacity through the node that does
	// not own the key; a fifth, asking the owner, gets nothing: both
	// nodes used the owner's Store.
	for i := range 4 {
		h := strings.Repeat(fmt.Sprint(i), 32)
		if g := post(nodes[other], h).Results[0]; g.Granted != 25 || g.Error != "" {
			t.Fatalf("holder %d through %s: %+v", i, other, g)
		}
	}
	if g := post(nodes[owner], strings.Repeat("9", 32)).Results[0]; g.Granted != 0 {
		t.Fatalf("fifth holder through the owner: %+v, want nothing left", g)
	}
	if g, _ := stores[other].Lease(t.Context(), "per-key:k", lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Minute}, 1, 0, lease.Lessee{}); g.Remaining != 99 {
		t.Fatalf("the non-owner's Store was used: %+v", g)
	}
}

// A gateway's fixed_window lease op may ask shares of the next windows:
// the node lends them within the gateway's share of the limit and no
// further ahead than a gateway's longest TTL, and its own checks then see
// the share counted in each window; an op asking none gets none.
func TestLeaseSharesAhead(t *testing.T) {
	clock := testClock() // a window start: 2026-01-01T00:00:00Z
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	cfg := DefaultConfig()
	cfg.ClientToken = testClientToken
	cfg.AdminToken = testAdminToken
	tn := newTestNodeConfig(t, "rules:\n  - name: fw\n    algorithm: fixed_window\n    limit: 100\n    period: 1s\n", store, clock, cfg)

	var lr struct {
		Results []struct {
			Granted, Lent int64
			AheadTokens   int64 `json:"ahead_tokens"`
			AheadWindows  int64 `json:"ahead_windows"`
			Error         string
		}
	}
	post := func(op string) {
		t.Helper()
		r := tn.do("POST", LeasePath, leaseBody(holderA, op), clientAuth)
		if r.status != 200 {
			t.Fatalf("lease: %d %s", r.status, r.body)
		}
		lr.Results = nil
		if err := json.Unmarshal([]byte(r.body), &lr); err != nil || len(lr.Results) != 1 || lr.Results[0].Error != "" {
			t.Fatalf("lease reply %s: %v", r.body, err)
		}
	}
	post(`{"op":"lease","rule":"fw","key":"k","want":1,"need":1,"ttl_ms":10000,"ahead_windows":1000,"ahead_tokens":50}`)
	if g := lr.Results[0]; g.Granted != 1 || g.AheadTokens != 25 || g.AheadWindows != 60 {
		t.Fatalf("lease asking 50 of each of 1000 windows: %+v, want 1 granted and 25 (the gateway's share of 100) of each of 60 windows (60s, a gateway's longest TTL)", g)
	}
	for _, w := range []int{1, 60} {
		clock.Set(time.Date(2026, 1, 1, 0, 0, w, 0, time.UTC))
		if r := tn.do("POST", "/v1/check", `{"rule":"fw","key":"k","hits":76}`); !strings.Contains(r.body, `"allowed":false`) {
			t.Fatalf("window %d: a check of 76 with the gateway's share of 25 counted: %s, want denied", w, r.body)
		}
		if r := tn.do("POST", "/v1/check", `{"rule":"fw","key":"k","hits":75}`); !strings.Contains(r.body, `"allowed":true`) {
			t.Fatalf("window %d: a check of the 75 left: %s, want allowed", w, r.body)
		}
	}
	clock.Set(time.Date(2026, 1, 1, 0, 1, 1, 0, time.UTC))
	if r := tn.do("POST", "/v1/check", `{"rule":"fw","key":"k","hits":100}`); !strings.Contains(r.body, `"allowed":true`) {
		t.Fatalf("window 61, past the shares: a check of 100: %s, want allowed", r.body)
	}
	post(`{"op":"lease","rule":"fw","key":"k2","want":1,"need":1,"ttl_ms":10000}`)
	if g := lr.Results[0]; g.Granted != 1 || g.AheadTokens != 0 || g.AheadWindows != 0 {
		t.Fatalf("lease asking nothing ahead: %+v, want none", g)
	}
}

func TestLeaseAheadBoundMatchesTheEngine(t *testing.T) {
	if api.MaxAheadWindows != lease.MaxAheadWindows {
		t.Fatalf("api.MaxAheadWindows %d, lease.MaxAheadWindows %d: the wire must bound what the engine accepts", api.MaxAheadWindows, lease.MaxAheadWindows)
	}
}
