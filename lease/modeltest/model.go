package modeltest

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// model is the reference: what was admitted, what each holder holds, and
// what each holder last heard from the Store. Its methods lock mu: the
// recorder calls them from the Managers' goroutines.
type model struct {
	mu         sync.Mutex
	sc         *scenario
	names      []string
	byName     map[string]int
	keys       []*keyModel
	start      int64
	now        int64
	violation  string // found by a recorder callback, reported after the op
	safetyOnly bool
	lentKnown  bool // the Store reports loans (Lessee, Grant.Lent)
	// direct holds the holders that decide in the Store (lease.Config.
	// Direct: their checks' lease calls name no Lessee and need what
	// they want): nothing is lent to them, and their refunds go to the
	// Store, which takes back what they spent.
	direct  map[int]bool
	tracing bool
	notes   []string // the Store calls of the op, when tracing
	checks  int
	// crowdedCalls counts the calls crowded out (Lessee.MaxHolders);
	// checkedCalls those a tier decided as checks (CheckingStore).
	crowdedCalls, checkedCalls int
	// bakesKnown: the Store reports its bakes (BakingStore).
	bakesKnown bool
}

type event struct {
	t, hits  int64
	m        int
	orig     int64 // hits before a refund
	refunded bool
	crowd    bool // lost: a crowded call's grant (see crowded)
}

// snapshot is what a holder knew after its last lease call for a key,
// computed by the model at that instant.
type snapshot struct {
	t     int64
	avail float64 // token_bucket, gcra: level − what the others held
	oth   float64 // what the others held
	win   int64   // windows: the window of the call
	c0    int64   // counted in the window before
	c1    int64   // counted in the window
	own   int64   // the holder's tokens on hand
	adm   int64   // the holder's net admissions so far
}

type keyModel struct {
	name    string
	p       lease.Policy
	rate    float64 // tokens per nanosecond
	cap     float64
	events  []event
	held    []int64 // per holder: lent and not spent, returned or dropped (windows: in the window rolled)
	heldExp []int64 // token_bucket, gcra: when the loan ends (0: never)
	// lent is what the Store said it lends each holder (Grant.Lent) at
	// its last call: held tokens and spent ones not yet settled. settled
	// is what it should lend by the contract: every call settles the
	// loan to what the holder says it holds, plus the grant.
	lent, settled []int64
	// credit is a holder's unsettled spent tokens as its last call (one
	// that granted nothing) counted them: spent at their t (a bake's end
	// for those a bake counts from then, see dated).
	credit [][]event
	// lastSpend is what the Store keeps with each holder's loan: when it
	// last spent before its last call (token_bucket, gcra).
	lastSpend []int64
	// lost is what the Store counts as spent that no check spent: loans
	// that expired or ended unspent (token_bucket, gcra). It lowers the
	// level the denials are judged against, never the safety side.
	lost []event
	// bakes are the ended loans whose caps the Store applied to the
	// stored level for good (BakingStore), oldest first.
	bakes   []*bake
	netAdm  []int64 // per holder: admitted − refunded
	snap    []*snapshot
	opSnaps [][]*snapshot // per holder: its snapshot before the op and those made during it
	lastUse []int64       // per holder: its bucket's idle clock, in ms (the Manager's resolution)
	// shareUntil: after its tier answered it from its share of the key
	// (SharedStore), until when the holder may deny what it cannot cover.
	shareUntil []int64
	// shareAt, shareRem: the holder's last answer from its share (0: a
	// Store answer came since) and its Remaining, which a share cannot
	// outgrow faster than the key's rate.
	shareAt, shareRem []int64
	// horizon is the Managers' Config.Horizon.
	horizon time.Duration
	// batchUntil: after a Store denial, until when the holder may wait
	// for a batch rather than ask for a check its projection covers.
	batchUntil []int64
	bucket     []bool          // the holder has a bucket of the key (by the model)
	counted    map[int64]int64 // windows: granted − returned per window, the shares lent into it ahead included
	stamps     []int64         // sliding_log
	ids        map[string]int64
	owned      [][]string // concurrency ids per holder, oldest first
	// ahead is, per holder, the shares the Store lends it ahead
	// (fixed_window), as its last lease call's answer reported them.
	ahead []share
	// span is, per holder, where in the current window it may spend what
	// it holds there, its share ahead, until a lease call lets it spend
	// all it holds to the window's end (see spanOf, callSpan); zero: no
	// such bound.
	span []span
	// placed: the holder's Manager knows where its shares ahead fall (its
	// last lease call's answer, as it saw it, lent it shares ahead).
	placed []bool
	// rolled is the last window whose shares ahead were counted: the
	// window of the latest time the model saw (fixed_window).
	rolled int64
	// crowd is, per holder, what its crowded calls (Lessee.MaxHolders)
	// granted during the op and no check admitted yet: spent at once by
	// the Store (lost, for token_bucket and gcra; counted, for the
	// windows), the grant of the check that asked, which the Manager
	// does not keep (Grant.Lent 0).
	crowd []int64
}

func newModel(sc *scenario, prefix string, slots int) *model {
	md := &model{sc: sc, byName: make(map[string]int)}
	for i, p := range sc.keys {
		name := fmt.Sprintf("%sk%d", prefix, i)
		md.names = append(md.names, name)
		md.byName[name] = i
		k := &keyModel{name: fmt.Sprintf("k%d", i), p: p, cap: float64(p.Capacity()),
			rate:       float64(p.Limit) / float64(p.Period),
			held:       make([]int64, slots),
			heldExp:    make([]int64, slots),
			lent:       make([]int64, slots),
			settled:    make([]int64, slots),
			credit:     make([][]event, slots),
			lastSpend:  make([]int64, slots),
			netAdm:     make([]int64, slots),
			snap:       make([]*snapshot, slots),
			opSnaps:    make([][]*snapshot, slots),
			lastUse:    make([]int64, slots),
			batchUntil: make([]int64, slots),
			shareUntil: make([]int64, slots),
			shareAt:    make([]int64, slots),
			shareRem:   make([]int64, slots),
			horizon:    horizon,
			bucket:     make([]bool, slots),
			counted:    make(map[int64]int64),
			ahead:      make([]share, slots),
			span:       make([]span, slots),
			placed:     make([]bool, slots),
			rolled:     math.MinInt64,
			ids:        make(map[string]int64),
			owned:      make([][]string, slots),
			crowd:      make([]int64, slots),
		}
		md.keys = append(md.keys, k)
	}
	return md
}

func (md *model) keyName(k int) string      { return md.names[k] }
func (md *model) policy(k int) lease.Policy { return md.keys[k].p }

func (md *model) index(name string) (int, bool) {
	k, ok := md.byName[name]
	return k, ok
}

func (md *model) setNow(t time.Time) {
	md.mu.Lock()
	defer md.mu.Unlock()
	md.now = t.UnixNano()
	if md.start == 0 {
		md.start = md.now
	}
}

// at writes a time relative to the run's start.
func (md *model) at(t int64) string {
	d := time.Duration(t - md.start)
	if d < 0 {
		return "t-" + (-d).String()
	}
	return "t+" + d.String()
}

// note records a Store call for the trace.
func (md *model) note(format string, args ...any) {
	md.mu.Lock()
	defer md.mu.Unlock()
	if md.tracing {
		md.notes = append(md.notes, fmt.Sprintf(format, args...))
	}
}

func (md *model) takeNotes() []string {
	md.mu.Lock()
	defer md.mu.Unlock()
	n := md.notes
	md.notes = nil
	return n
}

// short is a key's name in the trace.
func (md *model) short(key string) string {
	if k, ok := md.byName[key]; ok {
		return md.keys[k].name
	}
	return key
}

func (md *model) takeViolation() string {
	md.mu.Lock()
	defer md.mu.Unlock()
	v := md.violation
	md.violation = ""
	return v
}

func (md *model) fail(format string, args ...any) {
	if md.violation == "" {
		md.violation = fmt.Sprintf(format, args...)
	}
}

func (k *keyModel) windowed() bool {
	return k.p.Algorithm == lease.FixedWindow || k.p.Algorithm == lease.SlidingWindow
}

func (k *keyModel) win(t int64) int64 {
	p := int64(k.p.Period)
	w := t / p
	if t%p < 0 {
		w--
	}
	return w
}

// heldNow is what holder m holds of k at t: windowed tokens die with their
// window; a loan ends at its expiry, its tokens lost.
func (k *keyModel) heldNow(m int, t int64) int64 {
	k.roll(t)
	if e := k.heldExp[m]; e > 0 && t >= e && max(k.held[m], k.settled[m]) > 0 {
		// A loan that ends counts as spent then, all of it: its spent
		// tokens lose their refill since they were spent (a crash
		// costs the crashed holder's loan, contract clause (b)).
		k.lose(e, max(k.held[m], k.settled[m]), m)
		k.held[m], k.lent[m], k.settled[m] = 0, 0, 0
		k.credit[m] = nil
	}
	return k.held[m]
}

// dropped records that holder m dropped its bucket of k at t without a
// return: the Store counts its loan as lent until the holder's next call,
// which (a new bucket: held 0, idle 0) ends all of it then, or until the
// loan's end (contract clause (b)). Its shares ahead run on, lent to a
// holder that no longer knows them.
func (k *keyModel) dropped(m int, t int64) {
	k.heldNow(m, t)
	k.held[m] = 0
	k.bucket[m] = false
	k.ahead[m].known, k.placed[m] = false, false
}

// lose records n tokens the Store counts as spent at t.
func (k *keyModel) lose(t, n int64, m int) {
	i := len(k.lost)
	for i > 0 && k.lost[i-1].t > t {
		i--
	}
	k.lost = append(k.lost, event{})
	copy(k.lost[i+1:], k.lost[i:])
	k.lost[i] = event{t: t, hits: n, m: m}
}

// usable is what holder m can spend of what it holds at t: a Manager stops
// spending windowed tokens it held from before a check a millisecond
// before their window ends (its clock may lag by that much), and spends a
// share ahead that it holds only in its span (see spanOf).
func (k *keyModel) usable(m int, t int64) int64 {
	h := k.heldNow(m, t)
	if k.windowed() && t >= (k.win(t)+1)*int64(k.p.Period)-int64(time.Millisecond) {
		return 0
	}
	if sp := k.span[m]; sp.to != 0 && (t < sp.from || t >= sp.to) {
		return 0
	}
	return h
}

// heldOthers is what the holders but m hold at t, or what the Store
// counts as lent to them if more (spent tokens are lent until the
// holder's next call settles them; the contract allows denials for them,
// bounded by the lease sizes).
func (k *keyModel) heldOthers(m int, t int64) int64 {
	var n int64
	for j := range k.held {
		if j != m {
			n += max(k.heldNow(j, t), k.lent[j])
		}
	}
	return n
}

// runs reports whether holder m has a loan of k that the Store counts at
// t, for the bound on a key's holders (lease.Lessee.MaxHolders):
// token_bucket and gcra, lent and not expired; the windows, lent in t's
// window or, for fixed_window, a share ahead covering it or a later one.
func (k *keyModel) runs(m int, t int64) bool {
	k.heldNow(m, t) // the loan's end, the window's roll
	switch {
	case !k.windowed():
		return k.lent[m] > 0 && t < k.heldExp[m]
	case k.lent[m] > 0:
		return true
	}
	a := k.ahead[m]
	return k.p.Algorithm == lease.FixedWindow && a.tokens > 0 && a.to >= k.win(t)
}

// crowded checks holder m's lease call of k at t, answered g, against
// the bound on the key's holders (the call's Lessee.MaxHolders): the
// Store must crowd it out exactly when m has no running loan and that
// many holders have one (see runs), and a crowded call lends nothing and
// grants exactly its need or nothing. "" if it holds.
func (k *keyModel) crowded(m int, t int64, g lease.Grant, l loan) string {
	if g.Checked {
		if g.Crowded {
			return fmt.Sprintf("m%d's call was answered both crowded out and checked", m)
		}
		return ""
	}
	if l.lent < 0 || l.maxHolders <= 0 {
		if g.Crowded {
			return fmt.Sprintf("the Store crowded out m%d's call, which set no bound on the key's holders", m)
		}
		return ""
	}
	n := 0
	for j := range k.lent {
		if j != m && k.runs(j, t) {
			n++
		}
	}
	out := !k.runs(m, t) && n >= l.maxHolders
	switch {
	case out && !g.Crowded:
		return fmt.Sprintf("the Store made m%d's call as a holder's (granted %d, lent %d, not crowded out), but m%d had no loan of the key while %d holders had one, the bound %d (bound broken)", m, g.Granted, g.Lent, m, n, l.maxHolders)
	case !out && g.Crowded:
		mine := "no loan"
		if k.runs(m, t) {
			mine = "a loan"
		}
		return fmt.Sprintf("the Store crowded out m%d's call, with %s of its own and %d other holders' loans running, the bound %d", m, mine, n, l.maxHolders)
	case g.Crowded && (g.Lent != 0 || g.AheadTokens != 0 || g.AheadWindows != 0 || (g.Granted != 0 && g.Granted != l.need)):
		return fmt.Sprintf("m%d's crowded call (need %d) was granted %d, lent %d, %d ahead in %d windows: a crowded call lends nothing and grants exactly its need or nothing", m, l.need, g.Granted, g.Lent, g.AheadTokens, g.AheadWindows)
	}
	return ""
}

// checked checks holder m's lease call, answered g, against the tier's
// bound on what one holder may hold (l.room, CheckingStore; -1: none): a
// call whose need is more than that room must be decided as a check
// (Grant.Checked: its need granted to no holder, or nothing; the loan
// renewed, lending nothing), and one that is not must be granted no more
// than the room (at least its need). "" if it holds.
func (k *keyModel) checked(m int, g lease.Grant, l loan) string {
	if l.room < 0 || l.lent < 0 || g.Crowded {
		if g.Checked && l.room < 0 {
			return fmt.Sprintf("m%d's call was decided as a check by a tier that bounds no holder's share", m)
		}
		return ""
	}
	over := l.need > l.room
	switch {
	case over && !g.Checked:
		return fmt.Sprintf("m%d's call needing %d, with %d more it may hold, was lent %d (granted %d), not decided as a check (share bound broken)", m, l.need, l.room, g.Lent, g.Granted)
	case !over && g.Checked:
		return fmt.Sprintf("m%d's call needing %d was decided as a check, with %d more it may hold", m, l.need, l.room)
	case g.Checked && (g.AheadTokens != 0 || g.AheadWindows != 0 || (g.Granted != 0 && g.Granted != l.need)):
		return fmt.Sprintf("m%d's checked call (need %d) was granted %d, %d ahead in %d windows: a check grants exactly its need or nothing, and lends nothing", m, l.need, g.Granted, g.AheadTokens, g.AheadWindows)
	case !g.Checked && g.Granted > max(l.room, l.need):
		return fmt.Sprintf("m%d was granted %d, with %d more it may hold (share bound broken)", m, g.Granted, l.room)
	}
	return ""
}

// unlose takes n of holder m's crowded grant at t (the last lost event:
// nothing is lost later) back from what the Store lost: a check admitted
// them.
func (k *keyModel) unlose(t, n int64, m int) {
	for i := len(k.lost) - 1; i >= 0 && n > 0 && k.lost[i].t >= t; i-- {
		if e := &k.lost[i]; e.crowd && e.m == m && e.t == t {
			x := min(n, e.hits)
			e.hits -= x
			n -= x
		}
	}
}

// bake is an ended loan whose cap the Store applied to the key's stored
// level for good (the package doc's "more than 3 ended loans"): it counts
// the tokens lent at its time as spent then, at most those. end is when
// the loan ended; left is how many more of those tokens a later call may
// report spent before end and still see counted from end; budget is, per
// holder, how many of them the Store lent that holder when it baked (by
// the model), less those already counted from end.
type bake struct {
	end    int64
	left   int64
	budget []int64
}

// dated is n tokens holder m's lease call reports spent by at, as the
// Store counts them: from at, but those that a bake counts as spent at
// its end, later than at, from that end (the latest end first), as far as
// the bake's left and m's budget go. With settle, the call settles them
// (they are no longer lent): it uses up what it takes from those; a call
// that keeps them lent (credit) does not, its holder's next call reports
// them again.
func (k *keyModel) dated(at, n int64, m int, settle bool) []event {
	var out []event
	for i := len(k.bakes) - 1; i >= 0 && n > 0; i-- {
		b := k.bakes[i]
		if b.end <= at {
			continue
		}
		if x := min(n, b.left, b.budget[m]); x > 0 {
			out = append(out, event{t: b.end, hits: x, m: m})
			if settle {
				b.left -= x
				b.budget[m] -= x
			}
			n -= x
		}
	}
	if n > 0 {
		out = append(out, event{t: at, hits: n, m: m})
	}
	return out
}

// baked records that the Store applied to k's stored level, at t, the
// cap of an ended loan that ended at end, when lent tokens were lent.
func (md *model) baked(key string, end time.Time, lent int64, t time.Time) {
	md.mu.Lock()
	defer md.mu.Unlock()
	i, ok := md.byName[key]
	if !ok {
		md.fail("bake of unknown key %q", key)
		return
	}
	k, now, e := md.keys[i], t.UnixNano(), end.UnixNano()
	if e > now || lent < 0 {
		md.fail("%s: the Store baked a loan that ended at %s with %d tokens lent, at %s", k.name, md.at(e), lent, md.at(now))
		return
	}
	b := &bake{end: e, left: lent, budget: make([]int64, len(k.settled))}
	for m := range b.budget {
		k.heldNow(m, now)
		b.budget[m] = k.settled[m]
	}
	k.bakes = append(k.bakes, b)
}

// bakeAll records a bake at t of the caps of every loan then (what a
// grant to no holder does while a cap holds the level: see BakingStore),
// of the Store that does not report its bakes.
func (k *keyModel) bakeAll(t int64) {
	b := &bake{end: t, budget: make([]int64, len(k.settled))}
	for m := range b.budget {
		k.heldNow(m, t)
		b.budget[m] = k.settled[m]
		b.left += k.settled[m]
	}
	k.bakes = append(k.bakes, b)
}

// level is the token_bucket/gcra bucket at t of the actual admissions
// and the lost loans (full at the start): what has not been admitted,
// including what holders hold.
func (k *keyModel) level(t int64) float64 { return k.levelWith(t) }

// levelWith is level with more spends, extra.
func (k *keyModel) levelWith(t int64, extra ...event) float64 {
	for m := range k.held {
		k.heldNow(m, t) // loans that ended are lost
	}
	lost := k.lost
	for _, x := range extra {
		if x.hits <= 0 {
			continue
		}
		if len(lost) == len(k.lost) {
			lost = append([]event(nil), k.lost...)
		}
		i := len(lost)
		for i > 0 && lost[i-1].t > x.t {
			i--
		}
		lost = append(lost, event{})
		copy(lost[i+1:], lost[i:])
		lost[i] = x
	}
	lvl := k.cap
	last := int64(math.MinInt64)
	i, j := 0, 0
	for i < len(k.events) || j < len(lost) {
		var e event
		if j >= len(lost) || (i < len(k.events) && k.events[i].t <= lost[j].t) {
			e, i = k.events[i], i+1
		} else {
			e, j = lost[j], j+1
		}
		if last != math.MinInt64 {
			lvl = min(k.cap, lvl+k.rate*float64(e.t-last))
		}
		lvl -= float64(e.hits)
		last = e.t
	}
	if last != math.MinInt64 {
		lvl = min(k.cap, lvl+k.rate*float64(t-last))
	}
	return lvl
}

// loan is what a lease call said about holder m's loan: ttl is how long
// its tokens stay lent after the call (0: forever, or windowed); lent is
// the Store's Grant.Lent (-1: not reported).
type loan struct {
	ttl  time.Duration
	lent int64
	held int64 // what the holder said it held (Lessee.Held)
	// spentBefore: what it said it spent before its previous call and did
	// not refund since (Lessee.SpentBefore)
	spentBefore int64
	idle        time.Duration // how long since it last spent (Lessee.Idle)
	need        int64
	// aheadWindows, aheadTokens: the shares ahead the call asked for
	// (Lessee.AheadWindows, AheadTokens); aheadKnown: its Manager asked
	// for them (not the harness in its place).
	aheadWindows, aheadTokens int64
	aheadKnown                bool
	// direct: a call without a Lessee that needs what it wants, a check
	// decided in the Store (lease.Config.Direct), not a charge (need 0)
	direct bool
	// maxHolders: the call's Lessee.MaxHolders (0: none)
	maxHolders int
	// room: what the holder may still be lent of the key by its tier's
	// bound (CheckingStore.Room), -1 without one
	room int64
}

// leased records a lease call's answer to holder m.
func (md *model) leased(m int, key string, g lease.Grant, t time.Time, l loan) {
	md.mu.Lock()
	defer md.mu.Unlock()
	if l.lent < 0 && l.direct {
		if md.direct == nil {
			md.direct = map[int]bool{}
		}
		md.direct[m] = true
	}
	i, ok := md.byName[key]
	if !ok {
		md.fail("lease of unknown key %q", key)
		return
	}
	k, now := md.keys[i], t.UnixNano()
	if g.Granted < 0 {
		md.fail("%s: the Store granted %d tokens to m%d", k.name, g.Granted, m)
		return
	}
	k.shareAt[m] = 0 // a Store's answer (shareWait sets it again after a share's)
	if v := k.crowded(m, now, g, l); v != "" {
		md.fail("%s (%s): %s at %s", k.name, describe(k.p), v, md.at(now))
	}
	if v := k.checked(m, g, l); v != "" {
		md.fail("%s (%s): %s at %s", k.name, describe(k.p), v, md.at(now))
	}
	// A crowded call, or the check part of a checked one: a grant of
	// exactly its need to no holder, spent at once. A checked call's
	// loan is renewed and settled as by a call that grants nothing.
	crowd := g.Crowded || g.Checked
	loanGrant := g.Granted
	if g.Crowded {
		// A call with no Lessee for exactly its need: nothing lent.
		l = loan{lent: -1, need: l.need}
		md.crowdedCalls++
	}
	if g.Checked {
		loanGrant = 0
		md.checkedCalls++
	}
	own := k.heldNow(m, now)
	if l.lent >= 0 && k.callSpan(m, now, g) {
		own, k.held[m] = 0, 0
	}
	switch {
	case g.Granted == 0:
	case crowd:
		k.crowd[m] += g.Granted
		if k.windowed() {
			k.counted[k.win(now)] += g.Granted
			break
		}
		k.lost = append(k.lost, event{t: now, hits: g.Granted, m: m, crowd: true}) // now: the latest
		if !md.bakesKnown {
			// A grant to no holder while a loan's cap holds the level
			// bakes the caps in (the contract's clause (b)); the Store
			// does not say whether one held: as if one did.
			k.bakeAll(now)
		}
	default:
		k.held[m] = own + g.Granted
		if k.windowed() {
			k.counted[k.win(now)] += g.Granted
		}
	}
	if l.lent >= 0 {
		// A call renews a running loan until now + ttl. (What m holds
		// by the model is not compared with what it is lent: the
		// admissions of a batch are recorded after it, its lease calls
		// as they happen.)
		k.lent[m] = l.lent
		k.credit[m] = nil
		if k.windowed() {
			if loanGrant > 0 {
				k.settled[m] = min(k.settled[m], l.held) + loanGrant
			}
		} else {
			// The Store's view (contract clause (b)): the loan counts
			// whole until a call reports what the holder no longer
			// holds: what it spent before its previous call (and did not
			// refund) as spent by that call's last spend, the rest by
			// this call's (now − idle); refill is credited from then,
			// not from each spend. A grant settles both; a call that
			// grants nothing keeps the rest lent (the holder may refund
			// it) and credits it for itself and its next calls.
			spent := now - int64(l.idle)
			run := min(k.settled[m], l.held)
			early := min(l.spentBefore, k.settled[m]-run)
			late := k.settled[m] - run - early
			if early > 0 {
				at := spent
				if k.lastSpend[m] != 0 {
					at = min(at, k.lastSpend[m])
				}
				for _, e := range k.dated(at, early, m, true) {
					k.lose(e.t, e.hits, m)
				}
			}
			k.settled[m] = run + late + loanGrant
			if loanGrant > 0 && late > 0 {
				for _, e := range k.dated(spent, late, m, true) {
					k.lose(e.t, e.hits, m)
				}
				k.settled[m] -= late
			} else if late > 0 {
				k.credit[m] = k.dated(spent, late, m, false)
			}
			k.lastSpend[m] = spent
		}
		md.lentKnown = true
		if !k.windowed() && l.ttl > 0 && k.lent[m] > 0 {
			k.heldExp[m] = max(k.heldExp[m], now+int64(l.ttl))
		}
	}
	if v := md.lendAhead(m, k, now, g, l); v != "" {
		md.fail("%s", v)
	}
	s := &snapshot{t: now, win: k.win(now), own: k.held[m], adm: k.netAdm[m]}
	if l.need > 0 && g.Granted == 0 {
		// A Store denial: the holder may wait for a batch until Wait
		// plus a horizon (contract clause (c)), whatever it leases
		// meanwhile, and whatever a later denial with a shorter Wait
		// says (a prefetch's, for one token, after a check's for many).
		k.batchUntil[m] = max(k.batchUntil[m], now+int64(max(g.Wait, time.Millisecond)+k.horizon))
	}
	if l.need > 0 && g.Granted > 0 && !k.windowed() && float64(g.Remaining) < math.Ceil(k.cap*lease.DefaultMinLeaseShare) {
		// A grant that left the Store less than the smallest lease:
		// the key is saturated as after a denial (contract clause (c)),
		// until the Store has the call's need back (at least a
		// millisecond) plus a horizon. The Manager counts such a grant
		// only for a check's own call, and only for a key saturated
		// lately; the model sees neither (a prefetch's call needs a
		// token too), so it allows the wait after any: a bound, looser
		// than the Manager, as the denial's above.
		back := time.Duration(float64(max(l.need-g.Remaining, 0)) / k.rate)
		k.batchUntil[m] = max(k.batchUntil[m], now+int64(max(back, time.Millisecond)+k.horizon))
	}
	switch k.p.Algorithm {
	case lease.TokenBucket, lease.GCRA:
		s.oth = float64(k.heldOthers(m, now))
		if g.Checked {
			// A checked call's need is granted to no holder, from what
			// the Store has beside every loan: the holder's own too,
			// which the call renewed without a grant (its tokens spent
			// since the last grant count until one settles them: clause
			// (b), itself included).
			s.oth += float64(g.Lent)
		}
		s.avail = k.levelWith(now, k.credit[m]...) - s.oth
	case lease.FixedWindow, lease.SlidingWindow:
		s.c0, s.c1 = k.counted[s.win-1], k.counted[s.win]
	}
	k.snap[m] = s
	k.opSnaps[m] = append(k.opSnaps[m], s)
}

// beginOp starts an op: each holder's snapshots so far are the one it has.
func (md *model) beginOp() {
	md.mu.Lock()
	defer md.mu.Unlock()
	for _, k := range md.keys {
		for m := range k.opSnaps {
			k.opSnaps[m] = append(k.opSnaps[m][:0], k.snap[m])
		}
		clear(k.crowd) // what no check took stays spent
	}
}

// setHorizon records the Managers' Config.Horizon (clause (c)'s batch).
func (md *model) setHorizon(d time.Duration) {
	md.mu.Lock()
	defer md.mu.Unlock()
	for _, k := range md.keys {
		k.horizon = d
	}
}

// shareWait records that holder m's tier answered its lease call of key,
// at t, from m's share of the key (SharedStore): nothing granted, a wait
// (after md.leased, which recorded it as any answer).
func (md *model) shareWait(m int, key string, g lease.Grant, t time.Time) {
	md.mu.Lock()
	defer md.mu.Unlock()
	i, ok := md.byName[key]
	if !ok {
		md.fail("share wait of unknown key %q", key)
		return
	}
	k, now := md.keys[i], t.UnixNano()
	k.shareUntil[m] = max(k.shareUntil[m], now+int64(max(g.Wait, time.Millisecond)+k.horizon))
	k.shareAt[m], k.shareRem[m] = now, max(g.Remaining, 0)
}

// returned records tokens that holder m gave back.
func (md *model) returned(m int, key string, tokens int64, t time.Time) {
	md.mu.Lock()
	defer md.mu.Unlock()
	i, ok := md.byName[key]
	if !ok {
		md.fail("return to unknown key %q", key)
		return
	}
	k, now := md.keys[i], t.UnixNano()
	if h := k.heldNow(m, now); tokens > h {
		md.fail("%s: m%d returned %d tokens at %s but held %d (tokens made up: over-admission)", k.name, m, tokens, md.at(now), h)
	}
	if !k.windowed() && k.settled[m] > tokens {
		// A return ends the loan: what was lent and not returned counts
		// as spent now.
		k.lose(now, k.settled[m]-tokens, m)
		k.held[m] = 0
	}
	k.held[m] = max(0, k.held[m]-tokens)
	k.lent[m], k.settled[m] = 0, 0
	k.credit[m] = nil
	k.endAhead(m)
	if !k.windowed() && k.heldExp[m] > 0 && k.held[m] > 0 {
		// A return ends the loan: what was not returned is spent.
		k.lose(now, k.held[m], m)
		k.held[m] = 0
	}
	if k.windowed() {
		w := k.win(now)
		k.counted[w] = max(0, k.counted[w]-tokens)
	}
	k.snap[m] = nil
}

// decided records holder m's decision d on it and checks the safety side
// of the contract; "" if it holds.
func (md *model) decided(m int, it item, d lease.Decision, id string) string {
	md.mu.Lock()
	defer md.mu.Unlock()
	md.checks++
	k, now := md.keys[it.key], md.now
	if d.Degraded || d.Unavailable {
		return fmt.Sprintf("%s: m%d's decision is degraded/unavailable, but the Store never fails here", k.name, m)
	}
	if it.hits == 0 {
		if !d.Allowed && !md.safetyOnly && k.p.Algorithm != lease.Concurrency {
			return fmt.Sprintf("%s: m%d denied hits 0 at %s (a peek never denies)", k.name, m, md.at(now))
		}
		return ""
	}
	switch k.p.Algorithm {
	case lease.SlidingLog:
		return md.decideLog(m, k, it.hits, d)
	case lease.Concurrency:
		return md.decideConc(m, k, d, id)
	}
	// A Manager's idle clock starts with the key's bucket and then
	// counts spends only.
	if ms := now / int64(time.Millisecond); !k.bucket[m] || (d.Allowed && ms-k.lastUse[m] >= touchMs) {
		k.lastUse[m], k.bucket[m] = ms, true
	}
	if !d.Allowed {
		return ""
	}
	if h := k.heldNow(m, now); h+k.crowd[m] < it.hits {
		return fmt.Sprintf("%s: m%d admitted %d hits at %s but held only %d tokens the Store lent it (and %d a crowded call granted it)", k.name, m, it.hits, md.at(now), h, k.crowd[m])
	}
	if x := min(it.hits, k.crowd[m]); x > 0 {
		// The hits of the check a crowded call was made for: the grant's
		// (spent then: the admission, not a loss).
		k.crowd[m] -= x
		k.unlose(now, x, m)
		k.held[m] += x
	}
	k.held[m] -= it.hits
	k.netAdm[m] += it.hits
	k.events = append(k.events, event{t: now, hits: it.hits, m: m, orig: it.hits})
	return md.safety(k)
}

// safety checks the inequality of k's algorithm after an admission now.
func (md *model) safety(k *keyModel) string {
	now := md.now
	switch k.p.Algorithm {
	case lease.TokenBucket, lease.GCRA:
		var sum int64
		for j := len(k.events) - 1; j >= 0; j-- {
			sum += k.events[j].hits
			if j > 0 && k.events[j-1].t == k.events[j].t {
				continue
			}
			bound := k.cap + k.rate*float64(now-k.events[j].t)
			if float64(sum) > bound*(1+1e-12)+1e-6 {
				return fmt.Sprintf("%s (%s): %d hits admitted in [%s, %s] (%v), more than burst + rate×T = %.3f",
					k.name, describe(k.p), sum, md.at(k.events[j].t), md.at(now), time.Duration(now-k.events[j].t), bound)
			}
		}
	case lease.FixedWindow:
		w := k.win(now)
		if n := k.admittedIn(w); n > k.p.Limit {
			return fmt.Sprintf("%s (%s): %d hits admitted in the window [%s, %s), more than the limit",
				k.name, describe(k.p), n, md.at(w*int64(k.p.Period)), md.at((w+1)*int64(k.p.Period)))
		}
	case lease.SlidingWindow:
		w := k.win(now)
		prev, cur := k.admittedIn(w-1), k.admittedIn(w)
		weight := 1 - float64(now-w*int64(k.p.Period))/float64(k.p.Period)
		if est := float64(prev)*weight + float64(cur); est > float64(k.p.Limit)+1e-9 {
			return fmt.Sprintf("%s (%s): at %s the weighted estimate of admissions is %d×%.4f + %d = %.3f, more than the limit",
				k.name, describe(k.p), md.at(now), prev, weight, cur, est)
		}
	}
	return ""
}

func (k *keyModel) admittedIn(w int64) int64 {
	var n int64
	for _, e := range k.events {
		if k.win(e.t) == w {
			n += e.hits
		}
	}
	return n
}

// refunded records that holder m refunded the hits of its admission of
// it (made now).
func (md *model) refunded(m int, it item) {
	md.mu.Lock()
	defer md.mu.Unlock()
	k := md.keys[it.key]
	for i := len(k.events) - 1; i >= 0 && k.events[i].t == md.now; i-- {
		e := &k.events[i]
		if e.m == m && e.orig == it.hits && !e.refunded {
			e.refunded = true
			// A holder never holds more than the Store lends it: hits
			// spent before its last lease call (which settled them)
			// stay spent.
			r := e.hits
			if md.lentKnown && !md.direct[m] {
				r = min(r, max(0, k.lent[m]-k.heldNow(m, md.now)))
			}
			k.netAdm[m] -= r
			if !md.direct[m] {
				// A Direct holder's refund goes back to the Store: it
				// holds nothing.
				k.held[m] += r
			}
			e.hits -= r
			// The Manager reports refunded tokens as not spent before
			// its last call (Lessee.SpentBefore): its next call credits
			// fewer of them from then.
			for i := range k.credit[m] {
				c := &k.credit[m][i]
				x := min(c.hits, r)
				c.hits, r = c.hits-x, r-x
			}
			return
		}
	}
}

// judge checks that a denial of it by holder m is justified; "" if it is.
func (md *model) judge(m int, it item, d lease.Decision) string {
	md.mu.Lock()
	defer md.mu.Unlock()
	k, now, h := md.keys[it.key], md.now, it.hits
	if md.safetyOnly || d.Allowed || h == 0 || !k.p.Algorithm.Leased() || h > k.p.Capacity() {
		return ""
	}
	own := k.usable(m, now)
	if h > own && now <= k.shareUntil[m] {
		// Clause (d): its tier answered it a wait for its share of the
		// key (SharedStore), until that wait and a horizon,
		return ""
	}
	if at := k.shareAt[m]; at != 0 && h > own &&
		float64(k.shareRem[m])+math.Ceil(k.rate*float64(now-at)) < float64(h-own)+1 {
		// or while the share it answered (what it could be granted
		// then), grown at the key's whole rate since, cannot cover h.
		return ""
	}
	need := float64(h)
	var avail float64
	switch k.p.Algorithm {
	case lease.TokenBucket, lease.GCRA:
		oth := float64(k.heldOthers(m, now))
		// m's own spent tokens not yet settled (clause (b)): until its
		// next call.
		// m's own spent tokens: as its last call credited them, or, after
		// a grant, lent until its next call.
		lvl, unsettled := k.level(now), float64(max(0, k.settled[m]-k.heldNow(m, now)))
		var credited int64
		for _, c := range k.credit[m] {
			credited += c.hits
		}
		if credited > 0 {
			lvl, unsettled = k.levelWith(now, k.credit[m]...), max(0, unsettled-float64(credited))
		}
		avail = math.Floor(lvl-oth-unsettled-float64(own)+1e-6) + float64(own)
	case lease.FixedWindow:
		avail = float64(k.p.Limit - k.counted[k.win(now)] + own)
	case lease.SlidingWindow:
		w := k.win(now)
		est := float64(k.counted[w-1])*k.weight(now) + float64(k.counted[w])
		avail = math.Floor(float64(k.p.Limit)-est+1e-9) + float64(own) - 1
	}
	// The denial is justified by what the holder last heard from the
	// Store (clause (a)): any answer it had during the op may be the one
	// it judged by (a batch's items are judged after the batch).
	snaps := k.opSnaps[m]
	if len(snaps) == 0 {
		snaps = []*snapshot{k.snap[m]}
	}
	var last *snapshot
	lowest := math.Inf(1)
	for _, s := range snaps {
		proj, slack, batch := k.projection(m, s, now, h-own)
		if avail < need+batch || proj < need+slack+batch {
			return ""
		}
		if proj < lowest {
			lowest, last = proj, s
		}
	}
	why := "it never leased this key (or its bucket was dropped)"
	if last != nil {
		why = fmt.Sprintf("its last Store answer (at %s) projected to now covers %.2f", md.at(last.t), lowest)
	}
	return fmt.Sprintf("%s (%s): m%d denied %d hits at %s, but %.2f are available to it (the model's level, less %d tokens the other holders hold) and %s (denial unjustified)",
		k.name, describe(k.p), m, h, md.at(now), avail, k.heldOthers(m, now), why)
}

// weight is the previous window's weight in the sliding estimate at t.
func (k *keyModel) weight(t int64) float64 {
	return 1 - float64(t-k.win(t)*int64(k.p.Period))/float64(k.p.Period)
}

// projection is what holder m, which heard s from the Store, can count on
// at now, with the slack the contract gives a check that needs need more
// tokens than it holds: 1 token of rounding where the Store floors, and
// clause (c)'s batch.
func (k *keyModel) projection(m int, s *snapshot, now, need int64) (proj, slack, batch float64) {
	if s == nil {
		return math.Inf(1), 0, 0
	}
	spent := float64(k.netAdm[m] - s.adm)
	switch k.p.Algorithm {
	case lease.TokenBucket, lease.GCRA:
		proj = min(k.cap-s.oth, s.avail+k.rate*float64(now-s.t)) - spent
		// The answer counted the holder's own tokens; those its loan's
		// end took since (heldNow) are not on hand to cover anything.
		proj -= max(0, float64(s.own)-spent-float64(k.heldNow(m, now)))
		slack = 1
		if now <= k.batchUntil[m] {
			// Clause (c): waiting for a batch of
			// min(MinLeaseShare × capacity − hits, Horizon × rate).
			batch = max(0, min(math.Ceil(k.cap*lease.DefaultMinLeaseShare)-float64(need), math.Floor(float64(k.horizon)*k.rate)))
		}
	case lease.FixedWindow:
		proj = math.Inf(1)
		if s.win == k.win(now) {
			proj = float64(k.p.Limit-s.c1+s.own) - spent - k.unusable(m, s, now, spent)
		}
	case lease.SlidingWindow:
		proj, slack = math.Inf(1), 1
		switch s.win {
		case k.win(now):
			proj = math.Floor(float64(k.p.Limit)-(float64(s.c0)*k.weight(now)+float64(s.c1))+1e-9) + float64(s.own) - spent - k.unusable(m, s, now, spent)
		case k.win(now) - 1:
			proj = math.Floor(float64(k.p.Limit) - float64(s.c1)*k.weight(now) + 1e-9)
		}
	}
	return proj, slack, batch
}

// unusable is what of the windowed tokens holder m had at answer s, less
// spent since, it can no longer spend at now: in the last millisecond of
// their window (see usable) they are still lent to it, and a denial for
// them is clause (b)'s, not the answer's.
func (k *keyModel) unusable(m int, s *snapshot, now int64, spent float64) float64 {
	return max(0, float64(s.own)-spent-float64(k.usable(m, now)))
}

// decideLog checks a sliding_log decision against the exact log.
func (md *model) decideLog(m int, k *keyModel, hits int64, d lease.Decision) string {
	now, p := md.now, k.p
	in := func(strict bool) int64 {
		var n int64
		for _, s := range k.stamps {
			if s > now-int64(p.Period) || (!strict && s == now-int64(p.Period)) {
				n++
			}
		}
		return n
	}
	spaced := true
	if p.MinInterval > 0 && len(k.stamps) > 0 && now-k.stamps[len(k.stamps)-1] < int64(p.MinInterval) {
		spaced = false
	}
	lo, hi := in(true), in(false) // the window's count with its edge out and in
	mustAllow := spaced && hi+hits <= p.Limit
	mustDeny := !spaced || lo+hits > p.Limit
	switch {
	case d.Allowed && mustDeny:
		return fmt.Sprintf("%s (%s): m%d admitted %d hits at %s with %d in the window (newest at %s): over the limit or closer than min_interval",
			k.name, describe(p), m, hits, md.at(now), lo, md.at(k.newest()))
	case !d.Allowed && mustAllow && !md.safetyOnly:
		return fmt.Sprintf("%s (%s): m%d denied %d hits at %s with %d in the window (sliding_log is exact)",
			k.name, describe(p), m, hits, md.at(now), hi)
	}
	if d.Allowed {
		for range hits {
			k.stamps = append(k.stamps, now)
		}
	}
	return ""
}

func (k *keyModel) newest() int64 {
	if len(k.stamps) == 0 {
		return 0
	}
	return k.stamps[len(k.stamps)-1]
}

// decideConc checks a concurrency acquisition against the exact set of
// ids in flight.
func (md *model) decideConc(m int, k *keyModel, d lease.Decision, id string) string {
	now := md.now
	var lo, hi int64 // in flight with the expiry instant out and in
	for _, exp := range k.ids {
		if exp > now {
			lo++
		}
		if exp >= now {
			hi++
		}
	}
	switch {
	case d.Allowed && lo >= k.p.Limit:
		return fmt.Sprintf("%s (%s): m%d acquired at %s with %d in flight", k.name, describe(k.p), m, md.at(now), lo)
	case !d.Allowed && hi < k.p.Limit && !md.safetyOnly:
		return fmt.Sprintf("%s (%s): m%d denied at %s with %d in flight (concurrency is exact)", k.name, describe(k.p), m, md.at(now), hi)
	case d.Allowed && id == "":
		return fmt.Sprintf("%s: m%d acquired without an id", k.name, m)
	}
	if d.Allowed {
		k.ids[id] = now + int64(k.p.Period)
		k.owned[m] = append(k.owned[m], id)
	}
	return ""
}

func (md *model) oldestID(m, key int) string {
	md.mu.Lock()
	defer md.mu.Unlock()
	k := md.keys[key]
	for len(k.owned[m]) > 0 {
		id := k.owned[m][0]
		if _, ok := k.ids[id]; ok {
			return id
		}
		k.owned[m] = k.owned[m][1:]
	}
	return ""
}

func (md *model) released(key int, id string) {
	md.mu.Lock()
	defer md.mu.Unlock()
	delete(md.keys[key].ids, id)
}

// swept records an idle sweep of holder m: the keys it dropped (idle by
// the Manager's idle clock, which the model keeps at the same resolution,
// and no longer held: holds asks the Manager, which keeps some idle keys'
// loans) forget what it knew.
func (md *model) swept(m int, holds func(key string) bool) {
	md.mu.Lock()
	defer md.mu.Unlock()
	for i, k := range md.keys {
		if md.now/int64(time.Millisecond)-k.lastUse[m] >= int64(idle/time.Millisecond) && !holds(md.keyName(i)) {
			k.snap[m] = nil
			k.dropped(m, md.now)
		}
	}
}

// returnedKeys records ReturnKeys on holder m keeping the keys in keep.
func (md *model) returnedKeys(m int, keep uint8) {
	md.mu.Lock()
	defer md.mu.Unlock()
	for i, k := range md.keys {
		if keep&(1<<i) == 0 {
			k.snap[m] = nil
			k.dropped(m, md.now)
		}
	}
}
