package forward

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
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
	// be deciding its keys, so a caller that decides the items itself
	// must not admit them twice (node/engine decides them from a shared
	// Store, or within its share of the limit). Failures without it (connection refused or
	// reset, a peer removed, a reply that is not valid) say the owner
	// is not deciding: the caller may decide the items itself.
	ErrPeerBusy = errors.New("peer busy")
	// ErrClosed means the Forwarder was closed.
	ErrClosed = errors.New("forwarder closed")
)

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

	lateRefunds *metrics.Counter // in cfg.Metrics

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
	f := &Forwarder{cfg: cfg, sig: newSigner(cfg.ClusterKey), lateRefunds: cfg.Metrics.GetOrCreateCounter(lateRefundsName)}
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
	w.state.Store(0)
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
		// is not reused; what the owner allowed is refunded to it.
		if !w.abandon() {
			p.refundUnread(w, true)
		}
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
		w.state.Store(0)
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
			// The remaining waiters stay with the peer: not reused; what
			// the owner allowed of them is refunded to it (the caller
			// decides them all). So is what it allowed of those already
			// answered.
			for _, w := range ws[i:] {
				if !w.abandon() {
					p.refundUnread(w, true)
				}
			}
			for _, w := range ws[:i] {
				if w.err == nil {
					p.refundUnread(w, false) // not reused either
				} else {
					w.err = nil
					f.waiters.Put(w)
				}
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

// Unanswered is how many requests in a row to the peer at addr got no
// answer within their timeout: 0 for a peer never sent to, one that
// answered since (late, or with an error status), or one that answered
// anything within the last Backoff (an overloaded owner answers late,
// but answers; a stopped one answers nothing). A caller that routes
// around a silent peer reads it; only a request sent to the peer (a probe)
// can bring it back to 0.
func (f *Forwarder) Unanswered(addr string) int {
	p := (*f.peers.Load())[addr]
	if p == nil {
		return 0
	}
	n := int(p.unanswered.Load())
	if n > 0 && f.cfg.Now().UnixNano()-p.answered.Load() < int64(f.cfg.Backoff) {
		return 0
	}
	return n
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
		dropPeerMetrics(f.cfg.Metrics, addr)
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
