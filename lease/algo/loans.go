package algo

import (
	"cmp"
	"math"
	"slices"
)

// Loan is what a Store lent to one holder of a key and still counts
// against the key's capacity (see "Lent tokens" in the lease package
// doc).
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

	// Ref is a Store's own index of Holder for a loan it read from its
	// records (the MemoryStore's, in its shard's table of holder IDs), so
	// that the loan is written back with no lookup of the ID: the math
	// keeps it with the loan and never reads it. 0: none.
	Ref uint16
}

// Loans is a key's loans, one per holder, and for token_bucket and gcra
// the ended loans (no Holder) that still cap the level. A refilling key
// keeps them by Expires, latest first, the loans of one time in the order
// they came (byExpiry; the operations below keep that order), so that
// A(E) of every loan is one running sum (capLevel, fullIn, floorTAT,
// trim): a call costs time linear in the key's loans. The windows' are in
// no particular order. Its methods are the math's. Not safe for
// concurrent use.
type Loans []Loan

// byExpiry returns ls by Expires, latest first (ls itself, sorted in
// place): one pass when it already is, as a refilling key's loans are
// (a state from elsewhere is sorted once).
func (ls Loans) byExpiry() Loans {
	for i := 1; i < len(ls); i++ {
		if ls[i].Expires > ls[i-1].Expires {
			slices.SortStableFunc(ls, func(a, b Loan) int { return cmp.Compare(b.Expires, a.Expires) })
			break
		}
	}
	return ls
}

// place moves ls[i], whose Expires changed, to where the order by
// Expires puts it: after the other loans of its time. It returns its new
// index.
func (ls Loans) place(i int) int {
	l := ls[i]
	for ; i > 0 && ls[i-1].Expires < l.Expires; i-- {
		ls[i] = ls[i-1]
	}
	for ; i+1 < len(ls) && ls[i+1].Expires >= l.Expires; i++ {
		ls[i] = ls[i+1]
	}
	ls[i] = l
	return i
}

// insert adds l where the order by Expires puts it.
func (ls Loans) insert(l Loan) Loans {
	ls = append(ls, l)
	ls.place(len(ls) - 1)
	return ls
}

// find returns the index of holder's loan, or -1. It looks from the
// oldest: a holder renewing its loan in turn with others has the one
// renewed longest ago (by expiry, at the end but for the ended loans).
func (ls Loans) find(holder string) int {
	for i := len(ls) - 1; i >= 0; i-- {
		if ls[i].Holder == holder {
			return i
		}
	}
	return -1
}

// holders is how many holders ls lends to at t (loans with a Holder
// expiring after t; windowed loans, expiring 0 or with a share ahead,
// are asked with t < 0: every holder's loan of the window), and whether
// holder is one of them.
func (ls Loans) holders(holder string, t int64) (n int, has bool) {
	for i := range ls {
		if ls[i].Holder != "" && (t < 0 || ls[i].Expires > t) {
			n++
		}
	}
	i := ls.find(holder)
	return n, i >= 0 && (t < 0 || ls[i].Expires > t)
}

// crowd is the call a Store makes of a call of to wanting want, needing
// need, of a key whose loans are ls at t (see holders): the call itself,
// or, when to is crowded out (Lessee.MaxHolders: to has no loan of the
// key and MaxHolders holders have one), a call with no Lessee for
// exactly need tokens (crowded true).
func (ls Loans) crowd(to Lessee, want, need, t int64) (_ Lessee, _ int64, crowded bool) {
	if to.ID == "" || to.MaxHolders <= 0 {
		return to, want, false
	}
	if n, has := ls.holders(to.ID, t); has || n < to.MaxHolders {
		return to, want, false
	}
	return Lessee{}, need, true
}

// lentTo is what ls lends holder at t (loans expiring at or before t
// count as spent; windowed loans, expiring 0, are asked with t < 0).
func (ls Loans) lentTo(holder string, t int64) int64 {
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
func (ls Loans) total() int64 {
	var n int64
	for _, l := range ls {
		n += l.Lent
	}
	return n
}

// after is A(e): the tokens of the loans that expire at or after e, which
// all still counted just before e.
func (ls Loans) after(e int64) int64 {
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
// expiring at max(its expiry, t + TTL) (windowed: 0, the loan's share
// ahead kept), and LastSpend becomes t − Idle (the refilling
// algorithms). The caller has pruned the expired loans. A zero loan is
// dropped. A new loan keeps to.ID itself: the caller owns it
// (MemoryStore.Lease passes its shard's copy).
func (ls Loans) settle(to Lessee, keep, g, t int64, windowed bool) Loans {
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
		if !windowed {
			ls.place(i)
		}
	case i >= 0:
		ls = ls.remove(i)
	case lent > 0 && windowed:
		ls = append(ls, Loan{Holder: to.ID, Lent: lent})
	case lent > 0:
		ls = ls.insert(Loan{Holder: to.ID, Lent: lent, Expires: exp, LastSpend: last})
	}
	return ls
}

// unanswered handles a call of to at t that names its previous call as
// unanswered (Lessee.Unanswered): if that call is last, the last call to
// settle a loan of the key (the key's lastCall and what it granted), its
// grant never reached to. It takes that off to's loan and returns it: what
// the key gets back. The loan runs on, even at 0 (the call settles it).
func (ls Loans) unanswered(to Lessee, t int64, last lastCall) int64 {
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
func (ls Loans) held(to Lessee) int64 {
	if i := ls.find(to.ID); i >= 0 && to.ID != "" {
		return min(ls[i].Lent, to.Held)
	}
	return 0
}

// end ends holder's loan at t by a return of n: min(n, lent) goes back
// (returned), the rest counts as spent at t (an ended loan).
func (ls Loans) end(holder string, n, t int64) (_ Loans, back int64) {
	i := ls.find(holder)
	if i < 0 || holder == "" {
		return ls, 0
	}
	back = min(n, ls[i].Lent)
	if rest := ls[i].Lent - back; rest > 0 {
		ls[i] = Loan{Lent: rest, Expires: min(ls[i].Expires, t)}
		ls.place(i)
		return ls, back
	}
	return ls.remove(i), back
}

// take removes holder's loan and returns min(n, its lent): what a return
// of n may give back.
func (ls Loans) take(holder string, n int64) (Loans, int64) {
	i := ls.find(holder)
	if i < 0 || holder == "" {
		return ls, 0
	}
	back := min(n, ls[i].Lent)
	return ls.remove(i), back
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

func (ls Loans) split(to Lessee, t int64) split {
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
func (sp split) running(ls Loans, t int64) bool { return sp.i >= 0 && ls[sp.i].Expires > t }

// keep is what a call that grants g keeps of the loan (settle): nothing
// of one that ended; run after a grant; run + late otherwise.
func (sp split) keep(ls Loans, t, g int64) int64 {
	switch {
	case !sp.running(ls, t):
		return 0
	case g > 0:
		return sp.run
	}
	return sp.run + sp.late
}

// view is a refilling key's loans as a call sees them: ls by expiry,
// with loan i counting lent instead of its Lent, and parts, ended loans
// beside ls, latest first (Lent 0: none). See effective.
type view struct {
	ls    Loans
	i     int
	lent  int64
	parts [2]Loan
}

// viewOf is ls by expiry as it is.
func viewOf(ls Loans) view { return view{ls: ls.byExpiry(), i: -1} }

// effective is ls as the caller to's call sees it at t: the tokens of its
// loan it no longer holds (see split) count from when they were spent
// like loans that ended then (or at the loan's end, if earlier). ls
// itself is not changed (but for its order, see byExpiry).
func (ls Loans) effective(to Lessee, t int64) view {
	v := viewOf(ls)
	sp := v.ls.split(to, t)
	if sp.i < 0 || sp.run == ls[sp.i].Lent {
		return v
	}
	end := min(ls[sp.i].Expires, t)
	v.i, v.lent = sp.i, sp.run
	n := 0
	// Latest first: earlyAt ≤ lateAt.
	for _, part := range [2]Loan{{Lent: sp.late, Expires: sp.lateAt}, {Lent: sp.early, Expires: sp.earlyAt}} {
		switch {
		case part.Lent == 0:
		case part.Expires < end:
			v.parts[n] = part
			n++
		default: // spent now or after the loan ended: no earlier than the loan
			v.lent += part.Lent
		}
	}
	return v
}

// walk goes through a view's times, latest first: each next is a time E
// of its loans and A(E), what the loans expiring at or after E lend (all
// of which still counted just before E). One pass: the view is by expiry.
type walk struct {
	v    *view
	i, p int
	a    int64
}

func (w *walk) next() (e, a int64, ok bool) {
	ls, parts := w.v.ls, &w.v.parts
	more, part := w.i < len(ls), w.p < len(parts) && parts[w.p].Lent > 0
	switch {
	case more && part:
		e = max(ls[w.i].Expires, parts[w.p].Expires)
	case more:
		e = ls[w.i].Expires
	case part:
		e = parts[w.p].Expires
	default:
		return 0, 0, false
	}
	for ; w.i < len(ls) && ls[w.i].Expires == e; w.i++ {
		if w.i == w.v.i {
			w.a += w.v.lent
		} else {
			w.a += ls[w.i].Lent
		}
	}
	for ; w.p < len(parts) && parts[w.p].Lent > 0 && parts[w.p].Expires == e; w.p++ {
		w.a += parts[w.p].Lent
	}
	return e, w.a, true
}

// settling is ls as a write at t that settles to's loan (see split)
// leaves it, changed in place: the part the loan keeps runs until its
// expiry; the parts it settles (early, and late after a grant) become
// ended loans (no Holder), spent when they were, at t at the latest, or
// at the loan's expiry if earlier.
func (ls Loans) settling(to Lessee, t int64, granted bool) Loans {
	sp := ls.split(to, t)
	if sp.i < 0 || sp.run == ls[sp.i].Lent {
		return ls
	}
	end := min(ls[sp.i].Expires, t)
	ls[sp.i].Lent = sp.run
	if sp.early > 0 {
		ls = ls.insert(Loan{Lent: sp.early, Expires: min(sp.earlyAt, end)})
	}
	switch {
	case sp.late == 0:
	case granted || !sp.running(ls, t):
		ls = ls.insert(Loan{Lent: sp.late, Expires: min(sp.lateAt, end)})
	default:
		ls[sp.i].Lent += sp.late // kept lent
	}
	return ls
}

// maxEnded bounds the ended loans a key keeps (see trim).
const maxEnded = 3

// retire turns the holders' loans that ended by t into ended loans (no
// Holder): tokens spent by their Expires, which keep capping the level
// (capLevel, floorTAT) until trim drops them.
func (ls Loans) retire(t int64) Loans {
	for i := range ls {
		if ls[i].Holder != "" && ls[i].Expires <= t {
			ls[i] = Loan{Lent: ls[i].Lent, Expires: ls[i].Expires}
		}
	}
	return ls
}

// trim drops the ended loans (no Holder) that no longer cap anything at
// t, oldest first: binding(l, A(E)) false, so that they never will (the
// stored level refills past them: see the lease package doc). It merges the
// ended loans of the same time (they cap the same), and while more than
// maxEnded remain, hands the oldest to bake, which applies its cap to the
// stored level (or TAT) for good, and drops it. By expiry (byExpiry), the
// loans of one time are neighbours, and A(E) of a loan is what the loans
// up to the last of its time lend: one pass from the oldest. (After
// retire, as Lease and Return call it, the ended loans are the last ones,
// and those dropped the very last.)
func (ls Loans) trim(t int64, binding func(l Loan, a int64) bool, bake func(l Loan, a int64)) Loans {
	ls = ls.byExpiry()
	// Merge each time's ended loans into the first of them, in place (w:
	// where the next loan kept goes).
	var total int64
	w, ended := 0, 0
	for i := 0; i < len(ls); {
		e, first := ls[i].Expires, -1
		for ; i < len(ls) && ls[i].Expires == e; i++ {
			total += ls[i].Lent
			switch {
			case ls[i].Holder != "":
			case first >= 0:
				ls[first].Lent += ls[i].Lent
				continue
			default:
				first = w
				ended++
			}
			if w != i {
				ls[w] = ls[i]
			}
			w++
		}
	}
	clear(ls[w:])
	ls = ls[:w]
	// From the oldest: below is what the loans after a time lend (its
	// A(E) is the rest); a dropped loan is marked Lent −1, its tokens
	// still below the later times.
	drop, below := len(ls), int64(0) // drop: the first loan dropped
	for i := len(ls) - 1; i >= 0 && ended > 0; {
		e, sum, at := ls[i].Expires, int64(0), -1
		for ; i >= 0 && ls[i].Expires == e; i-- {
			sum += ls[i].Lent
			if ls[i].Holder == "" {
				at = i
			}
		}
		below += sum
		if at < 0 {
			continue
		}
		l, a := ls[at], total-below+sum
		switch {
		case !binding(l, a):
		case ended > maxEnded:
			bake(l, a)
		default:
			ended = 0 // the oldest binds, and at most maxEnded remain: done
			continue
		}
		ls[at].Lent, drop = -1, at
		ended--
	}
	w = drop
	for i := drop; i < len(ls); i++ {
		if ls[i].Lent >= 0 {
			ls[w] = ls[i]
			w++
		}
	}
	clear(ls[w:])
	return ls[:w]
}

// bakeFunc is told that trim baked the ended loan that ended at end (unix
// µs), with lent tokens lent at its time (A(E)); nil is told nothing.
type bakeFunc func(end, lent int64)

func (f bakeFunc) report(l Loan, a int64) {
	if f != nil {
		f(l.Expires, a)
	}
}

// remove removes ls[i]; the others keep their order.
func (ls Loans) remove(i int) Loans { return slices.Delete(ls, i, i+1) }

// capLevel caps a refilled level at t by the loans of a token_bucket key
// as a call sees them (fractional tokens; rate = lf/pf per µs, capacity
// cf). Before its expiry E a loan is out of the bucket; at E it counts as
// spent and the refill goes on from there: the level at t is at most C −
// A(E) + (t − min(E, t))·rate for every loan, which for the loans still
// running is C − their sum.
func (v view) capLevel(level float64, t int64, pf, lf, cf float64) float64 {
	w := walk{v: &v}
	for e, a, ok := w.next(); ok; e, a, ok = w.next() {
		if c := cf - float64(a) + float64(t-min(e, t))*lf/pf; c < level {
			level = c
		}
	}
	return level
}

// floorTAT is the lowest TAT a gcra key's loans, as a call sees them,
// allow at t: the gcra form of capLevel, with a loan's tokens A(E) worth
// ceil(A(E)·P/L) µs.
func (v view) floorTAT(t int64, pf, lf float64) int64 {
	var f int64
	w := walk{v: &v}
	for e, a, ok := w.next(); ok; e, a, ok = w.next() {
		f = max(f, min(e, t)+int64(math.Ceil(float64(a)*pf/lf)))
	}
	return f
}

// fullIn is how long after t (µs) a token_bucket or gcra key whose level
// is full in d µs (by refill alone) is full with its loans counted: every
// running loan must expire and its tokens refill after it, and every
// ended one stop capping the level.
func (ls Loans) fullIn(d float64, t int64, pf, lf float64) float64 {
	ls = ls.byExpiry()
	var a int64
	for i := 0; i < len(ls); {
		e := ls[i].Expires
		for ; i < len(ls) && ls[i].Expires == e; i++ {
			a += ls[i].Lent
		}
		if c := float64(e-t) + float64(a)*pf/lf; c > d {
			d = c
		}
	}
	return d
}

// spentBy is the latest of e and every loan's expiry plus its tokens'
// worth (E + ceil(A(E)·P/L)): when a gcra key's TAT (e) and loans are all
// past.
func (ls Loans) spentBy(e int64, pf, lf float64) int64 {
	ls = ls.byExpiry()
	var a int64
	for i := 0; i < len(ls); {
		x := ls[i].Expires
		for ; i < len(ls) && ls[i].Expires == x; i++ {
			a += ls[i].Lent
		}
		e = max(e, x+int64(math.Ceil(float64(a)*pf/lf)))
	}
	return e
}
