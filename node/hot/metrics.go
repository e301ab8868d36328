package hot

import "github.com/VictoriaMetrics/metrics"

// hotMetrics are a Hot's metrics, in its Config.Metrics set (the
// process's default set when nil: several Hots sharing it sum there).
// Per-Hot figures are also in [Hot.Stats].
type hotMetrics struct {
	// splitsStarted counts the splits this node started as owner.
	splitsStarted *metrics.Counter
	// splitsEnded counts the splits this node ended as owner (including
	// those it ended because it no longer owns the key).
	splitsEnded *metrics.Counter
	// splitsActive is the number of splits in the node's table: the
	// cluster's current splits as this node knows them.
	splitsActive *metrics.Gauge
	// keysTracked is the number of keys in the node's top-k sketch.
	keysTracked *metrics.Gauge

	// Hot-key decisions: checks of a split key that Route sent to this
	// node (a holder) or to another holder.
	routedSelf, routedHolder *metrics.Counter

	// Gossip.
	msgsSent, msgsFailed, msgsReceived, msgsRejected *metrics.Counter
}

// MetricsHelp returns the # HELP text of each metric family hot keys
// register, by family name: what it counts. A node's /metrics writes them
// (node combines every package's).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_hot_splits_started_total":    "Hot-key splits this node started as the key's owner.",
		"sluice_hot_splits_ended_total":      "Hot-key splits this node ended as owner (the key cooled, or is no longer its).",
		"sluice_hot_splits_active":           "Splits in this node's table: the cluster's current splits as it knows them.",
		"sluice_hot_keys_tracked":            "Keys in this node's top-k sketch of the keys it serves.",
		"sluice_hot_routed_total":            "Checks of split keys, by where routing sent them: self (this node holds the key), holder (another holder).",
		"sluice_hot_messages_sent_total":     "Split announcements this node gossiped.",
		"sluice_hot_messages_failed_total":   "Split announcements this node could not gossip.",
		"sluice_hot_messages_received_total": "Split announcements received from peers.",
		"sluice_hot_messages_rejected_total": "Split announcements received that did not decode, refused.",
	}
}

func newHotMetrics(set *metrics.Set) *hotMetrics {
	return &hotMetrics{
		splitsStarted: set.GetOrCreateCounter(`sluice_hot_splits_started_total`),
		splitsEnded:   set.GetOrCreateCounter(`sluice_hot_splits_ended_total`),
		splitsActive:  set.GetOrCreateGauge(`sluice_hot_splits_active`, nil),
		keysTracked:   set.GetOrCreateGauge(`sluice_hot_keys_tracked`, nil),
		routedSelf:    set.GetOrCreateCounter(`sluice_hot_routed_total{to="self"}`),
		routedHolder:  set.GetOrCreateCounter(`sluice_hot_routed_total{to="holder"}`),
		msgsSent:      set.GetOrCreateCounter(`sluice_hot_messages_sent_total`),
		msgsFailed:    set.GetOrCreateCounter(`sluice_hot_messages_failed_total`),
		msgsReceived:  set.GetOrCreateCounter(`sluice_hot_messages_received_total`),
		msgsRejected:  set.GetOrCreateCounter(`sluice_hot_messages_rejected_total`),
	}
}
