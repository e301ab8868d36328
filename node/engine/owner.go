package engine

import (
	"strconv"

	"github.com/sluicehq/sluice/shard"
)

// DecideOwned decides the items peers forwarded to this node, the owner of
// their keys (or a holder of their split), with this node's rules (so
// overrides apply as configured here) and Manager, through the batch path
// without routing: the checks are one-item requests of b, decided in order
// with their Store calls overlapped (see Decide), after the refunds, which
// give back hits charged earlier. results[i] answers items[i] (as long as
// items, zero on entry); an item that cannot be decided (an unknown rule,
// an invalid key, hits on a concurrency rule, a call the Manager refuses)
// is answered with Err, and its sender decides it itself. Forwarded checks
// are counted by the node that answered their client, not here
// (sluice_routed_items_served_total counts them here); they are observed
// as served here (hot keys), and DecideOwned appends to plans the split
// plans of their keys that the senders should route by. b must be empty;
// the items' strings are not kept.
func (e *Engine) DecideOwned(b *Batch, items []PeerItem, results []PeerResult, plans []shard.Plan) []shard.Plan {
	b.owned = true
	t := e.rules.Load()
	for i := range items {
		if it := &items[i]; it.Refund {
			if msg := e.refundOwned(t, b, it); msg != "" {
				results[i].Err = msg
			}
			continue
		}
		b.Add(items[i].Rule, items[i].Key, items[i].Hits)
		b.End()
	}
	if len(b.Requests) == 0 {
		return plans
	}
	c := e.cl
	var last *Rule
	b.local = b.local[:0]
	for qi := range b.Requests {
		q := &b.Requests[qi]
		if t == nil {
			q.Err = ErrNotReady
			continue
		}
		if err := b.resolve(t, q.lo, int32(qi), true, &last); err != nil {
			q.Err, q.ErrItem = err, int(q.lo)
			continue
		}
		b.local = append(b.local, q.lo)
		if it := &b.Items[q.lo]; c != nil && !it.peek {
			c.met.served.Inc()
			c.hot.Observe(it.ckey)
			if c.split {
				plans = c.hot.PlansFor(plans, it.ckey)
			}
		}
	}
	if len(b.local) > 0 {
		e.decideLocals(b)
		e.capLocals(b)
	}
	qi := 0
	for i := range items {
		if items[i].Refund {
			continue
		}
		q, it, res := &b.Requests[qi], &b.Items[b.Requests[qi].lo], &results[i]
		qi++
		if q.Err != nil {
			res.Err = q.Err.Error()
			continue
		}
		res.Decision = it.Decision
	}
	return plans
}

// refundOwned gives back the hits of a refund item a peer sent (hits its
// check charged here earlier), or says why it cannot.
func (e *Engine) refundOwned(t *Table, b *Batch, it *PeerItem) string {
	var ri *Rule
	if t != nil {
		ri = t.Get(it.Rule)
	}
	if ri == nil {
		return "rule: unknown rule " + strconv.Quote(it.Rule)
	}
	if msg := KeyProblem(it.Key); msg != "" {
		return "key: " + msg
	}
	if p := ri.rule.PolicyFor(it.Key); p.Algorithm.Leased() {
		ri.mgr.Refund(b.counterKey(ri.prefix, it.Key), p, it.Hits)
	}
	return ""
}
