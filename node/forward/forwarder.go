package forward

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"

	"github.com/sluicehq/sluice/shard"
)

// Errors.
var (
	// ErrPeerUnavailable means the owner did not answer in time (or
	// refused the connection, or answered something other than a valid
	// reply, or is backing off after such a failure); decide locally.
	ErrPeerUnavailable = errors.New("peer unavailable")
	// ErrPeerBusy is wrapped, together with ErrPeerUnavailable, by the
	// failures that say the owner is up but overloaded: the request timed
	// out (connecting included), the owner answered 503 or 429, the
	// peer's queue is full or backed up past the caller's deadline, or
	// the peer is backing off after such a failure. The owner may still
	// be deciding its keys, so a caller that decided the items itself
	// could admit them twice: it should shed them instead (node answers
	// 503 with Retry-After). Failures without it (connection refused or
	// reset, a peer removed, a reply that is not valid) say the owner
	// is not deciding: the caller may decide the items itself.
	ErrPeerBusy = errors.New("peer busy")
	// ErrClosed means the Forwarder was closed.
	ErrClosed = errors.New("forwarder closed")
)

// Config configures a [Forwarder].
type Config struct {
	// FlushInterval is how long a peer's collector waits, after the first
	// item of a batch, for more items. Zero means 200µs.
	FlushInterval time.Duration
	// EagerFlush sends a batch as soon as a connection is free instead of
	// waiting out FlushInterval: batches then form only while every
	// connection to the peer is busy (self-clocking, like a group
	// commit). It trades more, smaller requests at moderate load for less
	// latency; see BenchmarkForward. False (the default) flushes every
	// FlushInterval or at MaxBatch items.
	EagerFlush bool
	// MaxBatch is the most items of one request; a batch that reaches it
	// is sent at once. Zero means 256; at most MaxItems.
	MaxBatch int
	// Timeout is the least time one request (connection included) is
	// given before the peer is skipped. Zero means 50ms. Each peer's
	// timeout adapts to its round trips as TCP's retransmission timeout
	// does (RFC 6298): 2 × (srtt + 4·rttvar), between Timeout and
	// MaxTimeout, a timed-out request counting as a round trip of the
	// timeout it had. So a loaded owner that answers in 100ms gets the
	// room it needs instead of timing out batch after batch: a batch
	// that times out may still be decided by the owner, and its items,
	// shed by the sender, are admissions lost.
	Timeout time.Duration
	// MaxTimeout bounds the adaptive timeout. Zero means 2 × Timeout;
	// below Timeout means Timeout.
	MaxTimeout time.Duration
	// Backoff is how long a peer is considered down after a failed
	// request: its items fail at once with ErrPeerUnavailable. Zero means
	// 500ms.
	Backoff time.Duration
	// ClusterKey, when not empty, is the cluster's shared key: every
	// request is signed with it and every reply must be (see the package
	// doc). Empty sends unsigned requests.
	ClusterKey []byte
	// TLS, when not nil, makes requests go over TLS with this config
	// (owners serve the internal endpoint behind TLS: sluiced -tls-cert).
	// Peers are dialled by IP address, so their certificates must hold
	// IP SANs (or set ServerName). Nil sends plain HTTP.
	TLS *tls.Config
	// Self is this node's member name, sent (and signed) as the sender of
	// every request: owners bound its refunds by what they lent to that
	// name. At most MaxMemberLen bytes. Empty sends none (owners then
	// account by the connection's IP address).
	Self string
	// MaxConnsPerPeer bounds the requests in flight to one peer. Zero
	// means 4.
	MaxConnsPerPeer int
	// QueueLen bounds the calls waiting for one peer; a call that finds
	// the queue full fails with ErrPeerUnavailable (the owner cannot keep
	// up: decide locally). Zero means 4096.
	QueueLen int
	// OnPlans, when not nil, receives the split plans of every reply that
	// carries some. It is called from the Forwarder's goroutines, possibly
	// concurrently, after the batch's callers have their results; it may
	// keep the slice, and should not block.
	OnPlans func([]shard.Plan)
}

// DefaultConfig returns the configuration nodes use.
//
//   - FlushInterval 200µs and MaxBatch 256: at a few thousand
//     forwarded checks per second a batch still holds several items, and
//     200µs is small next to a gateway's own network hop.
//   - Timeout 50ms, the Store's call timeout, stretching up to MaxTimeout
//     100ms (2 × Timeout) when the peer's round trips are that slow. An
//     owner whose Store fails waits up to the Store's longest call before
//     it answers (in local mode): a sender whose timeout is shorter sheds
//     checks the owner would have answered, so sluiced sets 250ms, above
//     the Store's 4 × 50ms.
//   - Backoff 500ms: a dead peer costs one timed-out batch per half
//     second until memberlist removes it from the ring (a few seconds),
//     and a peer that only paused is tried again soon.
//   - MaxConnsPerPeer 4: enough requests in flight to keep batches full
//     on a busy link, few enough not to crowd a 2-core owner.
//   - QueueLen 4096 waiting calls: more than the concurrent checks of a
//     node's HTTP server.
func DefaultConfig() Config {
	return Config{
		FlushInterval:   200 * time.Microsecond,
		MaxBatch:        256,
		Timeout:         50 * time.Millisecond,
		Backoff:         500 * time.Millisecond,
		MaxConnsPerPeer: 4,
		QueueLen:        4096,
	}
}

// Validate reports the first invalid field of c, by its configuration
// name. Zero fields are valid: they mean the default.
func (c Config) Validate() error {
	switch {
	case c.FlushInterval < 0:
		return fmt.Errorf("forward: flush_interval: must be ≥ 0, got %s", c.FlushInterval)
	case c.MaxBatch < 0 || c.MaxBatch > MaxItems:
		return fmt.Errorf("forward: max_batch: must be between 0 and %d, got %d", MaxItems, c.MaxBatch)
	case c.Timeout < 0:
		return fmt.Errorf("forward: timeout: must be ≥ 0, got %s", c.Timeout)
	case c.MaxTimeout < 0:
		return fmt.Errorf("forward: max_timeout: must be ≥ 0, got %s", c.MaxTimeout)
	case c.Backoff < 0:
		return fmt.Errorf("forward: backoff: must be ≥ 0, got %s", c.Backoff)
	case c.MaxConnsPerPeer < 0:
		return fmt.Errorf("forward: max_conns_per_peer: must be ≥ 0, got %d", c.MaxConnsPerPeer)
	case len(c.Self) > MaxMemberLen:
		return fmt.Errorf("forward: self: longer than %d bytes", MaxMemberLen)
	case c.QueueLen < 0:
		return fmt.Errorf("forward: queue_len: must be ≥ 0, got %d", c.QueueLen)
	}
	return nil
}

// fill replaces zero and invalid fields by their defaults.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.FlushInterval <= 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.MaxBatch <= 0 || c.MaxBatch > MaxItems {
		c.MaxBatch = d.MaxBatch
	}
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 2 * c.Timeout
	}
	c.MaxTimeout = max(c.MaxTimeout, c.Timeout)
	if c.Backoff <= 0 {
		c.Backoff = d.Backoff
	}
	if c.MaxConnsPerPeer <= 0 {
		c.MaxConnsPerPeer = d.MaxConnsPerPeer
	}
	if c.QueueLen <= 0 {
		c.QueueLen = d.QueueLen
	}
}

// Stats are a Forwarder's counters since New.
type Stats struct {
	Requests  uint64 // requests answered with a valid reply
	Failures  uint64 // requests that failed (timeout, connection, status, body)
	Items     uint64 // items answered by their owner
	FastFails uint64 // items failed without a request: peer down, queue full
	Failed    uint64 // items failed with ErrPeerUnavailable, fast fails included
}

// Forwarder sends items to their owners in per-peer batches. It is safe
// for concurrent use. Peers are added on first use and stopped by
// RemovePeer or Close.
type Forwarder struct {
	cfg Config
	sig *signer // nil without a cluster key
	// peers is an immutable map, replaced under mu, so that Forward finds
	// its peer without a lock.
	peers atomic.Pointer[map[string]*peer]

	waiters sync.Pool // *waiter
	batches sync.Pool // *batch

	stats struct {
		requests, failures, items, fastFails, failed atomic.Uint64
	}

	mu struct {
		sync.Mutex
		closed bool
	}
}

// New returns a Forwarder. Zero fields of cfg take their defaults, and so
// do invalid ones: call [Config.Validate] first to report those.
func New(cfg Config) *Forwarder {
	cfg.fill()
	f := &Forwarder{cfg: cfg, sig: newSigner(cfg.ClusterKey)}
	f.peers.Store(&map[string]*peer{})
	f.waiters.New = func() any { return &waiter{done: make(chan struct{}, 1), res: make([]Result, 1)} }
	f.batches.New = func() any { return new(batch) }
	return f
}

// MaxTimeout is the longest a request may wait for its peer's answer
// (Config.MaxTimeout after defaults): callers bounding a forward by a
// deadline should leave at least that much.
func (f *Forwarder) MaxTimeout() time.Duration { return f.cfg.MaxTimeout }

// Stats returns the Forwarder's counters.
func (f *Forwarder) Stats() Stats {
	return Stats{
		Requests:  f.stats.requests.Load(),
		Failures:  f.stats.failures.Load(),
		Items:     f.stats.items.Load(),
		FastFails: f.stats.fastFails.Load(),
		Failed:    f.stats.failed.Load(),
	}
}

// Forward sends it to the peer whose HTTP address is addr ("host:port")
// in the peer's next batch and returns the owner's answer. It fails with
// [ErrPeerUnavailable] (wrapped) when the peer cannot answer in time: the
// caller should then decide the item itself. It fails early with ctx's
// error if ctx ends first, with an error naming the field if it is out of
// bounds, and with [ErrClosed] after Close.
func (f *Forwarder) Forward(ctx context.Context, addr string, it Item) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, fmt.Errorf("cannot forward to %s: %w", addr, err)
	}
	if err := checkItem(&it); err != nil {
		return Result{}, fmt.Errorf("cannot forward: %w", err)
	}
	p, err := f.peer(addr)
	if err != nil {
		return Result{}, err
	}
	w := f.waiters.Get().(*waiter)
	w.enc = appendItem(w.enc[:0], &it)
	w.n = 1
	if err := p.enqueue(w); err != nil {
		f.waiters.Put(w)
		return Result{}, err
	}
	select {
	case <-w.done:
		r, err := w.res[0], w.err
		w.err = nil
		f.waiters.Put(w)
		return r, err
	case <-ctx.Done():
		// w stays with the peer, which will answer it into the void: it
		// is not reused.
		return Result{}, busyCtxErr(addr, ctx.Err())
	}
}

// ForwardMany sends items to the peer whose HTTP address is addr and
// fills results[i] with the answer to items[i] (len(results) must be
// len(items)). Items are enqueued together, in batches of at most
// MaxBatch. If any batch fails, ForwardMany returns its error (wrapping
// [ErrPeerUnavailable]) and the caller should decide all the items itself:
// the owner may have charged the items of batches that succeeded, so this
// errs towards admitting less, never more.
func (f *Forwarder) ForwardMany(ctx context.Context, addr string, items []Item, results []Result) error {
	if len(results) != len(items) {
		return fmt.Errorf("cannot forward: results: length %d, want %d (one per item)", len(results), len(items))
	}
	if len(items) == 0 {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cannot forward to %s: %w", addr, err)
	}
	for i := range items {
		if err := checkItem(&items[i]); err != nil {
			return fmt.Errorf("cannot forward: item %d: %w", i, err)
		}
	}
	p, err := f.peer(addr)
	if err != nil {
		return err
	}
	chunks := (len(items) + f.cfg.MaxBatch - 1) / f.cfg.MaxBatch
	var one [1]*waiter
	ws := one[:0]
	if chunks > 1 {
		ws = make([]*waiter, 0, chunks)
	}
	var firstErr error
	for off := 0; off < len(items); off += f.cfg.MaxBatch {
		end := min(off+f.cfg.MaxBatch, len(items))
		w := f.waiters.Get().(*waiter)
		w.enc = w.enc[:0]
		for i := off; i < end; i++ {
			w.enc = appendItem(w.enc, &items[i])
		}
		w.n = end - off
		w.res = grow(w.res, w.n)
		if err := p.enqueue(w); err != nil {
			f.waiters.Put(w)
			firstErr = err
			break
		}
		ws = append(ws, w)
	}
	for i, w := range ws {
		select {
		case <-w.done:
		case <-ctx.Done():
			// The remaining waiters stay with the peer: not reused.
			for _, w := range ws[:i] {
				w.err = nil
				f.waiters.Put(w)
			}
			return busyCtxErr(addr, ctx.Err())
		}
	}
	off := 0
	for _, w := range ws {
		if w.err != nil && firstErr == nil {
			firstErr = w.err
		}
		copy(results[off:off+w.n], w.res[:w.n])
		off += w.n
		w.err = nil
		f.waiters.Put(w)
	}
	return firstErr
}

// busyCtxErr is the error of a call whose context ended while its items
// were queued or in flight: the owner is backed up (or still deciding
// them), so they are shed, not decided by the caller.
func busyCtxErr(addr string, err error) error {
	return fmt.Errorf("%w: %w: %s: still queued or in flight when the caller's deadline passed: %w", ErrPeerUnavailable, ErrPeerBusy, addr, err)
}

// RemovePeer stops the peer's goroutines (waiting for requests in flight,
// at most the timeout plus a second for a late reply, and one refund) and
// fails the calls still queued with ErrPeerUnavailable. A later Forward to
// addr starts it afresh.
func (f *Forwarder) RemovePeer(addr string) {
	f.mu.Lock()
	old := *f.peers.Load()
	p, ok := old[addr]
	if ok {
		m := make(map[string]*peer, len(old))
		for a, q := range old {
			if a != addr {
				m[a] = q
			}
		}
		f.peers.Store(&m)
	}
	f.mu.Unlock()
	if ok {
		p.close()
		dropPeerMetrics(addr)
	}
}

// Close stops every peer as RemovePeer does; later calls fail with
// ErrClosed. It is idempotent.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.mu.closed {
		f.mu.Unlock()
		return nil
	}
	f.mu.closed = true
	old := *f.peers.Load()
	f.peers.Store(&map[string]*peer{})
	f.mu.Unlock()
	for _, p := range old {
		p.close()
	}
	return nil
}

// peer returns the peer of addr, starting it if needed.
func (f *Forwarder) peer(addr string) (*peer, error) {
	if p := (*f.peers.Load())[addr]; p != nil {
		return p, nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("cannot forward: peer: %q is not host:port", addr)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mu.closed {
		return nil, ErrClosed
	}
	old := *f.peers.Load()
	if p := old[addr]; p != nil {
		return p, nil
	}
	p := f.newPeer(addr)
	m := make(map[string]*peer, len(old)+1)
	for a, q := range old {
		m[a] = q
	}
	m[addr] = p
	f.peers.Store(&m)
	return p, nil
}

// waiter is one call's items waiting for their results. It belongs to the
// caller until enqueued, then to the peer until done is signalled, then to
// the caller again.
type waiter struct {
	enc  []byte   // the items, encoded
	n    int      // how many
	res  []Result // their results, len ≥ n
	err  error
	done chan struct{} // cap 1
}

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
		met:  newPeerMetrics(addr),
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

// observe adds a round trip to the peer's estimate and sets its timeout.
func (p *peer) observe(rtt time.Duration) {
	p.rtt.Lock()
	p.rtt.est.Add(rtt)
	t := p.rtt.est.Timeout(p.f.cfg.Timeout, p.f.cfg.MaxTimeout)
	p.rtt.Unlock()
	p.timeout.Store(int64(t))
}

// isDown reports whether the peer is backing off.
func (p *peer) isDown() bool {
	d := p.down.Load()
	if d == 0 {
		return false
	}
	if time.Now().UnixNano() < d {
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

// send is one request: it sends b, fans the results out and releases its
// slot. The callers wait for the peer's current timeout; the request
// itself waits up to lateLimit, so that when the owner's reply comes after
// the callers were failed (and shed their checks), what it allowed is
// refunded to it: the owner decided a batch nobody read, and without the
// refund those tokens were spent for nothing.
func (p *peer) send(b *batch) {
	defer p.wg.Done()
	defer func() { <-p.sem }()

	b.body = AppendBatchHeader(b.body[:0], b.n)
	for _, w := range b.ws {
		b.body = append(b.body, w.enc...)
	}
	timeout := time.Duration(p.timeout.Load())
	start := time.Now()
	var finished atomic.Bool // the callers have their answer
	fired := make(chan struct{})
	timer := time.AfterFunc(timeout, func() {
		defer close(fired)
		if finished.CompareAndSwap(false, true) {
			p.observe(timeout)
			p.fail(b, true, fmt.Errorf("no answer within %s", timeout))
		}
	})
	var plans []shard.Plan
	var err error
	var busy bool
	b.results, plans, busy, err = p.do(b, b.body, b.n, start, timeout, timeout+lateWait)
	if !timer.Stop() {
		<-fired
	}
	if !finished.CompareAndSwap(false, true) {
		// The callers were failed at the timeout (the callback finished
		// them and counted the failure).
		if err == nil {
			p.refundLate(b)
		}
		clear(b.results)
		p.putBatch(b)
		return
	}
	if err != nil {
		if busy {
			p.observe(timeout)
		}
		p.fail(b, busy, err)
		p.putBatch(b)
		return
	}
	p.observe(time.Since(start))
	if p.down.Load() != 0 {
		p.down.Store(0)
	}
	p.f.stats.requests.Add(1)
	p.f.stats.items.Add(uint64(b.n))
	p.met.requests.Inc()
	p.met.items.Add(b.n)
	off := 0
	for _, w := range b.ws {
		copy(w.res[:w.n], b.results[off:off+w.n])
		off += w.n
		w.finish(nil)
	}
	clear(b.results)
	p.putBatch(b)
	if len(plans) > 0 && p.f.cfg.OnPlans != nil {
		p.f.cfg.OnPlans(plans)
	}
}

// lateWait is how long a request keeps waiting for a reply after its
// callers had the timeout, to refund what a late reply allowed.
const lateWait = time.Second

// fail marks the peer down (busy or not) and fails b's callers with err.
// b stays the caller's.
func (p *peer) fail(b *batch, busy bool, err error) {
	p.busy.Store(busy)
	p.down.Store(time.Now().Add(p.f.cfg.Backoff).UnixNano())
	p.f.stats.failures.Add(1)
	p.met.failures.Inc()
	p.f.stats.failed.Add(uint64(b.n))
	p.met.unavailable.Add(b.n)
	e := fmt.Errorf("%w: %s: %v", ErrPeerUnavailable, p.addr, err)
	if busy {
		e = fmt.Errorf("%w: %w: %s: %v", ErrPeerUnavailable, ErrPeerBusy, p.addr, err)
	}
	for _, w := range b.ws {
		w.finish(e)
	}
}

// do sends body (a batch of n items) and returns the owner's results
// (decoded into b.results' array) and plans. sent and budget are what
// DeadlineHeader says (when the callers' wait began, and how long it is);
// limit bounds the request. busy reports a failure that says the owner is
// up but overloaded (see ErrPeerBusy). It uses b's auth and deadline
// buffers.
func (p *peer) do(b *batch, body []byte, n int, sent time.Time, budget, limit time.Duration) (results []Result, plans []shard.Plan, busy bool, err error) {
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.Header.SetMethod(fasthttp.MethodPost)
	if p.f.cfg.TLS != nil {
		req.SetRequestURI("https://" + p.addr + Path) // the scheme must match the HostClient's
	} else {
		req.SetRequestURI(Path)
		req.Header.SetHost(p.addr)
	}
	req.Header.SetContentType(ContentType)
	var nonce [NonceLen]byte
	if p.f.sig != nil {
		nonce = newNonce()
		b.auth = p.f.sig.appendAuth(b.auth[:0], fasthttp.MethodPost, Path, p.f.cfg.Self, time.Now().UnixMilli(), &nonce, body)
		req.Header.SetBytesV(AuthHeader, b.auth)
	}
	if p.f.cfg.Self != "" {
		req.Header.Set(FromHeader, p.f.cfg.Self)
	}
	b.dl = appendDeadline(b.dl[:0], sent, budget)
	req.Header.SetBytesV(DeadlineHeader, b.dl)
	if p.f.sig != nil {
		b.auth = p.f.sig.appendDeadlineAuth(b.auth[:0], &nonce, b.dl)
		req.Header.SetBytesV(DeadlineAuthHeader, b.auth)
	}
	req.SetBodyRaw(body)
	defer req.SetBodyRaw(nil)

	err = p.hc.DoTimeout(req, resp, limit)
	busy = isTimeout(err)
	if err == nil && resp.StatusCode() != fasthttp.StatusOK {
		msg := resp.Body()
		if len(msg) > 200 {
			msg = msg[:200]
		}
		code := resp.StatusCode()
		busy = code == fasthttp.StatusServiceUnavailable || code == fasthttp.StatusTooManyRequests
		err = fmt.Errorf("status %d: %s", code, msg)
	}
	if err == nil && p.f.sig != nil {
		err = p.f.sig.verifyReply(resp.Header.Peek(ReplyAuthHeader), &nonce, resp.Body())
	}
	if err == nil {
		results, plans, err = DecodeReply(b.results, nil, resp.Body())
		if err == nil && len(results) != n {
			err = fmt.Errorf("%d results for %d items", len(results), n)
		}
	}
	return results, plans, busy, err
}

// refundLate sends the owner refunds of the checks of b that it allowed
// (b.results) after b's callers were failed: they shed those checks, so
// the hits the owner charged go back. A refund that fails is lost (errs
// towards admitting less).
func (p *peer) refundLate(b *batch) {
	items, err := decodeBatch(nil, b.body, false)
	if err != nil || len(items) != len(b.results) {
		return
	}
	var refunds []Item
	for i := range items {
		it, r := &items[i], &b.results[i]
		if it.Op == OpCheck && it.Hits > 0 && r.Allowed && !r.Degraded && r.Error == "" {
			refunds = append(refunds, Item{Op: OpRefund, Rule: it.Rule, Key: it.Key, Hits: it.Hits})
		}
	}
	if len(refunds) == 0 {
		return
	}
	body, err := AppendBatch(nil, refunds)
	if err != nil {
		return
	}
	saved := b.results
	b.results = nil // do decodes into it: keep the batch's
	now := time.Now()
	if _, _, _, err := p.do(b, body, len(refunds), now, p.f.cfg.MaxTimeout, p.f.cfg.MaxTimeout); err == nil {
		lateRefunds.Add(len(refunds))
	}
	b.results = saved
}

// isTimeout reports whether err is a timeout: of the request, or of the
// connection (fasthttp.ErrDialTimeout; a listener whose accept queue is
// full drops connections instead of refusing them).
func isTimeout(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, fasthttp.ErrTimeout) || errors.Is(err, fasthttp.ErrDialTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
