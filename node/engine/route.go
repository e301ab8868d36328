package node

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/shard"
)

// Routing: the step of the decision engine (decide.go) that says where
// each item of a phase is decided. A single node is a cluster of one: its
// ring holds itself alone and it has no peers, so every item is decided
// here and routing costs one length check per item. In a cluster, the
// items of a phase are split by the owner of their counter key (or a
// holder of its hot-key split): items this node owns are decided by its
// Manager while each peer's items go to that peer in one ForwardMany call,
// all peers concurrently, so a batch costs one forwarding round trip per
// phase, not one per item. An item whose owner, still a member, does not
// answer in time or says it is overloaded (forward.ErrPeerBusy) is shed
// (answered 503, see shed); one whose owner cannot be reached (refused the
// connection, left the ring) or answers with an item error (a rule it does
// not know yet) is decided here by leasing from the shared Store (see the
// package doc, "Cluster").
// Hits charged to items of a denied request are refunded where they were
// charged: here with Manager.Refund, at the owner with an OpRefund item.

// peerGroup is the items of one phase (or the refunds) bound for one peer.
type peerGroup struct {
	addr    string
	idx     []int32 // indexes in Batch.Items
	items   []forward.Item
	results []forward.Result
	err     error
}

func (b *Batch) resetGroups() {
	for i := range b.groups {
		g := &b.groups[i]
		clear(g.items) // drop the views of the request body
		g.addr, g.idx, g.items, g.results, g.err = "", g.idx[:0], g.items[:0], g.results[:0], nil
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
func (n *Node) peer(r *routes, ckey string) string {
	if len(r.addrs) == 0 {
		return ""
	}
	c := n.cl
	if hs := c.hot; hs.split {
		holder, split, self := hs.h.Route(ckey, rand.Uint64())
		if split {
			if self {
				return ""
			}
			if a := r.addrs[holder]; a != "" {
				return a
			}
			// The holder has no address (it left): its owner decides.
		}
	}
	return r.peerFor(ckey, r.self)
}

// phase decides the items of one kind (leased or exact) of the requests of
// b still undecided: those of peers sent to them, this node's decided here
// meanwhile.
func (n *Node) phase(ctx context.Context, r *routes, b *Batch, leased bool) {
	b.resetGroups()
	b.local = b.local[:0]
	peers := len(r.addrs) > 0 // else every item is decided here (see peer)
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
				addr = n.peer(r, it.ckey)
			}
			if addr == "" {
				b.local = append(b.local, i)
				continue
			}
			q.remote = true
			g := b.group(addr)
			g.idx = append(g.idx, i)
			g.items = append(g.items, forward.Item{Op: forward.OpCheck, Rule: it.ri.name, Key: it.Key, Hits: it.Hits})
		}
	}
	if len(b.local) == 0 && len(b.groups) == 0 {
		return
	}
	wait := noWait
	if len(b.groups) > 0 {
		wait = n.send(ctx, b)
	}
	if len(b.local) > 0 {
		n.decideLocals(b)
	}
	if n.cl != nil {
		for _, i := range b.local {
			n.servedHere(&b.Items[i])
		}
	}
	wait()
	if len(b.groups) > 0 {
		n.collect(b)
	}
	// Each request's denied flag was set as its items were decided
	// (Batch.noteDenied).
}

// collect records the peers' answers of a phase. The items of a peer that
// membership still lists as alive and that did not answer in time or said
// it is overloaded (forward.ErrPeerBusy) are shed (see shed); those of a
// peer that could not be reached (refused the connection, left the ring
// meanwhile, answered an invalid reply) or that answered with an item
// error are decided here.
func (n *Node) collect(b *Batch) {
	c := n.cl
	var r *routes // loaded at the first failure
	for gi := range b.groups {
		g := &b.groups[gi]
		shed := false
		if g.err != nil && errors.Is(g.err, forward.ErrPeerBusy) {
			if r == nil {
				r = n.routes.Load()
			}
			shed = r.alive(g.addr)
		}
		for j, i := range g.idx {
			res := &g.results[j]
			if shed {
				n.shed(b, i)
				continue
			}
			if g.err != nil || res.Error != "" {
				n.decideLocal(b, i)
				c.met.fallback.Inc()
				continue
			}
			it := &b.Items[i]
			it.Decision = res.Decision()
			it.Decided = true
			// As in record: a degraded decision took nothing from a leased
			// bucket, so it is never refunded.
			it.charged = it.Decision.Allowed && it.Hits > 0 && !it.Decision.Degraded
			if it.charged {
				it.owner = g.addr
			}
			it.ri.checks[decisionOf(it.Decision, it.ri.rule.Shadow, it.Policy.OnFailure)].Inc()
			b.noteDenied(it)
			c.met.forwarded.Inc()
		}
	}
}

// shed answers item i as shed: denied and unavailable (503 with
// Retry-After, as a closed rule with the Store down), retry after the
// Forwarder's back-off. Nothing was charged here; the owner may have
// charged it (a timed-out batch it decided late), which errs towards
// admitting less.
func (n *Node) shed(b *Batch, i int32) {
	it := &b.Items[i]
	if b.Requests[it.req].Err != nil {
		return
	}
	c := n.cl
	it.Decision = lease.Decision{Limit: it.Policy.Limit, RetryAfter: c.shedRetry, Unavailable: true}
	it.Decided = true
	it.charged = false
	it.ri.checks[decShed].Inc()
	b.noteDenied(it)
	c.met.shed.Inc()
}

// alive reports whether addr is the HTTP address of a member of the ring:
// membership still calls it alive.
func (r *routes) alive(addr string) bool {
	for _, a := range r.addrs {
		if a == addr {
			return true
		}
	}
	return false
}

// send forwards every group of b, each from its own goroutine unless it
// is the only work of the phase. The caller must call wait before reading
// the groups' results.
func (n *Node) send(ctx context.Context, b *Batch) (wait func()) {
	if len(b.groups) == 0 {
		return noWait
	}
	c := n.cl
	fctx, cancel := context.WithTimeout(ctx, c.forwardBudget())
	if len(b.groups) == 1 && len(b.local) == 0 {
		c.forwardGroup(fctx, &b.groups[0])
		cancel()
		return noWait
	}
	b.wg.Add(len(b.groups))
	for gi := range b.groups {
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

// forwardBudget bounds one phase's forwarding: the Forwarder's own
// (adaptive) timeout ends every request sooner, unless a peer's queue is
// backed up.
func (c *cluster) forwardBudget() time.Duration {
	return c.fwd.MaxTimeout() + time.Duration(c.timeout)
}

func (c *cluster) forwardGroup(ctx context.Context, g *peerGroup) {
	g.results = grow(g.results, len(g.items))
	clear(g.results)
	g.err = c.fwd.ForwardMany(ctx, g.addr, g.items, g.results)
}

// refund gives back the hits still charged to the items of denied (or
// failed) requests: here, or at the owner that charged them.
func (n *Node) refund(ctx context.Context, b *Batch) {
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
				n.mgr.Refund(it.ckey, it.Policy, it.Hits)
				continue
			}
			g := b.group(it.owner)
			g.idx = append(g.idx, i)
			g.items = append(g.items, forward.Item{Op: forward.OpRefund, Rule: it.ri.name, Key: it.Key, Hits: it.Hits})
			n.cl.met.refunds.Inc()
		}
	}
	// A refund the owner does not get is lost: the check errs towards
	// admitting less, never more.
	if len(b.groups) > 0 {
		n.send(ctx, b)()
	}
}

// decider is the Node as the forward.Decider of the items peers send it.
type decider Node

// decideChunk is how many forwarded items one goroutine decides. A batch
// of cold keys needs one Store round trip per key: deciding a full batch
// (256 items) serially could outlast the sender's forwarding timeout, so
// larger batches are decided by several goroutines at once.
const decideChunk = 32

// DecideBatch decides items forwarded by peers with this node's rules (so
// overrides apply as configured here) and Manager. An unknown rule, or a
// call the Manager refuses, is answered as an item error: the sender then
// decides the item itself. Forwarded checks are counted by the node that
// answered the gateway, not here (sluice_forward_served_items_total counts
// them here). The checks are observed as served here (hot keys), and the
// reply carries the split plans of the batch's keys that the sender should
// route by.
func (d *decider) DecideBatch(items []forward.Item, results []forward.Result) []shard.Plan {
	n := (*Node)(d)
	t := n.rules.Load()
	if len(items) <= decideChunk {
		return n.decideForwarded(t, items, results, nil)
	}
	var wg sync.WaitGroup
	chunks := (len(items) + decideChunk - 1) / decideChunk
	plans := make([][]shard.Plan, chunks)
	for ci := range chunks {
		lo := ci * decideChunk
		hi := min(lo+decideChunk, len(items))
		wg.Go(func() { plans[ci] = n.decideForwarded(t, items[lo:hi], results[lo:hi], nil) })
	}
	wg.Wait()
	var all []shard.Plan
	for _, ps := range plans {
		for _, p := range ps {
			if !slices.ContainsFunc(all, func(q shard.Plan) bool { return q.Key == p.Key }) {
				all = append(all, p)
			}
		}
	}
	return all
}

// decideForwarded decides forwarded items in order (see DecideBatch) and
// appends to plans the split plans their senders should know.
func (n *Node) decideForwarded(t *ruleTable, items []forward.Item, results []forward.Result, plans []shard.Plan) []shard.Plan {
	st := n.getState()
	defer n.putState(st)
	for i := range items {
		it := &items[i]
		res := &results[i]
		var ri *ruleInfo
		if t != nil {
			ri = t.get(it.Rule)
		}
		if ri == nil {
			res.Error = "unknown rule"
			continue
		}
		p := ri.rule.PolicyFor(it.Key)
		st.b.keys = st.b.keys[:0]
		ckey := st.b.counterKey(ri.prefix, it.Key)
		var dec lease.Decision
		var err error
		if c := n.cl; c != nil && it.Op != forward.OpRefund && ri.base.Algorithm != lease.Concurrency {
			c.met.served.Inc()
			c.hot.h.Observe(ckey)
			if c.hot.split {
				plans = c.hot.h.PlansFor(plans, ckey)
			}
		}
		switch {
		case it.Op == forward.OpRefund:
			if p.Algorithm.Leased() {
				n.mgr.Refund(ckey, p, it.Hits)
			}
			continue
		case ri.base.Algorithm == lease.Concurrency:
			if it.Hits != 0 {
				res.Error = "concurrency rule: only peeks (hits 0) are forwarded"
				continue
			}
			dec, _, err = n.mgr.Acquire(ckey, p, 0)
		default:
			dec, err = n.mgr.Take(ckey, p, it.Hits)
		}
		if err != nil {
			_, msg, _ := errorStatus(err)
			res.Error = msg
			continue
		}
		*res = forward.ResultOf(dec)
	}
	return plans
}
