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
	// keep 0: their loans end with the window, except a fixed_window loan
	// with shares ahead (Share), which ends with the window that ends at
	// Expires.
	Expires int64
	// LastSpend is when Holder last spent a token of the key before its
	// last lease call (that call's now − Idle, unix µs; 0 when unknown):
	// the tokens its next call reports spent before the last one
	// (Lessee.SpentBefore) refill from then. token_bucket and gcra only.
	LastSpend int64
	// Share is, for fixed_window, the tokens lent to Holder in each window
	// after the current one up to Expires (Lessee.AheadTokens): when such
	// a window starts, Lent becomes Share and the window's count starts
	// at the sum of the shares. 0 otherwise.
	Share int64
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

// total is the tokens ls lends, whether or not their loans expired (the
// windows' loans, which end with their window).
func (ls loans) total() int64 {
	var n int64
	for _, l := range ls {
		n += l.Lent
	}
	return n
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

// settle records a call of to at t that granted g: the holder's loan
// becomes keep + g (keep: what it keeps of the loan before, see split),
// expiring at max(its expiry, t + TTL) (windowed: 0), and LastSpend
// becomes t − Idle (the refilling algorithms). The caller has pruned the
// expired loans. A zero loan is dropped. A new loan keeps to.ID itself:
// the caller owns it (MemoryStore.Lease passes its shard's copy).
func (ls loans) settle(to Lessee, keep, g, t int64, windowed bool) loans {
	if to.ID == "" {
		return ls
	}
	i := ls.find(to.ID)
	lent := keep + g
	exp, last := int64(0), int64(0)
	if !windowed {
		exp, last = t+to.TTL.Microseconds(), t-to.Idle.Microseconds()
		if i >= 0 {
			exp = max(exp, ls[i].Expires)
		}
	}
	switch {
	case i >= 0 && lent > 0:
		ls[i].Lent, ls[i].Expires, ls[i].LastSpend = lent, exp, last
	case i >= 0:
		ls[i] = ls[len(ls)-1]
		ls[len(ls)-1] = Loan{}
		ls = ls[:len(ls)-1]
	case lent > 0:
		ls = append(ls, Loan{Holder: to.ID, Lent: lent, Expires: exp, LastSpend: last})
	}
	return ls
}

// unanswered handles a call of to at t that names its previous call as
// unanswered (Lessee.Unanswered): if that call is last, the last call to
// settle a loan of the key (the key's lastCall and what it granted), its
// grant never reached to. It takes that off to's loan and returns it: what
// the key gets back. The loan runs on, even at 0 (the call settles it).
func (ls loans) unanswered(to Lessee, t int64, last lastCall) int64 {
	if to.Unanswered == 0 || to.ID == "" || last.Call != to.Unanswered {
		return 0
	}
	i := ls.find(to.ID)
	if i < 0 || ls[i].Expires <= t {
		return 0
	}
	back := min(last.Grant, ls[i].Lent)
	ls[i].Lent -= back
	return back
}

// lastCall is the Lessee.Call of the last call that settled a loan of a
// token_bucket or gcra key, and what it granted; zero when that call was
// not told apart, or after its grant came back.
type lastCall struct {
	Call  uint32
	Grant int64
}

// lastCallOf is the lastCall of a call of to that granted g.
func lastCallOf(to Lessee, g int64) lastCall {
	if to.Call == 0 || to.ID == "" {
		return lastCall{}
	}
	return lastCall{Call: to.Call, Grant: g}
}

// held is what a windowed grant keeps of to's loan: min(lent, Held).
func (ls loans) held(to Lessee) int64 {
	if i := ls.find(to.ID); i >= 0 && to.ID != "" {
		return min(ls[i].Lent, to.Held)
	}
	return 0
}

// end ends holder's loan at t by a return of n: min(n, lent) goes back
// (returned), the rest counts as spent at t (an ended loan).
func (ls loans) end(holder string, n, t int64) (_ loans, back int64) {
	i := ls.find(holder)
	if i < 0 || holder == "" {
		return ls, 0
	}
	back = min(n, ls[i].Lent)
	if rest := ls[i].Lent - back; rest > 0 {
		ls[i] = Loan{Lent: rest, Expires: min(ls[i].Expires, t)}
		return ls, back
	}
	ls[i] = ls[len(ls)-1]
	ls[len(ls)-1] = Loan{}
	return ls[:len(ls)-1], back
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

// split is how a call of to at t (token_bucket, gcra) sees to's loan:
// run, the tokens it still holds (min(lent, Held)); early, those it spent
// before its previous call and did not refund since (min(SpentBefore,
// lent − run)), spent by the loan's LastSpend; late, the rest, spent by
// t − Idle. A call that grants g settles a running loan to run + g; one
// that grants nothing to run + late, so that the holder may still refund
// those (Manager.Refund). i is the loan's index, -1 without one.
type split struct {
	i                int
	run, early, late int64
	earlyAt, lateAt  int64 // when they were spent by (unix µs)
}

func (ls loans) split(to Lessee, t int64) split {
	sp := split{i: -1}
	if to.ID == "" {
		return sp
	}
	if sp.i = ls.find(to.ID); sp.i < 0 {
		return sp
	}
	l := ls[sp.i]
	sp.run = min(l.Lent, to.Held)
	sp.early = min(to.SpentBefore, l.Lent-sp.run)
	sp.late = l.Lent - sp.run - sp.early
	sp.lateAt = t - to.Idle.Microseconds()
	sp.earlyAt = sp.lateAt
	if l.LastSpend > 0 {
		sp.earlyAt = min(l.LastSpend, sp.lateAt)
	}
	return sp
}

// running reports whether the split loan runs at t (it is settled).
func (sp split) running(ls loans, t int64) bool { return sp.i >= 0 && ls[sp.i].Expires > t }

// keep is what a call that grants g keeps of the loan (settle): nothing
// of one that ended; run after a grant; run + late otherwise.
func (sp split) keep(ls loans, t, g int64) int64 {
	switch {
	case !sp.running(ls, t):
		return 0
	case g > 0:
		return sp.run
	}
	return sp.run + sp.late
}

// effective is ls as the caller to's call sees it at t: the tokens of its
// loan it no longer holds (see split) count from when they were spent
// like loans that ended then (or at the loan's end, if earlier). ls itself
// is not changed.
func (ls loans) effective(to Lessee, t int64) loans {
	sp := ls.split(to, t)
	if sp.i < 0 || sp.run == ls[sp.i].Lent {
		return ls
	}
	end := min(ls[sp.i].Expires, t)
	out := make(loans, len(ls), len(ls)+2)
	copy(out, ls)
	out[sp.i].Lent = sp.run
	for _, part := range [2]Loan{{Lent: sp.early, Expires: sp.earlyAt}, {Lent: sp.late, Expires: sp.lateAt}} {
		switch {
		case part.Lent == 0:
		case part.Expires < end:
			out = append(out, part)
		default: // spent now or after the loan ended: no earlier than the loan
			out[sp.i].Lent += part.Lent
		}
	}
	return out
}

// settling is ls as a write at t that settles to's loan (see split)
// leaves it: the part the loan keeps runs until its expiry; the parts it
// settles (early, and late after a grant) become ended loans (no Holder),
// spent when they were, at t at the latest, or at the loan's expiry if
// earlier. ls itself is not changed.
func (ls loans) settling(to Lessee, t int64, granted bool) loans {
	sp := ls.split(to, t)
	if sp.i < 0 || sp.run == ls[sp.i].Lent {
		return ls
	}
	end := min(ls[sp.i].Expires, t)
	out := make(loans, len(ls), len(ls)+2)
	copy(out, ls)
	out[sp.i].Lent = sp.run
	if sp.early > 0 {
		out = append(out, Loan{Lent: sp.early, Expires: min(sp.earlyAt, end)})
	}
	switch {
	case sp.late == 0:
	case granted || !sp.running(ls, t):
		out = append(out, Loan{Lent: sp.late, Expires: min(sp.lateAt, end)})
	default:
		out[sp.i].Lent += sp.late // kept lent
	}
	return out
}

// maxEnded bounds the ended loans a key keeps (see trim).
const maxEnded = 3

// retire turns the holders' loans that ended by t into ended loans (no
// Holder): tokens spent by their Expires, which keep capping the level
// (capLevel, floorTAT) until trim drops them.
func (ls loans) retire(t int64) loans {
	for i := range ls {
		if ls[i].Holder != "" && ls[i].Expires <= t {
			ls[i] = Loan{Lent: ls[i].Lent, Expires: ls[i].Expires}
		}
	}
	return ls
}

// trim drops the ended loans (no Holder) that no longer cap anything at
// t, oldest first (the smaller first among equal times, so that the order
// of ls does not matter): binding(l, A(E)) false, so that they never will
// (the stored level refills past them: see the package doc). It merges
// the ended loans of the same time (they cap the same), and while more than
// maxEnded remain, hands the oldest to bake, which applies its cap to the
// stored level (or TAT) for good, and drops it.
func (ls loans) trim(t int64, binding func(l Loan, a int64) bool, bake func(l Loan, a int64)) loans {
	for i := 0; i < len(ls); i++ {
		for j := i + 1; j < len(ls); j++ {
			if ls[i].Holder == "" && ls[j].Holder == "" && ls[i].Expires == ls[j].Expires {
				ls[i].Lent += ls[j].Lent
				ls = ls.remove(j)
				j--
			}
		}
	}
	for {
		oldest, n := -1, 0
		for i, l := range ls {
			if l.Holder == "" {
				n++
				if oldest < 0 || l.Expires < ls[oldest].Expires {
					oldest = i
				}
			}
		}
		if oldest < 0 {
			return ls
		}
		l := ls[oldest]
		a := ls.after(l.Expires)
		switch {
		case !binding(l, a):
		case n > maxEnded:
			bake(l, a)
		default:
			return ls
		}
		ls = ls.remove(oldest)
	}
}

// bakeFunc is told that trim baked the ended loan that ended at end (unix
// µs), with lent tokens lent at its time (A(E)); nil is told nothing.
type bakeFunc func(end, lent int64)

func (f bakeFunc) report(l Loan, a int64) {
	if f != nil {
		f(l.Expires, a)
	}
}

// remove removes ls[i] (the last loan takes its place).
func (ls loans) remove(i int) loans {
	ls[i] = ls[len(ls)-1]
	ls[len(ls)-1] = Loan{}
	return ls[:len(ls)-1]
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
// running loan must expire and its tokens refill after it, and every
// ended one stop capping the level.
func (ls loans) fullIn(d float64, t int64, pf, lf float64) float64 {
	for _, l := range ls {
		d = math.Max(d, float64(l.Expires-t)+float64(ls.after(l.Expires))*pf/lf)
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
