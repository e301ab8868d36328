package rls

import (
	"crypto/tls"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// What the two transports share: TLS, the bounds on requests that have not
// arrived whole (their deadline and the server's budget of their bytes),
// and the bound on SETTINGS.

const (
	// maxConcurrentStreams is the SETTINGS_MAX_CONCURRENT_STREAMS both
	// transports advertise.
	maxConcurrentStreams = 1024
	// maxSettings is the most SETTINGS parameters a connection may send
	// between two requests it sends whole (its first SETTINGS included):
	// past it, the connection is closed (ENHANCE_YOUR_CALM). A client sends
	// a handful at the start, then one now and then (a new window).
	maxSettings = 64
	// maxWindowRaises is the most of them that raise
	// SETTINGS_INITIAL_WINDOW_SIZE (grpc-go walks every stream for each;
	// a client raises its window now and then).
	maxWindowRaises = 4
	// handshakeTimeout is how long a new connection has to finish its TLS
	// handshake and send the client preface and its SETTINGS.
	handshakeTimeout = 10 * time.Second
	// freePending is the charge of unfinished requests a connection holds
	// without drawing on the server's budget: enough for the request or
	// two a client has on the wire at a time.
	freePending = 16 << 10
)

// The defaults of ServerConfig's bounds on requests that have not arrived
// whole.
const (
	DefaultRequestTimeout  = 10 * time.Second
	DefaultMaxPendingBytes = 64 << 20
)

// serverTLS is cfg for an HTTP/2 server: ALPN "h2" only (RFC 9113 3.2:
// HTTP/2 over TLS is negotiated with ALPN; a client that offers none is
// refused, as grpc-go refuses it), TLS 1.2 at least (9.2).
func serverTLS(cfg *tls.Config) *tls.Config {
	if cfg == nil {
		return nil
	}
	c := cfg.Clone()
	c.NextProtos = []string{"h2"}
	c.MinVersion = max(c.MinVersion, tls.VersionTLS12)
	return c
}

// budget bounds the bytes held by requests that have not arrived whole,
// across a server's connections (ServerConfig.MaxPendingBytes). It is
// safe for concurrent use.
type budget struct {
	max     int64 // ≤ 0: no bound
	held    atomic.Int64
	gauge   *metrics.Gauge   // sluice_rls_pending_bytes
	timeout *metrics.Counter // requests reset past RequestTimeout
	refused *metrics.Counter // requests reset for want of budget
}

func newBudget(max int64, set *metrics.Set) *budget {
	return &budget{max: max,
		gauge:   set.GetOrCreateGauge("sluice_rls_pending_bytes", nil),
		timeout: set.GetOrCreateCounter(`sluice_rls_unfinished_reset_total{reason="timeout"}`),
		refused: set.GetOrCreateCounter(`sluice_rls_unfinished_reset_total{reason="budget"}`)}
}

// reserve takes n bytes, unless that would hold more than the bound.
func (b *budget) reserve(n int64) bool {
	for {
		cur := b.held.Load()
		if b.max > 0 && cur+n > b.max {
			return false
		}
		if b.held.CompareAndSwap(cur, cur+n) {
			b.gauge.Add(float64(n))
			return true
		}
	}
}

// release gives back n reserved bytes.
func (b *budget) release(n int64) {
	if n != 0 {
		b.held.Add(-n)
		b.gauge.Add(float64(-n))
	}
}

// pending is a connection's charge of unfinished requests: the first
// freePending bytes are its own, the rest drawn on the server's budget.
// It is not safe for concurrent use.
type pending struct {
	held, drawn int64
}

// charge adds n > 0 bytes; false: the budget cannot take them (nothing is
// charged).
func (p *pending) charge(b *budget, n int64) bool {
	held := p.held + n
	drawn := max(held-freePending, 0)
	if need := drawn - p.drawn; need > 0 && !b.reserve(need) {
		return false
	}
	p.held, p.drawn = held, drawn
	return true
}

// release takes back n charged bytes.
func (p *pending) release(b *budget, n int64) {
	p.held -= n
	drawn := max(p.held-freePending, 0)
	b.release(p.drawn - drawn)
	p.drawn = drawn
}

// fifoLinks are an element's links in a fifo.
type fifoLinks[T any] struct {
	prev, next T
	in         bool
}

// fifoElem is a pointer to a struct that holds its fifoLinks.
type fifoElem[T any] interface {
	comparable
	links() *fifoLinks[T]
}

// fifo is an intrusive list in arrival order (of requests that have not
// arrived whole: the oldest is the first whose deadline passes): push,
// remove and front take constant time and allocate nothing. It is not
// safe for concurrent use.
type fifo[T fifoElem[T]] struct {
	head, tail T
	n          int
}

func (q *fifo[T]) push(x T) {
	var zero T
	l := x.links()
	l.prev, l.next, l.in = q.tail, zero, true
	if q.tail != zero {
		q.tail.links().next = x
	} else {
		q.head = x
	}
	q.tail = x
	q.n++
}

// remove takes x out of q, if it is in.
func (q *fifo[T]) remove(x T) {
	var zero T
	l := x.links()
	if !l.in {
		return
	}
	if l.prev != zero {
		l.prev.links().next = l.next
	} else {
		q.head = l.next
	}
	if l.next != zero {
		l.next.links().prev = l.prev
	} else {
		q.tail = l.prev
	}
	*l = fifoLinks[T]{}
	q.n--
}

// front is the oldest element, or nil.
func (q *fifo[T]) front() T { return q.head }
