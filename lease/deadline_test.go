package lease

import (
	"context"
	"errors"
	"testing"
	"time"
)

// deadlineStore is a DeadlineStore whose leases end only by their
// context's deadline (a timer of their own, as a request's connection
// deadline would) or its end, never by its Done channel closing at the
// deadline: it records what it was given.
type deadlineStore struct {
	Store
	done     <-chan struct{} // the context's Done
	deadline time.Time
}

func (s *deadlineStore) EndsByDeadline() {}

func (s *deadlineStore) Lease(ctx context.Context, key string, p Policy, want, need int64, _ Lessee) (Grant, error) {
	s.done = ctx.Done()
	d, ok := ctx.Deadline()
	if !ok {
		return Grant{}, errors.New("no deadline: the call would never end")
	}
	s.deadline = d
	t := time.NewTimer(time.Until(d))
	defer t.Stop()
	select {
	case <-t.C:
		if ctx.Done() == nil {
			return Grant{}, context.DeadlineExceeded // (a connection's deadline)
		}
		// A context of the caller's own, which does close at its
		// deadline: its end, not the timer (which may fire first), is
		// the call's.
		<-ctx.Done()
	case <-ctx.Done():
	}
	return Grant{}, ctx.Err()
}

// A DeadlineStore's call is bounded by the Breaker's timeout through a
// context that carries the deadline and arms no timer (its Done is the
// caller's); its end is the Breaker's timeout (a failure that counts),
// and the caller's own end still ends it, as a caller's error.
func TestBreakerDeadlineStore(t *testing.T) {
	s := &deadlineStore{}
	b := NewBreaker(s, BreakerConfig{Timeout: 20 * time.Millisecond, MaxTimeout: 20 * time.Millisecond, Failures: 2, Cooldown: time.Hour})
	p := perSecond(10)
	start := time.Now()
	_, err := b.Lease(context.Background(), "k", p, 1, 1, Lessee{})
	if !errors.Is(err, ErrStoreUnavailable) || !errors.Is(err, errTimedOut) {
		t.Fatalf("a call past its deadline: %v, want the Breaker's timeout", err)
	}
	if s.done != nil {
		t.Error("the call's context has a Done channel of its own: a timer was armed")
	}
	if s.deadline.Before(start) || s.deadline.After(start.Add(b.Timeout()+time.Second)) {
		t.Errorf("deadline %v, want the call's start %v plus the timeout", s.deadline, start)
	}
	// The caller's deadline, when sooner, is the call's own (the caller's
	// context itself).
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := b.Lease(ctx, "k", p, 1, 1, Lessee{}); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, errTimedOut) {
		t.Fatalf("a caller's deadline: %v, want the caller's own", err)
	}
	if s.done != ctx.Done() {
		t.Error("a caller's sooner deadline was wrapped")
	}
	// A caller that gives up ends the call; it is not the Store's failure.
	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if _, err := b.Lease(ctx, "k", p, 1, 1, Lessee{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a canceled caller: %v", err)
	}
	if b.State() != BreakerClosed {
		t.Fatalf("state %v after one timeout and the caller's ends, want closed", b.State())
	}
	dc := withDeadline(context.Background(), time.Now().Add(-time.Millisecond))
	if !errors.Is(dc.Err(), context.DeadlineExceeded) {
		t.Fatalf("a context past its deadline: Err %v", dc.Err())
	}
}
