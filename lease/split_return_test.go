package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// orderStore records the calls of the Managers that share it in the order
// the Store ran them, and can hold the next Return at a gate. It wraps the
// real MemoryStore: a fake only at our own seam.
type orderStore struct {
	Store
	mu    sync.Mutex
	calls []string
	gate  atomic.Pointer[returnGate]
}

// returnGate holds one Return: entered is closed when it arrives, and it
// runs once open is closed.
type returnGate struct{ entered, open chan struct{} }

func (o *orderStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	g, err := o.Store.Lease(ctx, key, p, want, need, to)
	if to.ID != "" {
		o.calls = append(o.calls, fmt.Sprintf("lease %s held=%d granted=%d lent=%d", to.ID, to.Held, g.Granted, g.Lent))
	}
	return g, err
}

func (o *orderStore) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	if g := o.gate.Swap(nil); g != nil {
		close(g.entered)
		<-g.open
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls = append(o.calls, fmt.Sprintf("return %s tokens=%d", holder, tokens))
	return o.Store.Return(ctx, key, p, tokens, holder)
}

// since returns the calls recorded from index i on.
func (o *orderStore) since(i int) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.calls[i:]...)
}

func (o *orderStore) len() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.calls)
}

// TestReturnKeysBeforeNewLease is the sequence suspected behind
// TestClusterHotKey's "admitted 2001 of 2000" (a split that ended and
// restarted mid-spray): a holder whose split ends returns the key's tokens
// (ReturnKeys, from the node's handoff goroutine) while checks of the key
// go on, and the split restarts at once, so that a new bucket of the key
// leases while the return is still at the Store. The key's slot orders
// them: the new lease waits for the return (held at a gate here), then
// says it holds nothing; the holders together admit exactly the limit
// (a frozen clock: no refill), and what they did not spend is back in the
// Store. It passes: the Manager keeps the order, the Store the count.
func TestReturnKeysBeforeNewLease(t *testing.T) {
	clk := clocktest.New()
	st := &orderStore{Store: NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})}
	newM := func(holder string) *Manager {
		cfg := DefaultConfig()
		cfg.Now = clk.Now
		cfg.SweepInterval = -1
		cfg.StoreTimeout = time.Minute // a loaded machine must not fail a call
		cfg.Holder = holder
		m := NewManager(st, cfg)
		t.Cleanup(func() { _ = m.Close() })
		return m
	}
	a, b := newM("a"), newM("b")
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: 24 * time.Hour, OnFailure: FailClosed}
	var allowed atomic.Int64
	take := func(m *Manager) bool {
		d, err := m.Take("k", p, 1)
		if err != nil {
			t.Error(err)
			return false
		}
		if d.Degraded || d.Unavailable {
			t.Errorf("decision %+v with a healthy Store", d)
		}
		if d.Allowed {
			allowed.Add(1)
		}
		return d.Allowed
	}
	take(b)
	take(a)
	a.drain()
	b.drain()

	g := &returnGate{entered: make(chan struct{}), open: make(chan struct{})}
	st.gate.Store(g)
	waiting := make(chan struct{})
	var once sync.Once
	slotWaitHook = func(key string) {
		if key == "k" {
			once.Do(func() { close(waiting) })
		}
	}
	t.Cleanup(func() { slotWaitHook = nil })

	from := st.len()
	returned := make(chan error, 1)
	go func() { returned <- b.ReturnKeys(func(string) bool { return false }) }() // the split ended
	<-g.entered                                                                  // b's return is at the Store, the key's slot held
	restarted := make(chan struct{})
	go func() { defer close(restarted); take(b) }() // the split restarted: a new bucket
	select {
	case <-waiting: // its lease waits for the key's slot
		if calls := st.since(from); len(calls) != 0 {
			t.Errorf("Store calls while b's return was held: %q", calls)
		}
	case <-restarted: // decided without waiting for the return
		t.Errorf("b's new bucket did not wait for the return: Store calls while it was held: %q", st.since(from))
	}
	close(g.open)
	if err := <-returned; err != nil {
		t.Fatal(err)
	}
	<-restarted
	b.drain()
	calls := st.since(from)
	if len(calls) < 2 || !strings.HasPrefix(calls[0], "return b ") || !strings.HasPrefix(calls[1], "lease b held=0 ") {
		t.Errorf("b's calls after the split ended: %q, want its return, then its new bucket's lease holding 0", calls)
	}

	// Both holders spend until neither can; then both return what is left.
	for range 3 * p.Limit {
		ta, tb := take(a), take(b)
		if !ta && !tb {
			break
		}
	}
	a.drain()
	b.drain()
	for _, m := range []*Manager{a, b} {
		if err := m.ReturnKeys(func(string) bool { return false }); err != nil {
			t.Fatal(err)
		}
	}
	got := allowed.Load()
	peek, err := st.Store.Lease(context.Background(), "k", p, 0, 0, Lessee{})
	if err != nil {
		t.Fatal(err)
	}
	if got > p.Limit || got+peek.Remaining != p.Limit {
		t.Errorf("admitted %d, the Store has %d left after every return: want at most %d admitted, and the two adding up to it (frozen clock)\ncalls: %q",
			got, peek.Remaining, p.Limit, st.since(0))
	}
}
