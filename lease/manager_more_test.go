package lease

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// gateStore blocks every Lease until the gate opens and records how many
// were in flight at once.
type gateStore struct {
	Store
	gate            chan struct{}
	inflight, maxIn atomic.Int64
	calls           atomic.Int64
}

func (g *gateStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	g.calls.Add(1)
	n := g.inflight.Add(1)
	for {
		old := g.maxIn.Load()
		if n <= old || g.maxIn.CompareAndSwap(old, n) {
			break
		}
	}
	defer g.inflight.Add(-1)
	select {
	case <-g.gate:
	case <-ctx.Done():
		return Grant{}, ctx.Err()
	}
	return g.Store.Lease(ctx, key, p, want, need, to)
}

// TestOneLeaseInFlightPerKey: checks that find no tokens while a lease for
// their key is in flight wait for it instead of calling the Store too.
func TestOneLeaseInFlightPerKey(t *testing.T) {
	clk := clocktest.New()
	gs := &gateStore{Store: NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1}), gate: make(chan struct{})}
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute
	m := NewManager(gs, cfg)
	defer m.Close()
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Hour}
	var wg sync.WaitGroup
	var allowed atomic.Int64
	for range 8 {
		wg.Go(func() {
			if d, err := m.Take("k", p, 1); err == nil && d.Allowed {
				allowed.Add(1)
			}
		})
	}
	for i := 0; gs.calls.Load() == 0 && i < 1_000_000; i++ {
		runtime.Gosched()
	}
	for range 10_000 { // give the other checks every chance to stampede
		runtime.Gosched()
	}
	close(gs.gate)
	wg.Wait()
	if got := gs.maxIn.Load(); got != 1 {
		t.Fatalf("%d lease calls in flight at once for one key, want 1", got)
	}
	if allowed.Load() != 8 {
		t.Fatalf("%d of 8 checks allowed under the limit", allowed.Load())
	}
}

func TestCoarseClock(t *testing.T) {
	c := startCoarseClock(time.Millisecond)
	if ns := c.Nanos(); ns == 0 || time.Since(time.Unix(0, ns)) < 0 {
		t.Fatalf("Nanos() = %d", ns)
	}
	c.Stop()
	if c.Nanos() != 0 {
		t.Fatal("a stopped clock still reports a time")
	}
	// A Manager on the real clock keeps working after Close.
	store := NewMemoryStore(MemoryStoreConfig{})
	defer store.Close()
	m := NewManager(store, Config{})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if d, err := m.Take("k", perSecond(5), 1); err != nil || !d.Allowed || d.Reset <= 0 {
		t.Fatalf("Take after Close: %+v %v", d, err)
	}
}

func TestMetricsMove(t *testing.T) {
	set := metrics.NewSet()
	m, fs, _ := testManager(t, func(c *Config) {
		c.Breaker = BreakerConfig{Failures: 1, Cooldown: time.Hour}
		c.Metrics = set
	})
	get := func(name string) uint64 { return set.GetOrCreateCounter(name).Get() }
	p := Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Hour, OnFailure: FailOpen}
	mustTake(t, m, "metrics-k", p, 1)
	if get(`sluice_lease_tokens_leased_total`) == 0 || get(`sluice_store_calls_total{op="lease",result="ok"}`) != 1 {
		t.Fatal("lease not counted")
	}
	fs.mode.Store(faultError)
	mustTake(t, m, "metrics-k2", p, 1) // fails, opens
	mustTake(t, m, "metrics-k3", p, 1) // rejected
	if get(`sluice_lease_decisions_total{source="degraded"}`) != 2 || get(`sluice_store_calls_total{op="lease",result="rejected"}`) != 1 {
		t.Fatal("degraded decisions or rejected calls not counted")
	}
	if set.GetOrCreateGauge(`sluice_store_breaker_state`, nil).Get() != 1 {
		t.Fatal("breaker gauge does not show the open breaker")
	}
	if st := m.Stats(); st.Breaker != BreakerOpen || st.DegradedDecisions != 2 || st.ActiveKeys != 3 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestMetricsPerSet: two Managers in one process (two nodes of a test
// cluster), each with its own set, keep separate counts under the same
// names; one without a set counts in the process's default set.
func TestMetricsPerSet(t *testing.T) {
	sets := [2]*metrics.Set{metrics.NewSet(), metrics.NewSet()}
	var ms [2]*Manager
	for i := range ms {
		ms[i], _, _ = testManager(t, func(c *Config) { c.Metrics = sets[i] })
	}
	p := Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Hour}
	mustTake(t, ms[0], "a", p, 1)
	mustTake(t, ms[0], "b", p, 1)
	mustTake(t, ms[1], "a", p, 1)
	for i, want := range []uint64{2, 1} {
		if got := sets[i].GetOrCreateCounter(`sluice_store_calls_total{op="lease",result="ok"}`).Get(); got != want {
			t.Errorf("Manager %d: sluice_store_calls_total{op=lease,result=ok} = %d, want %d", i, got, want)
		}
		if got := sets[i].GetOrCreateGauge(`sluice_lease_active_keys`, nil).Get(); got != float64(want) {
			t.Errorf("Manager %d: sluice_lease_active_keys = %v, want %d", i, got, want)
		}
	}
	def := metrics.GetDefaultSet().GetOrCreateCounter(`sluice_store_calls_total{op="lease",result="ok"}`)
	before := def.Get()
	m, _, _ := testManager(t, nil)
	mustTake(t, m, "a", p, 1)
	if got := def.Get() - before; got != 1 {
		t.Errorf("a Manager without a set: default set's count +%d, want +1", got)
	}
}

// TestConcurrentEvictionKeepsAccounts: checks race with idle sweeps,
// ReturnKeys and policy changes; after Close every token is either
// admitted or back in the Store (run with -race).
func TestConcurrentEvictionKeepsAccounts(t *testing.T) {
	clk := clocktest.New()
	store := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute
	m := NewManager(store, cfg)
	const limit = 20_000
	// Two policies sharing the Store's window counter: switching between
	// them replaces buckets but keeps one account per key.
	p1 := Policy{Algorithm: FixedWindow, Limit: limit, Period: time.Hour}
	p2 := p1
	p2.OnFailure = FailOpen
	keys := []string{"a", "b", "c"}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 6 {
		wg.Go(func() {
			for i := range 3000 {
				p := p1
				if g == 0 && i%100 == 0 {
					p = p2
				}
				d, err := m.Take(keys[i%3], p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Degraded {
					t.Error("degraded decision with a healthy Store")
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		})
	}
	var sweeps atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				sweeps.Add(int64(m.sweep(clk.Now().Add(time.Hour))))
			} else if err := m.ReturnKeys(func(k string) bool { return k != "b" }); err != nil {
				t.Error(err)
			}
			runtime.Gosched()
		}
	}()
	wg.Wait()
	close(stop)
	<-done
	// Checks racing with returns may be denied while the tokens are on
	// their way back, but no deny-until outlives the return.
	m.drain()
	for _, k := range keys {
		if d := mustTake(t, m, k, p1, 1); !d.Allowed {
			t.Fatalf("%s: denied after every return: %+v", k, d)
		}
		admitted.Add(1)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	var left int64
	for _, k := range keys {
		g, _ := store.Lease(context.Background(), k, p1, 0, 0, Lessee{})
		left += g.Remaining
	}
	if want := 3*limit - admitted.Load(); left != want {
		t.Fatalf("Store holds %d after Close, want %d (%d admitted, %d swept)", left, want, admitted.Load(), sweeps.Load())
	}
	t.Logf("%d admitted, %d keys swept meanwhile", admitted.Load(), sweeps.Load())
}
