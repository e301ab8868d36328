package lease

import (
	"sync"
	"sync/atomic"
)

// slotWaitHook, when set (by tests only), runs when a check finds its
// key's slot taken and is about to wait for it.
var slotWaitHook func(key string)

// slots holds the lease slot of every key that has a Store call in
// flight (sync lease, prefetch or return), by key: one per key, also
// across a bucket and the one that replaced it. The mutex guards m, and
// is what a roll into a window ahead holds to act as a slot holder with
// no slot in the map (see rollAhead).
type slots struct {
	sync.Mutex
	m map[string]*slot // by key
}

func (t *slots) init() { t.m = make(map[string]*slot) }

// tookOut reports whether a lease call of b's key in flight took off the
// bucket at least need tokens on hand, which it puts back as far as the
// Store still lends them: a check that finds the bucket short then waits
// for the call rather than deny for tokens this Manager may hold (a key
// whose holder leased its whole limit, the Store's last answer saying it
// has none left, was denied so while a call was out).
func (t *slots) tookOut(b *bucket, need int64) bool {
	t.Lock()
	s := t.m[b.key()]
	t.Unlock()
	return s != nil && s.took.Load() >= need
}

// claim takes the lease slot of b's key if it is free (owner = true),
// else returns the slot in flight. The slot is per key, not per bucket: a
// bucket that replaced an evicted one waits for the old one's return, so
// the Held of every lease call is all this Manager holds of the key.
func (t *slots) claim(b *bucket) (s *slot, owner bool) {
	t.Lock()
	defer t.Unlock()
	if s := t.m[b.key()]; s != nil {
		return s, false
	}
	s = &slot{done: make(chan struct{}), late: make(chan struct{})}
	t.m[b.key()] = s
	return s, true
}

// claimWait takes the lease slot of b's key, waiting for calls in flight.
func (t *slots) claimWait(b *bucket) *slot {
	for {
		s, owner := t.claim(b)
		if owner {
			return s
		}
		<-s.done
	}
}

// release frees b's slot s with the outcome err of its Store call.
func (t *slots) release(b *bucket, s *slot, err error) {
	t.Lock()
	delete(t.m, b.key())
	t.Unlock()
	s.err = err
	close(s.done)
}

// wait waits for s within bud; false if the budget ran out, or a check
// gave up on s's call (its own budget ran out first).
func (s *slot) wait(bud *budget) bool {
	select {
	case <-s.done:
		return true
	default:
	}
	select {
	case <-s.done:
		return true
	case <-s.late:
		return false
	case <-bud.expired:
		return false
	}
}

// slot is a bucket's lease slot: one Store call per bucket at a time.
// err is the outcome of the call, written before done is closed.
type slot struct {
	done chan struct{}
	// late is closed when a check gave up on the slot's call (its budget
	// ran out): the checks waiting for that call are decided at once
	// instead of each waiting out a budget of its own after it. Only a
	// check's own call (leaseSync with a budget) closes it.
	late chan struct{}
	err  error
	// took is the tokens on hand a check's own call took off the bucket
	// (leaseSync: it puts back what the Store still lends it), for the
	// checks that find the bucket empty meanwhile (see tookOut).
	took atomic.Int64
}
