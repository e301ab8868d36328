package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// takeSlow handles every leased check the fast path could not: a new key,
// a policy change, a peek, a deny-until, too few tokens.
func (m *Manager) takeSlow(b *bucket, key string, p Policy, hits, now int64) (Decision, error) {
	if b == nil || !samePolicy(b.pol, &p) {
		if err := p.Validate(); err != nil {
			return Decision{}, err
		}
		if hits == 0 && b == nil {
			return m.peekStore(strings.Clone(key), p), nil
		}
		b = m.bucketFor(key, p, now)
	}
	if hits == 0 {
		return m.peekLocal(b, key, p, now), nil
	}
	if hits > p.Capacity() {
		// Can never be met: deny without asking, and without a
		// deny-until that would also refuse smaller checks.
		local := m.onHand(b)
		return Decision{Limit: p.Limit, Remaining: local + b.remaining.Load(), RetryAfter: p.Period,
			Reset: b.reset(local, now)}, nil
	}
	// lastUse is the last spend (checks that spend touch it): how long
	// this Manager has not spent a token of the key, for the Store.
	idle := m.idleFor(b, now)
	// The check's budget for Store calls and waits (see
	// Config.CheckBudget), started when first needed.
	var bud *budget
	defer func() {
		if bud != nil {
			bud.stop()
		}
	}()
	waited, again, retried := false, false, false
	for {
		if m.usable(b, now) {
			if left, ok := m.take(b, hits, -1); ok {
				m.touch(b, now)
				if !b.spendable(now) {
					if renewHook != nil {
						renewHook(b)
					}
					m.renew(b, now) // past half its TTL: re-lend it in the background
				}
				return b.decision(left, now), nil
			}
		}
		du := b.denyUntil.Load()
		if du == evicted {
			b = m.bucketFor(key, p, now)
			continue
		}
		if m.rollAhead(b, now) {
			continue // the window of now, on a share leased ahead
		}
		// Judged on its own hits: denied locally only if the Store's last
		// answer, projected to now, cannot cover what local tokens do not
		// (or, while the key is saturated, that plus a batch).
		local := int64(0)
		if m.usable(b, now) {
			local = m.onHand(b)
		}
		if at, slack := b.coverAt(hits - local); at != 0 && !m.aheadMayFind(b, now) {
			if now < du && hits > local {
				// (A check the tokens on hand cover, on a striped
				// bucket whose stripes each hold less, gathers them.)
				at = addTime(at, batchWait(p, m.cfg.MinLeaseShare, hits-local, m.cfg.Horizon))
			}
			// Within the Store's rounding of the time, ask it: a denial
			// must be sure; a RetryAfter must never be early.
			if now < at-slack {
				if m.usable(b, now) && m.onHand(b) > local {
					// A lease call put tokens on hand since this check
					// looked (calls add them before they publish the
					// Store's answer read just now): take those.
					continue
				}
				if !m.tookOut(b, hits-local, du, now) {
					m.st.localDenials.Add(1)
					m.met.decisionsDenyLoc.Inc()
					return Decision{Limit: p.Limit, Remaining: min(local+b.projected(now), p.Capacity()),
						RetryAfter: time.Duration(at - now), Reset: b.reset(local, now)}, nil
				}
				// Else wait for the call that took them (below).
			}
		}
		if m.store.Rejecting() {
			m.met.storeCalls[opLease][resultRejected].Inc()
			return m.failure(b, key, p, hits, errBreakerOpen), nil
		}
		s, owner := m.claim(b)
		if bud == nil && (!owner || m.cfg.CheckBudget > 0) {
			// The budget's timer only when something waits on it: a
			// check that waits for another's call, or a Store call
			// bounded by CheckBudget (without one, the call's own
			// context is its bound).
			bud = m.startBudget()
		}
		if !owner {
			// Another check (or a prefetch, or a return) is leasing for
			// this key: wait for it rather than stampede, within this
			// check's budget.
			if slotWaitHook != nil {
				slotWaitHook(b.key())
			}
			if !m.waitSlot(s, bud) {
				return m.failure(b, key, p, hits, errStoreSlow), nil
			}
			if s.err != nil {
				return m.failure(b, key, p, hits, s.err), nil
			}
			waited = true
			now = max(now, m.nanosFor(&p))
			continue
		}
		if b.denyUntil.Load() == evicted {
			m.release(b, s, nil)
			continue
		}
		ctx, lb := m.ctx, bud
		if m.cfg.CheckBudget <= 0 {
			lb = nil
			if waited {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(m.ctx, bud.deadline)
				defer cancel()
			}
		}
		d := m.leaseSync(ctx, b, s, p, hits, now, idle, lb, &again)
		if again && !retried {
			// A call between two windows' spans found less of its own in
			// the Store's window than it counted on, and the Store has
			// the rest: ask again, knowing the window (once).
			retried = true
			now = max(now, m.nanosFor(&p))
			continue
		}
		return d, nil
	}
}

// tookOut reports whether a lease call of b's key in flight took off the
// bucket at least need tokens on hand, which it puts back as far as the
// Store still lends them: a check that finds the bucket short then waits
// for the call rather than deny for tokens this Manager may hold (a key
// whose holder leased its whole limit, the Store's last answer saying it
// has none left, was denied so while a call was out). Not while the key
// is saturated (du: the Store denied it, or a dry grant kept it so): a
// saturated key's checks are denied without a look at the calls in flight.
func (m *Manager) tookOut(b *bucket, need, du, now int64) bool {
	if du != 0 && now < du {
		return false
	}
	m.inflight.Lock()
	s := m.inflight.m[b.key()]
	m.inflight.Unlock()
	return s != nil && s.took.Load() >= need
}

// slotWaitHook, when set (by tests only), runs when a check finds its
// key's slot taken and is about to wait for it.
var slotWaitHook func(key string)

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
	bu.stop = m.afterFunc(d, func() { close(bu.expired) })
	return bu
}

// afterFunc runs f after d on the Manager's timer clock.
func (m *Manager) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if m.cfg.AfterFunc != nil {
		return m.cfg.AfterFunc(d, f)
	}
	return time.AfterFunc(d, f).Stop
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
	local := m.takeAll(b)
	s.took.Store(local)
	// Tokens of a window that ended, or past their TTL, are dropped: the
	// Store counted them in that window, or counts them as spent
	// (consumption is still measured from all of them).
	keep := local
	over := !m.usable(b, now)
	if over {
		keep = 0
	}
	gap := m.aheadGapOf(b, over, local, now)
	if keep >= hits {
		m.put(b, keep-hits)
		b.keptAdd(kept)
		m.touch(b, now)
		m.release(b, s, nil)
		return b.decision(keep-hits, now)
	}
	need := hits - keep
	want := m.sizeLease(b, b.basis.Load()-local, now, need, keep)

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
	// The call, in the background; the first of its answer and the budget
	// decides the check. state: 0 both pending, 1 answered first, 2 the
	// budget ran out first.
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
	if !m.goBG(call) {
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
	m.callEnded(b, c.to, err)
	if err != nil {
		m.put(b, keep)
		b.keptAdd(kept)
		m.release(b, s, err)
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
	admitted := m.takeEpisode(b)
	defer func() { m.chargeLater(b, admitted) }()
	b.keptAdd(keep + g.Granted)
	// The Store's durations count from its answer, not from now (read
	// from the precise clock: a share ahead is placed from it, see
	// aheadSpan). The answer is published after the tokens it grants are
	// on hand: a check that reads an answer saying the Store has nothing
	// left must find them (see takeSlow).
	after := max(now, m.nanosFor(&p))
	// got is what the call puts on hand: its grant, and what a call made
	// between two windows' spans finds lent to it in the Store's window.
	got := g.Granted + m.aheadFound(b, c.gap, g, now, after)
	if got >= need && got > 0 {
		m.countLocal(b.basis.Load() - local)
		m.st.tokensLeased.Add(g.Granted)
		m.met.tokensLeased.AddInt64(g.Granted)
		b.lastLeaseMs = unixMs32(now)
		exp := leaseExpiry(p, now, g, m.cfg.LeaseTTL)
		if keep > 0 && !p.Algorithm.Refills() && !m.aheadSame(b, c.gap, g, now, after) {
			// Kept tokens may belong to the window before the grant's.
			exp = min(exp, b.expires.Load())
		}
		b.expires.Store(exp)
		use := min(admitted, got+keep-hits)
		admitted -= use
		m.put(b, got+keep-hits-use)
		b.answer(g, after)
		m.keepAhead(b, g, now, after)
		m.touch(b, now)
		// basis bounds Refund: what the Store lends this Manager, so it
		// counts the hits just spent (measured as consumed at the next
		// lease). Tokens refunded meanwhile may not pass it.
		left := m.settle(b, g.Lent)
		low := m.lowFor(b, got, g.Lent)
		if g.Crowded || g.Checked {
			// Lent nothing: the key's holders are at its bound, or this
			// holder at its share. A prefetch would be answered the same
			// way, and spend its need.
			low = 0
		}
		if w := m.dryWait(p, g, need); w > 0 {
			if n, lately := m.deniedLately(b, after); lately {
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
		m.release(b, s, nil)
		return b.decision(left, now)
	}
	// Denied: the Store renewed what this Manager holds, if anything
	// (token_bucket, gcra: and settled it, keeping what this call reports
	// spent since the previous one, which may still be refunded; windows:
	// the consumption is measured at the next grant).
	m.st.tokensLeased.Add(g.Granted) // a call between windows' spans may get some
	m.met.tokensLeased.AddInt64(g.Granted)
	if keep > 0 && m.aheadSame(b, c.gap, g, now, after) {
		got += keep // of the Store's window, as the answer shows: until its end
		keep = 0
	}
	m.put(b, keep+got)
	b.answer(g, after)
	m.keepAhead(b, g, now, after)
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
	keep = m.settle(b, g.Lent)
	wait := max(g.Wait, time.Millisecond) + batchWait(p, m.cfg.MinLeaseShare, need, m.cfg.Horizon)
	b.denyTill(dryStamp(addTime(after, wait), 0))
	m.release(b, s, nil)
	return Decision{Limit: p.Limit, Remaining: keep + g.Remaining, RetryAfter: wait, Reset: b.reset(keep, after)}
}

// deniedLately reports whether b's key is saturated lately as of at: its
// deny-until (set by a Store denial, or by a dry grant that kept the key
// saturated) ended at most ten horizons before, and fewer than dryMax dry
// grants have kept it so since the Store last denied it; and how many
// have (dryCount). A key enters saturation by a Store denial, and a
// saturated key's next lease comes as its deny-until ends, so dry grants
// keep it saturated; but only for a while: the Store's denials, which
// recur while a key is over its limit, must renew it. Else a key shared
// by many holders, whose Store is short of a batch only because their
// loans are out, would stay saturated for good after one spike over its
// limit. (The Manager's measure of a key's rate cannot tell either: a
// lease right after a prefetch of the crumbs sees a few tokens spent.)
func (m *Manager) deniedLately(b *bucket, at int64) (n int, ok bool) {
	du := b.denyUntil.Load()
	if du == 0 || du == evicted || at >= addTime(du, 10*m.cfg.Horizon) {
		return 0, false
	}
	n = dryCount(du)
	return n, n < dryMax
}

// dryWait is how long after a grant g the key stays saturated (its
// deny-until, contract clause (c)) when g left the Store less than the
// smallest lease of a refilling key: the time until the Store has need
// tokens back, at least a millisecond as for a denial, plus batchWait. 0
// when g left the Store enough, for windows (their next lease waits for
// the window's end anyway), and for a call that needed nothing. The caller
// applies it only to a key denied lately (deniedLately). Without it a
// key over its limit leases the token or two refilled since its last call
// each time its batch is spent, a Store call per token until one call
// finds none, and a prefetch asks for the crumbs in between.
func (m *Manager) dryWait(p Policy, g Grant, need int64) time.Duration {
	if need <= 0 || !p.Algorithm.Refills() || g.Remaining >= int64(math.Ceil(m.cfg.MinLeaseShare*float64(p.Capacity()))) {
		return 0
	}
	perToken := float64(p.Period) / float64(p.Limit)
	back := time.Duration(float64(max(need-g.Remaining, 0)) * perToken)
	return max(back, time.Millisecond) + batchWait(p, m.cfg.MinLeaseShare, need, m.cfg.Horizon)
}

// lesseeOf is this Manager as the Lessee of a lease call of b, holding
// held: First until b was granted tokens or holds an answer; for token_bucket and gcra with a Call of its own, and the Call of
// b's previous call if that one went unanswered; for fixed_window with
// the shares it asks ahead (which drops b's: the call's answer sets them).
// The caller holds b's slot.
func (m *Manager) lesseeOf(b *bucket, held int64) Lessee {
	to := m.lessee(held)
	to.First = b.lastLeaseMs == 0 && b.resetAt.Load() == 0 // never granted, no answer on hand
	if !b.pol.Algorithm.Refills() {
		to.AheadWindows, to.AheadTokens = m.aheadAsk(b)
		return to
	}
	to.Call = rand.Uint32() | 1
	if m.unanswered.n.Load() > 0 {
		m.unanswered.Lock()
		to.Unanswered = m.unanswered.m[b]
		m.unanswered.Unlock()
	}
	return to
}

// callEnded records how b's lease call to ended (err nil: answered), for
// the next call's Lessee.Unanswered; with to zero, b's eviction. The
// caller holds b's slot, or evicted b.
func (m *Manager) callEnded(b *bucket, to Lessee, err error) {
	if errors.Is(err, errBreakerOpen) {
		return // never sent: an earlier unanswered call stays the one to tell
	}
	if err != nil && to.Call != 0 {
		m.unanswered.Lock()
		// Looked at under the lock: evict marks b before it removes the
		// entry.
		if b.denyUntil.Load() != evicted {
			if m.unanswered.m == nil {
				m.unanswered.m = map[*bucket]uint32{}
			}
			if _, ok := m.unanswered.m[b]; !ok {
				m.unanswered.n.Add(1)
			}
			m.unanswered.m[b] = to.Call
		}
		m.unanswered.Unlock()
		return
	}
	if m.unanswered.n.Load() == 0 {
		return
	}
	m.unanswered.Lock()
	if _, ok := m.unanswered.m[b]; ok {
		delete(m.unanswered.m, b)
		m.unanswered.n.Add(-1)
	}
	m.unanswered.Unlock()
}

// lessee is this Manager as the Lessee of a lease call, holding held
// tokens of the key.
func (m *Manager) lessee(held int64) Lessee {
	return Lessee{ID: m.cfg.Holder, Held: held, TTL: m.cfg.LeaseTTL}
}

// usable reports whether b's tokens may be spent at now: before
// b.expires, which the fast path checks, and for token_bucket and gcra
// also in the second half of their LeaseTTL (b.expires is half-way),
// while a renewal is due.
func (m *Manager) usable(b *bucket, now int64) bool {
	exp := b.expires.Load()
	return now < exp || (b.pol.Algorithm.Refills() && exp > 0 && now-exp < int64(m.cfg.LeaseTTL/2))
}

// renew starts a background lease of b that re-lends its tokens (they are
// past half their TTL at now), unless one is due or running, or one ended
// since the caller looked: a lease call stores b's expiry before it sets
// low again, so a renewal that ended after the caller found the tokens past
// half their TTL and before it took the trigger shows here as tokens
// spendable at now. Without that look, two checks of one millisecond could
// renew one loan twice (seen as one Store call too many in
// TestRedisOpsRenewals under make race).
func (m *Manager) renew(b *bucket, now int64) {
	if low := b.low.Load(); low >= 0 && b.low.CompareAndSwap(low, -1) {
		if b.spendable(now) {
			b.low.CompareAndSwap(-1, low) // renewed meanwhile: give the trigger back
			return
		}
		m.prefetch(b)
	}
}

// renewHook, when set (by tests only), runs when a check has found its
// key's tokens past half their TTL, before it renews them.
var renewHook func(b *bucket)

// idleFor is how long before now b's key last spent a token here, at
// most (lastUse is rounded down to whole ms and to touchMs): 0 if unknown.
func (m *Manager) idleFor(b *bucket, now int64) time.Duration {
	d := int32(unixMs32(now)-b.lastUse.Load()) - int32(m.touchMs) - 1
	if d <= 0 {
		return 0
	}
	return time.Duration(d) * time.Millisecond
}

// touch records a spend at now, to touchMs resolution (most checks only
// read lastUse). Checks that spend nothing do not touch: lastUse is also
// when this Manager last spent a token of the key (Lessee.Idle).
func (m *Manager) touch(b *bucket, now int64) {
	if ms := unixMs32(now); ms-b.lastUse.Load() >= m.touchMs {
		b.lastUse.Store(ms)
	}
}

// sizeLease updates b's rate with consumed hits since the last grant and
// returns the tokens to ask for on top of held (what the call reports
// held), at least need. The caller holds b's slot.
func (m *Manager) sizeLease(b *bucket, consumed, now, need, held int64) int64 {
	first := b.lastLeaseMs == 0
	elapsed := time.Duration(unixMs32(now)-b.lastLeaseMs) * time.Millisecond
	r, was := b.rateOf()
	ewma, sizing := observeRate(r, consumed, elapsed, m.cfg.Horizon, first)
	want := leaseWant(sizing, m.cfg.Horizon, m.cfg.MinLeaseShare, need, b.pol.Capacity())
	roomy := false
	if !first && m.cfg.MinLeaseShare > 0 && b.pol.Algorithm.Refills() {
		if loan := roomyLoan(b.pol, sizing, m.cfg.LeaseTTL/2, b.free(now)); loan >= 2*want {
			// A loan for the key's life, at least twice what sizing by
			// rate would ask (else it saves too few calls to be worth
			// a bigger loan): ask what tops it up (a batch on top of
			// held would pass it at every prefetch).
			want, roomy = max(loan-held, need), true
		} else if was {
			// Held is what a loan for the key's life left at its
			// prefetch mark (lowFor), up to a quarter of the capacity
			// below the loan: top it up to the batch, not past it.
			want = max(want-held, need)
		}
	}
	b.setRate(ewma, roomy)
	return want
}

// free is what of b's key is neither lent to another holder nor spent
// and not yet refilled at now, by the Store's last answer, for roomyLoan:
// its projection to now (Reset counts what it lends this Manager as
// spent), and at most its Remaining plus what it lends this Manager plus
// a quarter of the capacity. The Reset of a bucket whose other holders'
// loans cap it says nothing of them; the bound does: it counts the spends
// that the last call reported (at most a quarter of the capacity for a
// key far from its limit: see lowFor) as refilled, what other holders'
// loans never are. The caller holds b's slot.
func (b *bucket) free(now int64) int64 {
	return min(b.projected(now), max(b.remaining.Load(), 0)+b.basis.Load()+b.pol.Capacity()/4)
}

// farRate reports whether a key checked rate times a second is far from
// p's limit: at most half its rate.
func farRate(p *Policy, rate float64) bool {
	return rate*float64(p.Period) <= float64(p.Limit)*float64(time.Second)/2 // false for NaN
}

// roomy reports whether b's key holds a loan for its life: its last
// lease call asked for one (roomyLoan, sizeLease). Any goroutine may call
// it.
func (b *bucket) roomy() bool {
	_, r := b.rateOf()
	return r
}

// lowFor is b's prefetch mark after a call that granted (or renewed) n
// tokens and left the Store lending lent: LowWater × n, and for a key
// holding a loan for its life (roomy) at least lent less a quarter of the
// capacity, so that such a key reports what it spent at least every
// quarter of the capacity. Spent tokens count at the Store from the call
// that reports them (from the holder's last spend: Lessee.Idle), so a
// burst right after slow traffic finds those not refilled yet: this
// bounds that to a quarter of the capacity (below 2^33 tokens: the mark
// is an int32). The caller holds b's slot.
func (m *Manager) lowFor(b *bucket, n, lent int64) int32 {
	low := lowMark(m.cfg.LowWater, n)
	if b.roomy() {
		low = max(low, int32(min(max(lent-b.pol.Capacity()/4, 0), math.MaxInt32)))
	}
	return low
}

// roomyLoan is the loan of a token_bucket or gcra key far from its limit:
// enough for its rate over its loan's fast-path life (life, half the
// LeaseTTL), so that a slow key calls the Store once per quarter of the
// capacity it spends (lowFor) rather than once per smallest lease. Far
// from its limit means its rate is at most half the policy's (the Store's
// bucket stays near full) and the loan leaves at least half the capacity
// of what is free (bucket.free: neither lent to another holder nor spent
// and not yet refilled). The loan is at most half the capacity; 0 when
// the key is not far from its limit.
//
// What it costs is what any loan costs: nothing in accuracy (the Store
// counts it against the key's capacity), and under-admission of the key's
// other holders of at most the loan while it runs, a burst's worth only:
// a token_bucket still refills at its rate up to the capacity minus what
// is lent, and a gcra's TAT is held at most half a burst ahead. A key
// nearer its limit, and every window, keep the sizing by rate over the
// horizon and the smallest lease.
func roomyLoan(p *Policy, rate float64, life time.Duration, free int64) int64 {
	if !farRate(p, rate) {
		return 0
	}
	f := math.Ceil(rate * life.Seconds())
	c := p.Capacity()
	loan := max(min(c/2, free-c/2), 0)
	if f < float64(loan) {
		loan = int64(f)
	}
	return loan
}

// countLocal records hits admitted from leased tokens since the last lease.
func (m *Manager) countLocal(n int64) {
	if n > 0 {
		m.st.localHits.Add(n)
		m.met.localHits.AddInt64(n)
	}
}

// peekLocal answers hits = 0 for a known key from what the Manager knows,
// or from the Store if the key never leased.
func (m *Manager) peekLocal(b *bucket, key string, p Policy, now int64) Decision {
	if b.resetAt.Load() == 0 {
		return m.peekStore(b.key(), p)
	}
	// A peek is never denied: it reports what the Store's last answer,
	// projected to now, and the local tokens hold.
	local := m.onHand(b)
	return Decision{Allowed: true, Limit: p.Limit, Remaining: min(local+b.projected(now), p.Capacity()),
		Reset: b.reset(local, now)}
}

// peekStore answers hits = 0 with a Store peek; it creates no bucket. key
// must be the Manager's own copy.
func (m *Manager) peekStore(key string, p Policy) Decision {
	m.st.storeDecisions.Add(1)
	m.met.decisionsStore.Inc()
	g, err := m.store.Lease(m.ctx, key, p, 0, 0, Lessee{})
	if err != nil {
		return m.failure(nil, key, p, 0, err)
	}
	return Decision{Allowed: true, Limit: p.Limit, Remaining: g.Remaining, Reset: g.Reset}
}

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

// prefetch leases again for b in the background; the caller has set b.low
// to -1, which stops further triggers until a lease sets it again.
func (m *Manager) prefetch(b *bucket) {
	if !m.goBG(func() { m.prefetchNow(b) }) {
		b.low.Store(0)
	}
}

func (m *Manager) prefetchNow(b *bucket) {
	s, owner := m.claim(b)
	if !owner {
		return // a sync lease is in flight and will set low
	}
	if b.denyUntil.Load() == evicted {
		m.release(b, s, nil)
		return
	}
	p := *b.pol
	now := m.nanosFor(&p)
	kept := int64(0)
	if p.Algorithm.Refills() {
		kept = b.keptSwap() // before the tokens on hand: see keptSwap
	}
	local := m.onHand(b)
	held := local
	if !m.usable(b, now) {
		held = 0
	}
	wasRoomy := b.roomy() // before sizeLease sets it anew
	want, need := m.sizeLease(b, b.basis.Load()-local, now, 1, held), int64(1)
	// Enough on hand (a renewal: the tokens are past half their TTL):
	// re-lend them, asking for nothing more. A key far from its limit
	// whose tokens are still spendable is at its prefetch mark, which
	// leaves about as many on hand as it asks (see lowFor): it leases.
	renewal := held >= want && !(wasRoomy && b.spendable(now))
	if renewal {
		want, need = 0, 0
	}
	m.st.prefetches.Add(1)
	m.met.prefetches.Inc()
	// held may be spent while the call is out: an upper bound, which the
	// Store may count as lent until the next call settles it.
	gap := m.aheadGapOf(b, false, 0, now)
	to := m.lesseeOf(b, held)
	if p.Algorithm.Refills() {
		to.SpentBefore = b.spentBefore(kept)
	}
	g, err := m.store.Lease(m.ctx, b.key(), p, want, need, to)
	after := max(now, m.nanosFor(&p)) // see leaseEnded
	m.callEnded(b, to, err)
	if err != nil {
		// low stays -1: the next sync lease retries, or fails over.
		b.keptAdd(kept)
		m.release(b, s, err)
		return
	}
	m.endDegraded(b)
	b.keptAdd(held + g.Granted)
	m.countLocal(b.basis.Load() - local)
	m.st.tokensLeased.Add(g.Granted)
	m.met.tokensLeased.AddInt64(g.Granted)
	b.lastLeaseMs = unixMs32(now)
	switch {
	case g.Granted > 0:
		exp := leaseExpiry(p, now, g, m.cfg.LeaseTTL)
		switch {
		case held == 0 || m.onHand(b) == 0:
			m.takeAll(b) // of a window that ended, or expired: dropped
		case !p.Algorithm.Refills() && !m.aheadSame(b, gap, g, now, after):
			// Tokens on hand may belong to the window before the grant's.
			exp = min(exp, b.expires.Load())
		}
		b.expires.Store(exp)
	case g.Lent > 0 && p.Algorithm.Refills():
		b.expires.Store(leaseExpiry(p, now, g, m.cfg.LeaseTTL)) // renewed
	}
	// The fast path kept spending while we were away, and refunds may
	// have put tokens back: what is on hand may not pass what the Store
	// lends (basis, the refund bound). A grant of nothing leaves what this
	// call reports spent since the previous one lent (for the windows, all
	// of the loan, but for an expired one): refunds of those hits stay
	// possible.
	m.put(b, g.Granted)
	// Published after the tokens are on hand (see leaseSync).
	b.answer(g, after)
	m.keepAhead(b, g, now, after)
	m.settle(b, g.Lent)
	switch {
	case g.Granted > 0:
		b.low.Store(m.lowFor(b, g.Granted, g.Lent))
	case renewal:
		b.low.Store(m.lowFor(b, g.Lent, g.Lent))
	}
	// Granted 0 otherwise: nothing available; low stays -1 and the next
	// check that runs out leases synchronously and gets a deny-until.
	m.release(b, s, nil)
}
