package engine

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// Leases at the edge: the lease protocol's ops are engine work too. A
// holder outside the cluster (a gateway's client.Limiter, a region's node
// leasing the global rules) leases, returns and peeks at a key's tokens;
// each op goes where a check of the key would go (the owner on the ring:
// a split hot key's holders lease from one Store bucket, and a gateway's
// loan of it is the owner's to bound), is sent there by the Forwarder
// (node/forward's signed internal requests, never a header a client can
// set) and is decided by the owner's lessor (lessor.go) with one call of
// its Store. A front end (node's POST /v1/lease) only decodes, names the
// holder (its Store id, derived from the holder's secret) and encodes the
// results.

// LeaseKind is what a lease op asks.
type LeaseKind uint8

// The lease op kinds. The zero kind is invalid.
const (
	// LeaseLend leases tokens for Holder (lease.Store's Lease), or with
	// Want 0 renews and settles its loan.
	LeaseLend LeaseKind = 1
	// LeaseReturn gives back Tokens and ends Holder's loan.
	LeaseReturn LeaseKind = 2
	// LeasePeek reads what is left of the key, lending nothing and
	// settling no loan.
	LeasePeek LeaseKind = 3
)

// LeaseOp is one op of the lease protocol. Its strings may be views of a
// request body: the engine copies what it keeps.
type LeaseOp struct {
	Kind      LeaseKind
	Rule, Key string
	// Holder is the holder's id in the Store: a namespace and the public
	// id of its secret (the front end derives it; the secret never
	// reaches the engine, a peer or the Store). Required but for a peek.
	Holder string
	// Region, when set, names the region whose node the holder is: it is
	// not bound by the rule's gateway_share, and a saturated key is split
	// among the regions by their Demand (lease_split.go).
	Region string
	// Want and Need are the Store's Lease arguments (0 ≤ Need ≤ Want);
	// Tokens is a return's; Demand a region's checks per second of the
	// key (0: unknown).
	Want, Need, Tokens, Demand int64
	// To carries the lessee's report (Held, TTL, SpentBefore, Idle,
	// Call, Unanswered, AheadWindows, AheadTokens, First); its ID is
	// Holder, and MaxHolders is the rule's (the owner sets both).
	To lease.Lessee
}

// LeaseResult answers one LeaseOp: the Store's Grant (a return's and a
// peek's lend nothing), or Err when the op was not applied (the owner
// could not be reached and this node may not decide for it, the Store
// failed). Checked says the op asked more than the holder may hold of
// the key (gateway_share): the owner decided its Need as a check
// (Granted tokens are spent at once, nothing more is lent). Crowded says
// the key had as many holders as its rule allows (max_holders): the
// Store decided the Need as a check too.
type LeaseResult struct {
	Grant   lease.Grant
	Checked bool
	Crowded bool
	Err     string
}

// LeaseProblem is an op that cannot be applied: Index in the ops, Field
// the op's field at fault ("rule", "key").
type LeaseProblem struct {
	Index int
	Field string
	Msg   string
}

func (e *LeaseProblem) Error() string {
	return "ops[" + strconv.Itoa(e.Index) + "]." + e.Field + ": " + e.Msg
}

// leaseOp is an op resolved against the table.
type leaseOp struct {
	op   *LeaseOp
	r    *Rule
	p    lease.Policy
	ckey string
}

// Lease applies ops for their holders, each where its key is decided,
// with the rules of t (nil: ErrNotReady), and fills results (as long as
// ops). Every op is checked first: an unknown rule, an invalid key, an
// exact rule (its checks are sent as checks), or a rule this node does not
// lend (a global rule of a region's node: Config.Global) fails the whole
// call with a *LeaseProblem, and nothing is applied. An op whose owner
// does not answer is decided here when the cluster shares a Store
// (ClusterConfig.Shares nil), else answered with Err (the holder treats
// it as a failed Store call). ctx bounds forwarding.
func (e *Engine) Lease(ctx context.Context, t *Table, ops []LeaseOp, results []LeaseResult) error {
	if t == nil {
		return ErrNotReady
	}
	ls := make([]leaseOp, len(ops))
	for i := range ops {
		op := &ops[i]
		r := t.Get(op.Rule)
		if r == nil {
			return &LeaseProblem{i, "rule", "unknown rule " + strconv.Quote(op.Rule)}
		}
		if msg := KeyProblem(op.Key); msg != "" {
			return &LeaseProblem{i, "key", msg}
		}
		if r.global {
			return &LeaseProblem{i, "rule", "rule " + strconv.Quote(op.Rule) +
				" is global: this node leases it from the global tier; gateways send its checks (/v1/check)"}
		}
		p := r.rule.PolicyFor(op.Key)
		if !p.Algorithm.Leased() {
			return &LeaseProblem{i, "rule", "rule " + strconv.Quote(op.Rule) + " is exact (" + p.Algorithm.String() +
				"): send its checks (/v1/checks), it cannot be leased"}
		}
		ls[i] = leaseOp{op: op, r: r, p: p, ckey: op.Rule + ":" + op.Key}
	}
	clear(results)
	routes := e.routes.Load()
	var groups map[string][]int
	var one [1]int
	mine := one[:0] // (a lone op's, on the stack)
	for i := range ls {
		addr := ""
		if len(routes.Addrs) > 0 {
			addr = routes.peerFor(ls[i].ckey)
		}
		if addr == "" {
			mine = append(mine, i)
			continue
		}
		if groups == nil {
			groups = map[string][]int{}
		}
		groups[addr] = append(groups[addr], i)
	}
	if groups == nil {
		e.lendEach(ls, mine, results)
		return nil
	}
	var wg sync.WaitGroup
	for addr, idx := range groups {
		wg.Go(func() { e.forwardLeases(ctx, addr, ls, idx, results) })
	}
	e.lendEach(ls, mine, results)
	wg.Wait()
	return nil
}

// forwardLeases sends the ops idx of ls to their owner at addr and fills
// their results; when the owner does not answer, they are decided here if
// the cluster shares a Store, else answered with an error.
func (e *Engine) forwardLeases(ctx context.Context, addr string, ls []leaseOp, idx []int, results []LeaseResult) {
	c := e.cl
	ops := make([]LeaseOp, len(idx))
	for j, i := range idx {
		ops[j] = *ls[i].op
	}
	res := make([]LeaseResult, len(idx))
	fctx, cancel := context.WithTimeout(ctx, c.fwd.Budget())
	err := c.fwd.ForwardLeases(fctx, addr, ops, res)
	cancel()
	if err == nil {
		for j, i := range idx {
			results[i] = res[j]
		}
		c.met.leasesForwarded.Add(len(idx))
		return
	}
	if c.shares == nil { // a shared Store
		// Whoever calls the shared Store for a holder keeps the
		// contract: decided here, as the owner would.
		c.met.leasesFallback.Add(len(idx))
		e.lendEach(ls, idx, results)
		return
	}
	c.met.leasesFailed.Add(len(idx))
	msg := "the key's owner " + addr + " did not answer: " + err.Error()
	for _, i := range idx {
		results[i] = LeaseResult{Err: msg}
	}
}

// DecideOwnedLeases applies the lease ops peers forwarded to this node,
// the owner of their keys, with this node's rules and Store, and fills
// results (as long as ops): an op it cannot apply (a rule it does not
// know, an invalid key, an exact or global rule) is answered with Err.
func (e *Engine) DecideOwnedLeases(ops []LeaseOp, results []LeaseResult) {
	t := e.rules.Load()
	ls := make([]leaseOp, 0, len(ops))
	idx := make([]int, 0, len(ops))
	for i := range ops {
		if t == nil {
			results[i] = LeaseResult{Err: ErrNotReady.Error()}
			continue
		}
		one := ops[i : i+1 : i+1]
		if err := e.checkLeaseOp(t, one); err != nil {
			results[i] = LeaseResult{Err: err.Error()}
			continue
		}
		r := t.Get(ops[i].Rule)
		ls = append(ls, leaseOp{op: &ops[i], r: r, p: r.rule.PolicyFor(ops[i].Key), ckey: ops[i].Rule + ":" + ops[i].Key})
		idx = append(idx, i)
	}
	sub := make([]LeaseResult, len(ls))
	all := make([]int, len(ls))
	for i := range all {
		all[i] = i
	}
	e.lendEach(ls, all, sub)
	for j, i := range idx {
		results[i] = sub[j]
	}
	if c := e.cl; c != nil {
		c.met.leasesServed.Add(len(ls))
	}
}

// checkLeaseOp resolves ops against t as Lease does, without routing.
func (e *Engine) checkLeaseOp(t *Table, ops []LeaseOp) error {
	for i := range ops {
		op := &ops[i]
		r := t.Get(op.Rule)
		switch {
		case r == nil:
			return &LeaseProblem{i, "rule", "unknown rule " + strconv.Quote(op.Rule)}
		case r.global:
			return &LeaseProblem{i, "rule", "rule " + strconv.Quote(op.Rule) + " is global here"}
		}
		if msg := KeyProblem(op.Key); msg != "" {
			return &LeaseProblem{i, "key", msg}
		}
		if !r.rule.PolicyFor(op.Key).Algorithm.Leased() {
			return &LeaseProblem{i, "rule", "rule " + strconv.Quote(op.Rule) + " is exact"}
		}
	}
	return nil
}

// maxLendWorkers bounds the Store calls one lease request makes at once
// on this node (a pipelining Store overlaps them).
const maxLendWorkers = 32

// lendEach applies the ops idx of ls with this node's Store, filling
// results: in order on this goroutine when there is one, else by up to
// maxLendWorkers goroutines (the caller's among them).
func (e *Engine) lendEach(ls []leaseOp, idx []int, results []LeaseResult) {
	switch len(idx) {
	case 0:
		return
	case 1:
		i := idx[0]
		results[i] = e.lessor.apply(e.mgr.Lender(), &ls[i])
		return
	}
	// The workers read a copy: idx itself (a lone op's, on the caller's
	// stack) does not escape.
	own := slices.Clone(idx)
	var next atomic.Int64
	work := func() {
		for {
			j := next.Add(1) - 1
			if j >= int64(len(own)) {
				return
			}
			i := own[j]
			results[i] = e.lessor.apply(e.mgr.Lender(), &ls[i])
		}
	}
	var wg sync.WaitGroup
	for range min(len(own), maxLendWorkers) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// ceilMS is d in whole milliseconds, rounded up.
func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}
