package engine

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Demotion: an owner alive to membership that stops answering (a stopped
// process, a frozen VM, a link cut one way) would otherwise cost each
// check sent to it a forward timeout, every back-off, until membership
// declares it dead, seconds later (or never, for a one-way cut). After
// DemoteAfter requests in a row got no answer in time, this node routes
// around it: its items are decided at once as a silent owner's are
// (unanswered.go: on Redis by leasing from the shared Store, which keeps
// the accuracy contract whoever decides; on the memory store by
// on_store_failure, within the node's share). It is a local view: the
// ring does not change, and other nodes decide for themselves. Once per
// DemoteProbe, one phase's items for the demoted owner go to it anyway (a
// probe; unanswered, they are decided the same way): an answer, even a
// late one, restores it; so does membership removing it (its peer state
// goes with it). Each demotion and its end are logged once, with how long
// it lasted and how many checks were decided for the owner meanwhile.

// DefaultDemoteProbe is ClusterConfig.DemoteProbe's default.
const DefaultDemoteProbe = time.Second

// demoter decides whether a peer is routed around.
type demoter struct {
	after int           // requests in a row unanswered; 0: never demote
	probe time.Duration // between probes of a demoted peer
	now   func() time.Time
	log   *slog.Logger
	// unanswered is the Forwarder's count for a peer.
	unanswered func(addr string) int
	// peers holds each demoted peer's state: *demotion.
	peers sync.Map
}

// demotion is one peer's: its next probe time (Unix ns; 0 while it is
// not demoted), since when it is, and the items decided for it since.
type demotion struct {
	next, since, items atomic.Int64
}

// routeAround reports whether the items bound for addr are decided here.
func (d *demoter) routeAround(addr string) bool {
	if d == nil || d.after <= 0 {
		return false
	}
	if n := d.unanswered(addr); n < d.after {
		if v, ok := d.peers.Load(addr); ok {
			dm := v.(*demotion)
			if dm.next.Swap(0) != 0 { // it answered: a new demotion starts over
				d.log.Info("owner answers again: no longer routed around", "peer", addr,
					"for", time.Duration(d.now().UnixNano()-dm.since.Load()).Round(time.Millisecond).String(),
					"decided_here", dm.items.Swap(0))
			}
		}
		return false
	}
	v, ok := d.peers.Load(addr)
	if !ok {
		v, _ = d.peers.LoadOrStore(addr, new(demotion))
	}
	dm := v.(*demotion)
	now := d.now().UnixNano()
	n := dm.next.Load()
	if n == 0 {
		if dm.next.CompareAndSwap(0, now+int64(d.probe)) { // demoted now: the first probe after one interval
			dm.since.Store(now)
			d.log.Warn("owner does not answer: routing around it (its checks decided here, one probe a "+d.probe.String()+")",
				"peer", addr, "unanswered_requests", d.unanswered(addr))
		}
		return true
	}
	if now >= n && dm.next.CompareAndSwap(n, now+int64(d.probe)) {
		return false // this phase probes it
	}
	return true
}

// decided counts n items decided here for the demoted peer addr.
func (d *demoter) decided(addr string, n int) {
	if v, ok := d.peers.Load(addr); ok {
		v.(*demotion).items.Add(int64(n))
	}
}

// demoteOf is c's demoter, nil without a cluster or demotion.
func (c *cluster) demoteOf() *demoter {
	if c == nil {
		return nil
	}
	return c.demote
}
