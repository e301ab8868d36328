package lease

import (
	"math"
	"time"
)

// The leased algorithms' pure math. Each Lease method expects a valid
// policy and 0 ≤ need ≤ want (see CheckLease); each Return method expects
// 0 ≤ tokens. In the formulas, t is now in unix µs, P the period in µs, L
// the limit, C the capacity, all as float64 unless said otherwise.

// TokenBucketState is the Store state of one token_bucket key. The zero
// value is a key without state, which is a full bucket. Not safe for
// concurrent use.
type TokenBucketState struct {
	// Tokens is the (fractional) number of tokens at Updated.
	Tokens float64
	// Updated is when Tokens was written, in unix µs; 0 means no state.
	Updated int64
}

// level is the number of tokens at t:
// min(C, Tokens + (t-Updated)*L/P), or C without state.
func (s *TokenBucketState) level(t int64, pf, lf, cf float64) float64 {
	if s.Updated == 0 {
		return cf
	}
	elapsed := t - s.Updated
	if elapsed < 0 {
		elapsed = 0
	}
	return math.Min(cf, s.Tokens+float64(elapsed)*lf/pf)
}

// Lease runs one lease call at now (see the package doc). Wait is
// (need - tokens)*P/L, Reset is (C - tokens_after)*P/L. The state is
// written (Tokens = tokens after the grant, Updated = now) only when
// something is granted.
func (s *TokenBucketState) Lease(p Policy, now time.Time, want, need int64) Grant {
	t := unixMicros(now)
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	c := p.Capacity()
	cf := float64(c)
	tokens := s.level(t, pf, lf, cf)
	avail := int64(math.Floor(tokens))
	var g Grant
	switch {
	case need > c:
		g.Wait = ceilMillis(pf)
	case avail >= need:
		g.Granted = min(want, avail)
		if g.Granted > 0 {
			tokens -= float64(g.Granted)
			s.Tokens = tokens
			s.Updated = max(s.Updated, t)
		}
	default:
		g.Wait = ceilMillis((float64(need) - tokens) * pf / lf)
	}
	g.Remaining = int64(math.Floor(tokens))
	g.Reset = ceilMillis((cf - tokens) * pf / lf)
	return g
}

// Return gives back n tokens at now: tokens = min(C, level + n). A key
// without state is a full bucket: nothing to do.
func (s *TokenBucketState) Return(p Policy, now time.Time, n int64) {
	if s.Updated == 0 || n <= 0 {
		return
	}
	t := unixMicros(now)
	pf, lf, cf := float64(periodMicros(p)), float64(p.Limit), float64(p.Capacity())
	s.Tokens = math.Min(cf, s.level(t, pf, lf, cf)+float64(n))
	s.Updated = max(s.Updated, t)
}

// expiry is when the bucket is full again (unix µs, rounded up): from then
// on the state equals no state. Updated + ceil((C - Tokens)*P/L).
func (s *TokenBucketState) expiry(p Policy) int64 {
	if s.Updated == 0 {
		return 0
	}
	d := (float64(p.Capacity()) - s.Tokens) * float64(periodMicros(p)) / float64(p.Limit)
	if d <= 0 {
		return s.Updated
	}
	return s.Updated + int64(math.Ceil(math.Min(d, 1<<62)))
}

// GCRAState is the Store state of one gcra key: the theoretical arrival
// time. The zero value is a key without state (TAT ≤ now: full). Not safe
// for concurrent use.
//
// TAT is whole microseconds. A grant of g advances it by ceil(g*P/L) and a
// return moves it back by floor(n*P/L): when P/L is not a whole number of
// µs, each grant costs up to 1µs more than its exact share (under-admission
// of at most 1µs worth of tokens per lease call), but the Store never
// admits early. A float64 TAT would not be exact either: at today's unix
// µs its resolution is 0.25µs, and its rounding goes both ways.
type GCRAState struct {
	// TAT is the theoretical arrival time in unix µs; 0 means no state.
	TAT int64
}

// gcraAvail is floor(B - d*L/P), at least 0, where d = max(TAT, t) - t.
func gcraAvail(d int64, bf, lf, pf float64) int64 {
	a := math.Floor(bf - float64(d)*lf/pf)
	if a < 0 {
		return 0
	}
	return int64(a)
}

// Lease runs one lease call at now (see the package doc). With base =
// max(TAT, t) and d = base - t (integers): avail = floor(B - d*L/P); a
// grant of g sets TAT = base + ceil(g*P/L); Wait = d - (B - need)*P/L;
// Reset = TAT_after - t. These are the package doc's formulas with T = P/L
// and tau = B*T multiplied out, which keeps whole-token boundaries exact
// whenever P/L is a whole number of µs.
func (s *GCRAState) Lease(p Policy, now time.Time, want, need int64) Grant {
	t := unixMicros(now)
	pf, lf := float64(periodMicros(p)), float64(p.Limit)
	b := p.Capacity()
	bf := float64(b)
	base := max(s.TAT, t)
	d := base - t
	avail := gcraAvail(d, bf, lf, pf)
	var g Grant
	switch {
	case need > b:
		g.Wait = ceilMillis(pf)
	case avail >= need:
		g.Granted = min(want, avail)
		if g.Granted > 0 {
			adv := int64(math.Ceil(math.Min(float64(g.Granted)*pf/lf, maxTATAdvance)))
			s.TAT = min(base+adv, t+maxTATAdvance)
			d = s.TAT - t
		}
	default:
		g.Wait = ceilMillis(float64(d) - (bf-float64(need))*pf/lf)
	}
	g.Remaining = gcraAvail(d, bf, lf, pf)
	g.Reset = ceilMillis(float64(d))
	return g
}

// Return gives back n tokens at now: TAT = max(t, TAT - floor(n*P/L)). A
// TAT not after now is a full bucket: nothing to do.
func (s *GCRAState) Return(p Policy, now time.Time, n int64) {
	t := unixMicros(now)
	if s.TAT <= t || n <= 0 {
		return
	}
	back := math.Floor(float64(n) * float64(periodMicros(p)) / float64(p.Limit))
	s.TAT = max(t, s.TAT-int64(math.Min(back, float64(s.TAT-t))))
}

func (s *GCRAState) expiry(Policy) int64 { return s.TAT }

// maxTATAdvance bounds how far the TAT may run ahead of now (about 73,000
// years in µs) so that policies at the validation bounds (Burst 2^40 of a
// 1/year limit) cannot overflow int64. Only such policies ever reach it.
const maxTATAdvance = 1 << 61

// windowStart is the start of the window of length pu containing t:
// t - t mod pu (windows are aligned on multiples of Period since the epoch).
func windowStart(t, pu int64) int64 {
	m := t % pu
	if m < 0 {
		m += pu
	}
	return t - m
}

// FixedWindowState is the Store state of one fixed_window key. The zero
// value is a key without state. Not safe for concurrent use.
type FixedWindowState struct {
	// Start is the start of the window that Count belongs to (unix µs).
	Start int64
	// Count is the tokens granted in that window.
	Count int64
}

// current returns the current window's start and count at t. A stored
// window later than t's (a clock that went back) stays current.
func (s *FixedWindowState) current(t, pu int64) (ws, count int64) {
	ws = windowStart(t, pu)
	if s.Start >= ws {
		return s.Start, s.Count
	}
	return ws, 0
}

// Lease runs one lease call at now: avail = L - count; Wait and Reset are
// the time to the end of the current window (Reset even when count is 0).
func (s *FixedWindowState) Lease(p Policy, now time.Time, want, need int64) Grant {
	t, pu := unixMicros(now), periodMicros(p)
	ws, count := s.current(t, pu)
	end := float64(ws + pu - t)
	avail := max(0, p.Limit-count)
	var g Grant
	switch {
	case need > p.Limit:
		g.Wait = ceilMillis(float64(pu))
	case avail >= need:
		g.Granted = min(want, avail)
		if g.Granted > 0 {
			count += g.Granted
			s.Start, s.Count = ws, count
		}
	default:
		g.Wait = ceilMillis(end)
	}
	g.Remaining = max(0, p.Limit-count)
	g.Reset = ceilMillis(end)
	return g
}

// Return lowers the current window's count by n, not below 0. Tokens
// granted in an earlier window are not returned to this one.
func (s *FixedWindowState) Return(p Policy, now time.Time, n int64) {
	ws, count := s.current(unixMicros(now), periodMicros(p))
	if ws != s.Start || count == 0 || n <= 0 {
		return
	}
	s.Count = max(0, count-n)
}

// expiry is two windows after Start.
func (s *FixedWindowState) expiry(p Policy) int64 { return s.Start + 2*periodMicros(p) }

// SlidingWindowState is the Store state of one sliding_window key. The
// zero value is a key without state. Not safe for concurrent use.
type SlidingWindowState struct {
	// Start is the start of the window that Cur belongs to (unix µs).
	Start int64
	// Prev is the count of the window before Start; Cur the count of the
	// window at Start.
	Prev, Cur int64
}

// current rolls the stored window to t's: the previous window's count
// becomes prev; anything older is 0.
func (s *SlidingWindowState) current(t, pu int64) (ws, prev, cur int64) {
	ws = windowStart(t, pu)
	switch {
	case s.Start >= ws:
		return s.Start, s.Prev, s.Cur
	case s.Start == ws-pu:
		return ws, s.Cur, 0
	}
	return ws, 0, 0
}

// slidingAvail is L - cur - ceil(prev*(P-e)/P), at least 0: the same as
// floor(L - est) with est = prev*(1 - e/P) + cur, computed so that a
// weight that is a whole number stays exact.
func slidingAvail(limit, prev, cur int64, pe, pf float64) int64 {
	w := math.Ceil(float64(prev) * pe / pf)
	return max(0, limit-cur-int64(w))
}

// Lease runs one lease call at now. With ws the current window's start, e
// = t - ws and the weight of prev w = prev*(P-e)/P:
// avail = L - cur - ceil(w). Wait, when denied:
//   - if room = L - cur - need ≥ 0, in this window when w falls to room:
//     (P - e) - room*P/prev;
//   - else in the next window, where cur becomes prev: (P - e) if
//     cur ≤ L - need, else (P - e) + P - (L-need)*P/cur.
//
// Reset: end of the next window if cur > 0, end of this one if only
// prev > 0, else 0.
func (s *SlidingWindowState) Lease(p Policy, now time.Time, want, need int64) Grant {
	t, pu := unixMicros(now), periodMicros(p)
	pf := float64(pu)
	ws, prev, cur := s.current(t, pu)
	e := max(0, t-ws)
	pe := float64(pu - e)
	avail := slidingAvail(p.Limit, prev, cur, pe, pf)
	var g Grant
	switch {
	case need > p.Limit:
		g.Wait = ceilMillis(pf)
	case avail >= need:
		g.Granted = min(want, avail)
		if g.Granted > 0 {
			cur += g.Granted
			s.Start, s.Prev, s.Cur = ws, prev, cur
		}
	default:
		if room := p.Limit - cur - need; room >= 0 {
			g.Wait = ceilMillis(pe - float64(room)*pf/float64(prev))
		} else if room2 := p.Limit - need; cur <= room2 {
			g.Wait = ceilMillis(pe)
		} else {
			g.Wait = ceilMillis(pe + pf - float64(room2)*pf/float64(cur))
		}
	}
	g.Remaining = slidingAvail(p.Limit, prev, cur, pe, pf)
	switch {
	case cur > 0:
		g.Reset = ceilMillis(pe + pf)
	case prev > 0:
		g.Reset = ceilMillis(pe)
	}
	return g
}

// Return lowers the current window's count by n, not below 0.
func (s *SlidingWindowState) Return(p Policy, now time.Time, n int64) {
	ws, prev, cur := s.current(unixMicros(now), periodMicros(p))
	if cur == 0 || n <= 0 {
		return
	}
	s.Start, s.Prev, s.Cur = ws, prev, max(0, cur-n)
}

// expiry is two windows after Start: by then both counts have rolled out.
func (s *SlidingWindowState) expiry(p Policy) int64 { return s.Start + 2*periodMicros(p) }
