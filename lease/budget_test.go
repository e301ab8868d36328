package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// pausedStore is a Store whose lease calls that ask for tokens stall,
// while stall is set, until gate is closed: a Store pause (Redis under
// SIGSTOP) at our own seam. entered receives one value per stalled call.
type pausedStore struct {
	Store
	stall   atomic.Bool
	entered chan Lessee
	gate    chan struct{}
	calls   atomic.Int64
	wants   atomic.Int64 // tokens asked for by stalled calls
}

func (s *pausedStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	s.calls.Add(1)
	if want > 0 && s.stall.Load() {
		s.wants.Add(want)
		s.entered <- to
		<-s.gate
	}
	return s.Store.Lease(ctx, key, p, want, need, to)
}

// A check whose lease call stalls is decided by its rule's failure mode
// when its budget runs out, and so is a check waiting for that call; the
// call goes on in the background, its grant reaches the bucket (the next
// check spends it without a Store call) and the Store is charged what
// local mode admitted meanwhile.
func TestCheckBudgetDecidesAStalledCheck(t *testing.T) {
	m, st, clk, cfg, mem, release := stalledManager(t)
	p := budgetPolicy
	res := make(chan Decision, 2)
	take := budgetTake(t, m, res)
	go take()
	<-st.entered // the first check's lease call is at the Store, its budget running
	waiting := make(chan struct{})
	slotWaitHook = func(string) { close(waiting) }
	t.Cleanup(func() { slotWaitHook = nil })
	go take()
	<-waiting // the second check waits for the first one's call
	clocktest.Eventually(t, 10*time.Second, "both checks' budgets started", func() bool { return clk.Timers() == 2 })

	clk.Advance(cfg.CheckBudget - time.Millisecond)
	select {
	case d := <-res:
		t.Fatalf("a check was decided before its budget ran out: %+v", d)
	default:
	}
	clk.Advance(time.Millisecond)
	for i := range 2 {
		select {
		case d := <-res:
			if !d.Allowed || !d.Degraded {
				t.Fatalf("check %d at its budget: %+v, want allowed by on_store_failure local (Degraded)", i, d)
			}
		case <-time.After(10 * time.Second): // a guard, not a measure: the check never ends on the old code
			t.Fatalf("check %d still waits on the stalled Store after its budget ran out", i)
		}
	}
	if got := m.Stats().DegradedDecisions; got != 2 {
		t.Fatalf("DegradedDecisions = %d, want 2", got)
	}

	// The Store answers: the call goes on and its grant is kept.
	st.stall.Store(false)
	release()
	m.Settle()
	want := st.wants.Load()
	if want < 2 {
		t.Fatalf("the stalled call asked for %d tokens, want at least 2 (MinLeaseShare of 100)", want)
	}
	calls := st.calls.Load()
	if d := mustTake(t, m, "k", p, 1); !d.Allowed || d.Degraded {
		t.Fatalf("check after the Store answered: %+v, want allowed from the kept grant", d)
	}
	if got := st.calls.Load(); got != calls {
		t.Fatalf("the check after the Store answered made %d Store calls, want 0: the background grant did not reach the bucket", got-calls)
	}
	// The 2 hits local mode admitted were spent from the grant (the
	// Store lent it all: its bucket, full at the fake clock's start, is
	// exact), not charged again on top of it: a charge would find the
	// tokens the grant took already gone, and admit them twice.
	g, err := mem.Lease(context.Background(), "k", p, 0, 0, Lessee{})
	if err != nil {
		t.Fatal(err)
	}
	if g.Remaining != 100-want {
		t.Fatalf("Store remaining = %d, want %d (100 - %d lent)", g.Remaining, 100-want, want)
	}
	if got := m.striped.onHand(m.buckets.load("k")); got != want-2-1 {
		t.Fatalf("tokens on hand = %d, want %d (the grant of %d less the 2 local admissions and the check after)", got, want-3, want)
	}
}

// A check that waits for a lease call another check of its key gave up on
// (its budget ran out) is decided at once, not after a budget of its own:
// the checks of one key that arrive together (a forwarded batch, decided
// in order after TakeMany) each waited a whole budget after the one
// before, and a Redis pause added two budgets and more to a check end to
// end.
func TestCheckBudgetNotStackedOnAGivenUpCall(t *testing.T) {
	m, st, clk, cfg, _, _ := stalledManager(t)
	res := make(chan Decision, 2)
	take := budgetTake(t, m, res)
	go take()
	<-st.entered
	clocktest.Eventually(t, 10*time.Second, "the first check's budget started", func() bool { return clk.Timers() == 1 })
	clk.Advance(cfg.CheckBudget / 2)
	waiting := make(chan struct{})
	slotWaitHook = func(string) { close(waiting) }
	t.Cleanup(func() { slotWaitHook = nil })
	go take()
	<-waiting
	clocktest.Eventually(t, 10*time.Second, "the second check's budget started", func() bool { return clk.Timers() == 2 })

	clk.Advance(cfg.CheckBudget / 2) // the first check's budget runs out
	for i := range 2 {
		select {
		case d := <-res:
			if !d.Allowed || !d.Degraded {
				t.Fatalf("check %d: %+v, want allowed by on_store_failure local (Degraded)", i, d)
			}
		case <-time.After(10 * time.Second): // a guard, not a measure: on the old code the second check waits for its own budget
			t.Fatalf("check %d still waits on a call a check gave up on", i)
		}
	}
}

// budgetPolicy is the key's policy in the check budget tests.
var budgetPolicy = Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Minute, OnFailure: FailLocal}

// stalledManager is a Manager with a 20ms check budget on the fake clock,
// over a pausedStore (on mem) whose lease calls stall until release.
func stalledManager(t *testing.T) (m *Manager, st *pausedStore, clk *clocktest.Clock, cfg Config, mem *MemoryStore, release func()) {
	t.Helper()
	clk = clocktest.New()
	mem = NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = mem.Close() })
	st = &pausedStore{Store: mem, entered: make(chan Lessee, 4), gate: make(chan struct{})}
	cfg = DefaultConfig()
	cfg.Now = clk.Now
	cfg.AfterFunc = clk.AfterFunc
	cfg.SweepInterval = -1
	cfg.StoreTimeout = time.Minute // the Store's timeout never ends the call: only the budget does
	cfg.CheckBudget = 20 * time.Millisecond
	m = NewManager(st, cfg)
	t.Cleanup(func() { _ = m.Close() })
	var open sync.Once
	release = func() { open.Do(func() { close(st.gate) }) }
	t.Cleanup(release) // before Close: a failed test must not leave the call stalled
	st.stall.Store(true)
	return m, st, clk, cfg, mem, release
}

// budgetTake returns a check of one hit of "k" that sends its Decision
// to res.
func budgetTake(t *testing.T, m *Manager, res chan<- Decision) func() {
	return func() {
		d, err := m.Take("k", budgetPolicy, 1)
		if err != nil {
			t.Errorf("Take: %v", err)
		}
		res <- d
	}
}

// A closed rule's check whose budget runs out while the Store still works
// on its call is denied (429), not answered unavailable (503): the Store
// is slow, not down (issue 35: closed rules answered 503 on a loaded
// machine's first leases, though Redis answered every call). A closed
// rule with the breaker open still answers unavailable.
func TestCheckBudgetClosedRuleDeniesWhenSlow(t *testing.T) {
	m, st, clk, cfg, _, release := stalledManager(t)
	p := budgetPolicy
	p.OnFailure = FailClosed
	res := make(chan Decision, 1)
	go func() {
		d, err := m.Take("k", p, 1)
		if err != nil {
			t.Errorf("Take: %v", err)
		}
		res <- d
	}()
	<-st.entered
	clocktest.Eventually(t, 10*time.Second, "the check's budget started", func() bool { return clk.Timers() == 1 })
	clk.Advance(cfg.CheckBudget)
	select {
	case d := <-res:
		if d.Allowed || d.Unavailable || d.RetryAfter <= 0 {
			t.Fatalf("closed rule at its budget: %+v, want denied with a retry-after, not unavailable", d)
		}
	case <-time.After(10 * time.Second): // a guard, not a measure
		t.Fatal("the check still waits after its budget ran out")
	}
	st.stall.Store(false)
	release()
	m.Settle()
}
