// Package hot is a node's hot-key machinery: it counts the keys the node
// serves, decides as owner when a key is hot enough to split over several
// holders and when the split ends, announces the plans by gossip and in
// forwarding replies, keeps the table of the cluster's splits that routing
// reads on every check, and serves the /v1/hotkeys view.
//
// The pure parts of hot keys live in shard ([shard.TopK],
// [shard.Splitter], [shard.Table]); this sub-package holds the node side
// (the clock, gossip and forwarding) so that it can be built and tested
// on its own; the node calls it through a few hooks:
//
//	h, _ := hot.New(cfg, cluster)         // *member.Cluster is an Announcer
//	member.Config.OnMessage:  if hot.IsPlans(msg) { h.Receive(msg) }
//	on membership change:     h.SetRing(ring)
//	forward.Config.OnPlans:   h.ApplyPlans
//	forward.Decider:          plans = h.PlansFor(plans, item's counter key) per item
//	per check, before owner:  if holder, split, self := h.Route(ckey, rand); split { ... }
//	per check served here:    h.Observe(ckey)
//	h.OnEnd(func(k string) { mgr.ReturnKeys(k) })
//	GET /v1/hotkeys:          h.AppendJSON(buf)
//	h.Run(); defer h.Close()
//
// # When a key is hot
//
// Every Tick (1 s) the sketch closes its window and each tracked key gets
// a smoothed rate (checks/s this node served). A key's threshold is its
// rule's hot.threshold (Config.Threshold), or Config.DefaultThreshold when
// the rule sets none; with Config.CapacityShare > 0 it is at most that
// share of the node's own smoothed rate (but not below Config.MinRate).
// The [shard.Splitter] then starts a split of a key this node owns when
// its rate exceeds the threshold, with holders ring.OwnerN(key, split)
// (the owner first; split 0 = every member), and ends it when the key's
// estimated total rate (this node's share × holders) stays below half the
// threshold for the cooling period (10 s). The band between half the
// threshold and the threshold, the cooling period and strictly increasing
// epochs keep a key near its threshold from flapping.
//
// # Plans and their propagation
//
// Every plan (start, new holders, end) has a new epoch; a node keeps, per
// key, the plan with the highest epoch it has seen and ignores older ones,
// whatever path and order they come by. Owners apply their plans to their
// own table and gossip them at once, and gossip their active splits and
// the ends of the last Config.Recent (30 s) again every Config.Reannounce
// (10 s), because gossip is best effort and members join later.
//
// Forwarding replies carry plans too, so that a sender learns a split the
// first time it forwards the key: the node calls [Hot.PlansFor] for each
// item of a batch it decides, which adds the key's split (or the end of
// its split within Config.Recent) unless the reply already has it. We
// chose per-key plans over attaching every recent plan to every reply
// ([Hot.RecentPlans], kept for the admin view and tests): a reply carries
// only what its sender routes by, usually nothing, and PlansFor is a
// lock-free lookup that does not allocate.
//
// On a membership change ([Hot.SetRing]) the owner recomputes the holders
// of its splits (new epochs) and ends those of keys it no longer owns; the
// new owner of a departed owner's split adopts it (shard.Splitter.Adopt).
// In consistent hashing ownership only moves to a joining member or from a
// leaving one, so an owner's end and an adopter's restart never race.
//
// A holder that is not the key's owner and stops holding it (the split
// ended, or new holders leave it out) calls the [Hot.OnEnd] hook so that
// the node returns the key's leased tokens to the Store.
//
// # Gossip messages (version 1)
//
// Binary, at most [MaxMessageSize] (1200) bytes, several plans per
// message. Integers are unsigned varints, strings a varint length and the
// bytes:
//
//	message: kind='H' | version=1 | count | count × plan
//	plan:    key | epoch | holders | holders × holder   (0 holders: the split ended)
//
// [DecodePlans] refuses, with an error naming the plan and field, a wrong
// kind or version, a key, holder or count out of bounds ([MaxKeyLen],
// [MaxHolders], [MaxMemberLen]), epoch 0, duplicate holders, and missing
// or trailing bytes. A plan too large for one message on its own (a long
// key with dozens of long member names) is not gossiped (logged, counted
// as failed); it still reaches senders in forwarding replies.
//
// # Metrics
//
// sluice_hot_splits_started_total and sluice_hot_splits_ended_total
// (splits started and ended by this node as owner), sluice_hot_splits_active
// (splits in this node's table), sluice_hot_keys_tracked (keys in the
// sketch), sluice_hot_routed_total{to="self"|"holder"} (checks of split
// keys: served here as a holder, or sent to a holder), and
// sluice_hot_messages_{sent,failed,received,rejected}_total.
//
// # Concurrency
//
// A Hot is safe for concurrent use. Observe and Route are the hot path:
// Route is lock-free; Observe takes the sketch's mutex for one call in
// TopK.Sample. Tick and SetRing are serialised with each other (the owner
// side); Receive and ApplyPlans may run concurrently with them and with
// each other. Hot owns one goroutine, started by Run and stopped by Close
// (idempotent). Config.Threshold is called from Tick; the OnEnd hook is
// called from whichever method applied the plan, outside Hot's locks.
package hot
