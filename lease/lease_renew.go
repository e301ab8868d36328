package lease

// usable reports whether b's tokens may be spent at now: before
// b.expires, which the fast path checks, and for token_bucket and gcra
// also in the second half of their LeaseTTL (b.expires is half-way),
// while a renewal is due.
func (c *Config) usable(b *bucket, now int64) bool {
	exp := b.expires.Load()
	return now < exp || (b.pol.Algorithm.Refills() && exp > 0 && now-exp < int64(c.LeaseTTL/2))
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

// prefetch leases again for b in the background; the caller has set b.low
// to -1, which stops further triggers until a lease sets it again.
func (m *Manager) prefetch(b *bucket) {
	if !m.bg.spawn(func() { m.prefetchNow(b) }) {
		b.low.Store(0)
	}
}

func (m *Manager) prefetchNow(b *bucket) {
	s, owner := m.inflight.claim(b)
	if !owner {
		return // a sync lease is in flight and will set low
	}
	if b.denyUntil.Load() == evicted {
		m.inflight.release(b, s, nil)
		return
	}
	p := *b.pol
	now := m.clk.nanosFor(&p)
	kept := int64(0)
	if p.Algorithm.Refills() {
		kept = b.keptSwap() // before the tokens on hand: see keptSwap
	}
	local := m.striped.onHand(b)
	held := local
	if !m.cfg.usable(b, now) {
		held = 0
	}
	wasRoomy := b.roomy() // before sizeLease sets it anew
	want, need := m.cfg.sizeLease(b, b.basis.Load()-local, now, 1, held), int64(1)
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
	gap := m.ahead.gapOf(b, false, 0, now)
	to := m.lesseeOf(b, held)
	if p.Algorithm.Refills() {
		to.SpentBefore = b.spentBefore(kept)
	}
	g, err := m.store.Lease(m.ctx, b.key(), p, want, need, to)
	after := max(now, m.clk.nanosFor(&p)) // see leaseEnded
	m.unanswered.ended(b, to, err)
	if err != nil {
		// low stays -1: the next sync lease retries, or fails over.
		b.keptAdd(kept)
		m.inflight.release(b, s, err)
		return
	}
	m.fo.endDegraded(b)
	b.keptAdd(held + g.Granted)
	m.countLocal(b.basis.Load() - local)
	m.st.tokensLeased.Add(g.Granted)
	m.met.tokensLeased.AddInt64(g.Granted)
	b.lastLeaseMs = unixMs32(now)
	switch {
	case g.Granted > 0:
		exp := leaseExpiry(p, now, g, m.cfg.LeaseTTL)
		switch {
		case held == 0 || m.striped.onHand(b) == 0:
			m.striped.takeAll(b) // of a window that ended, or expired: dropped
		case !p.Algorithm.Refills() && !m.ahead.same(b, gap, g, now, after):
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
	m.striped.put(b, g.Granted)
	// Published after the tokens are on hand (see leaseSync).
	b.answer(g, after)
	m.ahead.keep(b, g, now, after)
	m.striped.settle(b, g.Lent)
	switch {
	case g.Granted > 0:
		b.low.Store(m.cfg.lowFor(b, g.Granted, g.Lent))
	case renewal:
		b.low.Store(m.cfg.lowFor(b, g.Lent, g.Lent))
	}
	// Granted 0 otherwise: nothing available; low stays -1 and the next
	// check that runs out leases synchronously and gets a deny-until.
	m.inflight.release(b, s, nil)
}
