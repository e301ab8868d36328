package forward

import (
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/shard"
)

// observe adds a round trip to the peer's estimate and sets its timeout.
func (p *peer) observe(rtt time.Duration) {
	p.rtt.Lock()
	p.rtt.est.Add(rtt)
	t := p.rtt.est.Timeout(p.f.cfg.Timeout, p.f.cfg.MaxTimeout)
	p.rtt.Unlock()
	p.timeout.Store(int64(t))
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
	start := p.f.cfg.Now()
	var finished atomic.Bool // the callers have their answer
	fired := make(chan struct{})
	stopTimer := p.f.cfg.AfterFunc(timeout, func() {
		defer close(fired)
		if finished.CompareAndSwap(false, true) {
			p.observe(timeout)
			p.unanswered.Add(1)
			p.fail(b, true, false, fmt.Errorf("no answer within %s", timeout))
		}
	})
	var plans []shard.Plan
	var err error
	var busy bool
	b.results, plans, busy, err = p.do(b, b.body, b.n, start, timeout, timeout+lateWait)
	if err == nil || !isTimeout(err) {
		p.unanswered.Store(0) // the peer answered, if late: it is not silent
		p.answered.Store(p.f.cfg.Now().UnixNano())
	}
	if !stopTimer() {
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
		p.fail(b, busy, !isTimeout(err), err)
		p.putBatch(b)
		return
	}
	p.observe(p.f.cfg.Now().Sub(start))
	if p.down.Load() != 0 {
		p.down.Store(0)
	}
	p.f.stats.requests.Add(1)
	p.f.stats.items.Add(uint64(b.n))
	p.met.requests.Inc()
	p.met.items.Add(b.n)
	off := 0
	for _, w := range b.ws {
		res := b.results[off : off+w.n]
		off += w.n
		if !w.state.CompareAndSwap(0, 1) {
			// Abandoned: its caller decides its checks itself, so what
			// the owner allowed of them goes back to it.
			p.refundItems(b, waiterBody(w), res)
			continue
		}
		copy(w.res[:w.n], res)
		w.finish(nil)
	}
	clear(b.results)
	p.putBatch(b)
	if len(plans) > 0 && p.f.cfg.OnPlans != nil {
		p.f.cfg.OnPlans(plans)
	}
}

// fail fails b's callers with err and, with backoff, marks the peer down
// (busy or not) for Config.Backoff. b stays the caller's. A timeout does
// not back the peer off: a stall of an owner (a GC pause, a stalled VM)
// then costs the checks it held, not a back-off's worth of checks decided
// without it (their senders decide those: node/engine's unanswered.go); a
// peer that stays silent is routed around by the engine (demote.go).
func (p *peer) fail(b *batch, busy, backoff bool, err error) {
	if backoff {
		p.busy.Store(busy)
		p.down.Store(p.f.cfg.Now().Add(p.f.cfg.Backoff).UnixNano())
	}
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
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	busy, err = p.post(resp, body, sent, budget, limit, &b.auth, &b.dl)
	if err == nil {
		results, plans, err = DecodeReply(b.results, nil, resp.Body())
		if err == nil && len(results) != n {
			err = fmt.Errorf("%d results for %d items", len(results), n)
		}
	}
	return results, plans, busy, err
}

// post sends body to the owner, signed (with the cluster key: the auth
// and deadline headers, in the buffers auth and dl), and fills resp with
// its reply once its signature is checked; see do for sent, budget, limit
// and busy.
func (p *peer) post(resp *fasthttp.Response, body []byte, sent time.Time, budget, limit time.Duration, auth, dl *[]byte) (busy bool, err error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
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
		*auth = p.f.sig.appendAuth((*auth)[:0], fasthttp.MethodPost, Path, p.f.cfg.Self, p.f.cfg.Now().UnixMilli(), &nonce, body)
		req.Header.SetBytesV(AuthHeader, *auth)
	}
	if p.f.cfg.Self != "" {
		req.Header.Set(FromHeader, p.f.cfg.Self)
	}
	*dl = appendDeadline((*dl)[:0], sent, budget)
	req.Header.SetBytesV(DeadlineHeader, *dl)
	if p.f.sig != nil {
		*auth = p.f.sig.appendDeadlineAuth((*auth)[:0], &nonce, *dl)
		req.Header.SetBytesV(DeadlineAuthHeader, *auth)
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
	return busy, err
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
