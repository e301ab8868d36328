package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

func TestFailureModes(t *testing.T) {
	const limit = 5
	tests := []struct {
		mode        FailureMode
		wantAllowed int // of 10 checks while the Store is down
		degraded    bool
		unavailable bool
	}{
		{FailLocal, limit, true, false},
		{FailOpen, 10, true, false},
		{FailClosed, 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			m, fs, clk := testManager(t, func(c *Config) {
				c.Breaker = BreakerConfig{Failures: 2, Cooldown: time.Second}
			})
			p := Policy{Algorithm: FixedWindow, Limit: limit, Period: time.Hour, OnFailure: tt.mode}
			fs.mode.Store(faultError)
			allowed := 0
			for i := range 10 {
				d := mustTake(t, m, "k", p, 1)
				if d.Allowed {
					allowed++
				}
				if d.Degraded != tt.degraded || d.Unavailable != tt.unavailable {
					t.Fatalf("check %d: %+v, want degraded %v unavailable %v", i, d, tt.degraded, tt.unavailable)
				}
				if tt.unavailable && d.RetryAfter != time.Second {
					t.Fatalf("closed: RetryAfter %v, want the cool-down 1s", d.RetryAfter)
				}
			}
			if allowed != tt.wantAllowed {
				t.Fatalf("allowed %d of 10 while the Store is down, want %d", allowed, tt.wantAllowed)
			}
			if m.StoreHealthy() {
				t.Fatal("StoreHealthy with the breaker open")
			}
			// Only the calls that opened the breaker reached the Store.
			if got := fs.n(opLease); got != 2 {
				t.Errorf("%d lease calls, want 2 (then the breaker fails fast)", got)
			}
			// The Store comes back: after the cool-down the next check
			// probes it, and the key goes back to leasing.
			fs.mode.Store(faultNone)
			clk.Advance(time.Second)
			d := mustTake(t, m, "k", p, 1)
			if !d.Allowed || d.Degraded || d.Unavailable {
				t.Fatalf("after recovery: %+v, want an allowed, normal decision", d)
			}
			if !m.StoreHealthy() {
				t.Fatal("breaker still open after a successful probe")
			}
		})
	}
}

// TestFailureOnHungStore: a Store that never answers costs a check at most
// the timeout (the test would hang otherwise), and the failure mode
// decides.
func TestFailureOnHungStore(t *testing.T) {
	m, fs, _ := testManager(t, func(c *Config) { c.StoreTimeout = time.Millisecond })
	fs.mode.Store(faultHang)
	p := Policy{Algorithm: TokenBucket, Limit: 3, Period: time.Hour, OnFailure: FailLocal}
	for i := range 5 {
		d := mustTake(t, m, "k", p, 1)
		if !d.Degraded || d.Allowed != (i < 3) {
			t.Fatalf("check %d: %+v", i, d)
		}
	}
	log := Policy{Algorithm: SlidingLog, Limit: 1, Period: time.Hour, OnFailure: FailOpen}
	if d := mustTake(t, m, "l", log, 1); !d.Allowed || !d.Degraded {
		t.Fatalf("sliding_log, open: %+v", d)
	}
	conc := Policy{Algorithm: Concurrency, Limit: 1, Period: time.Hour, OnFailure: FailLocal}
	d, id, err := m.Acquire("c", conc, 1)
	if err != nil || !d.Allowed || !d.Degraded || id == "" {
		t.Fatalf("concurrency, local: %+v %q %v", d, id, err)
	}
	if d, _, _ := m.Acquire("c", conc, 1); d.Allowed {
		t.Fatal("concurrency, local: second slot of 1 allowed")
	}
	closed := conc
	closed.OnFailure = FailClosed
	if d, id, _ := m.Acquire("c2", closed, 1); d.Allowed || !d.Unavailable || id != "" {
		t.Fatalf("concurrency, closed: %+v %q", d, id)
	}
}

// TestFailLocalSpendsLeasedTokensFirst: tokens already leased stay valid
// while the Store is down.
func TestFailLocalSpendsLeasedTokensFirst(t *testing.T) {
	m, fs, clk := testManager(t, nil)
	p := Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour}
	for range 20 {
		mustTake(t, m, "k", p, 1)
		m.drain()
		clk.Advance(time.Millisecond)
	}
	fs.mode.Store(faultError)
	calls := fs.n(opLease)
	if d := mustTake(t, m, "k", p, 1); !d.Allowed || d.Degraded {
		t.Fatalf("%+v: want a normal decision from the leased tokens", d)
	}
	if fs.n(opLease) != calls {
		t.Fatal("a check with leased tokens on hand called the Store")
	}
}

// TestFailLocalContinuesFromStoreLevel: a key that leased and spent most
// of its limit, then lost its Store, admits in local mode only what the
// Store had left (plus the tokens on hand), not a whole new capacity.
func TestFailLocalContinuesFromStoreLevel(t *testing.T) {
	const limit, spent = 100, 90
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow} {
		for _, how := range []string{"error", "breaker open"} {
			t.Run(alg.String()+"/"+how, func(t *testing.T) {
				m, fs, clk := testManager(t, func(c *Config) {
					c.Breaker = BreakerConfig{Failures: 2, Cooldown: time.Hour}
				})
				p := Policy{Algorithm: alg, Limit: limit, Period: time.Hour, OnFailure: FailLocal}
				for i := range spent {
					if !mustTake(t, m, "k", p, 1).Allowed {
						t.Fatalf("check %d denied under the limit", i)
					}
					m.drain()
					clk.Advance(time.Millisecond)
				}
				// Refill over the 90ms of warm-up is 100/h × 90ms: none.
				fs.mode.Store(faultError)
				if how == "breaker open" {
					// Open the breaker on another key first: the key's
					// first degraded check is then rejected without a call.
					other := Policy{Algorithm: alg, Limit: limit, Period: time.Hour, OnFailure: FailOpen}
					for range 2 {
						mustTake(t, m, "other", other, 1)
					}
					if m.StoreHealthy() {
						t.Fatal("breaker not open")
					}
				}
				allowed := 0
				for range 2 * limit {
					if mustTake(t, m, "k", p, 1).Allowed {
						allowed++
					}
				}
				if allowed != limit-spent {
					t.Fatalf("allowed %d during the outage after %d of %d were spent, want %d",
						allowed, spent, limit, limit-spent)
				}
			})
		}
	}
}

// TestFailLocalRefillsFromStoreLevel: token_bucket local mode starts at the
// Store's level aged by the refill since the last lease.
func TestFailLocalRefillsFromStoreLevel(t *testing.T) {
	m, fs, clk := testManager(t, nil)
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: 100 * time.Second, OnFailure: FailLocal} // 1 token/s
	for range 100 {
		mustTake(t, m, "k", p, 1) // all of it: the Store is empty
	}
	m.drain()
	clk.Advance(30 * time.Second) // 30 tokens refilled in the Store
	fs.mode.Store(faultError)
	allowed := 0
	for range 100 {
		if mustTake(t, m, "k", p, 1).Allowed {
			allowed++
		}
	}
	if allowed != 30 {
		t.Fatalf("allowed %d in local mode 30s after the bucket was emptied at 1/s, want 30", allowed)
	}
}

// TestFailLocalEpisodes: local mode is seeded once per outage. Decisions
// within an outage continue from the local state; after the Store comes
// back and fails again, the key starts from the Store's new level, never
// above what the local state has left.
func TestFailLocalEpisodes(t *testing.T) {
	m, fs, clk := testManager(t, func(c *Config) {
		c.Breaker = BreakerConfig{Failures: 1000, Cooldown: time.Second}
		c.MinLeaseShare = -1 // one token per lease: every check asks the Store
	})
	p := Policy{Algorithm: FixedWindow, Limit: 10, Period: time.Hour, OnFailure: FailLocal}
	take := func(want bool, degraded bool) {
		t.Helper()
		if d := mustTake(t, m, "k", p, 1); d.Allowed != want || d.Degraded != degraded {
			t.Fatalf("%+v, want allowed %v degraded %v", d, want, degraded)
		}
		clk.Advance(10 * time.Second) // a slow key: one-token leases
	}
	for range 4 {
		take(true, false) // Store: 6 left
	}
	fs.mode.Store(faultError)
	take(true, true) // local: seeded to 6, 5 left
	take(true, true) // 4 left: the episode goes on, no second seed
	fs.mode.Store(faultNone)
	take(true, false) // Store: 5 left (it never saw the local ones)
	fs.mode.Store(faultError)
	// A new episode: the Store said 5, local has 4: the lower wins.
	for range 4 {
		take(true, true)
	}
	take(false, true)
	if st := m.Stats(); st.DegradedDecisions != 7 {
		t.Fatalf("DegradedDecisions = %d, want 7", st.DegradedDecisions)
	}
	if m.fo.degraded.n.Load() != 1 {
		t.Fatalf("%d keys in a degraded episode, want 1", m.fo.degraded.n.Load())
	}
	// Eviction ends the episode (no leak). The charge for the first
	// episode runs in the background holding the key's slot, and a sweep
	// does not evict a key whose slot is held: wait for it first.
	m.drain()
	clk.Advance(time.Hour)
	m.sweep(clk.Now())
	if n := m.fo.degraded.n.Load(); n != 0 {
		t.Fatalf("%d keys in a degraded episode after the sweep, want 0", n)
	}
}

// TestFailLocalSeedConcurrent: checks racing into local mode seed the key
// once, and together admit only what the Store had left.
func TestFailLocalSeedConcurrent(t *testing.T) {
	m, fs, _ := testManager(t, nil)
	p := Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour, OnFailure: FailLocal}
	mustTake(t, m, "k", p, 1)
	m.drain()
	// As if the Store's last answer said 20 left and the tokens on hand
	// were spent.
	b := m.buckets.load("k")
	b.tokens.Store(0)
	b.remaining.Store(20)
	fs.mode.Store(faultError)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 50 {
				d, err := m.Take("k", p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					allowed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if got := allowed.Load(); got != 20 {
		t.Fatalf("allowed %d in local mode with the Store at 20, want 20", got)
	}
}

// gatedStore holds the first peek (a Lease of want 0, need 0: how
// seedLocal reads the local level) until open is closed.
type gatedStore struct {
	Store
	once    sync.Once
	entered chan struct{}
	open    chan struct{}
}

func (g *gatedStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	if want == 0 && need == 0 {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.entered)
			<-g.open
		}
	}
	return g.Store.Lease(ctx, key, p, want, need, to)
}

// TestFailLocalSeedBeforePublish: a check arriving while another seeds the
// local bucket waits for the seed. It used to find the episode already
// published and spend the unseeded local bucket (the whole capacity): the
// race behind TestFailLocalSeedConcurrent's rare "allowed 100".
func TestFailLocalSeedBeforePublish(t *testing.T) {
	clk := clocktest.New()
	local := &gatedStore{
		Store:   NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1}),
		entered: make(chan struct{}),
		open:    make(chan struct{}),
	}
	m, fs, _ := testManager(t, func(c *Config) {
		c.Now = clk.Now
		c.Local = local
	})
	p := Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour, OnFailure: FailLocal}
	mustTake(t, m, "k", p, 1)
	m.drain()
	b := m.buckets.load("k")
	b.tokens.Store(0)
	b.remaining.Store(20)
	fs.mode.Store(faultError)

	// The second check to look for an episode and find none is waiting
	// for the seed: the fixed code's path.
	var hooks atomic.Int32
	waiting := make(chan struct{})
	seedWaitHook = func() {
		if hooks.Add(1) == 2 {
			close(waiting)
		}
	}
	t.Cleanup(func() { seedWaitHook = nil })

	var allowed atomic.Int64
	take := func() {
		d, err := m.Take("k", p, 1)
		if err != nil {
			t.Error(err)
			return
		}
		if d.Allowed {
			allowed.Add(1)
		}
	}
	seeder := make(chan struct{})
	go func() { defer close(seeder); take() }()
	<-local.entered // the first check holds the seed mid-way
	other := make(chan struct{})
	go func() {
		defer close(other)
		for range 150 {
			take()
		}
	}()
	select {
	case <-waiting: // waits for the seed (fixed)
	case <-other: // spent the local bucket meanwhile (the bug)
	}
	close(local.open)
	<-seeder
	<-other
	if got := allowed.Load(); got != 20 {
		t.Fatalf("allowed %d in local mode with the Store at 20, want 20", got)
	}
}
