package client_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
	"github.com/sluicehq/sluice/node/upstream"
)

// The global tier's rules; a region has them too, and its own.
const globalTierRules = `
rules:
  - name: global-hour
    algorithm: token_bucket
    limit: 20
    period: 1h
    scope: global
`

const regionTierRules = globalTierRules + `
  - name: region-hour
    algorithm: token_bucket
    limit: 1000
    period: 1h
`

// startRegionTierNode starts a region's node leasing global rules from
// the global tier at globalAddr (node/upstream, as sluiced -upstream
// wires it), with the lease protocol on for gateways.
func startRegionTierNode(t *testing.T, clock *clocktest.Clock, globalAddr string) *limiterNode {
	t.Helper()
	up, err := upstream.Start(upstream.Config{URLs: []string{"http://" + globalAddr}, Token: limiterToken, Region: "eu",
		// A loaded -race machine: lease calls across the "ocean" are
		// given seconds (the leases' sizes are not under test).
		RTT: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	mcfg := lease.DefaultConfig()
	mcfg.Now = clock.Now
	mcfg.StoreTimeout = 10 * time.Second
	mgr := lease.NewManager(store, mcfg)
	cfg := node.DefaultConfig()
	cfg.ClientToken = limiterToken
	cfg.Upstream = up
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte(regionTierRules))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.CheckRules(set); err != nil {
		t.Fatal(err)
	}
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	rn := &limiterNode{n: n, mgr: mgr, addr: ln.Addr().String()}
	var once sync.Once
	rn.stop = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
			<-served
			mgr.Close()
			_ = up.Close()
			store.Close()
		})
	}
	t.Cleanup(rn.stop)
	return rn
}

// A gateway inside a region uses a global rule: the region's node says
// it does not lease it (/v1/lease/rules' "checks"), so the Limiter sends
// its checks to the node, whose owner decides them from what it leases of
// the global tier. The global limit holds: exactly the limit admitted,
// with a frozen clock; the region's own rule is still leased by the
// gateway.
func TestLimiterGlobalRuleInRegion(t *testing.T) {
	clock := clocktest.New()
	gstore := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { gstore.Close() })
	global := startLimiterNode(t, gstore, clock, globalTierRules)
	region := startRegionTierNode(t, clock, global.addr)

	req, _ := http.NewRequest(http.MethodGet, "http://"+region.addr+"/v1/lease/rules", nil)
	req.Header.Set("Authorization", "Bearer "+limiterToken)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var body struct {
		Checks []string `json:"checks"`
	}
	if err := json.Unmarshal(b, &body); err != nil || len(body.Checks) != 1 || body.Checks[0] != "global-hour" {
		t.Fatalf("the region's /v1/lease/rules: %s (%v), want checks [global-hour]", b, err)
	}

	l := newLimiter(t, clock, region.addr)
	ctx := context.Background()
	allowed := 0
	for i := range 30 {
		d, err := l.Allow(ctx, "global-hour", "tenant", 1)
		if err != nil {
			t.Fatalf("check %d of the global rule: %v", i, err)
		}
		if d.Degraded {
			t.Fatalf("check %d of the global rule: degraded %+v", i, d)
		}
		if d.Allowed {
			allowed++
		}
	}
	if allowed != 20 {
		t.Fatalf("checks of the global rule through a gateway in a region: %d admitted, want the global limit 20", allowed)
	}
	if lent := lentGauge(t, region.addr, "global-hour"); lent != 0 {
		t.Errorf("the region's node lends %d tokens of the global rule to gateways, want 0", lent)
	}
	// The global tier counted them: nothing is left for its own checks.
	if d, err := newLimiter(t, clock, global.addr).Allow(ctx, "global-hour", "tenant", 1); err != nil || d.Allowed {
		t.Fatalf("a check at the global tier after the region spent the limit: %+v %v, want denied", d, err)
	}

	// The region's own rule is leased by the gateway, as without an
	// upstream.
	if d, err := l.Allow(ctx, "region-hour", "tenant", 1); err != nil || !d.Allowed {
		t.Fatalf("a check of the region's rule: %+v %v", d, err)
	}
	if lent := lentGauge(t, region.addr, "region-hour"); lent <= 0 {
		t.Errorf("the region's node lends %d tokens of its own rule to the gateway, want some", lent)
	}
}
