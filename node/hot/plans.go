package hot

import (
	"cmp"
	"maps"
	"slices"
	"time"

	"github.com/sluicehq/sluice/lease/logkey"
	"github.com/sluicehq/sluice/shard"
)

// ended is a split that ended, and when: news for Config.Recent (see
// Hot.PlansFor, Hot.forgetLocked).
type ended struct {
	plan shard.Plan
	at   time.Time
}

// SetRing installs the ring of a new membership view. As owner, the node
// recomputes the holders of its splits on it (ending those of keys it no
// longer owns) and adopts the splits of departed owners whose keys it now
// owns; the resulting plans, each with a new epoch, are applied and
// announced.
func (h *Hot) SetRing(r *shard.Ring) {
	h.ring.Store(r)
	h.loop.Lock()
	defer h.loop.Unlock()
	now := h.cfg.Now()
	changed, end := h.splitter.Rehold(now, r)
	plans := append(changed, end...)
	h.applyOwnLocked(now, plans)
	// Adopt sees the table without the splits just ended.
	adopted, end2 := h.splitter.Adopt(now, h.table.Plans(nil), r)
	more := append(adopted, end2...)
	h.applyOwnLocked(now, more)
	h.broadcast(append(plans, more...))
}

// Receive applies the plans of a gossip message from another member:
// plans with an epoch above the last seen for their key replace it, older
// ones are ignored. Messages of other kinds ([IsPlans] false) are
// ignored; malformed ones are counted and logged at debug level.
func (h *Hot) Receive(msg []byte) {
	if !IsPlans(msg) {
		return
	}
	plans, err := DecodePlans(nil, msg)
	if err != nil {
		h.rejected.Add(1)
		h.met.msgsRejected.Inc()
		h.log.Debug("hot-key message refused", "err", err)
		return
	}
	h.received.Add(1)
	h.met.msgsReceived.Inc()
	now := h.cfg.Now()
	for _, p := range plans {
		h.apply(now, p)
	}
}

// ApplyPlans applies plans from a forwarding reply, as Receive does.
// Plans already known cost a lock-free lookup each. ps is not retained.
func (h *Hot) ApplyPlans(ps []shard.Plan) {
	if len(ps) == 0 {
		return
	}
	now := h.cfg.Now()
	for _, p := range ps {
		h.apply(now, p)
	}
}

// PlansFor appends to dst what a sender of a check of counterKey should
// know, unless dst already has a plan of that key: its split, or the end
// of its split if the split ended within Recent (the sender may still
// route by it). The node calls it for each item of a forwarded batch and
// returns the plans with the reply. It is lock-free and allocates only
// when dst lacks capacity.
func (h *Hot) PlansFor(dst []shard.Plan, counterKey string) []shard.Plan {
	p, ok := h.table.Lookup(counterKey)
	if !ok {
		ends := *h.ends.Load()
		if len(ends) == 0 {
			return dst
		}
		e, ok := ends[counterKey]
		if !ok {
			return dst
		}
		p = e.plan
	}
	for i := range dst {
		if dst[i].Key == counterKey {
			return dst
		}
	}
	return append(dst, p)
}

// RecentPlans appends to dst every split this node knows and every end
// of a split within Recent, ordered by key (splits first): everything a
// sender should know.
func (h *Hot) RecentPlans(dst []shard.Plan) []shard.Plan {
	dst = h.table.Plans(dst)
	start := len(dst)
	for _, e := range *h.ends.Load() {
		dst = append(dst, e.plan)
	}
	slices.SortFunc(dst[start:], func(a, b shard.Plan) int { return cmp.Compare(a.Key, b.Key) })
	return dst
}

// publishLocked applies the plans this node issued as owner and
// announces them.
func (h *Hot) publishLocked(now time.Time, plans []shard.Plan) {
	h.applyOwnLocked(now, plans)
	h.broadcast(plans)
}

// applyOwnLocked applies the plans this node issued as owner.
func (h *Hot) applyOwnLocked(now time.Time, plans []shard.Plan) {
	for _, p := range plans {
		applied, had := h.apply(now, p)
		switch {
		case !applied:
			// An epoch of ours below one already applied: another
			// member's plan for the key is newer.
			h.log.Warn("hot-key plan superseded before it was applied", logkey.Attr(p.Key), "epoch", p.Epoch)
		case p.Split() && !had:
			h.started.Add(1)
			h.met.splitsStarted.Inc()
			h.log.Info("hot key split", logkey.Attr(p.Key), "holders", p.Holders, "epoch", p.Epoch)
		case p.Split():
			h.log.Info("hot key holders changed", logkey.Attr(p.Key), "holders", p.Holders, "epoch", p.Epoch)
		default:
			if had {
				h.endedN.Add(1)
				h.met.splitsEnded.Inc()
			}
			h.log.Info("hot key split ended", logkey.Attr(p.Key), "epoch", p.Epoch)
		}
		if !p.Split() {
			h.loop.ownEnds = append(h.loop.ownEnds, ended{plan: p, at: now})
		}
	}
}

// broadcast gossips plans in as few messages as fit.
func (h *Hot) broadcast(plans []shard.Plan) {
	if h.ann == nil || len(plans) == 0 {
		return
	}
	msgs, errs := EncodePlans(plans)
	for _, err := range errs {
		h.failed.Add(1)
		h.met.msgsFailed.Inc()
		h.log.Warn("hot-key plan not gossiped (forwarding replies still carry it)", "err", err)
	}
	for _, m := range msgs {
		if err := h.ann.Broadcast(m); err != nil {
			h.failed.Add(1)
			h.met.msgsFailed.Inc()
			h.log.Warn("cannot gossip hot-key plans", "err", err)
			continue
		}
		h.sent.Add(1)
		h.met.msgsSent.Inc()
	}
}

// apply applies p to the table, reporting whether it did and whether the
// key was split before, and fires OnEnd when this node stops holding a
// key it does not own.
func (h *Hot) apply(now time.Time, p shard.Plan) (applied, had bool) {
	// Lock-free fast path for plans already known (forwarding replies
	// repeat them).
	if cur, ok := h.table.Lookup(p.Key); ok {
		if cur.Epoch >= p.Epoch {
			return false, true
		}
	} else if e, ok := (*h.ends.Load())[p.Key]; ok && e.plan.Epoch >= p.Epoch {
		return false, false
	}

	h.applyMu.Lock()
	old, had := h.table.Lookup(p.Key)
	if !h.table.Apply(p) {
		h.applyMu.Unlock()
		return false, had
	}
	ends := *h.ends.Load()
	_, inEnds := ends[p.Key]
	switch {
	case !p.Split() && had:
		next := maps.Clone(ends)
		next[p.Key] = ended{plan: shard.Plan{Key: p.Key, Epoch: p.Epoch}, at: now}
		h.ends.Store(&next)
	case p.Split() && inEnds:
		next := maps.Clone(ends)
		delete(next, p.Key)
		h.ends.Store(&next)
	}
	switch {
	case p.Split() && !had:
		h.met.splitsActive.Inc()
	case !p.Split() && had:
		h.met.splitsActive.Dec()
	}
	h.applyMu.Unlock()

	self := h.cfg.Self
	if had && old.Has(self) && !p.Has(self) && h.ring.Load().Owner(p.Key) != self {
		if f := h.onEnd.Load(); f != nil {
			(*f)(p.Key)
		}
	}
	return true, had
}

// forgetLocked drops ends older than Recent, and the table's memory of
// splits that ended long ago.
func (h *Hot) forgetLocked(now time.Time) {
	cut := now.Add(-h.cfg.Recent)
	h.loop.ownEnds = slices.DeleteFunc(h.loop.ownEnds, func(e ended) bool { return e.at.Before(cut) })

	h.applyMu.Lock()
	ends := *h.ends.Load()
	stale := false
	for _, e := range ends {
		if e.at.Before(cut) {
			stale = true
			break
		}
	}
	if stale {
		next := maps.Clone(ends)
		maps.DeleteFunc(next, func(_ string, e ended) bool { return e.at.Before(cut) })
		h.ends.Store(&next)
	}
	h.applyMu.Unlock()
	// Epochs are Unix nanoseconds: remember ended splits ten times longer
	// than they are news, so that a stale start delayed in gossip is
	// still refused.
	h.table.Forget(now.Add(-10 * h.cfg.Recent))
}
