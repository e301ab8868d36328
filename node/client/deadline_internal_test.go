package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// timerlessCtx is a context with a deadline whose Done does not close at
// it, as the Breaker hands a lease.DeadlineStore.
type timerlessCtx struct {
	context.Context
	at time.Time
}

func (c timerlessCtx) Deadline() (time.Time, bool) { return c.at, true }

func (c timerlessCtx) Err() error {
	if time.Now().Before(c.at) {
		return nil
	}
	return context.DeadlineExceeded
}

// The remote store is a lease.DeadlineStore: a call ends by its
// context's deadline while the node holds it, whether it was sent at once
// (the request's own deadline) or queued behind another (a timer of the
// call's), though the context's Done never closes and the Limiter's
// Timeout is an hour. Fails before await's timer: the queued call waits
// for the node.
func TestRemoteStoreEndsByDeadline(t *testing.T) {
	s := startSeam(t, seamRules)
	l := seamLimiter(t, s, func(c *LimiterConfig) { c.Timeout = time.Hour; c.LeaseRequests = 1 })
	queued := make(chan int, 64)
	l.store.queued = func(n int) { queued <- n }
	s.hold()
	t.Cleanup(s.open) // (before the Limiter's Close, which waits for its requests)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Hour}
	errs := make(chan error, 2)
	call := func(key string, at time.Time) {
		_, err := l.store.Lease(timerlessCtx{context.Background(), at}, "per-key:"+key, p, 10, 1, lease.Lessee{ID: "h", TTL: time.Minute})
		errs <- err
	}
	go call("sent", time.Now().Add(50*time.Millisecond))
	if n := s.waitArrival(t); n != 1 {
		t.Fatalf("the first call's request carried %d ops, want 1", n)
	}
	go call("queued", time.Now().Add(50*time.Millisecond))
	select {
	case <-queued:
	case <-time.After(time.Minute):
		t.Fatal("the second call was not queued within a minute")
	}
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, lease.ErrStoreUnavailable) {
				t.Errorf("a call the node held: %v, want ErrStoreUnavailable", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("a call the node held did not end within a minute: its deadline did not hold")
		}
	}
}
