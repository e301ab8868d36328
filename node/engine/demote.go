package engine

import (
	"sync"
	"sync/atomic"
	"time"
)

// Demotion: an owner alive to membership that stops answering (a stopped
// process, a frozen VM) would otherwise have its keys' checks shed until
// membership declares it dead, seconds later. After DemoteAfter requests
// in a row got no answer in time, this node routes around it: its items
// are decided here, by leasing from the shared Store, which keeps the
// accuracy contract whoever decides (the silent owner's leases are counted
// by the Store as lent). It is a local view: the ring does not change, and
// other nodes decide for themselves. Once per DemoteProbe, one phase's
// items for the demoted owner go to it anyway (a probe): an answer, even a
// late one, restores it; so does membership removing it (its peer state
// goes with it).
//
// Only while this node's Store breaker is closed: with the Store down, a
// demoted owner's keys would be decided from this node's memory while the
// owner may be deciding them from its own, so they are shed as before.

// DefaultDemoteProbe is ClusterConfig.DemoteProbe's default.
const DefaultDemoteProbe = time.Second

// demoter decides whether a peer is routed around.
type demoter struct {
	after int           // requests in a row unanswered; 0: never demote
	probe time.Duration // between probes of a demoted peer
	now   func() time.Time
	// unanswered is the Forwarder's count for a peer; storeUp whether
	// this node's Store is up (its breaker closed).
	unanswered func(addr string) int
	storeUp    func() bool
	// probes holds each demoted peer's next probe time (Unix ns): *atomic.Int64.
	probes sync.Map
}

// routeAround reports whether the items bound for addr are decided here.
func (d *demoter) routeAround(addr string) bool {
	if d == nil || d.after <= 0 {
		return false
	}
	if d.unanswered(addr) < d.after {
		if v, ok := d.probes.Load(addr); ok {
			v.(*atomic.Int64).Store(0) // it answered: a new demotion starts over
		}
		return false
	}
	if !d.storeUp() {
		return false
	}
	v, ok := d.probes.Load(addr)
	if !ok {
		v, _ = d.probes.LoadOrStore(addr, new(atomic.Int64))
	}
	next := v.(*atomic.Int64)
	now := d.now().UnixNano()
	n := next.Load()
	if n == 0 {
		next.CompareAndSwap(0, now+int64(d.probe)) // demoted now: the first probe after one interval
		return true
	}
	if now >= n && next.CompareAndSwap(n, now+int64(d.probe)) {
		return false // this phase probes it
	}
	return true
}

// demoteOf is c's demoter, nil without a cluster or demotion.
func (c *cluster) demoteOf() *demoter {
	if c == nil {
		return nil
	}
	return c.demote
}
