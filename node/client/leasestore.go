package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

// remoteStore is the lease.Store of a Limiter: the nodes' Store, reached
// through the lease protocol. Each call goes to the owner of its key (the
// ring of the member list, or any node, which forwards).
//
// Calls to one node are batched without a timer, as lua's script calls
// are (lua/batch.go): a call goes out at once, as a request of its own
// sent from the calling goroutine, when fewer than
// LimiterConfig.LeaseRequests requests are in flight to its node; calls
// that arrive while that many are in flight wait in the node's queue, and
// when a request ends the queue (at most api.MaxLeaseOps calls, the rest
// stay queued) goes out as the next request. A lone first touch thus costs
// one round trip and waits for nothing, and concurrent ones bound for a
// busy node share a request. A return, which no check waits for, goes
// alone only when nothing is in flight to its node. A request the node
// refuses as too many (429, before it reads it) is sent again at once,
// with the calls queued meanwhile, one request at a time until the node
// answers one: the Limiter's requests follow the node's bound instead of
// failing (the node's Retry-After, in whole seconds, is not waited for).
type remoteStore struct {
	l     *Limiter
	waits sync.Pool // of *leaseWait
	// posts are the requests of queued calls in flight (postQueued), each
	// ending within Timeout: Limiter.Close waits for them once its
	// Manager, which makes every call, is closed.
	posts sync.WaitGroup
	// queued, when set (by tests only), is called with the length of a
	// node's queue each time a call joins it, under the queue's lock.
	queued func(n int)
}

var _ lease.DeadlineStore = (*remoteStore)(nil)

// EndsByDeadline: a call sent at once is bounded by its context's
// deadline (Client.send's DoDeadline), and one that waits in a node's
// queue waits until then at most (await).
func (s *remoteStore) EndsByDeadline() {}

// errNotLeased answers the exact calls: the Limiter sends exact rules as
// checks, never through its Manager.
var errNotLeased = fmt.Errorf("%w: exact rules are sent as checks", lease.ErrWrongAlgorithm)

func (s *remoteStore) Log(context.Context, string, lease.Policy, int64) (lease.Result, error) {
	return lease.Result{}, errNotLeased
}

func (s *remoteStore) Acquire(context.Context, string, lease.Policy, string, int64) (lease.Result, error) {
	return lease.Result{}, errNotLeased
}

func (s *remoteStore) Release(context.Context, string, lease.Policy, string) error {
	return errNotLeased
}

// Ping asks a node for the rules' version (the breaker's probe).
func (s *remoteStore) Ping(ctx context.Context) error {
	return s.l.refreshRules(ctx)
}

// splitKey splits a counter key into rule and key.
func splitKey(ckey string) (rule, key string) {
	rule, key, _ = strings.Cut(ckey, ":")
	return rule, key
}

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func (s *remoteStore) Lease(ctx context.Context, ckey string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	rule, key := splitKey(ckey)
	if want <= 0 && to.ID == "" {
		// A peek (a check of 0 hits on a key the Manager holds nothing
		// of): the node lends nothing for it.
		r, err := s.do(ctx, ckey, api.LeaseOp{Op: api.OpPeek, Rule: rule, Key: key})
		if err != nil {
			return lease.Grant{}, err
		}
		return lease.Grant{Remaining: r.Remaining, Wait: time.Duration(r.WaitMS) * time.Millisecond,
			Reset: time.Duration(r.ResetMS) * time.Millisecond}, nil
	}
	// want 0 with a Lessee renews the loan (what is held, what was spent).
	op := api.LeaseOp{Op: api.OpLease, Rule: rule, Key: key, Want: max(want, 0), Need: min(max(need, 0), max(want, 0)),
		Held: to.Held, TTLMS: min(max(ceilMS(to.TTL), 1), api.MaxLeaseTTLMS), SpentBefore: to.SpentBefore,
		IdleMS: min(int64(to.Idle/time.Millisecond), api.MaxIdleMS), Call: to.Call, Unanswered: to.Unanswered,
		First:        to.First,
		AheadWindows: min(max(to.AheadWindows, 0), api.MaxAheadWindows), AheadTokens: min(max(to.AheadTokens, 0), api.MaxHits)}
	if d := s.l.cfg.Demand; d != nil {
		op.Demand = min(max(d(ckey), 0), api.MaxHits)
	}
	r, err := s.do(ctx, ckey, op)
	if err != nil {
		return lease.Grant{}, err
	}
	if f := s.l.cfg.OnLent; f != nil {
		f(ckey, r.Lent)
	}
	// A need decided as a check (over the holder's share, or past the
	// key's holders): the grant is spent at once, nothing lent.
	g := lease.Grant{Granted: r.Granted, Remaining: r.Remaining, Lent: r.Lent,
		Wait: time.Duration(r.WaitMS) * time.Millisecond, Reset: time.Duration(r.ResetMS) * time.Millisecond,
		Crowded: r.Crowded, Checked: r.Checked}
	if op.AheadWindows > 0 && r.AheadTokens > 0 {
		// Never more than asked: what this holder spends is what it asked.
		g.AheadTokens, g.AheadWindows = min(r.AheadTokens, op.AheadTokens), min(r.AheadWindows, op.AheadWindows)
	}
	return g, nil
}

func (s *remoteStore) Return(ctx context.Context, ckey string, p lease.Policy, tokens int64, _ string) error {
	rule, key := splitKey(ckey)
	_, err := s.do(ctx, ckey, api.LeaseOp{Op: api.OpReturn, Rule: rule, Key: key, Tokens: max(tokens, 0)})
	if f := s.l.cfg.OnLent; f != nil && err == nil {
		f(ckey, 0)
	}
	return err
}

// leaseQueue is one node's lease requests: how many are in flight, and
// the calls waiting for the next one.
type leaseQueue struct {
	mu       sync.Mutex
	inflight int
	waits    []*leaseWait
	// throttled: the node's last answer was 429 (too many lease requests
	// for the client token): one request at a time until one is answered.
	throttled bool
}

// leaseWait is one call waiting in a leaseQueue.
type leaseWait struct {
	ctx  context.Context // the caller's: a call whose caller gave up is not sent
	op   api.LeaseOp
	r    api.LeaseResult
	err  error
	done chan struct{} // receives once r and err are set
}

// errThrottled is a lease request the node answered 429: it applied none
// of its ops (it refuses a flood before reading the request), so they
// are sent again.
var errThrottled = errors.New("too many lease requests")

// do sends op to the owner of ckey (see remoteStore) and returns its
// answer. It returns when the answer is in or ctx is done.
func (s *remoteStore) do(ctx context.Context, ckey string, op api.LeaseOp) (api.LeaseResult, error) {
	c := s.l.c
	if c.closed() {
		return api.LeaseResult{}, ErrClosed
	}
	v := c.view.Load()
	n := v.owner(ckey)
	if n == nil {
		n = c.any(v, nil)
	}
	if n == nil {
		return api.LeaseResult{}, fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, ErrNoNodes)
	}
	room := s.l.cfg.LeaseRequests
	if op.Op == api.OpReturn {
		// No check waits for a return: it goes alone only to an idle
		// node, and shares a request otherwise (Close and the idle sweep
		// return many keys at once).
		room = 1
	}
	q := &n.lease
	q.mu.Lock()
	if q.throttled {
		room = 1
	}
	if q.inflight < room {
		// Room in flight: op goes now, alone, from this goroutine.
		q.inflight++
		q.mu.Unlock()
		cl := c.getCall()
		cl.lops = append(cl.lops[:0], op)
		rs, err := s.post(ctx, n, cl)
		var r api.LeaseResult
		if err == nil {
			r = rs[0]
		}
		c.putCall(cl)
		if err != errThrottled {
			s.ended(n, err == nil)
			return answerOf(r, err)
		}
		// Not applied: op waits for the next request, which goes now.
		w := s.wait(ctx, op)
		q.mu.Lock()
		q.throttled = true
		q.waits = append(q.waits, w)
		q.mu.Unlock()
		s.ended(n, false)
		return s.await(ctx, w)
	}
	w := s.wait(ctx, op)
	q.waits = append(q.waits, w)
	var full []*leaseWait
	if len(q.waits) == api.MaxLeaseOps { // a full request goes at once
		full, q.waits = q.waits, nil
		q.inflight++
	}
	if s.queued != nil {
		s.queued(len(q.waits))
	}
	q.mu.Unlock()
	if full != nil {
		s.posts.Go(func() { s.postQueued(n, full) })
	}
	return s.await(ctx, w)
}

// wait returns a leaseWait for op of a caller with ctx.
func (s *remoteStore) wait(ctx context.Context, op api.LeaseOp) *leaseWait {
	w, _ := s.waits.Get().(*leaseWait)
	if w == nil {
		w = &leaseWait{done: make(chan struct{}, 1)}
	}
	w.ctx, w.op, w.r, w.err = ctx, op, api.LeaseResult{}, nil
	return w
}

// await waits for w's answer, ctx's end or its deadline (which ctx.Done
// need not close at: see lease.DeadlineStore).
func (s *remoteStore) await(ctx context.Context, w *leaseWait) (api.LeaseResult, error) {
	var expired <-chan time.Time
	if d, ok := ctx.Deadline(); ok {
		t := time.NewTimer(time.Until(d))
		defer t.Stop()
		expired = t.C
	}
	err := context.DeadlineExceeded
	select {
	case <-w.done:
		r, err := w.r, w.err
		w.ctx, w.op = nil, api.LeaseOp{}
		s.waits.Put(w)
		return answerOf(r, err)
	case <-ctx.Done():
		err = ctx.Err()
	case <-expired:
	}
	// w is abandoned: its request may still write to it, so it is not
	// reused. The node may still apply op: its answer is lost, as a
	// single call's is when its deadline passes first.
	return api.LeaseResult{}, fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, err)
}

// answerOf is a call's result: an op the node answered with an error was
// not applied, a failed Store call for the holder.
func answerOf(r api.LeaseResult, err error) (api.LeaseResult, error) {
	switch {
	case err == errThrottled:
		return r, fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, err)
	case err != nil:
		return r, err
	case r.Error != "":
		return r, fmt.Errorf("%w: %s", lease.ErrStoreUnavailable, r.Error)
	}
	return r, nil
}

// ended is told that a request to n ended, answered (ok) or not: the
// calls queued meanwhile go out as the next request (in a goroutine of
// its own: the caller may be waiting for its own answer), or n has one
// request fewer in flight. Calls whose callers gave up are dropped.
func (s *remoteStore) ended(n *node, ok bool) {
	q := &n.lease
	q.mu.Lock()
	if ok {
		q.throttled = false
	}
	live := q.waits[:0]
	for _, w := range q.waits {
		if w.ctx.Err() == nil {
			live = append(live, w)
		} else {
			w.err = fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, w.ctx.Err())
			w.done <- struct{}{} // (buffered: its caller has gone, or reads this)
		}
	}
	clear(q.waits[len(live):])
	q.waits = live
	if len(q.waits) == 0 {
		q.inflight--
		q.mu.Unlock()
		return
	}
	k, was := min(len(q.waits), api.MaxLeaseOps), len(q.waits)
	ws := append([]*leaseWait(nil), q.waits[:k]...)
	q.waits = append(q.waits[:0], q.waits[k:]...)
	clear(q.waits[len(q.waits):was])
	q.mu.Unlock()
	s.posts.Go(func() { s.postQueued(n, ws) })
}

// postQueued sends queued calls as one request, answers each, and tells
// n's queue it ended. Calls the node refused with 429 (it applied none)
// go back to the front of the queue, and the node gets one request at a
// time until it answers one: the next goes as this one ends, carrying
// them and every call queued meanwhile.
func (s *remoteStore) postQueued(n *node, ws []*leaseWait) {
	c := s.l.c
	cl := c.getCall()
	for _, w := range ws {
		cl.lops = append(cl.lops, w.op)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.l.cfg.Timeout)
	rs, err := s.post(ctx, n, cl)
	cancel()
	if err == errThrottled {
		c.putCall(cl)
		q := &n.lease
		q.mu.Lock()
		q.throttled = true
		q.waits = append(ws, q.waits...)
		q.mu.Unlock()
		s.ended(n, false)
		return
	}
	for i, w := range ws {
		if err != nil {
			w.err = err
		} else {
			w.r = rs[i]
		}
		w.done <- struct{}{}
	}
	c.putCall(cl)
	s.ended(n, err == nil)
}

// post sends cl.lops to n (or, if the connection to n cannot be made,
// another node, which forwards them) as one lease request and returns the
// answers, in order (in cl.lres). Every error is a failed Store call.
func (s *remoteStore) post(ctx context.Context, n *node, cl *call) ([]api.LeaseResult, error) {
	l := s.l
	// The key is canonical already: SetCanonical skips Set's copy and
	// normalisation of it (the value is copied in either way).
	cl.req.Header.SetCanonical([]byte(fasthttp.HeaderAuthorization), unsafe.Slice(unsafe.StringData(l.auth), len(l.auth)))
	cl.body = api.AppendLeaseRequest(cl.body[:0], &api.LeaseRequest{Holder: l.holder, Region: l.cfg.Region, Ops: cl.lops})
	sent, err := l.c.send(ctx, l.c.view.Load(), n, leasePath, cl)
	if err != nil {
		if errors.Is(err, ErrClosed) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, err)
	}
	switch st := cl.resp.StatusCode(); {
	case st == fasthttp.StatusTooManyRequests:
		return nil, errThrottled
	case st >= 500:
		return nil, fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, &StatusError{Node: sent.addr, Status: st, Msg: errorMsg(cl.resp.Body())})
	case st != fasthttp.StatusOK:
		return nil, &StatusError{Node: sent.addr, Status: st, Msg: errorMsg(cl.resp.Body())}
	}
	rs, err := api.DecodeLeaseResults(cl.resp.Body(), cl.lres[:0], len(cl.lops))
	cl.lres = rs
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", lease.ErrStoreUnavailable, sent.addr, err)
	}
	return rs, nil
}
