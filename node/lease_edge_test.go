package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/lua/redistest"
	"github.com/sluicehq/sluice/node/api"
)

// The lease protocol at the edge, as an attacker holding the client token
// would try it: a holder's share with a big need, the hop a client could
// name, another holder's loan through its public id. Each runs on the
// memory store and on a real Redis (frozen clock).

// edgeStores runs f on a gateway node over each Store.
func edgeStores(t *testing.T, rules string, f func(t *testing.T, tn *testNode, store lease.Store)) {
	t.Run("memory", func(t *testing.T) {
		clock := testClock()
		store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
		t.Cleanup(func() { store.Close() })
		f(t, gatewayNodeOn(t, rules, store, clock), store)
	})
	t.Run("redis", func(t *testing.T) {
		srv, rclock := redistest.StartWithClock(t, clocktest.Epoch)
		store, err := lua.NewStore(lua.Config{Addrs: []string{srv.Addr}, Clock: rclock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		f(t, gatewayNodeOn(t, rules, store, clocktest.At(rclock.Now())), store)
	})
}

func gatewayNodeOn(t *testing.T, rules string, store lease.Store, clock *clocktest.Clock) *testNode {
	t.Helper()
	cfg := DefaultConfig()
	cfg.ClientToken = testClientToken
	cfg.AdminToken = testAdminToken
	mcfg := lease.DefaultConfig()
	// A real Redis on a machine under load may take longer than a
	// check's 50ms: these tests are about what is decided, not when.
	mcfg.StoreTimeout = 10 * time.Second
	tn := newTestNodeManager(t, rules, store, clock, cfg, mcfg)
	tn.n.gw.now = clock.Now
	return tn
}

// available is what the Store has of a per-key token bucket of 100 a
// minute (a peek).
func available(t *testing.T, store lease.Store, ckey string) int64 {
	t.Helper()
	g, err := store.Lease(t.Context(), ckey, lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Minute}, 0, 0, lease.Lessee{})
	if err != nil {
		t.Fatal(err)
	}
	return g.Remaining
}

// One holder never holds more than gateway_share (25 of 100), whatever
// need says: a need over its room is decided as a check, exactly (its
// tokens spent at once), and lends nothing.
func TestLeaseShareBoundHoldsWithNeed(t *testing.T) {
	edgeStores(t, gatewayRules, func(t *testing.T, tn *testNode, store lease.Store) {
		lease := func(holder, op string) leaseReply {
			t.Helper()
			return decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holder, op), clientAuth))
		}
		g := lease(holderA, `{"op":"lease","rule":"per-key","key":"k","want":100,"need":100,"ttl_ms":10000}`).Results[0]
		if g.Granted != 100 || g.Lent != 0 || g.Checked != 1 || g.Remaining != 0 {
			t.Fatalf("want 100 need 100 of a share of 25: %+v, want the 100 decided as a check (granted, spent, nothing lent)", g)
		}
		if got := available(t, store, "per-key:k"); got != 0 {
			t.Fatalf("the Store has %d after a check of 100, want 0", got)
		}
		g = lease(holderA, `{"op":"lease","rule":"per-key","key":"k2","want":60,"need":40,"ttl_ms":10000}`).Results[0]
		if g.Granted != 40 || g.Lent != 0 || g.Checked != 1 || g.Remaining != 60 {
			t.Fatalf("need 40 of a share of 25: %+v, want 40 decided as a check, 60 left", g)
		}
		g = lease(holderB, `{"op":"lease","rule":"per-key","key":"k2","want":70,"need":70,"ttl_ms":10000}`).Results[0]
		if g.Granted != 0 || g.Lent != 0 || g.Remaining != 60 {
			t.Fatalf("need 70 of the 60 left: %+v, want denied, nothing lent", g)
		}
		// Within its share, a holder is lent as before; past it, no more.
		g = lease(holderB, `{"op":"lease","rule":"per-key","key":"k2","want":1000,"need":1,"ttl_ms":10000}`).Results[0]
		if g.Granted != 25 || g.Lent != 25 || g.Checked != 0 {
			t.Fatalf("a lease of 1000 within the share: %+v, want 25 lent", g)
		}
		g = lease(holderB, `{"op":"lease","rule":"per-key","key":"k2","want":1000,"need":10,"held":25,"ttl_ms":10000}`).Results[0]
		if g.Granted != 10 || g.Lent != 25 || g.Checked != 1 {
			t.Fatalf("need 10 while holding the share: %+v, want 10 as a check, the loan still 25", g)
		}
		if got := available(t, store, "per-key:k2"); got != 25 {
			t.Fatalf("the Store has %d, want 25 (100 - 40 - 10 spent, 25 lent)", got)
		}
		st := tn.n.eng.LeaseStats()["per-key"]
		if st.Checked != 4 || st.Gateways != 25 {
			t.Fatalf("lease stats %+v, want 4 checked, 25 lent to gateways", st)
		}
	})
}

// A client cannot name a hop: the header the previous release trusted to
// mark a lease request forwarded by a node is ignored, and each node
// routes the op to the key's owner, so that two nodes on their own
// memory stores lend at most the limit between them.
func TestLeaseHopHeaderFromAClientIsIgnored(t *testing.T) {
	const rules = `rules:
  - name: five
    algorithm: token_bucket
    limit: 5
    period: 1h
    gateway_share: 1
`
	stores := map[string]*lease.MemoryStore{}
	for _, name := range []string{"a", "b"} {
		stores[name] = lease.NewMemoryStore(lease.MemoryStoreConfig{})
		t.Cleanup(func() { stores[name].Close() })
	}
	nodes := newClusterNodesWith(t, func(name string) lease.Store { return stores[name] }, map[string]string{"a": rules, "b": rules})
	var granted int64
	for i, name := range []string{"a", "b"} {
		cn := nodes[name]
		req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		req.SetRequestURI("http://" + cn.addr + LeasePath)
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer "+testClientToken)
		req.Header.Set("X-Sluice-Lease-Hop", "1")
		req.SetBodyString(leaseBody(strings.Repeat(fmt.Sprint(i+1), 32),
			`{"op":"lease","rule":"five","key":"k","want":5,"need":1,"ttl_ms":10000}`))
		if err := cn.client.DoTimeout(req, res, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		lr := decodeLeaseReply(t, resp{status: res.StatusCode(), body: string(res.Body())})
		fasthttp.ReleaseRequest(req)
		fasthttp.ReleaseResponse(res)
		if g := lr.Results[0]; g.Error != "" {
			t.Fatalf("through %s: %+v", name, g)
		} else {
			granted += g.Granted
		}
	}
	if granted > 5 {
		t.Fatalf("%d granted of a limit of 5 through two nodes that each were told the request was a hop", granted)
	}
}

// Knowing a holder's public id (shown in /v1/stats, logs, the dashboard)
// and the client token does not let anyone act for it: a return naming
// the public id (as a holder id, or as one made of it) ends no loan of
// the holder's, so that what it holds stays counted, for a gateway and
// for a region's node.
func TestLeaseForgedReturnWithPublicID(t *testing.T) {
	for _, region := range []string{"", "eu"} {
		t.Run("region="+region, func(t *testing.T) {
			edgeStores(t, gatewayRules, func(t *testing.T, tn *testNode, store lease.Store) {
				body := func(holder, op string) string {
					if region == "" {
						return leaseBody(holder, op)
					}
					return `{"holder":"` + holder + `","region":"` + region + `","ops":[` + op + `]}`
				}
				lr := decodeLeaseReply(t, tn.do("POST", LeasePath, body(holderA, leaseOpJSON("per-key", "k", 25)), clientAuth))
				if g := lr.Results[0]; g.Granted != 25 || g.Lent != 25 {
					t.Fatalf("lease: %+v", g)
				}
				pub := api.HolderPublicID(holderA)
				if r := tn.do("GET", "/v1/stats?scope=node", "", "Authorization: Bearer "+testAdminToken); !strings.Contains(r.body, pub) || strings.Contains(r.body, holderA) {
					t.Fatalf("/v1/stats names the holder %s by its secret, or not by its public id %s: %s", holderA, pub, r.body)
				}
				for _, forged := range []string{pub + pub, pub + strings.Repeat("0", 16)} {
					decodeLeaseReply(t, tn.do("POST", LeasePath, body(forged, returnOpJSON("per-key", "k", 25)), clientAuth))
				}
				if got := available(t, store, "per-key:k"); got != 75 {
					t.Fatalf("after returns naming the holder's public id: %d available, want 75 (its loan of 25 still counts)", got)
				}
				decodeLeaseReply(t, tn.do("POST", LeasePath, body(holderA, returnOpJSON("per-key", "k", 25)), clientAuth))
				if got := available(t, store, "per-key:k"); got != 100 {
					t.Fatalf("after the holder's own return: %d available, want 100", got)
				}
			})
		})
	}
}

// An owner that does not answer a forwarded lease op: on a shared Store
// the node that was asked applies it itself (whoever calls the shared
// Store for a holder keeps the contract); a node on its own memory store
// answers an error instead (the owner's Store holds the key, and a second
// decider would lend past the limit), which a holder takes for a failed
// Store call.
func TestLeaseOwnerGone(t *testing.T) {
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			one := lease.NewMemoryStore(lease.MemoryStoreConfig{})
			t.Cleanup(func() { one.Close() })
			stores := map[string]lease.Store{"a": one, "b": one}
			if !shared {
				other := lease.NewMemoryStore(lease.MemoryStoreConfig{})
				t.Cleanup(func() { other.Close() })
				stores["b"] = other
			}
			nodes := newClusterNodesOpts(t, func(name string) lease.Store { return stores[name] },
				map[string]string{"a": gatewayRules, "b": gatewayRules}, func(c *ClusterConfig) { c.SharedStore = shared })
			key := keyOwnedBy(t, nodes["a"].n, "per-key", "k", "b")
			nodes["b"].stop() // refuses connections from now on
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			req.SetRequestURI("http://" + nodes["a"].addr + LeasePath)
			req.Header.SetMethod("POST")
			req.Header.Set("Authorization", "Bearer "+testClientToken)
			req.SetBodyString(leaseBody(holderA, leaseOpJSON("per-key", key, 10)))
			if err := nodes["a"].client.DoTimeout(req, res, 10*time.Second); err != nil {
				t.Fatal(err)
			}
			g := decodeLeaseReply(t, resp{status: res.StatusCode(), body: string(res.Body())}).Results[0]
			switch {
			case shared && (g.Granted != 10 || g.Error != ""):
				t.Fatalf("owner gone, shared Store: %+v, want 10 granted here", g)
			case !shared && (g.Granted != 0 || !strings.Contains(g.Error, "did not answer")):
				t.Fatalf("owner gone, own memory stores: %+v, want an error", g)
			}
			if got := available(t, one, "per-key:"+key); shared && got != 90 {
				t.Fatalf("shared Store has %d, want 90", got)
			}
		})
	}
}

// Where a rule's tokens are shows in /v1/stats and /metrics: lent to
// gateways, to regions, to the node itself, left in the Store, and the
// bound that puts on a shortfall; a return counts as reported what the
// holder was lent and did not give back.
func TestLeaseTokensSeen(t *testing.T) {
	tn, _ := newGatewayNode(t)
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k", 10)), clientAuth))
	decodeLeaseReply(t, tn.do("POST", LeasePath,
		`{"holder":"`+holderB+`","region":"eu","ops":[`+leaseOpJSON("per-key", "k", 20)+`]}`, clientAuth))
	if r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"k2","hits":1}`); r.status != 200 {
		t.Fatalf("check: %d %s", r.status, r.body)
	}
	var b statsBody
	r := tn.do("GET", "/v1/stats?scope=node", "", "Authorization: Bearer "+testAdminToken)
	if err := json.Unmarshal([]byte(r.body), &b); err != nil {
		t.Fatal(err)
	}
	ts := b.Tokens["per-key"]
	// k: 10 to a gateway, 20 to a region, 70 left; k2: the node's own
	// lease (a quarter of the capacity, less the check's token) from its
	// Store's 100.
	nodes := tn.n.mgr.Holdings(func(string) string { return "x" })["x"].Lent
	if ts.Gateways != 10 || ts.Regions != 20 || ts.Nodes != nodes || nodes <= 0 || ts.Keys != 2 ||
		ts.Store != 70+100-nodes || ts.ShortBound != 30+nodes {
		t.Fatalf("tokens %+v (the node holds %d), want 10 to gateways, 20 to regions, the node's loan, the Store's rest", ts, nodes)
	}
	m := tn.do("GET", "/metrics", "").body
	for _, want := range []string{
		`sluice_tokens{rule="per-key",where="gateways"} 10`, `sluice_tokens{rule="per-key",where="regions"} 20`,
		fmt.Sprintf(`sluice_tokens_short_bound{rule="per-key"} %d`, 30+nodes),
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// The gateway spent 4 of its 10 and returns 6: 4 reported.
	decodeLeaseReply(t, tn.do("POST", LeasePath, leaseBody(holderA, returnOpJSON("per-key", "k", 6)), clientAuth))
	if st := tn.n.eng.LeaseStats()["per-key"]; st.Reported != 4 || st.Returned != 6 || st.Gateways != 0 {
		t.Fatalf("after the return: %+v, want 4 reported, 6 returned, none lent to gateways", st)
	}
}

// Many holders of one key on Redis (600 gateways' secrets, each leasing a
// token of one token_bucket key, 8 at a time) cost what the key's bound
// allows and no more: past max_holders (16 by default) they are answered
// as checks, so no script call holds Redis for long (none reaches Redis's
// slow log at 25 ms, where a call of a key of 600 holders' loans took
// 40–100 ms and stalled every other key), and the checks of other keys on
// the same node, meanwhile, are all decided from the Store, none
// degraded.
func TestLeaseManyHoldersOneKeyRedis(t *testing.T) {
	srv := redistest.StartServer(t, "--slowlog-log-slower-than", "25000")
	store, err := lua.NewStore(lua.Config{Addrs: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	const rules = `rules:
  - name: hot
    algorithm: token_bucket
    limit: 100000
    period: 1h
  - name: other
    algorithm: token_bucket
    limit: 100
    period: 1h
`
	tn := gatewayNodeOn(t, rules, store, testClock())
	post := func(body string) (resp, error) {
		req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(res)
		req.SetRequestURI("http://sluice" + LeasePath)
		req.Header.SetMethod("POST")
		req.Header.Set("Authorization", "Bearer "+testClientToken)
		req.SetBodyString(body)
		if err := tn.client.DoTimeout(req, res, time.Minute); err != nil {
			return resp{}, err
		}
		return resp{status: res.StatusCode(), body: string(res.Body())}, nil
	}
	const holders, others = 600, 300
	errs := make(chan error, holders+others)
	var wg sync.WaitGroup
	next := make(chan int, holders)
	for i := range holders {
		next <- i
	}
	close(next)
	for range 8 {
		wg.Go(func() {
			for i := range next {
				r, err := post(leaseBody(fmt.Sprintf("%032x", i+1), `{"op":"lease","rule":"hot","key":"k","want":1,"need":1,"ttl_ms":60000}`))
				if err == nil && (r.status != 200 || !strings.Contains(r.body, `"granted":1`)) {
					err = fmt.Errorf("holder %d: %d %s", i, r.status, r.body)
				}
				if err != nil {
					errs <- err
				}
			}
		})
	}
	var degraded atomic.Int64
	wg.Go(func() {
		for i := range others {
			req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			req.SetRequestURI("http://sluice/v1/check")
			req.Header.SetMethod("POST")
			req.SetBodyString(fmt.Sprintf(`{"rule":"other","key":"o%d"}`, i))
			if err := tn.client.DoTimeout(req, res, time.Minute); err != nil {
				errs <- err
			} else if b := string(res.Body()); res.StatusCode() != 200 || strings.Contains(b, `"degraded":true`) {
				degraded.Add(1)
			}
			fasthttp.ReleaseRequest(req)
			fasthttp.ReleaseResponse(res)
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := degraded.Load(); n > 0 {
		t.Errorf("%d of %d checks of other keys were not decided from the Store meanwhile", n, others)
	}
	if st := tn.n.eng.LeaseStats()["hot"]; st.Crowded != holders-lease.DefaultMaxHolders {
		t.Errorf("%d lease ops answered as checks past the bound, want %d (600 holders, %d allowed)", st.Crowded, holders-lease.DefaultMaxHolders, lease.DefaultMaxHolders)
	}
	if slow := srv.Do("SLOWLOG", "GET", "10"); slow != "" {
		t.Errorf("Redis's slow log (calls over 25 ms): %s", slow)
	}
}
