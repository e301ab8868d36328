package forward

import (
	"strings"
	"sync"
	"time"
)

// Refund bounds. A refund gives back hits an earlier check charged; the
// owner remembers, per peer and (rule, key), the hits it charged for that
// peer's allowed checks, and gives back at most that much: a peer can
// never refund more than this node lent it, whatever it sends.
const (
	// DefaultRefundWindow is how long the owner remembers what it lent
	// for a check: a sender refunds a denied request's hits as soon as
	// its other rules have answered (two forwarding timeouts, 100ms), so
	// 10s is generous. Loans are kept between one and two windows.
	DefaultRefundWindow = 10 * time.Second
	// DefaultMaxLoans bounds the remembered (peer, rule, key) loans per
	// window, at about 150 bytes each (40 MiB at worst). A loan that
	// does not fit is not remembered, so its refund is refused: the key
	// keeps the hits (admitting less, never more).
	DefaultMaxLoans = 1 << 18
)

// loanKey names what one peer was lent.
type loanKey struct{ peer, rule, key string }

// loans remembers what this node lent each peer, in two generations
// swapped every window (as nonceCache does). Values are pointers so that
// a loan found with a key whose strings are views of a request body can
// be updated without storing those views in the map. It is safe for
// concurrent use; callers take mu once per batch (lock, then lend/take).
type loans struct {
	window time.Duration
	max    int

	mu        sync.Mutex
	cur, prev map[loanKey]*int64 // guarded by mu
	since     time.Time          // when cur started; guarded by mu
}

func newLoans(window time.Duration, max int) *loans {
	return &loans{window: window, max: max,
		cur: make(map[loanKey]*int64), prev: make(map[loanKey]*int64)}
}

// rotate swaps generations when cur is a window old. Call with mu held.
func (l *loans) rotate(now time.Time) {
	if l.since.IsZero() {
		l.since = now
	}
	el := now.Sub(l.since)
	if el < l.window {
		return
	}
	old := l.prev
	clear(old)
	if el >= 2*l.window {
		clear(l.cur)
	} else {
		l.prev, l.cur = l.cur, old
	}
	l.since = now
}

// lend records that hits were charged to k's peer. k's strings may be
// views: they are copied when stored. Call with mu held.
func (l *loans) lend(k loanKey, hits int64, now time.Time) {
	l.rotate(now)
	if p := l.cur[k]; p != nil {
		*p += hits
		return
	}
	if len(l.cur) >= l.max {
		return // not remembered: its refund will be refused
	}
	v := hits
	l.cur[loanKey{strings.Clone(k.peer), strings.Clone(k.rule), strings.Clone(k.key)}] = &v
}

// take gives back up to hits of what k's peer was lent and returns how
// much (0..hits). Call with mu held.
func (l *loans) take(k loanKey, hits int64, now time.Time) int64 {
	l.rotate(now)
	got := int64(0)
	for _, m := range []map[loanKey]*int64{l.cur, l.prev} {
		p := m[k]
		if p == nil || *p <= 0 {
			continue
		}
		n := min(hits-got, *p)
		*p -= n
		got += n
		if got == hits {
			break
		}
	}
	return got
}
