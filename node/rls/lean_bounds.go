package rls

import (
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
)

// TransportLean's bounds on requests that have not arrived whole, and on
// idle connections.
//
// A request is unfinished from its HEADERS to its END_STREAM; a stream
// whose HEADERS end it never is. An unfinished request is charged
// leanStreamCost plus its buffer's capacity, against its connection's
// allowance (freePending) and, past it, against the server's budget
// (ServerConfig.MaxPendingBytes; see pending): a request the budget cannot
// take is refused (RST_STREAM(REFUSED_STREAM): not processed, the client
// may try again), and its buffer freed. A DATA frame that ends its request
// is never charged, so that a request sent whole in one go (gRPC clients
// and Envoy send HEADERS and then one DATA frame) is served whatever the
// budget's state. The server holds at most MaxConns × freePending plus
// MaxPendingBytes of unfinished requests.
//
// An unfinished request older than ServerConfig.RequestTimeout is
// answered DEADLINE_EXCEEDED and its stream reset, its buffer freed: a
// timer per connection (on ServerConfig's clock), armed for the oldest
// unfinished request, as they come in order.
//
// A connection with no call in flight and no request received whole for
// ServerConfig.IdleTimeout says GOAWAY (see idleCheck): an unfinished
// request keeps no connection busy.

// leanStreamCost is what an unfinished request is charged beyond its
// buffer: its stream, its map entry, its share of the reader's state.
const leanStreamCost = 1 << 10

// leanBounds is a connection's state of those bounds, under its wmu.
type leanBounds struct {
	unfinished fifo[*leanStream] // in the order their HEADERS came
	charged    pending           // their charges
	deadline   func() bool       // stops the armed deadline timer; nil: none armed
	idle       *time.Timer       // nil without ServerConfig.IdleTimeout
	idleSince  time.Time
}

// openLocked makes st, whose HEADERS did not end it, an unfinished
// request; false: the budget cannot take it (st is not charged).
func (c *leanConn) openLocked(st *leanStream) bool {
	st.start = c.s.cfg.Now()
	if !c.chargeLocked(st, leanStreamCost+int64(cap(st.in))) {
		return false
	}
	c.bounds.unfinished.push(st)
	c.armDeadlineLocked()
	return true
}

// chargeLocked charges st n more bytes; false: the budget cannot take them
// (nothing is charged).
func (c *leanConn) chargeLocked(st *leanStream, n int64) bool {
	if !c.bounds.charged.charge(c.l.budget, n) {
		return false
	}
	st.charge += n
	return true
}

// finishedLocked takes st out of the unfinished requests, if it is one,
// and gives back its charge.
func (c *leanConn) finishedLocked(st *leanStream) {
	b := &c.bounds
	if !st.queue.in {
		return
	}
	b.unfinished.remove(st)
	b.charged.release(c.l.budget, st.charge)
	st.charge = 0
}

// refuseLocked resets st, whose request the budget cannot take, with
// REFUSED_STREAM, and frees it.
func (c *leanConn) refuseLocked(st *leanStream) {
	id := st.id
	c.forgetLocked(st)
	c.wbuf = appendRSTStream(c.wbuf, id, http2.ErrCodeRefusedStream)
	c.l.budget.refused.Inc()
}

// armDeadlineLocked arms the deadline timer for the oldest unfinished
// request, unless one is armed (for it, or for an older request: it then
// fires early and arms again).
func (c *leanConn) armDeadlineLocked() {
	b := &c.bounds
	d := c.s.cfg.RequestTimeout
	st := b.unfinished.front()
	if b.deadline != nil || d <= 0 || st == nil || c.closed {
		return
	}
	b.deadline = c.s.cfg.AfterFunc(st.start.Add(d).Sub(c.s.cfg.Now()), c.checkDeadlines)
}

// checkDeadlines, the deadline timer's, answers the unfinished requests
// older than RequestTimeout DEADLINE_EXCEEDED and resets their streams.
func (c *leanConn) checkDeadlines() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	b := &c.bounds
	b.deadline = nil
	if c.closed {
		return
	}
	d := c.s.cfg.RequestTimeout
	now := c.s.cfg.Now()
	n := 0
	for st := b.unfinished.front(); st != nil && !now.Before(st.start.Add(d)); st = b.unfinished.front() {
		c.answerEarlyLocked(st, 200, codes.DeadlineExceeded, "the request did not arrive whole within "+d.String())
		n++
	}
	if n > 0 {
		c.l.budget.timeout.Add(n)
		c.flushLocked(true)
	}
	c.armDeadlineLocked()
}

// inflightLocked is the number of calls in flight: requests received
// whole whose answers are not yet written, those whose stream the peer
// reset included while their worker runs.
func (c *leanConn) inflightLocked() int {
	return len(c.streams) - c.bounds.unfinished.n + c.orphans
}

// startIdleLocked starts the idle timer (ServerConfig.IdleTimeout, on the
// real clock, as grpc-go's MaxConnectionIdle), once the preface is read.
func (c *leanConn) startIdleLocked() {
	if d := c.s.cfg.IdleTimeout; d > 0 {
		c.bounds.idleSince = time.Now()
		c.bounds.idle = time.AfterFunc(d, c.idleCheck)
	}
}

// activeLocked notes a request received whole: the idle time starts over.
func (c *leanConn) activeLocked() {
	if c.bounds.idle != nil {
		c.bounds.idleSince = time.Now()
	}
}

// doneLocked follows a stream's end: the idle time starts once no call is
// in flight, and a connection that said GOAWAY closes once its streams are
// done.
func (c *leanConn) doneLocked() {
	if c.bounds.idle != nil && c.inflightLocked() == 0 {
		c.bounds.idleSince = time.Now()
	}
	c.lingerIfDoneLocked()
}

// idleCheck, the idle timer's, says GOAWAY on a connection that has had
// no call in flight and no request received whole for the idle timeout,
// as Close does on every connection: its drain closes it (once its
// unfinished requests, if any, end or pass their deadline). A busy
// connection, or one idle for less, checks again when it may have been
// idle for the timeout.
func (c *leanConn) idleCheck() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed || c.goingAway {
		return
	}
	d := c.s.cfg.IdleTimeout
	if c.inflightLocked() > 0 {
		c.bounds.idle.Reset(d)
		return
	}
	if left := d - time.Since(c.bounds.idleSince); left > 0 {
		c.bounds.idle.Reset(left)
		return
	}
	c.goAwayLocked()
}

// stopTimersLocked stops the connection's timers, once it has ended.
func (c *leanConn) stopTimersLocked() {
	b := &c.bounds
	if b.idle != nil {
		b.idle.Stop()
	}
	if b.deadline != nil {
		b.deadline()
		b.deadline = nil
	}
}
