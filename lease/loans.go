package lease

import "math"

// Loan is what a Store lent to one holder of a key and still counts
// against the key's capacity (see "Lent tokens" in the package doc).
type Loan struct {
	// Holder is the Lessee's ID.
	Holder string
	// Lent is the tokens lent to Holder and not known to be spent or
	// returned.
	Lent int64
	// Expires is when Lent counts as spent (unix µs). Windowed algorithms
	// keep 0: their loans end with the window.
	Expires int64
}

// loans is a key's loans, one per holder, in no particular order. Not
// safe for concurrent use.
type loans []Loan

// find returns the index of holder's loan, or -1.
func (ls loans) find(holder string) int {
	for i := range ls {
		if ls[i].Holder == holder {
			return i
		}
	}
	return -1
}

// lentTo is what ls lends holder at t (loans expiring at or before t
// count as spent; windowed loans, expiring 0, are asked with t < 0).
func (ls loans) lentTo(holder string, t int64) int64 {
	if holder == "" {
		return 0
	}
	if i := ls.find(holder); i >= 0 && ls[i].Expires > t {
		return ls[i].Lent
	}
	return 0
}

// after is A(e): the tokens of the loans that expire at or after e, which
// all still counted just before e.
func (ls loans) after(e int64) int64 {
	var a int64
	for _, l := range ls {
		if l.Expires >= e {
			a += l.Lent
		}
	}
	return a
}

// prune drops the loans that have expired at t (their tokens count as
// spent).
func (ls loans) prune(t int64) loans {
	out := ls[:0]
	for _, l := range ls {
		if l.Expires > t {
			out = append(out, l)
		}
	}
	clear(ls[len(out):])
	return out
}

// settle records a grant of g to, at t: the holder's loan becomes
// min(lent, held) + g, expiring at t + TTL (expires < 0: windowed, 0). The
// caller has pruned the expired loans. A zero loan is dropped.
func (ls loans) settle(to Lessee, g, t int64, windowed bool) loans {
	if to.ID == "" {
		return ls
	}
	i := ls.find(to.ID)
	var lent int64
	if i >= 0 {
		lent = min(ls[i].Lent, to.Held)
	}
	lent += g
	exp := int64(0)
	if !windowed {
		exp = t + to.TTL.Microseconds()
		if i >= 0 {
			exp = max(exp, ls[i].Expires)
		}
	}
	switch {
	case i >= 0 && lent > 0:
		ls[i].Lent, ls[i].Expires = lent, exp
	case i >= 0:
		ls[i] = ls[len(ls)-1]
		ls[len(ls)-1] = Loan{}
		ls = ls[:len(ls)-1]
	case lent > 0:
		ls = append(ls, Loan{Holder: cloneString(to.ID), Lent: lent, Expires: exp})
	}
	return ls
}

// take removes holder's loan and returns min(n, its lent): what a return
// of n may give back.
func (ls loans) take(holder string, n int64) (loans, int64) {
	i := ls.find(holder)
	if i < 0 || holder == "" {
		return ls, 0
	}
	back := min(n, ls[i].Lent)
	ls[i] = ls[len(ls)-1]
	ls[len(ls)-1] = Loan{}
	return ls[:len(ls)-1], back
}

// effective is ls as the caller to's call sees it at t: its loan's
// tokens it no longer holds (lent − Held) were spent by t − Idle, so from
// then they count like a loan that ended. ls itself is not changed.
func (ls loans) effective(to Lessee, t int64) loans {
	if to.ID == "" || to.Idle <= 0 {
		return ls
	}
	i := ls.find(to.ID)
	if i < 0 || ls[i].Lent <= to.Held {
		return ls
	}
	spent := t - to.Idle.Microseconds()
	if spent >= ls[i].Expires {
		return ls
	}
	out := make(loans, len(ls), len(ls)+1)
	copy(out, ls)
	out[i].Lent = to.Held
	return append(out, Loan{Lent: ls[i].Lent - to.Held, Expires: spent})
}

// capLevel caps a refilled level at t by the loans of a token_bucket key
// (fractional tokens; rate = lf/pf per µs, capacity cf). Before its
// expiry E a loan is out of the bucket; at E it counts as spent and the
// refill goes on from there: the level at t is at most C − A(E) + (t −
// min(E, t))·rate for every loan, which for the loans still running is
// C − their sum.
func (ls loans) capLevel(level float64, t int64, pf, lf, cf float64) float64 {
	for _, l := range ls {
		s := min(l.Expires, t)
		level = math.Min(level, cf-float64(ls.after(l.Expires))+float64(t-s)*lf/pf)
	}
	return level
}

// fullIn is how long after t (µs) a token_bucket or gcra key whose level
// is full in d µs (by refill alone) is full with its loans counted: every
// running loan must expire and its tokens refill after it.
func (ls loans) fullIn(d float64, t int64, pf, lf float64) float64 {
	for _, l := range ls {
		if l.Expires > t {
			d = math.Max(d, float64(l.Expires-t)+float64(ls.after(l.Expires))*pf/lf)
		}
	}
	return d
}

// floorTAT is the lowest TAT a gcra key's loans allow at t: the gcra form
// of capLevel, with a loan's tokens A(E) worth ceil(A(E)·P/L) µs.
func (ls loans) floorTAT(t int64, pf, lf float64) int64 {
	var f int64
	for _, l := range ls {
		s := min(l.Expires, t)
		f = max(f, s+int64(math.Ceil(float64(ls.after(l.Expires))*pf/lf)))
	}
	return f
}

// cloneString copies s (a Store keeps holder IDs past the call).
func cloneString(s string) string { return string([]byte(s)) }
