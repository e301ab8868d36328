package modeltest

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// share is what the Store lends a holder of a fixed_window key ahead
// (Lessee.AheadWindows, Grant.AheadTokens): tokens in each window from
// from to to (window numbers, see keyModel.win), counted in each from its
// start. known says whether the holder's Manager asked for it (and so
// knows it); the harness may lend shares in its place (scenario.ahead)
// that only the Store knows.
type share struct {
	tokens   int64
	from, to int64
	known    bool
	// at and reset are the lending call's time and Grant.Reset (ns);
	// skip is how many fewer windows it lent than asked (its Manager
	// counts the windows it lent as the last of those it asked).
	at, reset, skip int64
}

// span is where in a window a holder may spend its share ahead: [from,
// to) (ns).
type span struct{ from, to int64 }

// margin is the allowance the Manager takes off each end of the span of a
// share of window j (j ≥ 1, counted from the window of the call that lent
// it): a millisecond, as a window's own tokens stop early, and 10^-4 of
// the time from the call to the window's end, at most j+1 periods, for
// the rates of its clock and the Store's (lease's aheadMargin).
func margin(p time.Duration, j int64) int64 {
	return int64(time.Millisecond) + int64(float64(j+1)*float64(p)*1e-4)
}

// spanOf is the span of a's share of window w of period p, which the
// Manager dates from the call that lent it, late rather than early (the
// lease package doc): from when the answer came plus Reset and the
// windows between to when the call was sent plus the same, less the
// call's latency plus a millisecond; each end moved inwards by the
// margin. The harness's clock does not move during a call: send and
// answer are a.at, the latency 0.
func spanOf(a share, w int64, p time.Duration) span {
	n := w - a.from + 1 // w is the n-th window after the call's
	mg := margin(p, a.skip+n)
	end := a.at + a.reset + n*int64(p)
	return span{from: end - int64(p) + mg, to: end - int64(time.Millisecond) - mg}
}

// roll starts the window of t for a windowed key if it is later than the
// last one the model saw: what each holder held and was lent ends with its
// window, and each share ahead that covers the new window is lent in it
// from its start and counted in it, as a grant at that start would be (the
// Store's FixedWindowState.roll), held by its holder if its Manager knows
// it, and spent only in its span.
func (k *keyModel) roll(t int64) {
	if !k.windowed() {
		return
	}
	w := k.win(t)
	if w <= k.rolled {
		return
	}
	k.rolled = w
	for m := range k.held {
		k.held[m], k.lent[m], k.settled[m], k.span[m] = 0, 0, 0, span{}
		if a := k.ahead[m]; a.tokens > 0 && a.from <= w && w <= a.to {
			k.counted[w] += a.tokens
			k.lent[m], k.settled[m] = a.tokens, a.tokens
			if a.known {
				k.held[m], k.span[m] = a.tokens, spanOf(a, w, k.p.Period)
			}
		}
	}
}

// lendAhead records the shares ahead that holder m's lease call at t,
// which asked for l's, was answered (g): they replace the holder's shares
// after the current window (none ends them then). It returns a violation
// of the contract's shares, "" if none: a share nobody asked for, more
// than was asked, or shares of one window that pass the limit.
func (md *model) lendAhead(m int, k *keyModel, t int64, g lease.Grant, l loan) string {
	if k.p.Algorithm == lease.FixedWindow && l.lent >= 0 {
		k.placed[m] = l.aheadKnown && g.AheadTokens > 0
	}
	if g.AheadTokens == 0 && g.AheadWindows == 0 {
		if k.p.Algorithm == lease.FixedWindow && l.lent >= 0 {
			k.ahead[m] = share{}
		}
		return ""
	}
	switch {
	case k.p.Algorithm != lease.FixedWindow || l.lent < 0:
		return fmt.Sprintf("%s (%s): the Store lent m%d %d tokens ahead in %d windows at %s: only a fixed_window holder's call may have shares ahead",
			k.name, describe(k.p), m, g.AheadTokens, g.AheadWindows, md.at(t))
	case g.AheadTokens <= 0 || g.AheadWindows <= 0 || g.AheadTokens > l.aheadTokens || g.AheadWindows > l.aheadWindows:
		return fmt.Sprintf("%s (%s): the Store lent m%d %d tokens ahead in %d windows at %s, asked for %d in %d",
			k.name, describe(k.p), m, g.AheadTokens, g.AheadWindows, md.at(t), l.aheadTokens, l.aheadWindows)
	}
	w := k.win(t)
	k.ahead[m] = share{tokens: g.AheadTokens, from: w + 1, to: w + g.AheadWindows, known: l.aheadKnown,
		at: t, reset: int64(g.Reset), skip: l.aheadWindows - g.AheadWindows}
	// Every share runs from the next window on (or ended): the next
	// window has the most lent into it.
	var sum int64
	for _, a := range k.ahead {
		if a.tokens > 0 && a.to > w {
			sum += a.tokens
		}
	}
	if sum > k.p.Limit {
		return fmt.Sprintf("%s (%s): after m%d's call at %s the Store lends %d tokens of the next window in shares ahead, more than the limit",
			k.name, describe(k.p), m, md.at(t), sum)
	}
	return ""
}

// callSpan applies holder m's lease call at t, answered g, to the span of
// the share it holds in the current window (if any: see roll), and
// reports whether the call leaves that share behind. A Manager spends a
// share it rolled into until its span ends. A call of a Manager that
// knows where its shares fall (placed) shows it which window the Store is
// in: it then spends all it holds of that window (found there, if it made
// the call outside the span) to the window's end. One that no longer
// knows (its last call's answer lent none ahead) holds none of the share
// at a call outside the span (before it rolled into it, or after the
// span), and leaves it behind: the Store counts it spent; its grant is
// spendable to the window's end.
func (k *keyModel) callSpan(m int, t int64, g lease.Grant) (lost bool) {
	sp := k.span[m]
	if sp.to == 0 {
		return false
	}
	over := t < sp.from || t >= sp.to
	switch {
	case k.placed[m]:
	case over:
		lost = true
	case g.Granted == 0:
		return false
	}
	k.span[m] = span{}
	return lost
}

// endAhead records that holder m's return ended its shares ahead.
func (k *keyModel) endAhead(m int) {
	if k.p.Algorithm == lease.FixedWindow {
		k.ahead[m], k.span[m], k.placed[m] = share{}, span{}, false
	}
}

// inject is the share ahead that the harness asks for in holder slot's
// n-th lease call of key k (from 0), in the Manager's place
// (scenario.ahead): a share of one to a few windows, of one token up to the
// limit, or none (which ends the holder's shares after the current
// window). A call in which the Manager asked for shares itself keeps its
// ask half the time (use false). It depends on the seed and the call
// only.
func (sc *scenario) inject(slot, k int, n uint64, asked bool) (windows, tokens int64, use bool) {
	r := rand.New(rand.NewPCG(sc.seed^0xa4ead, uint64(slot)<<56|uint64(k)<<48|n))
	if asked && r.IntN(2) == 0 {
		return 0, 0, false
	}
	if r.IntN(4) == 0 {
		return 0, 0, true
	}
	l := sc.keys[k].Limit
	return pick[int64](r, 1, 1, 2, 3, 8), pick(r, 1, l/10+1, l/3+1, l/2+1, l), true
}
