package modeltest

import (
	"fmt"
	"math/rand/v2"

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
}

// roll starts the window of t for a windowed key if it is later than the
// last one the model saw: what each holder held and was lent ends with its
// window, and each share ahead that covers the new window is lent in it
// from its start and counted in it, as a grant at that start would be (the
// Store's FixedWindowState.roll), held by its holder if its Manager knows
// it.
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
		k.held[m], k.lent[m], k.settled[m] = 0, 0, 0
		if a := k.ahead[m]; a.tokens > 0 && a.from <= w && w <= a.to {
			k.counted[w] += a.tokens
			k.lent[m], k.settled[m] = a.tokens, a.tokens
			if a.known {
				k.held[m] = a.tokens
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
	k.ahead[m] = share{tokens: g.AheadTokens, from: w + 1, to: w + g.AheadWindows, known: l.aheadKnown}
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

// endAhead records that holder m's return ended its shares ahead.
func (k *keyModel) endAhead(m int) {
	if k.p.Algorithm == lease.FixedWindow {
		k.ahead[m] = share{}
	}
}

// inject is the share ahead that the harness asks for in holder slot's
// n-th lease call of key k (from 0) when its Manager asked for none
// (scenario.ahead): a share of one to a few windows, of one token up to
// the limit, or none (which ends the holder's shares after the current
// window). It depends on the seed and the call only.
func (sc *scenario) inject(slot, k int, n uint64) (windows, tokens int64) {
	r := rand.New(rand.NewPCG(sc.seed^0xa4ead, uint64(slot)<<56|uint64(k)<<48|n))
	if r.IntN(4) == 0 {
		return 0, 0
	}
	l := sc.keys[k].Limit
	return pick[int64](r, 1, 1, 2, 3, 8), pick(r, 1, l/10+1, l/3+1, l/2+1, l)
}
