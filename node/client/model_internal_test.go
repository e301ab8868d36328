package client

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lease/modeltest"
	sluiced "github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// TestModelGatewayTier runs the model-based harness (lease/modeltest) on
// the gateway tier: each of the harness's holders is a gateway, a
// lease.Manager over a Limiter's remote Store, which leases through a real
// node's lease protocol from the Store below it (a MemoryStore on the fake
// clock). What the gateways admit together is checked against the same
// reference model as the nodes' Managers on a Store: Store → node →
// gateway holders keeps the contract.
//
// Both sides are checked (never over, and every denial justified), with
// gateway_share 1 and with the default share (a quarter): the share bound
// limits what a gateway holds ahead, never what a check needs at once, so
// a gateway denies only when the Store has not the tokens either.
//
// The long form: SLUICE_MODEL_TIME=10m; a failing seed prints its replay.
func TestModelGatewayTier(t *testing.T) {
	leased := []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow}
	for i, c := range []struct {
		name       string
		share      float64
		maxHolders int
	}{
		{"share=1", 1, 0},
		{"share=default", 0, 0},
		// More gateways than a key may have holders (max_holders 2):
		// the ones past it are answered as checks, as they come and go.
		{"share=default/max_holders=2", 0, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := modeltest.FromEnv(t, modeltest.Options{
				Seed: 19_000_000 + uint64(i)*1_000_000, Seeds: 30, Steps: 200, Algorithms: leased, Ahead: true,
				MaxHolders: c.maxHolders,
			})
			s := modeltest.Run(t, tierHarness(t, c.share, c.maxHolders), o)
			t.Logf("model: %d seeds, %d steps, %d decisions checked", s.Seeds, s.Steps, s.Checks)
		})
	}
}

// TestModelGatewayTierFoundSeeds replays seeds whose failures the model
// found at this tier, as regression cases.
func TestModelGatewayTierFoundSeeds(t *testing.T) {
	leased := []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow}
	for _, c := range []struct {
		name  string
		share float64
		seed  uint64
	}{
		// A check of 0 hits on a key the gateway held nothing of was sent
		// as a lease of 1 token, which stayed lent and unused.
		{"peek-lends-nothing", 1, 19_000_000},
		// A loan's renewal (want 0, what is held) was sent as a peek: the
		// Store went on counting the tokens spent since as lent.
		{"renewal-is-no-peek", 1, 19_000_025},
		// The share bound cut a lease below its need: the Manager got
		// fewer tokens than its check needed, which it could not account
		// for, and spent them beyond the limit.
		{"share-keeps-need", 0, 20_000_070},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := modeltest.Options{Seed: c.seed, Seeds: 1, Steps: 250, Algorithms: leased}
			if s := modeltest.Run(t, tierHarness(t, c.share, 0), o); s.Seeds != 1 {
				t.Fatalf("ran %d seeds, want 1", s.Seeds)
			}
		})
	}
}

// tierHarness gives each replay a fresh node on a fresh MemoryStore, its
// rules with gateway_share share and max_holders maxHolders (0: the
// defaults).
func tierHarness(t *testing.T, share float64, maxHolders int) modeltest.Harness {
	clk := clocktest.New()
	var cur *tierStore
	t.Cleanup(func() {
		if cur != nil {
			cur.close()
		}
	})
	return modeltest.Harness{
		NewStore: func(tb testing.TB) lease.Store {
			if cur != nil {
				cur.close() // the harness is done with the previous replay's
			}
			clk.Set(clocktest.Epoch) // every replay from the same instant
			cur = newTierStore(tb, clk, share)
			cur.maxHolders = maxHolders
			return cur
		},
		Now: clk.Now, Advance: clk.Advance, Package: "./node/client/",
		// A gateway's Manager, as NewLimiter configures it: loans no
		// longer than the nodes grant (the protocol's bound), so that the
		// Manager stops spending a loan when the Store counts it spent.
		Config: func(c *lease.Config) { c.LeaseTTL = 30 * time.Second },
	}
}

const modelToken = "model-token"

// tierStore is the Store the harness's Managers see: each holder's calls
// go through a Limiter's remote Store of its own (one gateway per holder),
// to a node that serves the lease protocol over mem. The harness names
// policies, a gateway names rules: each policy becomes a rule of the node
// when first used, and its keys are leased under it.
type tierStore struct {
	tb    testing.TB
	mem   *lease.MemoryStore
	mgr   *lease.Manager
	n     *sluiced.Node
	addr  string
	share float64
	// maxHolders is the rules' max_holders (0: the default), which the
	// model must be told (modeltest.Options.MaxHolders) to expect.
	maxHolders int
	done       chan error
	// region, when set, makes each gateway a region's node (a
	// regional holder of the global tier): it returns the region of the
	// harness's holder and the demand that region reports.
	region func(holder string) (name string, demand func(ckey string) int64)

	mu    sync.Mutex
	specs []rules.Spec
	rule  map[lease.Policy]string
	gws   map[string]*Limiter // harness holder → its gateway
}

func newTierStore(tb testing.TB, clk *clocktest.Clock, share float64) *tierStore {
	return newTierStoreWith(tb, clk, share, nil, nil)
}

// newTierStoreWith is newTierStore with the gateways made regions' nodes
// by region (tierStore.region), and the node's Store, when wrap is not
// nil, seen through wrap.
func newTierStoreWith(tb testing.TB, clk *clocktest.Clock, share float64,
	region func(string) (string, func(string) int64), wrap func(lease.Store) lease.Store) *tierStore {
	mem := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	mcfg := lease.DefaultConfig()
	mcfg.Now = clk.Now
	mcfg.SweepInterval = -1
	mcfg.StoreTimeout = time.Minute // a loaded machine must not make the Store look failed
	var below lease.Store = mem
	if wrap != nil {
		below = wrap(mem)
	}
	mgr := lease.NewManager(below, mcfg)
	cfg := sluiced.DefaultConfig()
	cfg.ClientToken = modelToken
	cfg.ClientRate = 1 << 30 // the harness is one client making many calls
	cfg.Now = clk.Now        // the regional split's credit earns by the Store's clock
	n := sluiced.New(cfg, mgr)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &tierStore{tb: tb, mem: mem, mgr: mgr, n: n, addr: ln.Addr().String(), share: share,
		done: make(chan error, 1), rule: map[lease.Policy]string{}, gws: map[string]*Limiter{}, region: region}
	s.setRules()
	go func() { s.done <- n.Serve(ln) }()
	return s
}

func (s *tierStore) setRules() {
	set, err := rules.NewSet(s.specs)
	if err != nil {
		s.tb.Fatalf("rules %+v: %v", s.specs, err)
	}
	s.n.SetRules(set)
}

// ruleFor names p's rule, adding it to the node on first use.
func (s *tierStore) ruleFor(p lease.Policy) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	p.OnFailure = 0 // not the Store's concern
	if r, ok := s.rule[p]; ok {
		return r
	}
	r := fmt.Sprintf("p%d", len(s.specs))
	s.specs = append(s.specs, rules.Spec{Name: r, Algorithm: p.Algorithm.String(), Limit: p.Limit,
		Period: p.Period.String(), Burst: p.Burst, GatewayShare: s.share, MaxHolders: s.maxHolders})
	s.rule[p] = r
	s.setRules()
	return r
}

// gateway is holder's gateway, started on first use.
func (s *tierStore) gateway(holder string) *Limiter {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.gws[holder]; l != nil {
		return l
	}
	cfg := LimiterConfig{Nodes: []string{s.addr}, Token: modelToken,
		Timeout: time.Minute, Flush: time.Microsecond, RulesPoll: time.Hour}
	if s.region != nil {
		cfg.Region, cfg.Demand = s.region(holder)
	}
	l, err := NewLimiter(cfg)
	if err != nil {
		s.tb.Fatalf("gateway of %s: %v", holder, err)
	}
	s.gws[holder] = l
	return l
}

func (s *tierStore) close() {
	s.mu.Lock()
	gws := s.gws
	s.gws = nil
	s.mu.Unlock()
	for _, l := range gws {
		_ = l.Close()
	}
	_ = s.n.Shutdown(context.Background())
	<-s.done
	s.mgr.Close()
	s.mem.Close()
}

func (s *tierStore) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	return s.gateway(to.ID).store.Lease(ctx, s.ruleFor(p)+":"+key, p, want, need, to)
}

func (s *tierStore) Return(ctx context.Context, key string, p lease.Policy, tokens int64, holder string) error {
	return s.gateway(holder).store.Return(ctx, s.ruleFor(p)+":"+key, p, tokens, holder)
}

// The exact algorithms are not leased (a gateway sends their checks to
// the nodes): the harness runs only leased ones here.
func (s *tierStore) Log(context.Context, string, lease.Policy, int64) (lease.Result, error) {
	return lease.Result{}, errNotLeased
}

func (s *tierStore) Acquire(context.Context, string, lease.Policy, string, int64) (lease.Result, error) {
	return lease.Result{}, errNotLeased
}

func (s *tierStore) Release(context.Context, string, lease.Policy, string) error {
	return errNotLeased
}

func (s *tierStore) Ping(context.Context) error { return nil }

// Room is what a gateway that says it holds held may still be lent of a
// key of p: its share of the capacity less what it holds
// (modeltest.CheckingStore). A region's node is not bound by the share
// (-1): its tier splits a saturated key by demand.
func (s *tierStore) Room(p lease.Policy, held int64) int64 {
	if s.region != nil {
		return -1
	}
	share := s.share
	if share == 0 {
		share = rules.DefaultGatewayShare
	}
	most := max(int64(float64(p.Capacity())*share), 1)
	return most - min(held, most)
}

// A gateway's fixed_window lease asks shares of the next windows through
// the lease protocol: the node lends them (no further ahead than 60s) and
// counts them in each window, and the gateway's answer carries them.
func TestGatewaySharesAhead(t *testing.T) {
	clk := clocktest.New()
	clk.Set(clocktest.Epoch)
	ts := newTierStore(t, clk, 1)
	t.Cleanup(ts.close)
	ctx := context.Background()
	p := lease.Policy{Algorithm: lease.FixedWindow, Limit: 100, Period: time.Second}
	g, err := ts.Lease(ctx, "k", p, 1, 1, lease.Lessee{ID: "h1", TTL: 10 * time.Second, AheadWindows: 200, AheadTokens: 12})
	if err != nil || g.Granted != 1 || g.AheadTokens != 12 || g.AheadWindows != 60 {
		t.Fatalf("gateway lease asking 12 of each of 200 windows: %+v, %v; want 1 granted, 12 of each of 60 windows (60s)", g, err)
	}
	clk.Advance(time.Second)
	g, err = ts.Lease(ctx, "k", p, 100, 1, lease.Lessee{ID: "h2", TTL: 10 * time.Second})
	if err != nil || g.Granted != 88 || g.AheadTokens != 0 {
		t.Fatalf("another gateway in the next window: %+v, %v; want 88 granted (h1's share of 12 counted), none ahead (it asked none)", g, err)
	}
}
