package lease

import (
	"context"
	"time"
)

// A DeadlineStore is a Store whose calls end by their context's deadline
// on their own, without waiting for its Done channel to close at it: a
// call's I/O is bounded by ctx.Deadline() (a connection's deadline), and
// a call that waits for something else waits at most until then (a
// timer of its own). It still ends early when ctx.Done closes, and reads
// ctx.Err (which reports the deadline once it has passed).
//
// A Breaker around a DeadlineStore bounds each call by a context that
// carries the call's deadline and arms no timer (see withDeadline): a
// Store call's context then costs one allocation, where
// context.WithTimeout costs four and a runtime timer set and stopped. A
// gateway's Limiter, whose Store is the nodes' (a request each call),
// is one.
type DeadlineStore interface {
	Store
	// EndsByDeadline marks the Store as one; it is never called.
	EndsByDeadline()
}

// deadlineCtx is a context whose deadline is at, before its parent's,
// and which arms no timer: Done is its parent's (it does not close at
// the deadline); Err reports context.DeadlineExceeded once the clock is
// past it. Only a DeadlineStore is given one.
type deadlineCtx struct {
	context.Context
	at time.Time
}

func (c *deadlineCtx) Deadline() (time.Time, bool) { return c.at, true }

func (c *deadlineCtx) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if !time.Now().Before(c.at) {
		return context.DeadlineExceeded
	}
	return nil
}

// withDeadline is ctx bounded by at for a DeadlineStore's call: ctx
// itself if its own deadline is no later.
func withDeadline(ctx context.Context, at time.Time) context.Context {
	if d, ok := ctx.Deadline(); ok && !d.After(at) {
		return ctx
	}
	return &deadlineCtx{Context: ctx, at: at}
}
