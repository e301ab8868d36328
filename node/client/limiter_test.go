package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/lua/redistest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

const limiterToken = "client-secret"

const limiterRules = `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 1000
    period: 1m
    descriptor: api_key
  - name: logged
    algorithm: sliding_log
    limit: 2
    period: 1h
  - name: open-on-failure
    algorithm: token_bucket
    limit: 100
    period: 1m
    on_store_failure: open
`

// limiterNode is a real node serving the lease protocol on loopback.
type limiterNode struct {
	n    *node.Node
	mgr  *lease.Manager
	addr string
	stop func()
}

// startLimiterNode starts a node over store with the client token.
func startLimiterNode(t *testing.T, store lease.Store, clock *clocktest.Clock, yml string) *limiterNode {
	t.Helper()
	mcfg := lease.DefaultConfig()
	mcfg.Now = clock.Now
	mcfg.StoreTimeout = 10 * time.Second // a loaded -race machine: routing, not timeouts, is under test
	mgr := lease.NewManager(store, mcfg)
	cfg := node.DefaultConfig()
	cfg.ClientToken = limiterToken
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	ln2 := &limiterNode{n: n, mgr: mgr, addr: ln.Addr().String()}
	var once sync.Once
	ln2.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
			<-served
			mgr.Close()
		})
	}
	t.Cleanup(ln2.stop)
	return ln2
}

func newLimiter(t *testing.T, clock *clocktest.Clock, addrs ...string) *client.Limiter {
	t.Helper()
	cfg := client.LimiterConfig{Nodes: addrs, Token: limiterToken, Timeout: 10 * time.Second}
	cfg.Lease.Now = clock.Now
	cfg.Lease.AfterFunc = clock.AfterFunc
	cfg.Lease.SweepInterval = -1
	for i := range cfg.Nodes {
		cfg.Nodes[i] = "http://" + cfg.Nodes[i]
	}
	l, err := client.NewLimiter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// lentGauge reads sluice_gateway_tokens_lent of rule from a node.
func lentGauge(t *testing.T, addr, rule string) int64 {
	t.Helper()
	res, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`sluice_gateway_tokens_lent\{rule="` + rule + `"\} (\d+)`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// The contract end to end: three gateways on three nodes sharing one
// Store, one saturated key, a frozen clock (nothing refills): the
// gateways admit exactly the limit in total: never over, and no token
// stranded.
func TestLimiterThreeGatewaysNeverOverAdmit(t *testing.T) {
	clock := clocktest.New()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	threeGateways(t, store, clock)
}

// The same over a real Redis whose clock is frozen (the Lua scripts read
// the server's TIME).
func TestLimiterThreeGatewaysNeverOverAdmitRedis(t *testing.T) {
	_, store, clock := frozenRedisStore(t)
	threeGateways(t, store, clock)
}

// frozenRedisStore is a Redis store on a redis-server whose clock is
// frozen, and a clock at the server's time for the nodes and gateways.
func frozenRedisStore(t *testing.T) (*redistest.Server, *lua.Store, *clocktest.Clock) {
	t.Helper()
	srv, rclock := redistest.StartWithClock(t, clocktest.Epoch)
	store, err := lua.NewStore(lua.Config{Addrs: []string{srv.Addr}, Clock: rclock.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return srv, store, clocktest.At(rclock.Now())
}

func threeGateways(t *testing.T, store lease.Store, clock *clocktest.Clock) {
	var lims []*client.Limiter
	for range 3 {
		n := startLimiterNode(t, store, clock, limiterRules)
		lims = append(lims, newLimiter(t, clock, n.addr))
	}
	// Each goroutine checks until its first denial. A Limiter denies a
	// check only when it holds no token of the key and the Store granted
	// none (every token is spent or lent to another gateway), and with the
	// clock frozen it asks no more and nothing refills or goes back idle:
	// so when every goroutine has stopped, every token lent was spent by
	// the gateway that held it, and the gateways admitted the whole limit,
	// not just most of it. A token stranded in a gateway (a lease sized or
	// returned wrongly, a grant miscounted on the way) shows as a
	// shortfall.
	const limit, maxChecks = 1000, 2 * 1000
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for _, l := range lims {
		for range 4 {
			wg.Go(func() {
				for range maxChecks {
					d, err := l.Allow(t.Context(), "per-key", "hot", 1)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						return
					}
					admitted.Add(1)
				}
				t.Errorf("%d checks allowed to one goroutine, more than the limit of %d", maxChecks, limit)
			})
		}
	}
	wg.Wait()
	got := admitted.Load()
	t.Logf("admitted %d of %d", got, limit)
	if got > limit {
		t.Fatalf("admitted %d, over the limit of %d", got, limit)
	}
	if got < limit {
		t.Fatalf("admitted %d of %d: tokens stranded", got, limit)
	}
}

// Close gives back what the Limiter holds: the node's count of tokens
// lent to gateways drops to zero.
func TestLimiterCloseReturnsWhatItHolds(t *testing.T) {
	clock := clocktest.New()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	n := startLimiterNode(t, store, clock, limiterRules)
	l := newLimiter(t, clock, n.addr)
	d, err := l.Allow(t.Context(), "per-key", "k", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("Allow: %+v, %v", d, err)
	}
	if got := lentGauge(t, n.addr, "per-key"); got <= 0 || got > 250 {
		t.Fatalf("lent to the gateway after one check: %d, want 1..250 (the share)", got)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if got := lentGauge(t, n.addr, "per-key"); got != 0 {
		t.Fatalf("lent after Close: %d, want 0", got)
	}
	if _, err := l.Allow(t.Context(), "per-key", "k", 1); err == nil {
		t.Fatal("Allow after Close succeeded")
	}
}

// Exact rules go as checks (the lease endpoint refuses them); unknown
// rules and bad keys are errors; descriptors match the nodes' rules.
func TestLimiterExactUnknownAndDescriptors(t *testing.T) {
	clock := clocktest.New()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	n := startLimiterNode(t, store, clock, limiterRules)
	l := newLimiter(t, clock, n.addr)
	for i, want := range []bool{true, true, false} {
		d, err := l.Allow(t.Context(), "logged", "k", 1)
		if err != nil || d.Allowed != want {
			t.Fatalf("sliding_log check %d: %+v, %v; want allowed=%v", i, d, err, want)
		}
	}
	if _, err := l.Allow(t.Context(), "nope", "k", 1); !errors.Is(err, client.ErrUnknownRule) {
		t.Fatalf("unknown rule: %v", err)
	}
	if _, err := l.Allow(t.Context(), "per-key", "", 1); err == nil {
		t.Fatal("empty key accepted")
	}
	d, err := l.AllowDescriptors(t.Context(), []api.Descriptor{{Name: "api_key", Value: "k9"}}, 1)
	if err != nil || !d.Allowed || d.Rule != "per-key" || d.Limit != 1000 {
		t.Fatalf("descriptors: %+v, %v", d, err)
	}
}

// When no node answers, a rule's on_store_failure applies in the
// gateway: open admits (degraded).
func TestLimiterNodeDownFollowsOnStoreFailure(t *testing.T) {
	clock := clocktest.New()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	n := startLimiterNode(t, store, clock, limiterRules)
	l := newLimiter(t, clock, n.addr)
	n.stop()
	d, err := l.Allow(t.Context(), "open-on-failure", "k", 1)
	if err != nil || !d.Allowed || !d.Degraded {
		t.Fatalf("open rule with no node: %+v, %v; want allowed and degraded", d, err)
	}
}

// The middleware answers 429 with Retry-After and the RateLimit headers.
func TestLimiterMiddleware(t *testing.T) {
	clock := clocktest.New()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	n := startLimiterNode(t, store, clock, limiterRules)
	l := newLimiter(t, clock, n.addr)
	h := l.Middleware(client.MiddlewareConfig{Rule: "logged", Key: client.KeyFromHeader("X-API-Key")},
		http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	codes := []int{}
	var last *httptest.ResponseRecorder
	for range 3 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", "user-1")
		last = httptest.NewRecorder()
		h.ServeHTTP(last, r)
		codes = append(codes, last.Code)
	}
	if fmt.Sprint(codes) != "[200 200 429]" {
		t.Fatalf("codes %v, want [200 200 429]", codes)
	}
	for _, hd := range []string{"Retry-After", "RateLimit", "RateLimit-Policy", "X-RateLimit-Limit"} {
		if last.Header().Get(hd) == "" {
			t.Errorf("429 lacks %s: %v", hd, last.Header())
		}
	}
}

// Allow's fast path (a key whose tokens the Limiter holds, decided with
// no validation and no Store call) agrees with its full path: keys too
// long for its stack buffer and keys that fit count against the same
// limit, a key refused once is refused every time (it is never leased, so
// never reaches the fast path), a shadow rule reports, and a rule with
// overrides decides each key by its own policy.
func TestLimiterFastPath(t *testing.T) {
	clock := clocktest.New()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	n := startLimiterNode(t, store, clock, `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 1000
    period: 1h
  - name: watched
    algorithm: token_bucket
    limit: 2
    period: 1h
    shadow: true
  - name: tiers
    algorithm: token_bucket
    limit: 1000
    period: 1h
    overrides:
      - {key: "small-*", limit: 3}
`)
	l := newLimiter(t, clock, n.addr)
	ctx := t.Context()
	long := strings.Repeat("x", 200) // "per-key:" + 200 bytes: past the stack buffer
	for _, key := range []string{"short", long} {
		for i := range int64(5) {
			d, err := l.Allow(ctx, "per-key", key, 1)
			if err != nil || !d.Allowed || d.Remaining != 1000-1-i || d.Rule != "per-key" {
				t.Fatalf("%d-byte key, check %d: %+v, %v; want allowed, remaining %d", len(key), i, d, err, 1000-1-i)
			}
		}
	}
	for i := range 3 {
		if _, err := l.Allow(ctx, "per-key", "bad\x01key", 1); err == nil {
			t.Fatalf("a key with a control character accepted (check %d)", i)
		}
		if _, err := l.Allow(ctx, "per-key", `a\#b`, 1); err == nil {
			t.Fatalf(`a key holding \# accepted (check %d)`, i)
		}
	}
	for i, wantDenied := range []bool{false, false, true} {
		d, err := l.Allow(ctx, "watched", "k", 1)
		if err != nil || !d.Allowed || !d.Shadow || d.ShadowDenied != wantDenied {
			t.Fatalf("shadow rule, check %d: %+v, %v; want allowed, shadow, shadow-denied %v", i, d, err, wantDenied)
		}
	}
	for i, want := range []bool{true, true, true, false} {
		d, err := l.Allow(ctx, "tiers", "small-1", 1)
		if err != nil || d.Allowed != want || d.Limit != 3 {
			t.Fatalf("override, check %d: %+v, %v; want allowed %v, limit 3", i, d, err, want)
		}
		if d, err := l.Allow(ctx, "tiers", "big-1", 1); err != nil || !d.Allowed || d.Limit != 1000 {
			t.Fatalf("rule's own policy, check %d: %+v, %v", i, d, err)
		}
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if d, err := l.Allow(ctx, "per-key", "short", 1); err != nil || !d.Allowed {
			t.Fatalf("%+v, %v", d, err)
		}
	}); allocs != 0 {
		t.Fatalf("%v allocations per Allow on a leased key, want 0", allocs)
	}
}

// A rules fetch is not cut short by the decisions' Timeout: NewLimiter
// through a node whose rules answer takes longer than Timeout (a busy
// host) starts, and decides. (The proxy holds the rules answer for three
// Timeouts, a wall-clock delay: what is under test is a timeout; it stays
// far below the fetch's own 2s.)
func TestLimiterSlowRulesFetch(t *testing.T) {
	clock := clocktest.New()
	n := startLimiterNode(t, lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now}), clock, limiterRules)
	const timeout = 50 * time.Millisecond
	target := &url.URL{Scheme: "http", Host: n.addr}
	rp := httputil.NewSingleHostReverseProxy(target)
	var slowed atomic.Int64
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/lease/rules" {
			slowed.Add(1)
			time.Sleep(3 * timeout)
		}
		rp.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	cfg := client.LimiterConfig{Nodes: []string{proxy.URL}, Token: limiterToken, Timeout: timeout}
	cfg.Lease.Now = clock.Now
	cfg.Lease.AfterFunc = clock.AfterFunc
	cfg.Lease.SweepInterval = -1
	l, err := client.NewLimiter(cfg)
	if err != nil {
		t.Fatalf("NewLimiter through a node whose rules take 3 Timeouts: %v", err)
	}
	defer l.Close()
	if slowed.Load() == 0 {
		t.Fatal("the rules were not fetched through the slow proxy")
	}
	d, err := l.Allow(context.Background(), "per-key", "user-1", 1)
	if err != nil || !d.Allowed {
		t.Fatalf("Allow: %+v, %v; want allowed", d, err)
	}
}

// TestLimiterFirstTouchesRedis: a gateway's first lease of a key tells
// the node so ("first":1), and the node's Redis store writes the new
// key's state with SET NX instead of a script: 50 new keys through a
// gateway run at most the one script that samples Redis's clock.
func TestLimiterFirstTouchesRedis(t *testing.T) {
	srv, store, clock := frozenRedisStore(t)
	n := startLimiterNode(t, store, clock, limiterRules)
	l := newLimiter(t, clock, n.addr)
	scripts := func() int64 {
		t.Helper()
		st, err := redistest.CommandStats(srv.Addr)
		if err != nil {
			t.Fatal(err)
		}
		return st["evalsha"] + st["eval"]
	}
	before := scripts()
	for i := range 50 {
		if d, err := l.Allow(context.Background(), "per-key", "first-"+strconv.Itoa(i), 1); err != nil || !d.Allowed {
			t.Fatalf("Allow = %+v, %v", d, err)
		}
	}
	// The first one's script (with a NOSCRIPT EVALSHA before its EVAL on
	// a new server) samples the clock; the others set.
	if got := scripts() - before; got > 2 {
		t.Errorf("50 new keys through a gateway ran %d scripts, want at most 2 (one, loading it)", got)
	}
}
