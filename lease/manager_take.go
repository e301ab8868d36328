package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func errHits(hits int64) error {
	return &FieldError{Field: "hits", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), hits)}
}

// Take checks hits against key's limit p and spends them if allowed. It
// serves every algorithm but concurrency (ErrWrongAlgorithm: use Acquire).
// hits = 0 peeks. The error is non-nil only for a bad call: hits outside
// [0, MaxHits], an invalid policy, or the concurrency algorithm.
//
// key need not outlive the call: the Manager copies it when it keeps it (a
// new bucket) and hands Stores only its own copies, so a caller may pass a
// view of a reused buffer. A check of a key that has a bucket does not
// allocate.
func (m *Manager) Take(key string, p Policy, hits int64) (Decision, error) {
	if hits < 0 || hits > MaxHits {
		return Decision{}, errHits(hits)
	}
	if m.cfg.Direct && p.Algorithm.Leased() {
		return m.takeDirect(key, p, hits)
	}
	now := m.clk.nanosFor(&p)
	b := m.buckets.load(key)
	// The fast path, as takeFast (written out here: the call costs the
	// single-check benchmark about a third). Only leased policies have
	// buckets, so it needs no look at the algorithm table.
	if b != nil && samePolicy(b.pol, &p) && hits > 0 && b.spendable(now) {
		left, ok := b.quickTake(hits)
		if !ok {
			left, ok = m.striped.take(b, hits, left+hits)
		}
		if ok {
			b.touch(now, m.touchMs)
			if low := b.low.Load(); left < int64(low) && b.low.CompareAndSwap(low, -1) {
				m.prefetch(b)
			}
			return b.decision(left, now), nil
		}
	}
	if !p.Algorithm.Leased() {
		return m.takeExact(key, p, hits)
	}
	return m.takeSlow(b, key, p, hits, now)
}

// takeFast is the fast path of a leased check, for TakeMany (Take has its
// own copy): b (may be nil) has enough spendable tokens for hits > 0 under
// policy p. No I/O, no allocation.
func (m *Manager) takeFast(b *bucket, p *Policy, hits, now int64) (Decision, bool) {
	if b != nil && samePolicy(b.pol, p) && hits > 0 && b.spendable(now) {
		left, ok := b.quickTake(hits)
		if !ok {
			left, ok = m.striped.take(b, hits, left+hits)
		}
		if ok {
			b.touch(now, m.touchMs)
			if low := b.low.Load(); left < int64(low) && b.low.CompareAndSwap(low, -1) {
				m.prefetch(b)
			}
			return b.decision(left, now), true
		}
	}
	return Decision{}, false
}

// Check is one item of [Manager.TakeMany]: the arguments of a Take (Key,
// Policy, Hits) and, once TakeMany returns, its results (Decision, Err).
type Check struct {
	Key    string
	Policy Policy
	Hits   int64

	Decision Decision
	Err      error
}

// errPending marks the checks of a TakeMany still to be decided.
var errPending = errors.New("lease: check not decided yet")

// TakeMany decides every check of cs as Take(c.Key, c.Policy, c.Hits)
// would, writing each one's Decision and Err in place. It is for batches
// (POST /v1/checks): their Store calls overlap instead of running one after
// another.
//
// First every check that local tokens can answer is decided, in order, with
// no I/O; when that is all of them TakeMany does not allocate. The rest
// (new keys, keys out of tokens, peeks, sliding_log, and bad calls, which
// get their error as from Take) are then decided concurrently by at most
// Config.BatchWorkers goroutines that TakeMany starts and waits for, the
// calling goroutine being one of them: with a pipelining Store (rueidis)
// a batch of cold keys costs about one Store round trip per BatchWorkers
// keys, not one per key. Each check keeps Take's guarantees: one lease
// call in flight per key (checks of a key that has one wait for it),
// StoreTimeout per Store call, failure modes instead of errors. A failing
// Store costs the batch about StoreTimeout (the first calls fail together
// and open the breaker; the others are then rejected at once), at most
// StoreTimeout for each BatchWorkers checks that miss.
//
// Order: checks of different keys are independent. Several checks of the
// same key are not decided in the order of cs when some need the Store:
// together they never admit more than the key's limit, but which of them
// are allowed is not set. A caller that needs the order (a request that
// matches the same key twice) should sum the hits into one check.
//
// The keys need not outlive the call, as for Take; cs must not be used by
// other goroutines during it. TakeMany is safe for concurrent use.
func (m *Manager) TakeMany(cs []Check) {
	if m.cfg.Direct {
		// Every Store call is a call into memory: in order, on this
		// goroutine.
		for i := range cs {
			c := &cs[i]
			c.Decision, c.Err = m.Take(c.Key, c.Policy, c.Hits)
		}
		return
	}
	now := m.clk.precise() // once for the batch: it may hold windows (see nanosFor)
	misses := 0
	for i := range cs {
		c := &cs[i]
		if c.Hits > 0 && c.Hits <= MaxHits { // takeFast answers leased policies only
			if d, ok := m.takeFast(m.buckets.load(c.Key), &c.Policy, c.Hits, now); ok {
				c.Decision, c.Err = d, nil
				continue
			}
		}
		c.Decision, c.Err = Decision{}, errPending
		misses++
	}
	if misses == 0 {
		return
	}
	if misses == 1 {
		for i := range cs {
			if c := &cs[i]; c.Err == errPending {
				c.Decision, c.Err = m.Take(c.Key, c.Policy, c.Hits)
				return
			}
		}
	}
	var next atomic.Int64
	work := func() {
		for {
			i := next.Add(1) - 1
			if i >= int64(len(cs)) {
				return
			}
			if c := &cs[i]; c.Err == errPending {
				c.Decision, c.Err = m.Take(c.Key, c.Policy, c.Hits)
			}
		}
	}
	var wg sync.WaitGroup
	for range min(misses, m.cfg.BatchWorkers) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// decision is an allowed Decision with left tokens on hand.
func (b *bucket) decision(left, now int64) Decision {
	return Decision{
		Allowed:   true,
		Limit:     b.pol.Limit,
		Remaining: min(left+b.remaining.Load(), b.pol.Capacity()),
		Reset:     b.reset(left, now),
	}
}

// reset is the Decision's Reset with local tokens on hand: the time until
// the key's limit would be fully available again if those tokens were
// still in the Store. The Store's Reset (at the last lease) counts them as
// spent; for token_bucket and gcra each is worth Period/Limit of refill,
// so they are taken off it (never below 0), and Reset agrees with
// Remaining (local + the Store's remaining). A window's Reset is the end
// of a window, whoever holds the tokens: unchanged.
func (b *bucket) reset(local, now int64) time.Duration {
	r := b.resetAt.Load() - now
	if r <= 0 {
		return 0
	}
	if local > 0 && b.pol.Algorithm.Refills() {
		// In float64: local × Period can overflow int64.
		held := float64(local) * float64(b.pol.Period) / float64(b.pol.Limit)
		if held >= float64(r) {
			return 0
		}
		r -= int64(held)
	}
	return time.Duration(r)
}

// Refund gives back hits that Take admitted for a request that another
// rule then denied (a denied request burns no quota). Leased algorithms
// put them back into the local bucket, never above what the last lease
// left on hand; exact algorithms, unknown keys and changed policies
// ignore it. With Config.Direct they go back to the Store
// (MemoryStore.Refund): refund soon after the check, as the engine does
// (within its request, or a forward's round trip), since a refund Δ later
// may give back up to rate × Δ that a strict bucket would not.
//
// Refund only decisions that are not Degraded: a Degraded decision was made
// by the failure mode and took nothing from the local bucket, so refunding
// it would put tokens there that no Store ever granted (over-admission).
func (m *Manager) Refund(key string, p Policy, hits int64) {
	if hits <= 0 || hits > MaxHits || !p.Algorithm.Leased() {
		return
	}
	if m.cfg.Direct {
		m.refundDirect(key, p, hits)
		return
	}
	b := m.buckets.load(key)
	if b == nil || !samePolicy(b.pol, &p) || b.denyUntil.Load() == evicted {
		return
	}
	m.striped.refund(b, hits)
}

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
		local := m.striped.onHand(b)
		return Decision{Limit: p.Limit, Remaining: local + b.remaining.Load(), RetryAfter: p.Period,
			Reset: b.reset(local, now)}, nil
	}
	// lastUse is the last spend (checks that spend touch it): how long
	// this Manager has not spent a token of the key, for the Store.
	idle := b.idleFor(now, m.touchMs)
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
		if m.cfg.usable(b, now) {
			if left, ok := m.striped.take(b, hits, -1); ok {
				b.touch(now, m.touchMs)
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
		if m.cfg.usable(b, now) {
			local = m.striped.onHand(b)
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
				if m.cfg.usable(b, now) && m.striped.onHand(b) > local {
					// A lease call put tokens on hand since this check
					// looked (calls add them before they publish the
					// Store's answer read just now): take those.
					continue
				}
				// Not while the key is saturated (du: the Store denied
				// it, or a dry grant kept it so): a saturated key's
				// checks are denied without a look at the calls out.
				if (du != 0 && now < du) || !m.inflight.tookOut(b, hits-local) {
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
		s, owner := m.inflight.claim(b)
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
			if !s.wait(bud) {
				return m.failure(b, key, p, hits, errStoreSlow), nil
			}
			if s.err != nil {
				return m.failure(b, key, p, hits, s.err), nil
			}
			waited = true
			now = max(now, m.clk.nanosFor(&p))
			continue
		}
		if b.denyUntil.Load() == evicted {
			m.inflight.release(b, s, nil)
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
			now = max(now, m.clk.nanosFor(&p))
			continue
		}
		return d, nil
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
	local := m.striped.onHand(b)
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
