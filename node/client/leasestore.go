package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

// remoteStore is the lease.Store of a Limiter: the nodes' Store, reached
// through the lease protocol. Each call goes to the owner of its key (the
// ring of the member list, or any node, which forwards), batched per node
// for LimiterConfig.Flush.
type remoteStore struct {
	l        *Limiter
	batchers sync.Map // node address → *leaseBatcher
}

var _ lease.Store = (*remoteStore)(nil)

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

// leaseAnswer is one op's answer.
type leaseAnswer struct {
	r   api.LeaseResult
	err error
}

// do queues op for the owner of ckey and waits for its answer.
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
	bi, _ := s.batchers.LoadOrStore(n.addr, &leaseBatcher{s: s})
	b := bi.(*leaseBatcher)
	done := make(chan leaseAnswer, 1)
	b.add(n, op, done)
	select {
	case a := <-done:
		if a.err != nil {
			return a.r, a.err
		}
		if a.r.Error != "" {
			return a.r, fmt.Errorf("%w: %s", lease.ErrStoreUnavailable, a.r.Error)
		}
		return a.r, nil
	case <-ctx.Done():
		return api.LeaseResult{}, fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, ctx.Err())
	}
}

// leaseBatcher gathers the ops to one node for LimiterConfig.Flush (or
// until api.MaxLeaseOps) and sends them as one request.
type leaseBatcher struct {
	s     *remoteStore
	mu    sync.Mutex
	n     *node
	ops   []api.LeaseOp
	waits []chan leaseAnswer
}

func (b *leaseBatcher) add(n *node, op api.LeaseOp, done chan leaseAnswer) {
	b.mu.Lock()
	b.n = n
	b.ops = append(b.ops, op)
	b.waits = append(b.waits, done)
	switch len(b.ops) {
	case 1:
		time.AfterFunc(b.s.l.cfg.Flush, b.flush)
	case api.MaxLeaseOps:
		ops, waits, n := b.take()
		b.mu.Unlock()
		go b.s.send(n, ops, waits)
		return
	}
	b.mu.Unlock()
}

// take empties the batch (b.mu held).
func (b *leaseBatcher) take() ([]api.LeaseOp, []chan leaseAnswer, *node) {
	ops, waits := b.ops, b.waits
	b.ops, b.waits = nil, nil
	return ops, waits, b.n
}

func (b *leaseBatcher) flush() {
	b.mu.Lock()
	ops, waits, n := b.take()
	b.mu.Unlock()
	if len(ops) > 0 {
		b.s.send(n, ops, waits)
	}
}

// send posts one lease request and answers its waiters.
func (s *remoteStore) send(n *node, ops []api.LeaseOp, waits []chan leaseAnswer) {
	l := s.l
	answerAll := func(err error) {
		for _, w := range waits {
			w <- leaseAnswer{err: err}
		}
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(l.c.scheme() + "://" + n.addr + leasePath)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.Set(fasthttp.HeaderAuthorization, l.auth)
	req.Header.SetContentType("application/json")
	req.SetBody(api.AppendLeaseRequest(req.Body()[:0], &api.LeaseRequest{Holder: l.holder, Region: l.cfg.Region, Ops: ops}))
	if err := n.hc.DoTimeout(req, resp, l.cfg.Timeout); err != nil {
		l.c.markDown(n)
		answerAll(fmt.Errorf("%w: %s: %w", lease.ErrStoreUnavailable, n.addr, err))
		return
	}
	if st := resp.StatusCode(); st != fasthttp.StatusOK {
		err := error(&StatusError{Node: n.addr, Status: st, Msg: errorMsg(resp.Body())})
		if st == fasthttp.StatusTooManyRequests || st >= 500 {
			err = fmt.Errorf("%w: %w", lease.ErrStoreUnavailable, err)
		}
		answerAll(err)
		return
	}
	rs, err := api.DecodeLeaseResults(resp.Body(), nil, len(ops))
	if err != nil {
		answerAll(fmt.Errorf("%w: %s: %w", lease.ErrStoreUnavailable, n.addr, err))
		return
	}
	for i, w := range waits {
		w <- leaseAnswer{r: rs[i]}
	}
}
