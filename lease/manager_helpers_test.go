package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// faultStore is a Store that counts calls and can be told to fail or to
// hang until its context ends. It wraps the real MemoryStore: a fake only
// at our own seam.
type faultStore struct {
	Store
	mode  atomic.Int32 // faultNone, faultError, faultHang
	calls [numOps]atomic.Int64
	wants struct {
		sync.Mutex
		w []int64
	}
}

const (
	faultNone int32 = iota
	faultError
	faultHang
	// faultLoseAnswer runs lease calls in the Store and then fails them,
	// as a call that timed out after the Store ran it.
	faultLoseAnswer
)

var errInjected = errors.New("injected failure")

func newFaultStore(now func() time.Time) *faultStore {
	return &faultStore{Store: NewMemoryStore(MemoryStoreConfig{Now: now, SweepInterval: -1})}
}

func (f *faultStore) fault(ctx context.Context) error {
	switch f.mode.Load() {
	case faultError:
		return errInjected
	case faultHang:
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (f *faultStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	f.calls[opLease].Add(1)
	if err := f.fault(ctx); err != nil {
		return Grant{}, err
	}
	f.wants.Lock()
	f.wants.w = append(f.wants.w, want)
	f.wants.Unlock()
	if f.mode.Load() == faultLoseAnswer {
		_, _ = f.Store.Lease(ctx, key, p, want, need, to)
		return Grant{}, errInjected
	}
	return f.Store.Lease(ctx, key, p, want, need, to)
}

func (f *faultStore) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	f.calls[opReturn].Add(1)
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.Store.Return(ctx, key, p, tokens, holder)
}

func (f *faultStore) Log(ctx context.Context, key string, p Policy, hits int64) (Result, error) {
	f.calls[opLog].Add(1)
	if err := f.fault(ctx); err != nil {
		return Result{}, err
	}
	return f.Store.Log(ctx, key, p, hits)
}

func (f *faultStore) Acquire(ctx context.Context, key string, p Policy, id string, hits int64) (Result, error) {
	f.calls[opAcquire].Add(1)
	if err := f.fault(ctx); err != nil {
		return Result{}, err
	}
	return f.Store.Acquire(ctx, key, p, id, hits)
}

func (f *faultStore) Release(ctx context.Context, key string, p Policy, id string) error {
	f.calls[opRelease].Add(1)
	if err := f.fault(ctx); err != nil {
		return err
	}
	return f.Store.Release(ctx, key, p, id)
}

func (f *faultStore) n(op int) int64 { return f.calls[op].Load() }

func (f *faultStore) lastWant() int64 {
	f.wants.Lock()
	defer f.wants.Unlock()
	if len(f.wants.w) == 0 {
		return 0
	}
	return f.wants.w[len(f.wants.w)-1]
}

// available peeks at the Store's whole tokens for key.
func (f *faultStore) available(t *testing.T, key string, p Policy) int64 {
	t.Helper()
	g, err := f.Store.Lease(context.Background(), key, p, 0, 0, Lessee{})
	if err != nil {
		t.Fatalf("peek %s: %v", key, err)
	}
	return g.Remaining
}

// testManager returns a Manager on a fault store with a fake clock and no
// sweeper goroutine, closed at the end of the test.
func testManager(t *testing.T, edit func(*Config)) (*Manager, *faultStore, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	fs := newFaultStore(clk.Now)
	cfg := DefaultConfig()
	cfg.Now = clk.Now
	cfg.SweepInterval = -1
	// A loaded test machine must not make the Store look failed; the
	// tests of timeouts set their own.
	cfg.StoreTimeout = time.Minute
	if edit != nil {
		edit(&cfg)
	}
	m := NewManager(fs, cfg)
	t.Cleanup(func() { _ = m.Close() })
	return m, fs, clk
}

// drain waits for the Manager's background goroutines (prefetches and
// returns). Tests call it where no new ones can start.
func (m *Manager) drain() { m.bg.wg.Wait() }

func mustTake(t *testing.T, m *Manager, key string, p Policy, hits int64) Decision {
	t.Helper()
	d, err := m.Take(key, p, hits)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", key, hits, err)
	}
	return d
}

// perSecond is a token bucket of n per second with burst n.
func perSecond(n int64) Policy {
	return Policy{Algorithm: TokenBucket, Limit: n, Period: time.Second}
}
