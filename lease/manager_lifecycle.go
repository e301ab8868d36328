package lease

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/lease/logkey"
)

// policyTable interns the policies of buckets, so a bucket holds a
// pointer instead of a copy.
type policyTable struct {
	sync.Mutex
	m map[Policy]*Policy
}

// intern returns the shared copy of p.
func (t *policyTable) intern(p Policy) *Policy {
	t.Lock()
	defer t.Unlock()
	if q, ok := t.m[p]; ok {
		return q
	}
	if t.m == nil {
		t.m = make(map[Policy]*Policy)
	}
	q := new(Policy)
	*q = p
	t.m[p] = q
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
		nb := newBucket(key, m.policies.intern(p))
		nb.lastUse.Store(unixMs32(now))
		if old == nil {
			if got, loaded := m.buckets.loadOrStore(nb.key(), nb); loaded {
				if *got.pol == p && got.denyUntil.Load() != evicted {
					return got
				}
				continue
			}
			m.st.active.Add(1)
			m.met.activeKeys.Inc()
			return nb
		}
		s := m.inflight.claimWait(old)
		if !m.buckets.compareAndSwap(old.key(), old, nb) {
			m.inflight.release(old, s, nil)
			continue
		}
		// The policy changed (rules reloaded): the old bucket's tokens go
		// back under its old policy, and the key starts fresh.
		marked := old.markEvicted()
		m.fo.endDegraded(old)
		m.unanswered.ended(old, Lessee{}, nil)
		if !marked {
			m.inflight.release(old, s, nil)
		} else if !m.bg.spawn(func() { m.returnOne(old, s) }) {
			m.returnOne(old, s)
		}
		return nb
	}
}

// background is a Manager's background goroutines (prefetches, returns,
// charges): Close stops new ones and waits for those running.
type background struct {
	sync.Mutex // guards closed, and orders wg.Add before Close's Wait
	closed     bool
	wg         sync.WaitGroup
}

// spawn runs f in a goroutine that Close waits for; false once closed.
func (g *background) spawn(f func()) bool {
	g.Lock()
	defer g.Unlock()
	if g.closed {
		return false
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		f()
	}()
	return true
}

// stop refuses new goroutines and waits for those running.
func (g *background) stop() {
	g.Lock()
	g.closed = true
	g.Unlock()
	g.wg.Wait()
}

// returnBucket gives an evicted bucket's tokens back to the Store and
// releases s, the key's slot, which the caller holds. always makes the
// call even with nothing to give back, to end the loan (a policy change,
// an ownership move, Close: the last spends may be recent); the idle sweep
// does not (see returnable, and leaseSync's first lease of a key), but to
// end fixed_window shares of windows ahead. The caller logs a failure.
func (m *Manager) returnBucket(ctx context.Context, b *bucket, s *slot, always bool) error {
	tokens, call := m.returnable(b, always)
	var err error
	if call {
		m.st.returns.Add(1)
		err = m.store.Return(ctx, b.key(), *b.pol, tokens, m.cfg.Holder)
		if err != nil && always && ctx.Err() == nil {
			// A loan that ends here (Close, a move) is left otherwise
			// for its TTL or, with shares of windows ahead, until the
			// last of them ends: once more. A return that landed but
			// whose answer was lost ended the loan: this one then gives
			// back nothing.
			err = m.store.Return(ctx, b.key(), *b.pol, tokens, m.cfg.Holder)
		}
		if err == nil {
			m.st.tokensReturned.Add(tokens)
			m.met.tokensReturned.AddInt64(tokens)
		} else if always {
			m.leftRecent() // before a new bucket of the key can lease
		}
	}
	m.inflight.release(b, s, err)
	if err == nil && tokens > 0 {
		// A newer bucket of the key (after a policy change, or a check
		// racing with eviction) may be denying until a batch that the
		// Store could not see coming: these tokens. Let it lease again.
		// Holding its slot orders this after any lease it has in flight.
		if nb := m.buckets.load(b.key()); nb != nil && nb != b {
			ns := m.inflight.claimWait(nb)
			nb.forget()
			m.inflight.release(nb, ns, nil)
		}
	}
	return err
}

// returnable takes the tokens of an evicted bucket b off it (the caller
// holds b's slot) and says what its return gives back, and whether it
// makes a Store call at all.
func (m *Manager) returnable(b *bucket, always bool) (tokens int64, call bool) {
	tokens = m.striped.takeAll(b)
	m.striped.remove(b) // b left the index: checks holding it find no stripes
	lent := b.basis.Load()
	m.countLocal(lent - tokens)
	b.basis.Store(0)
	now := m.clk.nanosFor(b.pol)
	// Shares of windows ahead end only with a return (or a lease call
	// asking none): one is made for them even with nothing on hand.
	ahead := m.ahead.live(b, now)
	if !m.cfg.usable(b, now) {
		// Tokens of a window that ended (a return would lower the count
		// of the current window, which never granted them), or past
		// their TTL (the Store counts them as spent). But a fixed_window
		// bucket with shares of windows ahead that it did not roll into
		// spent none of the share the Store counts in its window of now:
		// that goes back, as much as it surely did not spend in any
		// window the Store may be in (aheadGap.sure; 0 without shares).
		// Left there, a clean stop would take the share out of the
		// window for the key's next holder.
		tokens = m.ahead.gapOf(b, true, tokens, now).sure
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
	return tokens, tokens > 0 || (always && lent > 0) || ahead
}

// leftRecent records that a loan whose last spends may be recent was left
// running (its return failed, or was not made): until it ends, LeaseTTL
// from now at most, the first lease of a new bucket says it spent nothing
// for as long as it knows, not Idle (see leaseSync). The Store then may
// keep the refill of up to that loan's tokens from a key for that long
// (under-admission), where dating their spends back would let it admit
// them twice.
func (m *Manager) leftRecent() {
	until := addTime(m.clk.nanos(), m.cfg.LeaseTTL)
	for {
		u := m.leftUntil.Load()
		if u >= until || m.leftUntil.CompareAndSwap(u, until) {
			return
		}
	}
}

// returnOne returns the tokens of b, evicted on a policy change, logging
// a failure.
func (m *Manager) returnOne(b *bucket, s *slot) {
	if err := m.returnBucket(m.ctx, b, s, true); err != nil {
		m.cfg.Logger.Warn("cannot return leased tokens", logkey.Attr(b.key()), "err", err)
	}
}

// evict removes b (the bucket of key) from the index and marks it; false
// if it was already gone.
func (m *Manager) evict(b *bucket) bool {
	if !m.buckets.compareAndDelete(b.key(), b) {
		return false
	}
	m.st.active.Add(-1)
	m.met.activeKeys.Dec()
	marked := b.markEvicted()
	m.fo.endDegraded(b) // after the mark, which seedLocal checks under the lock
	m.unanswered.ended(b, Lessee{}, nil)
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
		s = m.inflight.claimWait(b)
	} else if s, ok = m.inflight.claim(b); !ok {
		return evicting{}, false
	}
	if !m.evict(b) {
		m.inflight.release(b, s, nil)
		return evicting{}, false
	}
	return evicting{b: b, s: s, always: wait}, true
}

// returnAll returns the tokens of evicted buckets with at most
// ReturnWorkers Store calls at once, the biggest loans first, starting
// none after ReturnTimeout: the loans it leaves then end on their own (the
// Store counts them as lent until their TTL or their window's end, as a
// crashed node's). It logs one line for what failed or was left, and
// reports the first error.
func (m *Manager) returnAll(bs []evicting) error {
	if len(bs) == 0 {
		return nil
	}
	slices.SortFunc(bs, func(x, y evicting) int { return cmp.Compare(y.b.basis.Load(), x.b.basis.Load()) })
	var over atomic.Bool
	stop := m.clk.afterFunc(m.cfg.ReturnTimeout, func() { over.Store(true) })
	defer stop()
	var (
		mu       sync.Mutex
		first    error
		firstKey string
		fails    int
		left     atomic.Int64
	)
	eachStoreCall(m.cfg.ReturnWorkers, len(bs), func(i int) {
		e := bs[i]
		if over.Load() {
			if _, call := m.returnable(e.b, e.always); call {
				left.Add(1)
				if e.always {
					m.leftRecent() // before a new bucket of the key can lease
				}
			}
			m.inflight.release(e.b, e.s, nil)
			return
		}
		if err := m.returnBucket(m.ctx, e.b, e.s, e.always); err != nil {
			mu.Lock()
			if first == nil {
				first, firstKey = err, e.b.key()
			}
			fails++
			mu.Unlock()
		}
	})
	if n := left.Load(); n > 0 {
		m.cfg.Logger.Warn("leases left to end on their own: the return budget ran out", "keys", n,
			"returned", len(bs)-int(n)-fails, "budget", m.cfg.ReturnTimeout)
	}
	if first != nil {
		m.cfg.Logger.Warn("cannot return leased tokens", logkey.Attr(firstKey), "keys", fails, "err", first)
		return fmt.Errorf("cannot return the leases of %d keys: %w", fails, first)
	}
	return nil
}

// eachStoreCall runs f(i) for i in [0, n) with at most workers
// (Config.ReturnWorkers) calls at once (each makes a Store call), and
// waits for them.
func eachStoreCall(workers, n int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, workers) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				f(i)
			}
		})
	}
	wg.Wait()
}

// sweep evicts the buckets unused since now - Idle, but those it keeps
// (see keeps; at most KeepIdle, the least idle), and returns their
// tokens; it returns how many it evicted.
func (m *Manager) sweep(now time.Time) int {
	nowNs := now.UnixNano()
	nowMs := unixMs32(nowNs)
	var idle []evicting
	var kept []keptBucket
	m.buckets.rangeAll(func(b *bucket) {
		// Signed: a bucket used after now was read (checks go on during
		// a sweep) is not idle, not 49 days idle. A key with a Store
		// call in flight is not idle either.
		if d := int32(nowMs - b.lastUse.Load()); d >= int32(m.idleMs) {
			if m.keeps(b, nowNs) {
				kept = append(kept, keptBucket{b: b, idle: d})
			} else if e, ok := m.evictHeld(b, false); ok {
				idle = append(idle, e)
			}
		}
	})
	if bound := max(m.cfg.KeepIdle, 0); len(kept) > bound {
		// Too many: the longest idle go, as any other idle key.
		slices.SortFunc(kept, func(x, y keptBucket) int { return cmp.Compare(y.idle, x.idle) })
		for _, k := range kept[:len(kept)-bound] {
			if e, ok := m.evictHeld(k.b, false); ok {
				idle = append(idle, e)
			}
		}
	}
	_ = m.returnAll(idle) // logged
	if !m.store.Rejecting() {
		m.fo.chargeOwed() // charges that failed while the breaker stayed closed
	}
	m.policies.prune(&m.buckets)
	if c, ok := m.direct.(interface{ Len() int }); ok {
		// Config.Direct keeps no bucket: the gauge shows the Store's
		// keys, as Stats.ActiveKeys does.
		m.met.activeKeys.Set(float64(c.Len()))
	}
	return len(idle)
}

// keptBucket is a bucket the sweep may keep, idle for idle ms.
type keptBucket struct {
	b    *bucket
	idle int32
}

// keeps reports whether the idle sweep keeps b, idle for Idle at now: it
// has tokens spendable on the fast path (a check coming back is answered
// from memory), and its loan is a slow key's: what the Store lends this
// Manager of it (basis) is at most twice the smallest lease, or half the
// capacity for a key leasing for its life (slowLoan), and b is not in a
// FailLocal episode. A fixed_window bucket with shares of windows ahead (a
// slow key's floor, by construction) counts as spendable until its last
// share's span ends: a check coming back rolls into its window's share.
//
// Keeping it costs no accuracy: the Store counts the loan against the
// key's capacity as long as it runs (a token_bucket's level is capped by
// its loans, a gcra's TAT kept ahead of them, a window counts what it
// lent), so the key cannot spend the loan and a refilled bucket both. What
// it costs is under-admission of the other holders of the key (a hot
// key's split, another node after an ownership move that did not go
// through ReturnKeys) of at most the loan, for at most the loan's life:
// the loan's tokens stop being spendable on the fast path (their window's
// end, half their TTL), and the next sweep drops the bucket, returning
// them if they still count.
func (m *Manager) keeps(b *bucket, now int64) bool {
	t := b.tokens.Load()
	if m.cfg.KeepIdle <= 0 || t < 0 {
		return false // striped buckets (tokens < 0) are hot keys'
	}
	current := t > 0 && b.spendable(now)
	if current && b.basis.Load() > m.cfg.slowLoan(b) {
		return false
	}
	if !current && now >= m.ahead.end(b) {
		return false
	}
	if m.fo.degraded.n.Load() > 0 {
		if _, ok := m.fo.degraded.m.Load(b); ok {
			return false
		}
	}
	return true
}

// slowLoan is the biggest loan of b's key that the idle sweep keeps:
// twice the smallest lease of its policy (MinLeaseShare of its capacity,
// at least one token), or, for a key whose last lease call asked for a
// loan for its life (a token_bucket or gcra key far from its limit:
// roomyLoan), half the capacity if that is more. A slow key's leases are
// the smallest lease, and it asks for one when what it holds is below
// that (it ran out, fell to its prefetch mark, or is renewing), so its
// loan stays below twice it; a key far from its limit tops its loan up to
// at most half the capacity. A key that leased for its rate has a bigger
// loan, which goes back at Idle.
func (c *Config) slowLoan(b *bucket) int64 {
	p := b.pol
	floor := 2 * leaseWant(0, c.Horizon, c.MinLeaseShare, 1, p.Capacity())
	if b.roomy() {
		return max(floor, p.Capacity()/2)
	}
	return floor
}

// prune forgets the interned policies that no bucket of x uses, so that
// rule reloads do not grow the Manager forever. A policy interned by a
// bucketFor racing with it may be interned again: harmless, buckets
// compare policies by value.
func (t *policyTable) prune(x *index) {
	live := make(map[*Policy]struct{})
	x.rangeAll(func(b *bucket) { live[b.pol] = struct{}{} })
	t.Lock()
	defer t.Unlock()
	for p, q := range t.m {
		if _, ok := live[q]; !ok {
			delete(t.m, p)
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
			m.sweep(m.clk.now())
		}
	}
}

// ReturnKeys returns the leases of every key for which keep is false and
// drops their buckets (ownership moved to another node), kept idle keys
// included. It waits for the returns, starting none after ReturnTimeout
// (the loans left end on their own), and reports the first failure. keep
// must not call the Manager.
func (m *Manager) ReturnKeys(keep func(key string) bool) error {
	var moved []*bucket
	m.buckets.rangeAll(func(b *bucket) {
		if !keep(b.key()) {
			moved = append(moved, b)
		}
	})
	gone := make([]evicting, 0, len(moved))
	for _, b := range moved {
		if e, ok := m.evictHeld(b, true); ok {
			gone = append(gone, e)
		}
	}
	return m.returnAll(gone)
}

// Close stops the Manager's goroutines and returns every lease to the
// Store, as ReturnKeys does (within ReturnTimeout, logging one line for
// the loans it could not return or left). It reports the first failed
// return. Close is idempotent. Call it
// after the last check: checks made during or after Close still work (no
// longer prefetching), but the tokens they lease are not returned.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		close(m.stopSweep)
		<-m.sweepDone
		m.bg.stop()
		m.closeErr = m.ReturnKeys(func(string) bool { return false })
		m.fo.chargeOwed()
		m.fo.dropOwed() // the Store is still down: nothing left to charge them later
		if m.fo.own != nil {
			_ = m.fo.own.Close() // stops its janitor; it stays usable
		}
		if m.clk.coarse != nil {
			m.clk.coarse.Stop() // clk.nanos falls back to clk.now
		}
		m.store.Close() // its background probe
	})
	return m.closeErr
}
