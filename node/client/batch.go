package client

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/node/api"
)

// Client-side batching of Check (Config.BatchWindow > 0): concurrent
// checks for the same node wait up to BatchWindow, or until BatchSize of
// them are queued, and go as one POST /v1/checks. The batch's first check
// starts a timer; the timer, or the check that fills the batch, sends it.

// pending is one Check waiting in a batch.
type pending struct {
	req  api.CheckRequest
	res  api.CheckResult
	err  error
	done chan struct{} // receives once the result is set
}

// batch is the checks queued for one node.
type batch struct {
	items []*pending
	timer *time.Timer
}

// batcher queues the checks of one node.
type batcher struct {
	mu  sync.Mutex
	cur *batch // the open batch, nil when none
}

// batching holds the Client's batching state.
type batching struct {
	pendings sync.Pool // of *pending
	batches  sync.Pool // of *batch

	// mu protects closed, and orders flushes.Add before Close's Wait.
	mu      sync.Mutex
	closed  bool
	flushes sync.WaitGroup // timers armed and batches being sent
}

// closeBatching stops new batches and waits for those in flight (each
// ends within Timeout × MaxAttempts).
func (c *Client) closeBatching() {
	c.bat.mu.Lock()
	c.bat.closed = true
	c.bat.mu.Unlock()
	// Answer the open batches now rather than at the end of their window
	// (with ErrClosed: the Client is closed). A batch of a node that left
	// the view still ends with its timer, within BatchWindow.
	v := c.view.Load()
	for _, n := range v.nodes {
		b := &n.batch
		b.mu.Lock()
		cur := b.cur
		b.cur = nil
		b.mu.Unlock()
		if cur != nil && cur.timer.Stop() {
			c.flush(v, n, cur)
			c.bat.flushes.Done()
		}
	}
	c.bat.flushes.Wait()
}

// checkBatched queues the check for n (nil: any node) and waits for its
// batch's answer or ctx.
func (c *Client) checkBatched(ctx context.Context, v *view, n *node, rule, key string, hits int64) (api.CheckResult, error) {
	if n == nil {
		n = c.any(v, nil)
		if n == nil {
			return api.CheckResult{}, ErrNoNodes
		}
	}
	p, _ := c.bat.pendings.Get().(*pending)
	if p == nil {
		p = &pending{done: make(chan struct{}, 1)}
	}
	p.req = api.CheckRequest{Rule: rule, Key: key, Hits: hits, HitsSet: true}
	p.res, p.err = api.CheckResult{Rule: rule, Key: key}, nil

	b := &n.batch
	b.mu.Lock()
	cur := b.cur
	if cur == nil {
		c.bat.mu.Lock()
		if c.bat.closed {
			c.bat.mu.Unlock()
			b.mu.Unlock()
			return api.CheckResult{}, ErrClosed
		}
		c.bat.flushes.Add(1)
		c.bat.mu.Unlock()
		cur, _ = c.bat.batches.Get().(*batch)
		if cur == nil {
			cur = &batch{}
		}
		b.cur = cur
		cur.timer = time.AfterFunc(c.cfg.BatchWindow, func() {
			defer c.bat.flushes.Done()
			b.mu.Lock()
			if b.cur != cur { // already sent full
				b.mu.Unlock()
				return
			}
			b.cur = nil
			b.mu.Unlock()
			c.flush(v, n, cur)
		})
	}
	cur.items = append(cur.items, p)
	full := len(cur.items) >= c.cfg.BatchSize
	if full {
		b.cur = nil
	}
	b.mu.Unlock()
	if full {
		if cur.timer.Stop() {
			defer c.bat.flushes.Done() // the timer will not run: its Done is ours
		}
		c.flush(v, n, cur)
	}

	select {
	case <-p.done:
		res, err := p.res, p.err
		c.bat.pendings.Put(p)
		return res, err
	case <-ctx.Done():
		// p is abandoned: the flush still writes to it, so it is not reused.
		return api.CheckResult{}, ctx.Err()
	}
}

// flush sends a batch and hands each check its result.
func (c *Client) flush(v *view, n *node, b *batch) {
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout*time.Duration(c.cfg.MaxAttempts))
	defer cancel()
	cl := c.getCall()
	defer c.putCall(cl)
	for _, p := range b.items {
		cl.batch.Checks = append(cl.batch.Checks, p.req)
		cl.res = append(cl.res, api.CheckResult{Rule: p.req.Rule, Key: p.req.Key})
	}
	cl.body = api.AppendChecksRequest(cl.body[:0], &cl.batch)
	sent, err := c.send(ctx, v, n, "/v1/checks", cl)
	var out []api.CheckResult
	if err == nil {
		out, err = c.batchAnswer(cl, sent, len(b.items))
	} else {
		err = fmt.Errorf("cannot check: %w", err)
	}
	for k, p := range b.items {
		switch {
		case err != nil:
			p.err = err
		case out[k].Error != "":
			p.err = &api.FieldError{Field: stripItem(out[k].Field), Msg: out[k].Error}
		default:
			p.res = out[k]
		}
		p.done <- struct{}{}
	}
	clear(b.items)
	b.items = b.items[:0]
	b.timer = nil
	c.bat.batches.Put(b)
}

// stripItem turns "checks[3].key" into "key": the field of a single check.
func stripItem(field string) string {
	if rest, ok := strings.CutPrefix(field, "checks["); ok {
		if _, after, ok := strings.Cut(rest, "]"); ok {
			return strings.TrimPrefix(after, ".")
		}
	}
	return field
}
