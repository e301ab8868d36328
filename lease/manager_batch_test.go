package lease

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// TestTakeManyDecidesAsTake: every kind of check in one batch gets the
// answer Take would give it.
func TestTakeManyDecidesAsTake(t *testing.T) {
	m, _, _ := testManager(t, nil)
	tb := Policy{Algorithm: TokenBucket, Limit: 10, Period: time.Hour}
	log := Policy{Algorithm: SlidingLog, Limit: 1, Period: time.Hour}
	conc := Policy{Algorithm: Concurrency, Limit: 1, Period: time.Hour}
	mustTake(t, m, "warm", tb, 1) // a bucket with tokens on hand
	cs := []Check{
		{Key: "warm", Policy: tb, Hits: 1},
		{Key: "cold", Policy: tb, Hits: 1},
		{Key: "cold", Policy: tb, Hits: 0},   // peek
		{Key: "big", Policy: tb, Hits: 11},   // above capacity
		{Key: "bad", Policy: tb, Hits: -1},   // bad call
		{Key: "log", Policy: log, Hits: 1},   // exact
		{Key: "log", Policy: log, Hits: 1},   // exact, over its limit of 1
		{Key: "conc", Policy: conc, Hits: 1}, // Acquire's
		{Key: "inv", Policy: Policy{Algorithm: TokenBucket}, Hits: 1},
	}
	m.TakeMany(cs)
	want := []struct {
		allowed bool
		err     string
	}{
		{true, ""}, {true, ""}, {true, ""}, {false, ""}, {false, "hits"},
		{true, ""}, {false, ""}, {false, "wrong"}, {false, "limit"},
	}
	logAllowed := 0
	for i, c := range cs {
		switch w := want[i]; {
		case w.err == "hits" || w.err == "limit":
			var fe *FieldError
			if !errors.As(c.Err, &fe) || fe.Field != w.err {
				t.Errorf("check %d: err %v, want a FieldError on %s", i, c.Err, w.err)
			}
		case w.err == "wrong":
			if !errors.Is(c.Err, ErrWrongAlgorithm) {
				t.Errorf("check %d: err %v, want ErrWrongAlgorithm", i, c.Err)
			}
		case c.Err != nil:
			t.Errorf("check %d: err %v", i, c.Err)
		case c.Policy.Algorithm == SlidingLog:
			// Two checks of one key that both need the Store: either
			// order is allowed, never both.
			if c.Decision.Allowed {
				logAllowed++
			}
		case c.Decision.Allowed != w.allowed:
			t.Errorf("check %d (%s, %d hits): %+v, want allowed %v", i, c.Key, c.Hits, c.Decision, w.allowed)
		}
	}
	if logAllowed != 1 {
		t.Errorf("sliding_log of limit 1: %d of 2 checks allowed, want 1", logAllowed)
	}
}

// TestTakeManySameKeyNeverOverAdmits: a batch of many checks of one key,
// most of them needing the Store, admits exactly the limit.
func TestTakeManySameKeyNeverOverAdmits(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, FixedWindow, SlidingWindow} {
		t.Run(alg.String(), func(t *testing.T) {
			m, _, _ := testManager(t, func(c *Config) { c.MinLeaseShare = -1; c.BatchWorkers = 8 })
			p := Policy{Algorithm: alg, Limit: 100, Period: time.Hour}
			cs := make([]Check, 300)
			for i := range cs {
				cs[i] = Check{Key: "k" + strconv.Itoa(i%3), Policy: p, Hits: 1}
			}
			m.TakeMany(cs)
			allowed := map[string]int{}
			for _, c := range cs {
				if c.Err != nil {
					t.Fatal(c.Err)
				}
				if c.Decision.Allowed {
					allowed[c.Key]++
				}
			}
			if len(allowed) != 3 {
				t.Errorf("allowed checks of %d keys, want 3: %v", len(allowed), allowed)
			}
			for k, n := range allowed {
				if n != 100 {
					t.Errorf("%s: %d of 100 checks allowed, want the limit 100", k, n)
				}
			}
		})
	}
}

// heldStore holds the first n lease calls until the test opens the gate,
// and records how many calls were in flight at most: a seam we own.
type heldStore struct {
	Store
	n        int64
	inflight atomic.Int64
	most     atomic.Int64
	calls    atomic.Int64
	gate     chan struct{}
}

func (g *heldStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	in := g.inflight.Add(1)
	defer g.inflight.Add(-1)
	for {
		most := g.most.Load()
		if in <= most || g.most.CompareAndSwap(most, in) {
			break
		}
	}
	if g.calls.Add(1) <= g.n {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return Grant{}, ctx.Err()
		}
	}
	return g.Store.Lease(ctx, key, p, want, need, to)
}

// TestTakeManyOverlapsStoreCalls: the Store calls of a batch's misses are
// in flight together, never more than BatchWorkers. The first BatchWorkers
// calls are held until all of them have arrived: a TakeMany that called
// the Store one key at a time would never get there.
func TestTakeManyOverlapsStoreCalls(t *testing.T) {
	const workers, keys = 4, 20
	gs := &heldStore{Store: NewMemoryStore(MemoryStoreConfig{SweepInterval: -1}), n: workers, gate: make(chan struct{})}
	m := NewManager(gs, Config{BatchWorkers: workers, StoreTimeout: time.Minute, SweepInterval: -1})
	t.Cleanup(func() { _ = m.Close() })
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Second}
	cs := make([]Check, keys)
	for i := range cs {
		cs[i] = Check{Key: "cold-" + strconv.Itoa(i), Policy: p, Hits: 1}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.TakeMany(cs)
	}()
	var open sync.Once
	release := func() { open.Do(func() { close(gs.gate) }); <-done }
	t.Cleanup(release) // if the wait fails: let the held calls go
	clocktest.EventuallyState(t, 30*time.Second, fmt.Sprintf("%d Store calls in flight together", workers), func() (bool, string) {
		return gs.inflight.Load() >= workers, fmt.Sprintf("%d at most", gs.most.Load())
	})
	release()
	if most := gs.most.Load(); most != workers {
		t.Errorf("%d Store calls in flight at most, want BatchWorkers = %d", most, workers)
	}
	for i, c := range cs {
		if c.Err != nil || !c.Decision.Allowed || c.Decision.Degraded {
			t.Errorf("check %d: %+v %v, want allowed by the Store", i, c.Decision, c.Err)
		}
	}
}

// TestTakeManyHungStore: a Store that never answers costs the batch its
// timeouts, and the failure mode decides every check (the test would hang
// otherwise).
func TestTakeManyHungStore(t *testing.T) {
	m, fs, _ := testManager(t, func(c *Config) {
		c.StoreTimeout = time.Millisecond
		c.BatchWorkers = 4
	})
	fs.mode.Store(faultHang)
	p := Policy{Algorithm: TokenBucket, Limit: 3, Period: time.Hour, OnFailure: FailLocal}
	cs := make([]Check, 40)
	for i := range cs {
		cs[i] = Check{Key: "k" + strconv.Itoa(i%10), Policy: p, Hits: 1}
	}
	m.TakeMany(cs)
	allowed := 0
	for i, c := range cs {
		if c.Err != nil || !c.Decision.Degraded {
			t.Fatalf("check %d: %+v %v, want a degraded decision", i, c.Decision, c.Err)
		}
		if c.Decision.Allowed {
			allowed++
		}
	}
	if allowed != 30 { // 10 keys × limit 3, from node memory
		t.Errorf("allowed %d of 40 in local mode, want 30", allowed)
	}
}

func TestTakeManyHotDoesNotAllocate(t *testing.T) {
	m, _, _ := testManager(t, nil)
	cs := make([]Check, 100)
	for i := range cs {
		cs[i] = Check{Key: "hot-" + strconv.Itoa(i), Policy: hotPolicy, Hits: 1}
	}
	m.TakeMany(cs) // leases every key
	m.drain()
	if n := testing.AllocsPerRun(100, func() { m.TakeMany(cs) }); n != 0 {
		t.Fatalf("TakeMany of 100 keys with tokens on hand: %v allocations, want 0", n)
	}
	for _, c := range cs {
		if c.Err != nil || !c.Decision.Allowed {
			t.Fatalf("%+v %v", c.Decision, c.Err)
		}
	}
}

func ExampleManager_TakeMany() {
	m := NewManager(NewMemoryStore(MemoryStoreConfig{}), Config{})
	defer m.Close()
	p := Policy{Algorithm: TokenBucket, Limit: 2, Period: time.Minute}
	checks := []Check{
		{Key: "user-1", Policy: p, Hits: 1},
		{Key: "user-2", Policy: p, Hits: 1},
		{Key: "user-3", Policy: p, Hits: 3}, // more than the limit
	}
	m.TakeMany(checks)
	for _, c := range checks {
		fmt.Println(c.Key, c.Decision.Allowed, c.Err)
	}
	// Output:
	// user-1 true <nil>
	// user-2 true <nil>
	// user-3 false <nil>
}

// sleepStore is a MemoryStore with a fixed latency per lease call, like a
// Store across a network: a seam we own. It waits by yielding, not with
// time.Sleep: on the development VM a 50µs Sleep lasts about 1.1ms (timer
// granularity), which would model a Store twenty times slower.
type sleepStore struct {
	*MemoryStore
	latency time.Duration
}

func (s sleepStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	for start := time.Now(); time.Since(start) < s.latency; {
		runtime.Gosched()
	}
	return s.MemoryStore.Lease(ctx, key, p, want, need, to)
}

// BenchmarkTakeManyCold: 100 checks of keys never seen before, on a Store
// with 50µs per lease call: one TakeMany against 100 Takes in a row.
func BenchmarkTakeManyCold(b *testing.B) {
	const batch = 100
	run := func(b *testing.B, decide func(m *Manager, cs []Check)) {
		ms := NewMemoryStore(MemoryStoreConfig{})
		m := NewManager(sleepStore{ms, 50 * time.Microsecond}, Config{})
		b.Cleanup(func() {
			_ = m.Close()
			_ = ms.Close()
		})
		cs := make([]Check, batch)
		var n int
		b.ReportAllocs()
		for b.Loop() {
			for i := range cs {
				n++
				cs[i] = Check{Key: "cold-" + strconv.Itoa(n), Policy: hotPolicy, Hits: 1}
			}
			decide(m, cs)
			if !cs[batch-1].Decision.Allowed {
				b.Fatal("denied")
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/decision")
	}
	b.Run("TakeMany", func(b *testing.B) {
		run(b, func(m *Manager, cs []Check) { m.TakeMany(cs) })
	})
	b.Run("sequential", func(b *testing.B) {
		run(b, func(m *Manager, cs []Check) {
			for i := range cs {
				c := &cs[i]
				c.Decision, c.Err = m.Take(c.Key, c.Policy, c.Hits)
			}
		})
	})
}

// BenchmarkTakeManyHot: batches of 100 keys with tokens on hand.
func BenchmarkTakeManyHot(b *testing.B) {
	m := benchManager(b)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		cs := make([]Check, 100)
		for i := range cs {
			cs[i] = Check{Key: "hot-" + strconv.Itoa(i), Policy: hotPolicy, Hits: 1}
		}
		m.TakeMany(cs)
		for pb.Next() {
			m.TakeMany(cs)
		}
	})
}
