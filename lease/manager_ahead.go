package lease

import "time"

// Windows leased ahead (fixed_window). A lease call of a fixed_window key
// also asks the Store for a share of each of the next windows
// (Lessee.AheadWindows, AheadTokens): the smallest lease (MinLeaseShare of
// the capacity, the floor a slow key's leases are) in each window up to
// Config.AheadHorizon ahead. When a check then finds the bucket's window
// over and a share covers now, the bucket rolls into that window locally:
// its tokens on hand become the share, with no Store call. A slow key
// checked every few windows so makes one Store call per horizon instead of
// one per window. A hot key's need above the floor is still leased window
// by window (its shares get it through the first checks of each window
// while its prefetch is out).
//
// A share of window j (1 for the window after the grant's) is spent only
// where it is surely inside window j on the Store's clock: the Store
// answered at some instant between the call's send and its answer (on the
// node's clock), and its window ended Reset (rounded up to a ms) after
// that, so window j runs from at latest recv + Reset + (j−1)·P to at
// earliest send + Reset − 1ms + j·P. Each end is moved inwards by the
// margin aheadMargin(j) for the clocks' rates; a check between two
// windows' spans, or past the last share, leases as any other, and takes
// on hand what the answer shows lent to it in the Store's window (see
// aheadGap).
//
// The bucket keeps its shares in one word (the aux field, which
// fixed_window does not otherwise use; see aheadWord), next to resetAt,
// which is recv + Reset + j·P once the bucket rolled into window j: the
// latest end of its current window on the node's clock.

// aheadDrift is the margin for the rates of the node's clock and the
// Store's, as a fraction of the time since the call: 1e-4 (100 ppm).
// Clocks kept by NTP run within a few ppm of true time, and a crystal left
// alone is specified within ±50 ppm, so two clocks drift apart by less;
// a clock being slewed faster (ntpd: up to 500 ppm while it corrects an
// offset) or stepped can beat it, as it can beat the 1ms by which a
// window's own tokens stop early.
const aheadDrift = 1e-4

// aheadMaxTokens bounds a share (Lessee.AheadTokens): the word holds 32
// bits of it. A slow key spends far fewer tokens per window than that.
const aheadMaxTokens = 1<<32 - 1

// aheadMaxLatency bounds the latency of a call (recv − send + 1ms) whose
// shares the bucket keeps: the word holds 15 bits of it in aheadUnit.
const (
	aheadUnit       = 100 * time.Microsecond
	aheadMaxLatency = (1<<15 - 1) * aheadUnit
)

// aheadMargin is the margin of window j (counted from the grant's, j ≥ 1)
// of policy period pu: 1ms, as a window's own tokens stop early (the
// clocks' reading), and aheadDrift of the time from the call to the
// window's end, at most (j+1) periods (the grant's Reset is at most one).
func aheadMargin(pu time.Duration, j int64) int64 {
	return int64(time.Millisecond) + int64(float64(j+1)*float64(pu)*aheadDrift)
}

// aheadWindows is how many windows of period pu a lease call asks ahead
// with horizon h: h / pu, at most MaxAheadWindows, and at most as many as
// keep each window's span (shortened by twice its margin) at least half
// the window; 0 when h is 0 (off) or pu passes h.
func aheadWindows(pu, h time.Duration) int64 {
	if h <= 0 || pu <= 0 || pu > h {
		return 0
	}
	k := int64(h / pu)
	k = min(k, MaxAheadWindows)
	// 2·aheadMargin(k) ≤ pu/2: (k+1)·pu·aheadDrift ≤ pu/4 − 1ms.
	room := float64(pu/4-time.Millisecond) / (float64(pu) * aheadDrift)
	if room < 2 {
		return 0
	}
	return min(k, int64(room)-1)
}

// aheadWord packs a bucket's shares: tokens per window (32 bits), the
// index j of the bucket's current window counted from the grant's (17
// bits: at most MaxAheadWindows), and w, the call's recv − send + 1ms in
// aheadUnit rounded up (15 bits). The bucket has shares of windows j+1 to
// k (aheadWindows of its policy). 0 is no shares.
type aheadWord uint64

func packAhead(tokens, j, w int64) aheadWord {
	return aheadWord(uint64(tokens)<<32 | uint64(j)<<15 | uint64(w))
}

func (a aheadWord) tokens() int64 { return int64(a >> 32) }
func (a aheadWord) index() int64  { return int64(a >> 15 & (1<<17 - 1)) }
func (a aheadWord) latency() int64 {
	return int64(a&(1<<15-1)) * int64(aheadUnit)
}

// aheadTerms are what a Manager leases ahead by: Config.AheadHorizon,
// and the smallest lease (Config.Horizon, MinLeaseShare) that each share
// is. What a call asks ahead, and where a share is spendable, are
// functions of the bucket and these; rolling into a window (rollAhead)
// is the Manager's, which owns the slots and counters it touches.
type aheadTerms struct {
	horizon      time.Duration // Config.AheadHorizon
	leaseHorizon time.Duration // Config.Horizon
	minShare     float64       // Config.MinLeaseShare
}

// ahead returns b's shares (0 for an algorithm that does not lease
// ahead: Algorithm.LeasesAhead).
func (b *bucket) ahead() aheadWord {
	if !b.pol.Algorithm.LeasesAhead() {
		return 0
	}
	return aheadWord(b.aux.Load())
}

// ask is what a lease call of b asks ahead: the smallest lease in
// each of aheadWindows windows; none for other algorithms, with
// AheadHorizon off, or for a striped bucket (a contended key, whose need
// is far above the floor: shares would save it no Store call). The caller
// holds b's slot; b's shares are dropped, as the call replaces them (its
// answer sets them again: see aheadTerms.keep).
func (at *aheadTerms) ask(b *bucket) (windows, tokens int64) {
	if !b.pol.Algorithm.LeasesAhead() {
		return 0, 0
	}
	b.aux.Store(0)
	k := aheadWindows(b.pol.Period, at.horizon)
	if k == 0 || b.tokens.Load() < 0 {
		return 0, 0
	}
	return k, min(leaseWant(0, at.leaseHorizon, at.minShare, 1, b.pol.Capacity()), aheadMaxTokens)
}

// keep records the shares of answer g to b's lease call, sent at send
// and answered at recv (after b.answer set resetAt = recv + Reset). The
// caller holds b's slot.
func (at *aheadTerms) keep(b *bucket, g Grant, send, recv int64) {
	if !b.pol.Algorithm.LeasesAhead() {
		return
	}
	k := aheadWindows(b.pol.Period, at.horizon)
	w := recv - send + int64(time.Millisecond)
	if g.AheadTokens <= 0 || g.AheadWindows <= 0 || k == 0 || w > int64(aheadMaxLatency) || b.resetAt.Load() == 0 {
		b.aux.Store(0)
		return
	}
	// Windows the Store lent fewer of than asked (it lends as many as
	// asked, or none) count as the last ones of k: the margins stay those
	// of k, larger.
	j := k - min(g.AheadWindows, k)
	units := (w + int64(aheadUnit) - 1) / int64(aheadUnit)
	b.aux.Store(int64(packAhead(min(g.AheadTokens, aheadMaxTokens), j, units)))
}

// span is the span of b's window n after its current one (n ≥ 1) in
// which its share may be spent, on the node's clock: [from, to). ok is
// false when b has no share of it.
func (at *aheadTerms) span(b *bucket, a aheadWord, n int64) (from, to int64, ok bool) {
	pu := b.pol.Period
	j := a.index() + n
	if a == 0 || n < 1 || j > aheadWindows(pu, at.horizon) {
		return 0, 0, false
	}
	r := b.resetAt.Load() // the latest end of the current window
	mg := aheadMargin(pu, j)
	from = addTime(r, time.Duration(n-1)*pu) + mg
	to = addTime(r, time.Duration(n)*pu) - a.latency() - mg
	return from, to, r != 0 && from < to
}

// rollAhead moves b into the window of now on a share, if b's window is
// over, no Store call of its key is in flight (the roll must not mix with
// one's answer), and a share of b covers now: its tokens on hand become
// the share (those of the window that ended are dropped, as a lease call
// drops them), with no Store call. It reports whether it rolled.
//
// The tokens are put on hand before the new expiry is published: a check
// that sees the expiry finds them, and one that saw the old expiry and
// takes them does so after now, inside the share's window.
func (m *Manager) rollAhead(b *bucket, now int64) bool {
	if b.ahead() == 0 || m.cfg.usable(b, now) {
		return false
	}
	m.inflight.Lock()
	defer m.inflight.Unlock()
	a := b.ahead()
	if a == 0 || m.inflight.m[b.key()] != nil || b.denyUntil.Load() == evicted || b.tokens.Load() < 0 || m.cfg.usable(b, now) {
		return false
	}
	r := b.resetAt.Load()
	if r == 0 || now < r {
		return false
	}
	pu := int64(b.pol.Period)
	n := (now-r)/pu + 1
	from, to, ok := m.ahead.span(b, a, n)
	if !ok || now < from || now >= to {
		return false
	}
	// No slot is held (none is in the map, and claims take the lock this
	// holds): the roll owns what a slot holder owns (rate, lastLeaseMs).
	s := a.tokens()
	left := b.tokens.Swap(s)
	consumed := b.basis.Load() - left
	m.countLocal(consumed)
	first := b.lastLeaseMs == 0
	elapsed := time.Duration(unixMs32(now)-b.lastLeaseMs) * time.Millisecond
	rate, _ := b.rateOf()
	ewma, _ := observeRate(rate, consumed, elapsed, m.cfg.Horizon, first)
	b.setRate(ewma, false)
	b.lastLeaseMs = unixMs32(now)
	b.basis.Store(s)
	b.remaining.Store(max(b.pol.Limit-s, 0))
	b.resetAt.Store(addTime(r, time.Duration(n*pu)))
	b.aux.Store(int64(packAhead(s, a.index()+n, a.latency()/int64(aheadUnit))))
	b.low.Store(lowMark(m.cfg.LowWater, s))
	b.expires.Store(to)
	m.st.aheadRolls.Add(1)
	m.met.aheadRolls.Inc()
	return true
}

// end is when b's last share stops being spendable (the end of its
// span), or 0 if b has none.
func (at *aheadTerms) end(b *bucket) int64 {
	a := b.ahead()
	if a == 0 {
		return 0
	}
	left := aheadWindows(b.pol.Period, at.horizon) - a.index()
	if _, to, ok := at.span(b, a, left); ok {
		return to
	}
	return 0
}

// live reports whether the Store may still lend b shares of a window
// that has not started at now: a return ends them (see returnable). It
// errs towards true (a return that ends nothing costs a Store call, a
// share left running costs the key's other holders its tokens).
func (at *aheadTerms) live(b *bucket, now int64) bool {
	a := b.ahead()
	if a == 0 {
		return false
	}
	left := aheadWindows(b.pol.Period, at.horizon) - a.index()
	r := b.resetAt.Load()
	if left <= 0 {
		return false
	}
	// The latest start of the last share's window on the node's clock.
	return now < addTime(r, time.Duration(left-1)*b.pol.Period)+aheadMargin(b.pol.Period, a.index()+left)
}

// aheadGap is what a lease call of a fixed_window bucket with shares
// knows of the bucket's window before it: its shares, its window's latest
// end, and whether the tokens on hand are that window's. A call made when
// the window is over by the bucket's bound (between two windows' spans,
// or past the last share) may find still lent to it in the Store's
// window the tokens on hand, if the Store is still in the bucket's window
// (its end bound is early by the latency and the margin), or the share
// of a window ahead the bucket did not roll into: it reports held what
// covers either (the Store keeps min(held, lent) of the loan), and its
// answer says which window the Store is in (see aheadTerms.found). Zero for a
// bucket without shares.
type aheadGap struct {
	a     aheadWord
	reset int64 // the bucket's resetAt: its window's latest end
	lo    int64 // a marginGap's earliest end of that window (see marginSame)
	own   bool  // the tokens on hand are of the window ending at reset
	left  int64 // the tokens on hand of a call made with the window over
	held  int64 // what such a call reports held: the most it may find
	sure  int64 // the least it may find, in any window the Store may be in
}

// gapOf is b's aheadGap before a lease call at now (the caller holds
// b's slot, and has not asked lesseeOf, which drops the shares). With over
// (b's window is over at now), local is the tokens the call took off b.
func (at *aheadTerms) gapOf(b *bucket, over bool, local, now int64) aheadGap {
	a, r := b.ahead(), b.resetAt.Load()
	if a == 0 {
		return marginGap(b, over, local, r)
	}
	if r == 0 {
		return aheadGap{}
	}
	// Tokens on hand are of the window ending at r when their expiry was
	// set from the answer or roll that set r (less than half a period
	// before it: see aheadWindows), not kept from a window before it.
	gp := aheadGap{a: a, reset: r, own: ownWindow(b, r)}
	if !over {
		return gp
	}
	if gp.own {
		gp.left = local
	}
	// The windows the Store may answer in: from the bucket's window of now
	// (by the latest ends) to that of now + P/2 (by the earliest: a call
	// takes less than half a window), counted from the bucket's window.
	pu := b.pol.Period
	k := aheadWindows(pu, at.horizon)
	d := aheadMargin(pu, k)
	first := max(0, (now-r-d)/int64(pu)+1)
	if now < r+d {
		first = 0
	}
	e := r - a.latency() - d // the earliest end of the bucket's window
	last := max(0, (now+int64(pu)/2-e+d)/int64(pu)+1)
	if now+int64(pu)/2 < e-d {
		last = 0
	}
	gp.sure = -1
	for n := first; n <= min(last, first+2); n++ {
		f := int64(0)
		switch {
		case n == 0:
			f = gp.left
		case a.index()+n <= k:
			f = a.tokens()
		}
		gp.held = max(gp.held, f)
		if gp.sure < 0 || f < gp.sure {
			gp.sure = f
		}
	}
	if last > first+2 {
		gp.sure = 0 // more windows than a call's latency crosses: unsure
	}
	gp.sure = max(gp.sure, 0)
	return gp
}

// marginGap is the aheadGap of a window's bucket without shares
// (sliding_window's, a fixed_window's with none) whose window is over by
// its bound (over) with local tokens on hand that are its window's, the
// one ending at r (own). The bound is early by the latency of the answer
// that set it and by the rounding of its Reset, so in a window's last
// millisecond or so the Store may still be in it, with those tokens still
// lent to this Manager there: a key that holds its whole limit (a hot key
// leases up to that) would be denied until the window ended, though far
// from its limit. The call reports them held (the Store keeps min(held,
// lent) of the loan in its window; the bucket spends none while its slot
// is held), and its answer says whether the Store is still in that
// window (see marginSame): then what the Store kept is spendable until
// the answer's end of it. sure is 0: the call still asks its need.
func marginGap(b *bucket, over bool, local, r int64) aheadGap {
	if !over || local <= 0 || r == 0 || b.pol.Algorithm.Refills() || !ownWindow(b, r) {
		return aheadGap{}
	}
	lo := b.expires.Load() + int64(b.pol.ResetPastWindow()) // sliding_window's Reset is the end of the next window
	return aheadGap{reset: r, lo: lo, own: true, left: local, held: local}
}

// ownWindow reports whether the tokens on hand of b, a window's bucket,
// are of the window ending at r: their expiry was set from the answer
// that set r (which puts it less than a window's latency and rounding
// before r, a period more for sliding_window, whose answers' Reset is the
// end of the next window), not kept from a window before.
func ownWindow(b *bucket, r int64) bool {
	pu := int64(b.pol.Period)
	end := r - int64(b.pol.ResetPastWindow()) // where the answer that set r puts the tokens' end, at the latest
	return b.expires.Load() > end-pu/2
}

// marginSame reports whether answer g to a call of gap gp (a marginGap),
// sent at send and answered at recv, shows the Store in the window of
// the tokens on hand. Each answer places the end of its window (for
// sliding_window, of the next) between its call's send + Reset − 1ms
// (Reset is rounded up) and its recv + Reset: the bucket's between gp.lo
// (the tokens' expiry) and gp.reset, this one's between send + g.Reset −
// 1ms and recv + g.Reset, each widened by the margin for the clocks'
// drift. The same window when the two spans meet; it cannot tell (false)
// when together they are as wide as a period, as they then may also meet
// a period apart.
func marginSame(b *bucket, gp aheadGap, g Grant, send, recv int64) bool {
	pu := int64(b.pol.Period)
	d := aheadMargin(b.pol.Period, 1)
	lo, hi := addTime(send, g.Reset)-int64(time.Millisecond)-d, addTime(recv, g.Reset)+d
	glo, ghi := gp.lo-d, gp.reset+d
	if (hi-lo)+(ghi-glo) >= pu {
		return false
	}
	return lo <= ghi && glo <= hi
}

// windowOf is which window the Store answered g in (sent at send,
// answered at recv), counted from the bucket's window before the call (0:
// the same), told from where its end falls (recv + Reset) against that
// window's latest end: n periods later, within the two calls' latencies
// and the margins, which must stay under half a period. ok is false when
// it cannot tell.
func (at *aheadTerms) windowOf(b *bucket, gp aheadGap, g Grant, send, recv int64) (n int64, ok bool) {
	if gp.a == 0 {
		return 0, false
	}
	pu := int64(b.pol.Period)
	k := aheadWindows(b.pol.Period, at.horizon)
	if recv-send+int64(time.Millisecond)+gp.a.latency()+2*aheadMargin(b.pol.Period, k) >= pu/2 {
		return 0, false
	}
	d := addTime(recv, g.Reset) - gp.reset
	if d < -pu/2 {
		return 0, false
	}
	return (d + pu/2) / pu, true
}

// same reports whether answer g shows the Store in the bucket's
// window before the call, whose tokens on hand are that window's: they
// may then be spent until the answer's end of it.
func (at *aheadTerms) same(b *bucket, gp aheadGap, g Grant, send, recv int64) bool {
	n, ok := at.windowOf(b, gp, g, send, recv)
	return ok && n == 0 && gp.own
}

// found is what answer g to a call of a bucket in gap gp finds lent
// to it in the Store's window: gp.left if that window is the bucket's,
// the share if it is one of the windows ahead (none of it was spent: the
// bucket did not roll into it), else 0.
func (at *aheadTerms) found(b *bucket, gp aheadGap, g Grant, send, recv int64) int64 {
	if gp.held == 0 {
		return 0
	}
	lent := max(g.Lent-g.Granted, 0) // what the Store kept of the loan
	if gp.a == 0 {
		if !marginSame(b, gp, g, send, recv) {
			return 0
		}
		return min(gp.left, lent) // see marginGap
	}
	n, ok := at.windowOf(b, gp, g, send, recv)
	switch {
	case !ok:
		return 0
	case n == 0:
		return min(gp.left, lent)
	case gp.a.index()+n <= aheadWindows(b.pol.Period, at.horizon):
		return min(gp.a.tokens(), lent)
	}
	return 0
}

// aheadMayFind reports whether a lease call of b at now, its window over
// by the bucket's bound, may find tokens lent to it in the Store's window
// (see aheadGap): a check then asks the Store rather than deny locally
// (the tokens on hand of a window that runs on past the bound, a share).
func (m *Manager) aheadMayFind(b *bucket, now int64) bool {
	if m.cfg.usable(b, now) {
		return false
	}
	if b.ahead() == 0 {
		return marginGap(b, true, m.striped.onHand(b), b.resetAt.Load()).held > 0
	}
	return m.ahead.gapOf(b, true, max(b.tokens.Load(), 0), now).held > 0
}
