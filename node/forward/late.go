package forward

import (
	"bytes"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DeadlineHeader carries, on every request, when the sender sent it and
// how long it waits for the answer: "<unix µs>.<timeout µs>", by the
// sender's clock. The owner answers 503 without deciding a batch that it
// starts to decide after the sender has given up (see lateness): its
// checks are shed by the sender anyway, and deciding them would spend
// tokens for answers nobody reads (the under-admission of an overloaded
// cluster). With a cluster key it is signed (DeadlineAuthHeader): a
// deadline moved on the way would otherwise become the sender's reference
// and make the owner refuse its honest requests as late for 10–20 s.
const DeadlineHeader = "X-Sluice-Deadline"

func appendDeadline(dst []byte, sent time.Time, timeout time.Duration) []byte {
	dst = strconv.AppendInt(dst, sent.UnixMicro(), 10)
	dst = append(dst, '.')
	return strconv.AppendInt(dst, timeout.Microseconds(), 10)
}

func parseDeadline(v []byte) (sentUS, budgetUS int64, ok bool) {
	a, b, found := bytes.Cut(v, []byte{'.'})
	if !found {
		return 0, 0, false
	}
	sent, err1 := strconv.ParseInt(string(a), 10, 64)
	budget, err2 := strconv.ParseInt(string(b), 10, 64)
	if err1 != nil || err2 != nil || budget <= 0 {
		return 0, 0, false
	}
	return sent, budget, true
}

// lateWindow is how long a sender's smallest offset is remembered (a
// minimum over the current and the previous window, so 10–20 s): long
// enough to hold one request that was not queued, short enough that a
// step of the sender's clock is forgotten soon.
const lateWindow = 10 * time.Second

// maxLateSenders bounds the senders tracked; past it the table starts
// afresh (a cluster has far fewer members).
const maxLateSenders = 1024

// lateness measures how long a request waited before its owner started to
// decide it, without synchronised clocks: per sender, the offset of a
// request is the owner's clock minus the sender's timestamp (the clocks'
// skew plus the one-way delay), and its lag is its offset minus the
// smallest offset of that sender's recent requests (the skew and the
// unloaded delay cancel out), so the lag is the time spent queued on the
// way (sockets, a CPU-starved owner). Safe for concurrent use.
type lateness struct {
	mu      sync.Mutex
	senders map[string]*offsets
}

// offsets is one sender's smallest offset in the current and the previous
// window, in µs.
type offsets struct {
	start     int64 // the current window's start, owner's clock, µs
	cur, prev int64
}

func newLateness() *lateness { return &lateness{senders: map[string]*offsets{}} }

// check parses a DeadlineHeader value v of sender, received at now, and
// returns the request's lag and the sender's timeout; ok is false when v
// does not parse.
func (l *lateness) check(sender string, v []byte, now time.Time) (lag, budget time.Duration, ok bool) {
	sent, budgetUS, ok := parseDeadline(v)
	if !ok {
		return 0, 0, false
	}
	nowUS := now.UnixMicro()
	off := nowUS - sent
	l.mu.Lock()
	o := l.senders[sender]
	if o == nil {
		if len(l.senders) >= maxLateSenders {
			clear(l.senders)
		}
		o = &offsets{start: nowUS, cur: off, prev: off}
		l.senders[strings.Clone(sender)] = o
	}
	ref := o.observe(nowUS, off)
	if off-ref > maxLag.Microseconds() {
		// More than any queue holds a batch: a clock stepped (the
		// sender's back, or this node's forward). Take this request as
		// the new reference rather than refuse every request for two
		// windows.
		*o = offsets{start: nowUS, cur: off, prev: off}
		ref = off
	}
	l.mu.Unlock()
	return time.Duration(off-ref) * time.Microsecond, time.Duration(budgetUS) * time.Microsecond, true
}

// maxLag is the largest lag taken as queueing; a larger one is taken as a
// step of a clock (see check).
const maxLag = 5 * time.Second

// observe records off, seen at now, and returns the smallest offset of the
// last one to two windows.
func (o *offsets) observe(now, off int64) int64 {
	if now-o.start >= lateWindow.Microseconds() {
		o.prev, o.cur, o.start = o.cur, off, now
	} else if off < o.cur {
		o.cur = off
	}
	return min(o.cur, o.prev)
}
