package node

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/shard"
)

// Routing (cluster only). A request's items, or a whole batch's, are
// decided in two phases as on a single node (leased rules first, then
// exact rules of the checks nothing denied). In each phase the items are
// split by the owner of their counter key: items this node owns are
// decided by its Manager while each peer's items go to that peer in one
// ForwardMany call, all peers concurrently, so a batch costs one forwarding
// round trip per phase, not one per item. An item whose owner does not
// answer in time (forward.ErrPeerUnavailable), or answers with an item
// error (a rule it does not know yet), is decided here by leasing from the
// shared Store. Hits charged to items of a denied check are refunded where
// they were charged: here with Manager.Refund, at the owner with an
// OpRefund item.

// routedCheck is one check of a routed request: its items are
// items[lo:hi].
type routedCheck struct {
	lo, hi int
	hits   int64
	idx    int // the check's index in its batch
	denied bool
	err    error
}

// peerGroup is the items of one phase (or the refunds) bound for one peer.
type peerGroup struct {
	addr    string
	idx     []int // indexes in items
	items   []forward.Item
	results []forward.Result
	err     error
}

// routeState is the scratch space of a routed request, pooled.
type routeState struct {
	checks []routedCheck
	check  []int32  // per item: index in checks
	owner  []string // per item: the peer that charged it ("" here)
	local  []int
	groups []peerGroup
	wg     sync.WaitGroup
	take   batchTake // the local items of a phase (see decideLocals)
}

func (c *cluster) getRoute(nItems int) *routeState {
	rs := c.states.Get().(*routeState)
	rs.check = grow(rs.check, nItems)
	rs.owner = grow(rs.owner, nItems)
	clear(rs.owner)
	return rs
}

func (c *cluster) putRoute(rs *routeState) {
	clear(rs.checks)
	rs.checks = rs.checks[:0]
	rs.resetGroups()
	c.states.Put(rs)
}

func (rs *routeState) resetGroups() {
	rs.local = rs.local[:0]
	for i := range rs.groups {
		g := &rs.groups[i]
		clear(g.items) // drop the views of the request body
		g.addr, g.idx, g.items, g.results, g.err = "", g.idx[:0], g.items[:0], g.results[:0], nil
	}
	rs.groups = rs.groups[:0]
}

// group returns the group of addr, adding it if needed.
func (rs *routeState) group(addr string) *peerGroup {
	for i := range rs.groups {
		if rs.groups[i].addr == addr {
			return &rs.groups[i]
		}
	}
	if len(rs.groups) < cap(rs.groups) {
		rs.groups = rs.groups[:len(rs.groups)+1]
	} else {
		rs.groups = append(rs.groups, peerGroup{})
	}
	g := &rs.groups[len(rs.groups)-1]
	g.addr = addr
	return g
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// decide is Node.decide for a clustered node: items are one check's.
func (c *cluster) decide(items []item, hits int64) (verdict, error) {
	rs := c.getRoute(len(items))
	defer c.putRoute(rs)
	rs.checks = append(rs.checks, routedCheck{lo: 0, hi: len(items), hits: hits})
	c.decideChecks(rs, items)
	ch := &rs.checks[0]
	if ch.err != nil {
		return verdict{}, ch.err
	}
	return combine(items, ch.denied), nil
}

// decideChecks decides every check of rs (their items are in items) and
// refunds the charged items of those denied.
func (c *cluster) decideChecks(rs *routeState, items []item) {
	for ci := range rs.checks {
		ch := &rs.checks[ci]
		for i := ch.lo; i < ch.hi; i++ {
			rs.check[i] = int32(ci)
		}
	}
	c.phase(rs, items, true)
	c.phase(rs, items, false)
	c.refund(rs, items)
}

// phase decides the items of one kind (leased or exact) of the checks
// still undecided.
func (c *cluster) phase(rs *routeState, items []item, leased bool) {
	r := c.routes.Load()
	rs.resetGroups()
	for ci := range rs.checks {
		ch := &rs.checks[ci]
		if ch.err != nil || (!leased && ch.denied) {
			continue
		}
		for i := ch.lo; i < ch.hi; i++ {
			it := &items[i]
			if it.p.Algorithm.Leased() != leased {
				continue
			}
			addr := ""
			if !it.peek {
				addr = c.peer(r, it.ckey)
			}
			if addr == "" {
				rs.local = append(rs.local, i)
				continue
			}
			g := rs.group(addr)
			g.idx = append(g.idx, i)
			g.items = append(g.items, forward.Item{Op: forward.OpCheck, Rule: it.ri.name, Key: it.key, Hits: ch.hits})
		}
	}
	if len(rs.local) == 0 && len(rs.groups) == 0 {
		return
	}
	wait := c.send(rs)
	c.decideLocals(rs, items)
	for _, i := range rs.local {
		c.met.local.Inc()
		if it := &items[i]; !it.peek {
			c.hot.h.Observe(it.ckey) // a key this node owns or holds
		}
	}
	wait()
	for gi := range rs.groups {
		g := &rs.groups[gi]
		for j, i := range g.idx {
			res := &g.results[j]
			if g.err != nil || res.Error != "" {
				c.decideLocal(rs, items, i)
				c.met.fallback.Inc()
				continue
			}
			it := &items[i]
			it.d = res.Decision()
			it.done = true
			// As in decideOne: a degraded decision took nothing from a
			// leased bucket, so it is never refunded.
			it.charged = it.d.Allowed && rs.checks[rs.check[i]].hits > 0 && !it.d.Degraded
			if it.charged {
				rs.owner[i] = g.addr
			}
			it.ri.checks[decisionOf(it.d, it.ri.rule.Shadow, it.p.OnFailure)].Inc()
			c.met.forwarded.Inc()
		}
	}
	for ci := range rs.checks {
		ch := &rs.checks[ci]
		for i := ch.lo; i < ch.hi && !ch.denied; i++ {
			if it := &items[i]; it.done && !it.d.Allowed && !it.ri.rule.Shadow {
				ch.denied = true
			}
		}
	}
}

// send forwards every group of rs, each from its own goroutine unless it
// is the only work of the phase. The caller must call wait before reading
// the groups' results.
func (c *cluster) send(rs *routeState) (wait func()) {
	if len(rs.groups) == 0 {
		return func() {}
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.forwardBudget())
	if len(rs.groups) == 1 && len(rs.local) == 0 {
		c.forwardGroup(ctx, &rs.groups[0])
		cancel()
		return func() {}
	}
	rs.wg.Add(len(rs.groups))
	for gi := range rs.groups {
		go func(g *peerGroup) {
			defer rs.wg.Done()
			c.forwardGroup(ctx, g)
		}(&rs.groups[gi])
	}
	return func() {
		rs.wg.Wait()
		cancel()
	}
}

// forwardBudget bounds one phase's forwarding: the Forwarder's own timeout
// ends every request sooner, unless a peer's queue is backed up.
func (c *cluster) forwardBudget() time.Duration { return 2 * time.Duration(c.timeout) }

func (c *cluster) forwardGroup(ctx context.Context, g *peerGroup) {
	g.results = grow(g.results, len(g.items))
	clear(g.results)
	g.err = c.fwd.ForwardMany(ctx, g.addr, g.items, g.results)
}

// decideLocal decides items[i] with this node's Manager.
func (c *cluster) decideLocal(rs *routeState, items []item, i int) {
	ch := &rs.checks[rs.check[i]]
	if err := c.n.decideOne(&items[i], ch.hits); err != nil && ch.err == nil {
		ch.err = err
	}
}

// decideLocals decides the items rs.local of a phase with this node's
// Manager: those that can (see batchTake) with one TakeMany, their Store
// calls overlapped, then the others in order.
func (c *cluster) decideLocals(rs *routeState, items []item) {
	if len(rs.local) < 2 {
		for _, i := range rs.local {
			c.decideLocal(rs, items, i)
		}
		return
	}
	tk := &rs.take
	tk.reset()
	for _, i := range rs.local {
		tk.offer(items, i, rs.checks[rs.check[i]].hits, true)
	}
	tk.run(c.n.mgr, items)
	j := 0 // tk.idx is in the order of rs.local
	for _, i := range rs.local {
		if j < len(tk.idx) && int(tk.idx[j]) == i {
			if ch := &rs.checks[rs.check[i]]; tk.cs[j].Err != nil && ch.err == nil {
				ch.err = tk.cs[j].Err
			}
			j++
			continue
		}
		c.decideLocal(rs, items, i)
	}
	tk.reset() // drop the key views
}

// refund gives back the hits charged to the items of denied (or failed)
// checks: here, or at the owner that charged them.
func (c *cluster) refund(rs *routeState, items []item) {
	rs.resetGroups()
	for ci := range rs.checks {
		ch := &rs.checks[ci]
		if !ch.denied && ch.err == nil {
			continue
		}
		for i := ch.lo; i < ch.hi; i++ {
			it := &items[i]
			if !it.charged {
				continue
			}
			it.charged = false
			if rs.owner[i] == "" {
				c.n.mgr.Refund(it.ckey, it.p, ch.hits)
				continue
			}
			g := rs.group(rs.owner[i])
			g.idx = append(g.idx, i)
			g.items = append(g.items, forward.Item{Op: forward.OpRefund, Rule: it.ri.name, Key: it.key, Hits: ch.hits})
			c.met.refunds.Inc()
		}
	}
	// A refund the owner does not get is lost: the check errs towards
	// admitting less, never more.
	c.send(rs)()
}

// checksRouted is /v1/checks on a clustered node: every check's items are
// decided together (see "Routing" above), then answered in order.
func (n *Node) checksRouted(ctx *fasthttp.RequestCtx, st *reqState, t *ruleTable, checks []api.CheckRequest) {
	c := n.cl
	start := time.Now()
	rs := c.getRoute(0)
	defer c.putRoute(rs)
	st.items = st.items[:0]
	st.keys = st.keys[:0] // counter keys stay valid for the whole batch
	for i := range checks {
		ck := &checks[i]
		res := &st.results[i]
		*res = api.CheckResult{}
		if ck.Err != nil {
			*res = api.CheckResult{Error: ck.Err.Msg, Field: ck.Err.Field}
			continue
		}
		lo := len(st.items)
		if err := st.addCheck(t, ck); err != nil {
			st.items = st.items[:lo]
			_, msg, field := errorStatus(err)
			*res = api.CheckResult{Error: msg, Field: batchField(i, field)}
			continue
		}
		rs.checks = append(rs.checks, routedCheck{lo: lo, hi: len(st.items), hits: hitsOf(ck), idx: i})
	}
	rs.check = grow(rs.check, len(st.items))
	rs.owner = grow(rs.owner, len(st.items))
	clear(rs.owner)
	c.decideChecks(rs, st.items)
	for ci := range rs.checks {
		ch := &rs.checks[ci]
		res := &st.results[ch.idx]
		if ch.err != nil {
			_, msg, field := errorStatus(ch.err)
			*res = api.CheckResult{Error: msg, Field: batchField(ch.idx, field)}
			continue
		}
		its := st.items[ch.lo:ch.hi]
		result(res, its, combine(its, ch.denied))
	}
	if len(checks) > 0 { // one observation: the mean time per check
		n.met.checkDuration.Update(time.Since(start).Seconds() / float64(len(checks)))
	}
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendResults(st.buf[:0], st.results)
	ctx.SetBody(st.buf)
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
		st.keys = st.keys[:0]
		ckey := st.counterKey(ri.prefix, it.Key)
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
