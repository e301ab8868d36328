package lease

import "sync/atomic"

// slotWaitHook, when set (by tests only), runs when a check finds its
// key's slot taken and is about to wait for it.
var slotWaitHook func(key string)

// claim takes the lease slot of b's key if it is free (owner = true),
// else returns the slot in flight. The slot is per key, not per bucket: a
// bucket that replaced an evicted one waits for the old one's return, so
// the Held of every lease call is all this Manager holds of the key.
func (m *Manager) claim(b *bucket) (s *slot, owner bool) {
	m.inflight.Lock()
	defer m.inflight.Unlock()
	if s := m.inflight.m[b.key()]; s != nil {
		return s, false
	}
	s = &slot{done: make(chan struct{}), late: make(chan struct{})}
	m.inflight.m[b.key()] = s
	return s, true
}

// claimWait takes the lease slot of b's key, waiting for calls in flight.
func (m *Manager) claimWait(b *bucket) *slot {
	for {
		s, owner := m.claim(b)
		if owner {
			return s
		}
		<-s.done
	}
}

// release frees b's slot s with the outcome err of its Store call.
func (m *Manager) release(b *bucket, s *slot, err error) {
	m.inflight.Lock()
	delete(m.inflight.m, b.key())
	m.inflight.Unlock()
	s.err = err
	close(s.done)
}

// waitSlot waits for s within bud; false if the budget ran out, or a
// check gave up on s's call (its own budget ran out first).
func (m *Manager) waitSlot(s *slot, bud *budget) bool {
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
