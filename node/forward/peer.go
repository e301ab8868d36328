package forward

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
)

// waiter is one call's items waiting for their results. It belongs to the
// caller until enqueued, then to the peer until done is signalled, then to
// the caller again.
type waiter struct {
	enc  []byte   // the items, encoded
	n    int      // how many
	res  []Result // their results, len ≥ n
	err  error
	done chan struct{} // cap 1
	// state: 0 pending; 1 the owner's results delivered; 2 abandoned,
	// the caller's deadline passed first (its checks are decided by the
	// caller: what the owner allowed is refunded to it when it answers).
	state atomic.Int32
}

// abandon marks w's results unread: the caller's deadline passed. It
// reports false when the owner's results were delivered first: the
// caller must then have them refunded (peer.refundUnread).
func (w *waiter) abandon() bool { return w.state.CompareAndSwap(0, 2) }

func (w *waiter) finish(err error) {
	w.err = err
	w.done <- struct{}{}
}

// batch is the waiters of one request and its buffers.
type batch struct {
	ws      []*waiter
	n       int
	body    []byte
	auth    []byte // the AuthHeader value
	dl      []byte // the DeadlineHeader value
	results []Result
}

func (b *batch) add(w *waiter) {
	b.ws = append(b.ws, w)
	b.n += w.n
}

// peer is one owner: its queue, collector and senders.
type peer struct {
	f    *Forwarder
	addr string
	hc   *fasthttp.HostClient
	q    chan *waiter
	sem  chan struct{} // one token per request in flight
	stop chan struct{}
	wg   sync.WaitGroup // the collector and the senders
	down atomic.Int64   // Unix nanoseconds until which the peer is down; 0: up
	busy atomic.Bool    // the failure that marked it down said busy (ErrPeerBusy)
	// unanswered counts the peer's requests in a row that got no answer
	// within their timeout; any answer (even a late one, or an error
	// status) resets it. See Forwarder.Unanswered.
	unanswered atomic.Int32
	// answered is when the peer last answered (Unix ns, cfg.Now).
	answered atomic.Int64
	// timeout is the current request timeout in nanoseconds, from rtt.
	timeout atomic.Int64
	rtt     struct {
		sync.Mutex
		est lease.RTTEstimator
	}
	met peerMetrics
	// errDn and errBusy are the errors of items failed while down, after
	// a failure without and with ErrPeerBusy.
	errDn, errBusy error

	mu struct {
		sync.Mutex
		closed bool // no more enqueues
	}
}

func (f *Forwarder) newPeer(addr string) *peer {
	timeout := f.cfg.Timeout
	p := &peer{
		f:    f,
		addr: addr,
		q:    make(chan *waiter, f.cfg.QueueLen),
		sem:  make(chan struct{}, f.cfg.MaxConnsPerPeer),
		stop: make(chan struct{}),
		met:  newPeerMetrics(f.cfg.Metrics, addr),
		errDn: fmt.Errorf("%w: %s is down (backing off after a failure)",
			ErrPeerUnavailable, addr),
		errBusy: fmt.Errorf("%w: %w: %s is backing off after a timeout or an overload answer",
			ErrPeerUnavailable, ErrPeerBusy, addr),
		hc: &fasthttp.HostClient{
			Addr:     addr,
			Name:     "sluice-forward",
			MaxConns: f.cfg.MaxConnsPerPeer,
			// Below any sane server idle timeout, so that the client,
			// not the owner, closes idle connections: a request on a
			// connection the owner just closed fails (it is never
			// retried) and backs the peer off for nothing.
			MaxIdleConnDuration: 5 * time.Second,
			Dial:                func(a string) (net.Conn, error) { return fasthttp.DialTimeout(a, timeout) },
			// Never retry: the owner may have decided the batch.
			RetryIf:                       func(*fasthttp.Request) bool { return false },
			MaxResponseBodySize:           MaxBodyBytes,
			IsTLS:                         f.cfg.TLS != nil,
			TLSConfig:                     f.cfg.TLS,
			DisableHeaderNamesNormalizing: true,
		},
	}
	p.timeout.Store(int64(timeout))
	p.wg.Add(1)
	go p.collect()
	return p
}

// isDown reports whether the peer is backing off.
func (p *peer) isDown() bool {
	d := p.down.Load()
	if d == 0 {
		return false
	}
	if p.f.cfg.Now().UnixNano() < d {
		return true
	}
	return false
}

// enqueue hands w to the collector, or fails at once if the peer is
// down, stopped or overloaded.
func (p *peer) enqueue(w *waiter) error {
	if p.isDown() {
		p.fastFail(w.n)
		return p.downErr()
	}
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		p.fastFail(w.n)
		return fmt.Errorf("%w: %s was removed", ErrPeerUnavailable, p.addr)
	}
	select {
	case p.q <- w:
		p.mu.Unlock()
		return nil
	default:
		p.mu.Unlock()
		p.fastFail(w.n)
		return fmt.Errorf("%w: %w: %s: queue full", ErrPeerUnavailable, ErrPeerBusy, p.addr)
	}
}

func (p *peer) fastFail(n int) {
	p.f.stats.fastFails.Add(uint64(n))
	p.f.stats.failed.Add(uint64(n))
	p.met.unavailable.Add(n)
}

// close stops the peer: no more enqueues, the collector fails what is
// queued, the senders finish their requests.
func (p *peer) close() {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return
	}
	p.mu.closed = true
	p.mu.Unlock()
	close(p.stop)
	p.wg.Wait()
	p.hc.CloseIdleConnections()
}

// collect is the peer's collector goroutine: it gathers waiters into
// batches and hands each to a sender.
func (p *peer) collect() {
	defer p.wg.Done()
	maxBatch := p.f.cfg.MaxBatch
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var pending *waiter // the waiter that did not fit the last batch
	for {
		first := pending
		pending = nil
		if first == nil {
			select {
			case first = <-p.q:
			case <-p.stop:
				p.drain(nil)
				return
			}
		}
		if p.isDown() {
			p.failFast(first)
			continue
		}
		b := p.f.batches.Get().(*batch)
		b.add(first)
		if b.n < maxBatch && !p.f.cfg.EagerFlush {
			timer.Reset(p.f.cfg.FlushInterval)
		collect:
			for b.n < maxBatch {
				select {
				case w := <-p.q:
					if b.n+w.n > maxBatch {
						pending = w
						break collect
					}
					b.add(w)
				case <-timer.C:
					break collect
				case <-p.stop:
					timer.Stop()
					p.failBatch(b, p.stopErr())
					p.drain(pending)
					return
				}
			}
			timer.Stop()
		}
		// Wait for a free connection, still filling the batch: when every
		// connection is busy the queue grows, and the next request should
		// carry as much of it as it can.
	wait:
		for {
			q := p.q
			if pending != nil || b.n >= maxBatch {
				q = nil
			}
			select {
			case p.sem <- struct{}{}:
				break wait
			case w := <-q:
				if b.n+w.n > maxBatch {
					pending = w
				} else {
					b.add(w)
				}
			case <-p.stop:
				p.failBatch(b, p.stopErr())
				p.drain(pending)
				return
			}
		}
		if p.isDown() {
			<-p.sem
			for _, w := range b.ws {
				p.failFast(w)
			}
			p.putBatch(b)
			continue
		}
		p.wg.Add(1)
		go p.send(b)
	}
}

func (p *peer) stopErr() error {
	return fmt.Errorf("%w: %s was removed", ErrPeerUnavailable, p.addr)
}

// failFast fails w without a request: the peer is down.
func (p *peer) failFast(w *waiter) {
	p.fastFail(w.n)
	w.finish(p.downErr())
}

// downErr is the error of an item failed while the peer is down: busy if
// the failure that marked it down was.
func (p *peer) downErr() error {
	if p.busy.Load() {
		return p.errBusy
	}
	return p.errDn
}

// drain fails pending and every queued waiter after stop. Enqueues have
// stopped (mu.closed is set before stop is closed), so the queue only
// empties.
func (p *peer) drain(pending *waiter) {
	err := p.stopErr()
	if pending != nil {
		p.fastFail(pending.n)
		pending.finish(err)
	}
	for {
		select {
		case w := <-p.q:
			p.fastFail(w.n)
			w.finish(err)
		default:
			return
		}
	}
}

func (p *peer) failBatch(b *batch, err error) {
	for _, w := range b.ws {
		p.fastFail(w.n)
		w.finish(err)
	}
	p.putBatch(b)
}

func (p *peer) putBatch(b *batch) {
	clear(b.ws)
	b.ws = b.ws[:0]
	b.n = 0
	p.f.batches.Put(b)
}
