package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// failOnceStore fails the first Return: before running it, or, with ran,
// after running it (its answer lost).
type failOnceStore struct {
	*MemoryStore
	ran    bool
	failed atomic.Bool
}

func (s *failOnceStore) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	if s.failed.CompareAndSwap(false, true) {
		if s.ran {
			_ = s.MemoryStore.Return(ctx, key, p, tokens, holder)
		}
		return errInjected
	}
	return s.MemoryStore.Return(ctx, key, p, tokens, holder)
}

// Close gives back what a Manager holds even when a Store call fails once
// on the way (a timeout on a loaded host, say): the return is made once
// more. A return whose answer was lost gives back nothing the second
// time: never more than was lent.
func TestCloseRetriesAFailedReturn(t *testing.T) {
	for _, ran := range []bool{false, true} {
		clock := clocktest.New()
		ms := NewMemoryStore(MemoryStoreConfig{Now: clock.Now, SweepInterval: -1})
		defer ms.Close()
		st := &failOnceStore{MemoryStore: ms, ran: ran}
		cfg := DefaultConfig()
		cfg.Now, cfg.SweepInterval = clock.Now, -1
		m := NewManager(st, cfg)
		p := Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour}
		if d, err := m.Take("k", p, 1); err != nil || !d.Allowed {
			t.Fatalf("take: %+v %v", d, err)
		}
		if err := m.Close(); err != nil {
			t.Fatalf("ran=%v: Close: %v", ran, err)
		}
		g, err := ms.Lease(t.Context(), "k", p, 0, 0, Lessee{})
		if err != nil {
			t.Fatal(err)
		}
		if g.Remaining != 99 {
			t.Fatalf("ran=%v: %d left after Close, want 99 (only the check's token spent)", ran, g.Remaining)
		}
	}
}
