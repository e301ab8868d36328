package lease

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// leaseSync leases for a check of hits while holding b's slot s, and
// releases it. With a budget bud (Config.CheckBudget), the Store call owns
// the slot: if bud runs out first, the check is decided by p's failure
// mode (errBudget) and the call goes on in the background, where its
// answer is kept as a prefetch's would be (the grant on hand for the next
// checks, what local mode admitted meanwhile charged to the Store).
func (m *Manager) leaseSync(ctx context.Context, b *bucket, s *slot, p Policy, hits, now int64, idle time.Duration, bud *budget, again *bool) Decision {
	*again = false
	kept := int64(0)
	if p.Algorithm.Refills() {
		kept = b.keptSwap() // before the tokens on hand: see keptSwap
	}
	local := m.striped.takeAll(b)
	s.took.Store(local)
	// Tokens of a window that ended, or past their TTL, are dropped: the
	// Store counted them in that window, or counts them as spent
	// (consumption is still measured from all of them).
	keep := local
	over := !m.cfg.usable(b, now)
	if over {
		keep = 0
	}
	gap := m.ahead.gapOf(b, over, local, now)
	if keep >= hits {
		m.striped.put(b, keep-hits)
		b.keptAdd(kept)
		b.touch(now, m.touchMs)
		m.inflight.release(b, s, nil)
		return b.decision(keep-hits, now)
	}
	need := hits - keep
	want := m.cfg.sizeLease(b, b.basis.Load()-local, now, need, keep)

	m.st.storeDecisions.Add(1)
	m.st.leases.Add(1)
	m.met.decisionsStore.Inc()
	to := m.lesseeOf(b, keep)
	// A call made with the window over may find tokens lent to it in the
	// Store's window (see aheadGap): it needs what it surely finds less.
	to.Held = max(to.Held, gap.held)
	ask := max(need-gap.sure, 0)
	to.Idle = idle
	if p.Algorithm.Refills() {
		to.SpentBefore = b.spentBefore(kept)
	}
	if b.lastLeaseMs == 0 && now >= m.leftUntil.Load() {
		// The bucket's first lease. A loan of this Manager for the key
		// can only be left by a bucket the idle sweep dropped without a
		// return (every other eviction ends the loan, or sets leftUntil):
		// its last spend was at least Idle before.
		to.Idle = max(idle, m.cfg.Idle-time.Duration(m.touchMs+1)*time.Millisecond)
	}
	lc := leaseCall{b: b, s: s, p: p, now: now, need: need, keep: keep, kept: kept, local: local, to: to, gap: gap, again: again}
	if bud == nil {
		g, err := m.store.Lease(ctx, b.key(), p, want, ask, to)
		return m.leaseEnded(lc, hits, g, err)
	}
	return m.leaseBudgeted(ctx, lc, hits, want, ask, bud)
}

// leaseBudgeted is leaseSync's call c within the check's budget bud: the
// call, in the background; the first of its answer and the budget
// decides the check. (A function of its own: the call's closure would
// put c on the heap for every call, those without a budget too.)
func (m *Manager) leaseBudgeted(ctx context.Context, lc leaseCall, hits, want, ask int64, bud *budget) Decision {
	b, s, p, to := lc.b, lc.s, lc.p, lc.to
	// state: 0 both pending, 1 answered first, 2 the budget ran out
	// first.
	var (
		state    atomic.Int32
		g        Grant
		err      error
		answered = make(chan struct{})
		decided  = make(chan struct{})
	)
	call := func() {
		g, err = m.store.Lease(ctx, b.key(), p, want, ask, to)
		if state.CompareAndSwap(0, 1) {
			close(answered)
			return
		}
		// The check was decided by its failure mode: once that decision
		// is recorded (a FailLocal admission in b's episode, which this
		// answer ends and charges), keep the grant for the next checks.
		<-decided
		m.leaseEnded(lc, 0, g, err)
	}
	if !m.bg.spawn(call) {
		call() // closing: no background work, the call is bounded by its timeout
	}
	select {
	case <-answered:
	case <-bud.expired:
		if state.CompareAndSwap(0, 2) {
			close(s.late) // the checks waiting for this call stop waiting
			d := m.failure(b, b.key(), p, hits, errBudget)
			close(decided)
			return d
		}
		<-answered
	}
	return m.leaseEnded(lc, hits, g, err)
}

// leaseCall is what a sync lease call of leaseSync holds until its answer.
type leaseCall struct {
	b                            *bucket
	s                            *slot
	p                            Policy
	now, need, keep, kept, local int64
	to                           Lessee
	gap                          aheadGap
	again                        *bool // set when the check should lease again (see takeSlow)
}

// leaseEnded applies the answer (g, err) of lease call c for a check of
// hits, and releases c's slot. hits 0 is a call whose check was decided
// meanwhile by its failure mode: the answer only refills the bucket (the
// Decision returned then means nothing).
func (m *Manager) leaseEnded(c leaseCall, hits int64, g Grant, err error) Decision {
	b, s, p, now, need, keep, kept, local := c.b, c.s, c.p, c.now, c.need, c.keep, c.kept, c.local
	m.unanswered.ended(b, c.to, err)
	if err != nil {
		m.striped.put(b, keep)
		b.keptAdd(kept)
		m.inflight.release(b, s, err)
		if hits == 0 {
			return Decision{}
		}
		return m.failure(b, b.key(), p, hits, err)
	}
	// The key's FailLocal episode ends: its admissions (those of checks
	// decided at their budget while this call was out, among others) are
	// spent from this grant first, as if the Store had been charged them
	// (the Store may have nothing left for a charge: this grant took it);
	// what the grant cannot cover is charged in the background.
	admitted := m.fo.takeEpisode(b)
	defer func() { m.fo.chargeLater(b, admitted) }()
	b.keptAdd(keep + g.Granted)
	// The Store's durations count from its answer, not from now (read
	// from the precise clock: a share ahead is placed from it, see
	// aheadTerms.span). The answer is published after the tokens it grants are
	// on hand: a check that reads an answer saying the Store has nothing
	// left must find them (see takeSlow).
	after := max(now, m.clk.nanosFor(&p))
	// got is what the call puts on hand: its grant, and what a call made
	// between two windows' spans finds lent to it in the Store's window.
	got := g.Granted + m.ahead.found(b, c.gap, g, now, after)
	if got >= need && got > 0 {
		m.countLocal(b.basis.Load() - local)
		m.st.tokensLeased.Add(g.Granted)
		m.met.tokensLeased.AddInt64(g.Granted)
		b.lastLeaseMs = unixMs32(now)
		exp := leaseExpiry(p, now, g, m.cfg.LeaseTTL)
		if keep > 0 && !p.Algorithm.Refills() && !m.ahead.same(b, c.gap, g, now, after) {
			// Kept tokens may belong to the window before the grant's.
			exp = min(exp, b.expires.Load())
		}
		b.expires.Store(exp)
		use := min(admitted, got+keep-hits)
		admitted -= use
		m.striped.put(b, got+keep-hits-use)
		b.answer(g, after)
		m.ahead.keep(b, g, now, after)
		b.touch(now, m.touchMs)
		// basis bounds Refund: what the Store lends this Manager, so it
		// counts the hits just spent (measured as consumed at the next
		// lease). Tokens refunded meanwhile may not pass it.
		left := m.striped.settle(b, g.Lent)
		low := m.cfg.lowFor(b, got, g.Lent)
		if g.Crowded || g.Checked {
			// Lent nothing: the key's holders are at its bound, or this
			// holder at its share. A prefetch would be answered the same
			// way, and spend its need.
			low = 0
		}
		if w := m.cfg.dryWait(p, g, need); w > 0 {
			if n, lately := m.cfg.deniedLately(b, after); lately {
				// The grant left the Store less than a batch, and the
				// key was saturated lately: it still is, as if denied.
				// Its checks wait for a batch once this grant is spent.
				// (A key whose Store is short of a batch only because
				// other holders' loans are out, far from its limit, is
				// never denied: its checks lease as before.) No
				// prefetch asks for the crumbs either, unless this
				// Manager holds over a quarter of the capacity: the
				// Store's refill stops at what is not lent, and a
				// prefetch's report of the tokens spent lets it go on
				// sooner, as lowFor keeps a loan for a key's life
				// within a quarter of the capacity.
				b.denyTill(dryStamp(addTime(after, w), n+1))
				if g.Lent <= p.Capacity()/4 {
					low = 0
				}
			}
		}
		b.low.Store(low)
		m.inflight.release(b, s, nil)
		return b.decision(left, now)
	}
	// Denied: the Store renewed what this Manager holds, if anything
	// (token_bucket, gcra: and settled it, keeping what this call reports
	// spent since the previous one, which may still be refunded; windows:
	// the consumption is measured at the next grant).
	m.st.tokensLeased.Add(g.Granted) // a call between windows' spans may get some
	m.met.tokensLeased.AddInt64(g.Granted)
	if keep > 0 && m.ahead.same(b, c.gap, g, now, after) {
		got += keep // of the Store's window, as the answer shows: until its end
		keep = 0
	}
	m.striped.put(b, keep+got)
	b.answer(g, after)
	m.ahead.keep(b, g, now, after)
	if got > 0 {
		b.expires.Store(leaseExpiry(p, now, g, m.cfg.LeaseTTL)) // of the Store's window
		// A call between windows' spans that counted on finding more
		// than it did: the check asks again if the Store has the rest.
		// (hits 0: the check was decided, and again is not written.)
		if hits > 0 && c.gap.held > 0 && got+g.Remaining >= need {
			*c.again = true
		}
	}
	if g.Lent > 0 && p.Algorithm.Refills() {
		b.expires.Store(leaseExpiry(p, now, g, m.cfg.LeaseTTL))
	}
	keep = m.striped.settle(b, g.Lent)
	wait := max(g.Wait, time.Millisecond) + batchWait(p, m.cfg.MinLeaseShare, need, m.cfg.Horizon)
	b.denyTill(dryStamp(addTime(after, wait), 0))
	m.inflight.release(b, s, nil)
	return Decision{Limit: p.Limit, Remaining: keep + g.Remaining, RetryAfter: wait, Reset: b.reset(keep, after)}
}

// lesseeOf is this Manager as the Lessee of a lease call of b, holding
// held: First until b was granted tokens or holds an answer; for token_bucket and gcra with a Call of its own, and the Call of
// b's previous call if that one went unanswered; for fixed_window with
// the shares it asks ahead (which drops b's: the call's answer sets them).
// The caller holds b's slot.
func (m *Manager) lesseeOf(b *bucket, held int64) Lessee {
	to := m.cfg.lessee(held)
	to.First = b.lastLeaseMs == 0 && b.resetAt.Load() == 0 // never granted, no answer on hand
	if !b.pol.Algorithm.Refills() {
		to.AheadWindows, to.AheadTokens = m.ahead.ask(b)
		return to
	}
	to.Call = rand.Uint32() | 1
	to.Unanswered = m.unanswered.of(b)
	return to
}

// lessee is this Manager as the Lessee of a lease call, holding held
// tokens of the key.
func (c *Config) lessee(held int64) Lessee {
	return Lessee{ID: c.Holder, Held: held, TTL: c.LeaseTTL}
}

// countLocal records hits admitted from leased tokens since the last lease.
func (m *Manager) countLocal(n int64) {
	if n > 0 {
		m.st.localHits.Add(n)
		m.met.localHits.AddInt64(n)
	}
}

var errStoreSlow = fmt.Errorf("%w: a lease in flight for the key did not finish in time", ErrStoreUnavailable)

// errBudget is the failure a check is decided by when its budget ran out
// while its own lease call was still out.
var errBudget = fmt.Errorf("%w: the check's budget ran out before the Store answered", ErrStoreUnavailable)

// budget is one check's time for Store calls and waits: expired is
// closed when it runs out, on the Manager's timer clock (Config.AfterFunc).
type budget struct {
	expired  chan struct{}
	deadline time.Time // in real time: bounds the call of a check that waited, without CheckBudget
	stop     func() bool
}

// startBudget starts a check's budget: Config.CheckBudget, or without one
// the Store call's timeout (a check that waits for another's call waits as
// long as that call may take).
func (m *Manager) startBudget() *budget {
	d := m.cfg.CheckBudget
	if d <= 0 {
		d = m.store.Timeout()
	}
	bu := &budget{expired: make(chan struct{}), deadline: time.Now().Add(d)}
	bu.stop = m.clk.afterFunc(d, func() { close(bu.expired) })
	return bu
}

// unansweredCalls holds the token_bucket and gcra buckets whose last
// lease call got no answer (an error: the Store may have run it), with
// that call's Lessee.Call; their next call says so (Lessee.Unanswered),
// and the Store gives back what it granted. A call answered or the
// bucket's eviction removes the entry; n counts them, so the lease path
// skips the lock when there are none.
type unansweredCalls struct {
	sync.Mutex
	m map[*bucket]uint32
	n atomic.Int64
}

// of is the Call of b's last lease call if it went unanswered, else 0.
func (u *unansweredCalls) of(b *bucket) uint32 {
	if u.n.Load() == 0 {
		return 0
	}
	u.Lock()
	defer u.Unlock()
	return u.m[b]
}

// ended records how b's lease call to ended (err nil: answered), for
// the next call's Lessee.Unanswered; with to zero, b's eviction. The
// caller holds b's slot, or evicted b.
func (u *unansweredCalls) ended(b *bucket, to Lessee, err error) {
	if errors.Is(err, errBreakerOpen) {
		return // never sent: an earlier unanswered call stays the one to tell
	}
	if err != nil && to.Call != 0 {
		u.Lock()
		// Looked at under the lock: evict marks b before it removes the
		// entry.
		if b.denyUntil.Load() != evicted {
			if u.m == nil {
				u.m = map[*bucket]uint32{}
			}
			if _, ok := u.m[b]; !ok {
				u.n.Add(1)
			}
			u.m[b] = to.Call
		}
		u.Unlock()
		return
	}
	if u.n.Load() == 0 {
		return
	}
	u.Lock()
	if _, ok := u.m[b]; ok {
		delete(u.m, b)
		u.n.Add(-1)
	}
	u.Unlock()
}
