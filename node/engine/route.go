package engine

import (
	"context"
	"errors"
	"math/rand/v2"
)

// Routing: the step of the decision engine (decide.go) that says where
// each item of a phase is decided. A single node is a cluster of one: its
// ring holds itself alone and it has no peers, so every item is decided
// here and routing costs one length check per item. In a cluster, the
// items of a phase are split by the owner of their counter key (or a
// holder of its hot-key split): items this node owns are decided by its
// Manager while each peer's items go to that peer in one Forward call,
// all peers concurrently, so a batch costs one forwarding round trip per
// phase, not one per item. An item whose owner does not answer in time or
// says it is overloaded (ErrPeerBusy), or has stopped answering
// altogether and is routed around (demote.go), is decided as a Store
// that does not answer would have it (unanswered.go: never shed); one
// whose owner cannot be reached (refused the connection, left the ring)
// or answers with an item error (a rule it does not know yet) is decided
// here by leasing from the shared Store.
// Hits charged to items of a denied request are refunded where they were
// charged: here with Manager.Refund, at the owner with a refund item.

// peerGroup is the items of one phase (or the refunds) bound for one peer.
type peerGroup struct {
	addr    string
	idx     []int32 // indexes in Batch.Items
	items   []PeerItem
	results []PeerResult
	err     error
	demoted bool // the peer is routed around: decided here, not sent (demote.go)
}

func (b *Batch) resetGroups() {
	for i := range b.groups {
		g := &b.groups[i]
		clear(g.items) // drop the views of the request body
		g.addr, g.idx, g.items, g.results, g.err, g.demoted = "", g.idx[:0], g.items[:0], g.results[:0], nil, false
	}
	b.groups = b.groups[:0]
}

// group returns the group of addr, adding it if needed.
func (b *Batch) group(addr string) *peerGroup {
	for i := range b.groups {
		if b.groups[i].addr == addr {
			return &b.groups[i]
		}
	}
	if len(b.groups) < cap(b.groups) {
		b.groups = b.groups[:len(b.groups)+1]
	} else {
		b.groups = append(b.groups, peerGroup{})
	}
	g := &b.groups[len(b.groups)-1]
	g.addr = addr
	return g
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// peer returns the HTTP address of the node that decides a check of ckey,
// "" for this node: a holder of its split if it is split, else its owner.
// Without peers (a single node, or a cluster whose members have no
// address yet) it is always this node.
func (e *Engine) peer(r *Routes, ckey string) string {
	if len(r.Addrs) == 0 {
		return ""
	}
	if c := e.cl; c.split {
		holder, split, self := c.hot.Route(ckey, rand.Uint64())
		if split {
			if self {
				return ""
			}
			if a := r.Addrs[holder]; a != "" {
				return a
			}
			// The holder has no address (it left): its owner decides.
		}
	}
	return r.peerFor(ckey)
}

// phase decides the items of one kind (leased or exact) of the requests of
// b still undecided: those of peers sent to them, this node's decided here
// meanwhile.
func (e *Engine) phase(ctx context.Context, r *Routes, b *Batch, leased bool) {
	b.resetGroups()
	b.local = b.local[:0]
	peers := len(r.Addrs) > 0 // else every item is decided here (see peer)
	for qi := range b.Requests {
		q := &b.Requests[qi]
		q.remote = false
		if q.Err != nil || (!leased && q.denied) {
			continue
		}
		for i := q.lo; i < q.hi; i++ {
			it := &b.Items[i]
			if it.Policy.Algorithm.Leased() != leased {
				continue
			}
			addr := ""
			if peers && !it.peek {
				addr = e.peer(r, it.ckey)
			}
			if addr == "" {
				b.local = append(b.local, i)
				continue
			}
			q.remote = true
			g := b.group(addr)
			g.idx = append(g.idx, i)
			g.items = append(g.items, PeerItem{Rule: it.ri.name, Key: it.Key, Hits: it.Hits})
		}
	}
	if len(b.local) == 0 && len(b.groups) == 0 {
		return
	}
	if d := e.cl.demoteOf(); d != nil {
		for gi := range b.groups {
			g := &b.groups[gi]
			g.demoted = d.routeAround(g.addr)
		}
	}
	wait := noWait
	if len(b.groups) > 0 {
		wait = e.send(ctx, b)
	}
	if len(b.local) > 0 {
		e.decideLocals(b)
		e.capLocals(b)
	}
	if e.cl != nil {
		for _, i := range b.local {
			e.servedHere(&b.Items[i])
		}
	}
	wait()
	if len(b.groups) > 0 {
		e.collect(b)
	}
	// Each request's denied flag was set as its items were decided
	// (Batch.noteDenied).
}

// collect records the peers' answers of a phase. The items of a peer
// that did not answer in time, said it is overloaded (ErrPeerBusy) or is
// routed around (demoted) are decided as unanswered.go says; those of a
// peer that could not be reached (refused the connection, left the ring
// meanwhile, answered an invalid reply) or that answered with an item
// error are decided here.
func (e *Engine) collect(b *Batch) {
	c := e.cl
	for gi := range b.groups {
		g := &b.groups[gi]
		if g.demoted {
			// Its owner stopped answering: decided here, from the Store.
			for _, i := range g.idx {
				e.unanswered(b, i, g.addr)
				c.met.demoted.Inc()
			}
			c.demote.decided(g.addr, len(g.idx))
			continue
		}
		silent := g.err != nil && errors.Is(g.err, ErrPeerBusy)
		for j, i := range g.idx {
			res := &g.results[j]
			if silent {
				e.unanswered(b, i, g.addr)
				continue
			}
			if g.err != nil || res.Err != "" {
				e.decideLocal(b, i)
				c.met.fallback.Inc()
				continue
			}
			it := &b.Items[i]
			if res.Decision.Unavailable && c.shares == nil {
				// The owner's Store is down (a closed rule's 503); this
				// node's, the same shared Store, may answer it.
				e.decideShared(b, i)
				c.met.fallback.Inc()
				continue
			}
			it.Decision = res.Decision
			b.record(it)
			if it.charged {
				it.owner = g.addr
			}
			b.noteDenied(it)
			c.met.forwarded.Inc()
		}
	}
}

// send forwards every group of b, each from its own goroutine unless it
// is the only work of the phase. The caller must call wait before reading
// the groups' results.
func (e *Engine) send(ctx context.Context, b *Batch) (wait func()) {
	n, last := 0, 0
	for gi := range b.groups {
		if !b.groups[gi].demoted {
			n, last = n+1, gi
		}
	}
	if n == 0 {
		return noWait
	}
	c := e.cl
	fctx, cancel := context.WithTimeout(ctx, c.fwd.Budget())
	if n == 1 && len(b.local) == 0 {
		c.forwardGroup(fctx, &b.groups[last])
		cancel()
		return noWait
	}
	b.wg.Add(n)
	for gi := range b.groups {
		if b.groups[gi].demoted {
			continue
		}
		go func(g *peerGroup) {
			defer b.wg.Done()
			c.forwardGroup(fctx, g)
		}(&b.groups[gi])
	}
	return func() {
		b.wg.Wait()
		cancel()
	}
}

func noWait() {}

func (c *cluster) forwardGroup(ctx context.Context, g *peerGroup) {
	g.results = grow(g.results, len(g.items))
	clear(g.results)
	g.err = c.fwd.Forward(ctx, g.addr, g.items, g.results)
}

// refund gives back the hits still charged to the items of denied (or
// failed) requests: here, or at the owner that charged them.
func (e *Engine) refund(ctx context.Context, b *Batch) {
	b.resetGroups()
	b.local = b.local[:0]
	for qi := range b.Requests {
		q := &b.Requests[qi]
		if !q.denied && q.Err == nil {
			continue
		}
		for i := q.lo; i < q.hi; i++ {
			it := &b.Items[i]
			if !it.charged {
				continue
			}
			it.charged = false
			if it.owner == "" {
				it.ri.mgr.Refund(it.ckey, it.Policy, it.Hits)
				continue
			}
			g := b.group(it.owner)
			g.idx = append(g.idx, i)
			g.items = append(g.items, PeerItem{Refund: true, Rule: it.ri.name, Key: it.Key, Hits: it.Hits})
			e.cl.met.refunds.Inc()
		}
	}
	// A refund the owner does not get is lost: the check errs towards
	// admitting less, never more.
	if len(b.groups) > 0 {
		e.send(ctx, b)()
	}
}
