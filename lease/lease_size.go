package lease

import (
	"math"
	"time"
)

// Lease sizing. How much a lease call asks, when a key prefetches, how
// long a dry grant keeps a key saturated: functions of the bucket and the
// Config's terms (Horizon, MinLeaseShare, LowWater, LeaseTTL), methods of
// the Config. The caller holds b's slot where a comment says so.

// sizeLease updates b's rate with consumed hits since the last grant and
// returns the tokens to ask for on top of held (what the call reports
// held), at least need. The caller holds b's slot.
func (c *Config) sizeLease(b *bucket, consumed, now, need, held int64) int64 {
	first := b.lastLeaseMs == 0
	elapsed := time.Duration(unixMs32(now)-b.lastLeaseMs) * time.Millisecond
	r, was := b.rateOf()
	ewma, sizing := observeRate(r, consumed, elapsed, c.Horizon, first)
	want := leaseWant(sizing, c.Horizon, c.MinLeaseShare, need, b.pol.Capacity())
	roomy := false
	if !first && c.MinLeaseShare > 0 && b.pol.Algorithm.Refills() {
		if loan := roomyLoan(b.pol, sizing, c.LeaseTTL/2, b.free(now)); loan >= 2*want {
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
func (c *Config) lowFor(b *bucket, n, lent int64) int32 {
	low := lowMark(c.LowWater, n)
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
func (c *Config) deniedLately(b *bucket, at int64) (n int, ok bool) {
	du := b.denyUntil.Load()
	if du == 0 || du == evicted || at >= addTime(du, 10*c.Horizon) {
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
func (c *Config) dryWait(p Policy, g Grant, need int64) time.Duration {
	if need <= 0 || !p.Algorithm.Refills() || g.Remaining >= int64(math.Ceil(c.MinLeaseShare*float64(p.Capacity()))) {
		return 0
	}
	perToken := float64(p.Period) / float64(p.Limit)
	back := time.Duration(float64(max(need-g.Remaining, 0)) * perToken)
	return max(back, time.Millisecond) + batchWait(p, c.MinLeaseShare, need, c.Horizon)
}
