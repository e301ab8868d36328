package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/shard"
)

// The node's adapters between the engine and node/forward: forwarder is
// the engine's Forwarder (the sending side), decider the internal
// endpoint's Decider (the owner side, which the engine decides with
// DecideOwned).

// forwarder is a forward.Forwarder as the engine's Forwarder.
type forwarder struct {
	f       *forward.Forwarder
	timeout time.Duration // the Forwarder's timeout
	bufs    sync.Pool     // of *wireBufs
}

// wireBufs hold one call's items and results in node/forward's types.
type wireBufs struct {
	items   []forward.Item
	results []forward.Result
}

func newForwarder(f *forward.Forwarder, timeout time.Duration) *forwarder {
	return &forwarder{f: f, timeout: timeout, bufs: sync.Pool{New: func() any { return new(wireBufs) }}}
}

// Budget bounds one phase's forwarding: the Forwarder's own (adaptive)
// timeout ends every request sooner, unless a peer's queue is backed up.
func (a *forwarder) Budget() time.Duration { return a.f.MaxTimeout() + a.timeout }

// Unanswered is the Forwarder's count of addr's requests in a row that got
// no answer in time.
func (a *forwarder) Unanswered(addr string) int { return a.f.Unanswered(addr) }

// Forward sends items to addr with ForwardMany. forward.ErrPeerBusy
// (the owner, alive, did not answer in time or is overloaded) is
// answered as engine.ErrPeerBusy.
func (a *forwarder) Forward(ctx context.Context, addr string, items []engine.PeerItem, results []engine.PeerResult) error {
	w := a.bufs.Get().(*wireBufs)
	defer a.bufs.Put(w)
	w.items = w.items[:0]
	for i := range items {
		it := &items[i]
		op := forward.OpCheck
		if it.Refund {
			op = forward.OpRefund
		}
		w.items = append(w.items, forward.Item{Op: op, Rule: it.Rule, Key: it.Key, Hits: it.Hits})
	}
	w.results = grow(w.results, len(items))
	clear(w.results)
	err := a.f.ForwardMany(ctx, addr, w.items, w.results)
	clear(w.items) // drop the views of the request
	if err != nil {
		if errors.Is(err, forward.ErrPeerBusy) {
			return fmt.Errorf("%w: %w", engine.ErrPeerBusy, err)
		}
		return err
	}
	for i := range results {
		r := &w.results[i]
		results[i] = engine.PeerResult{Decision: r.Decision(), Err: r.Error}
	}
	return nil
}

// ForwardLeases has the owner at addr apply lease ops
// (forward.Forwarder.ForwardLeases).
func (a *forwarder) ForwardLeases(ctx context.Context, addr string, ops []engine.LeaseOp, results []engine.LeaseResult) error {
	return a.f.ForwardLeases(ctx, addr, ops, results)
}

// decider is the engine as the forward.Decider of the items peers send
// this node.
type decider struct {
	eng    *engine.Engine
	states sync.Pool // of *ownedState
}

// ownedState is one DecideBatch's scratch space.
type ownedState struct {
	b       engine.Batch
	items   []engine.PeerItem
	results []engine.PeerResult
}

func newDecider(e *engine.Engine) *decider {
	return &decider{eng: e, states: sync.Pool{New: func() any { return new(ownedState) }}}
}

// DecideBatch decides items forwarded by peers with the engine
// (engine.Engine.DecideOwned): an item it cannot decide is answered with
// an item error, and the sender then decides it itself.
func (d *decider) DecideBatch(items []forward.Item, results []forward.Result) []shard.Plan {
	st := d.states.Get().(*ownedState)
	defer d.states.Put(st)
	st.items = st.items[:0]
	for i := range items {
		it := &items[i]
		st.items = append(st.items, engine.PeerItem{Refund: it.Op == forward.OpRefund, Rule: it.Rule, Key: it.Key, Hits: it.Hits})
	}
	st.results = grow(st.results, len(items))
	clear(st.results)
	plans := d.eng.DecideOwned(&st.b, st.items, st.results, nil)
	for i := range results {
		r := &st.results[i]
		if r.Err != "" {
			results[i] = forward.Result{Error: r.Err}
			continue
		}
		if items[i].Op != forward.OpRefund {
			results[i] = forward.ResultOf(r.Decision)
		}
	}
	st.b.Reset()
	clear(st.items) // drop the views of the request body
	return plans
}

// DecideLeases applies the lease ops peers forwarded, with the engine
// (engine.Engine.DecideOwnedLeases): the forward.LeaseDecider.
func (d *decider) DecideLeases(ops []engine.LeaseOp, results []engine.LeaseResult) {
	d.eng.DecideOwnedLeases(ops, results)
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
