package lease

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/lease/logkey"
)

// intern returns the shared copy of p.
func (m *Manager) intern(p Policy) *Policy {
	m.policies.Lock()
	defer m.policies.Unlock()
	if q, ok := m.policies.m[p]; ok {
		return q
	}
	q := new(Policy)
	*q = p
	m.policies.m[p] = q
	return q
}

// bucketFor returns key's live bucket for p, creating it, or replacing a
// bucket of another policy (whose tokens go back to the Store in the
// background, holding the key's slot: the new bucket's first lease waits
// for the return).
func (m *Manager) bucketFor(key string, p Policy, now int64) *bucket {
	for {
		old := m.buckets.load(key)
		if old != nil && *old.pol == p && old.denyUntil.Load() != evicted {
			return old
		}
		nb := &bucket{pol: m.intern(p)}
		nb.lastUse.Store(unixMs32(now))
		if old == nil {
			nb.key = strings.Clone(key)
			if got, loaded := m.buckets.loadOrStore(nb.key, nb); loaded {
				if *got.pol == p && got.denyUntil.Load() != evicted {
					return got
				}
				continue
			}
			m.st.active.Add(1)
			m.met.activeKeys.Inc()
			return nb
		}
		nb.key = old.key
		s := m.claimWait(old)
		if !m.buckets.compareAndSwap(old.key, old, nb) {
			m.release(old, s, nil)
			continue
		}
		// The policy changed (rules reloaded): the old bucket's tokens go
		// back under its old policy, and the key starts fresh.
		marked := old.markEvicted()
		m.endDegraded(old)
		m.callEnded(old, Lessee{}, nil)
		if !marked {
			m.release(old, s, nil)
		} else if !m.goBG(func() { m.returnBucket(context.Background(), old, s, true) }) {
			m.returnBucket(m.ctx, old, s, true)
		}
		return nb
	}
}

// goBG runs f in a goroutine that Close waits for; false once closed.
func (m *Manager) goBG(f func()) bool {
	m.bg.Lock()
	defer m.bg.Unlock()
	if m.bg.closed {
		return false
	}
	m.bg.wg.Add(1)
	go func() {
		defer m.bg.wg.Done()
		f()
	}()
	return true
}

// returnBucket gives an evicted bucket's tokens back to the Store and
// releases s, the key's slot, which the caller holds. always makes the
// call even with nothing to give back, to end the loan (a policy change,
// an ownership move, Close: the last spends may be recent); the idle sweep
// does not (see below, and leaseSync's first lease of a key).
func (m *Manager) returnBucket(ctx context.Context, b *bucket, s *slot, always bool) error {
	tokens := m.takeAll(b)
	m.striped.remove(b) // b left the index: checks holding it find no stripes
	lent := b.basis.Load()
	m.countLocal(lent - tokens)
	b.basis.Store(0)
	if now := m.nanos(); !m.usable(b, now) {
		// Tokens of a window that ended (a return would lower the count
		// of the current window, which never granted them), or past
		// their TTL (the Store counts them as spent).
		tokens = 0
	} else if !always && b.refilled(now) {
		// The Store said it would be full again by now but for what it
		// lent this Manager. Not returned: the idle return of a cold key
		// would double its Store calls (measured: 2.6% → 5.3% script
		// calls per decision, Zipf with idle return). The cost: the
		// Store keeps counting these tokens against the burst until the
		// loan ends (LeaseTTL) or this Manager's next lease of the key
		// (Held 0) settles it: under-admission of at most one lease, for
		// at most LeaseTTL, and only if the key's traffic wants more
		// than the rest of its burst meanwhile.
		tokens = 0
	}
	// With no tokens on hand the sweep makes no call either: the Store
	// counts what it lent this Manager until the loan ends or this
	// Manager's next lease of the key settles it (that lease says the
	// tokens were spent at least Idle ago: see leaseSync).
	var err error
	if tokens > 0 || (always && lent > 0) {
		m.st.returns.Add(1)
		err = m.store.Return(ctx, b.key, *b.pol, tokens, m.cfg.Holder)
		if err == nil {
			m.st.tokensReturned.Add(tokens)
			m.met.tokensReturned.AddInt64(tokens)
		} else {
			m.cfg.Logger.Warn("cannot return leased tokens", logkey.Attr(b.key), "tokens", tokens, "err", err)
		}
	}
	m.release(b, s, err)
	if err == nil && tokens > 0 {
		// A newer bucket of the key (after a policy change, or a check
		// racing with eviction) may be denying until a batch that the
		// Store could not see coming: these tokens. Let it lease again.
		// Holding its slot orders this after any lease it has in flight.
		if nb := m.buckets.load(b.key); nb != nil && nb != b {
			ns := m.claimWait(nb)
			nb.forget()
			m.release(nb, ns, nil)
		}
	}
	return err
}

// evict removes b (the bucket of key) from the index and marks it; false
// if it was already gone.
func (m *Manager) evict(b *bucket) bool {
	if !m.buckets.compareAndDelete(b.key, b) {
		return false
	}
	m.st.active.Add(-1)
	m.met.activeKeys.Dec()
	marked := b.markEvicted()
	m.endDegraded(b) // after the mark, which seedLocal checks under the lock
	m.callEnded(b, Lessee{}, nil)
	return marked
}

// evicting is a bucket taken out of the index whose key's slot is held
// until its return.
type evicting struct {
	b      *bucket
	s      *slot
	always bool // end the loan even with nothing to give back
}

// evictHeld evicts b holding its key's slot (waiting for it if wait, else
// giving up when it is busy); ok is false when b was not evicted.
func (m *Manager) evictHeld(b *bucket, wait bool) (e evicting, ok bool) {
	var s *slot
	if wait {
		s = m.claimWait(b)
	} else if s, ok = m.claim(b); !ok {
		return evicting{}, false
	}
	if !m.evict(b) {
		m.release(b, s, nil)
		return evicting{}, false
	}
	return evicting{b: b, s: s, always: wait}, true
}

// returnAll returns the tokens of evicted buckets with at most
// ReturnWorkers Store calls at once; it reports the first error.
func (m *Manager) returnAll(ctx context.Context, bs []evicting) error {
	if len(bs) == 0 {
		return nil
	}
	var (
		mu    sync.Mutex
		first error
		fails int
	)
	m.eachStoreCall(len(bs), func(i int) {
		if err := m.returnBucket(ctx, bs[i].b, bs[i].s, bs[i].always); err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			fails++
			mu.Unlock()
		}
	})
	if first != nil {
		return fmt.Errorf("cannot return the leases of %d keys: %w", fails, first)
	}
	return nil
}

// eachStoreCall runs f(i) for i in [0, n) with at most ReturnWorkers
// calls at once (each makes a Store call), and waits for them.
func (m *Manager) eachStoreCall(n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, m.cfg.ReturnWorkers) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// sweep evicts the buckets unused since now - Idle and returns their
// tokens; it returns how many it evicted.
func (m *Manager) sweep(now time.Time) int {
	nowMs := unixMs32(now.UnixNano())
	var idle []evicting
	m.buckets.rangeAll(func(b *bucket) {
		// Signed: a bucket used after now was read (checks go on during
		// a sweep) is not idle, not 49 days idle. A key with a Store
		// call in flight is not idle either.
		if int32(nowMs-b.lastUse.Load()) >= int32(m.idleMs) {
			if e, ok := m.evictHeld(b, false); ok {
				idle = append(idle, e)
			}
		}
	})
	_ = m.returnAll(m.ctx, idle) // logged per key
	if !m.store.Rejecting() {
		m.chargeOwed() // charges that failed while the breaker stayed closed
	}
	m.prunePolicies()
	return len(idle)
}

// prunePolicies forgets the interned policies that no bucket uses, so that
// rule reloads do not grow the Manager forever. A policy interned by a
// bucketFor racing with it may be interned again: harmless, buckets
// compare policies by value.
func (m *Manager) prunePolicies() {
	live := make(map[*Policy]struct{})
	m.buckets.rangeAll(func(b *bucket) { live[b.pol] = struct{}{} })
	m.policies.Lock()
	defer m.policies.Unlock()
	for p, q := range m.policies.m {
		if _, ok := live[q]; !ok {
			delete(m.policies.m, p)
		}
	}
}

func (m *Manager) sweeper(every time.Duration) {
	defer close(m.sweepDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stopSweep:
			return
		case <-t.C:
			m.sweep(m.nowFn())
		}
	}
}

// ReturnKeys returns the leases of every key for which keep is false and
// drops their buckets (ownership moved to another node). It waits for the
// returns and reports the first failure. keep must not call the Manager.
func (m *Manager) ReturnKeys(keep func(key string) bool) error {
	var moved []*bucket
	m.buckets.rangeAll(func(b *bucket) {
		if !keep(b.key) {
			moved = append(moved, b)
		}
	})
	gone := make([]evicting, 0, len(moved))
	for _, b := range moved {
		if e, ok := m.evictHeld(b, true); ok {
			gone = append(gone, e)
		}
	}
	return m.returnAll(m.ctx, gone)
}

// Close stops the Manager's goroutines and returns every lease to the
// Store. It reports the first failed return. Close is idempotent. Call it
// after the last check: checks made during or after Close still work (no
// longer prefetching), but the tokens they lease are not returned.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		close(m.stopSweep)
		<-m.sweepDone
		m.bg.Lock()
		m.bg.closed = true
		m.bg.Unlock()
		m.bg.wg.Wait()
		m.closeErr = m.ReturnKeys(func(string) bool { return false })
		m.chargeOwed()
		m.dropOwed() // the Store is still down: nothing left to charge them later
		if m.own != nil {
			_ = m.own.Close() // stops its janitor; it stays usable
		}
		if m.clock != nil {
			m.clock.Stop() // nanos falls back to nowFn
		}
		m.store.Close() // its background probe
	})
	return m.closeErr
}
