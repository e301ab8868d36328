package hot

import "github.com/VictoriaMetrics/metrics"

// Metrics of the hot package, registered in the default VictoriaMetrics
// set (these globals are the package's only mutable state). They sum over
// every Hot of the process (a node has one); per-Hot figures are in
// [Hot.Stats].
var (
	// splitsStarted counts the splits this node started as owner.
	splitsStarted = metrics.NewCounter(`sluice_hot_splits_started_total`)
	// splitsEnded counts the splits this node ended as owner (including
	// those it ended because it no longer owns the key).
	splitsEnded = metrics.NewCounter(`sluice_hot_splits_ended_total`)
	// splitsActive is the number of splits in the node's table: the
	// cluster's current splits as this node knows them.
	splitsActive = metrics.NewGauge(`sluice_hot_splits_active`, nil)
	// keysTracked is the number of keys in the node's top-k sketch.
	keysTracked = metrics.NewGauge(`sluice_hot_keys_tracked`, nil)

	// Hot-key decisions: checks of a split key that Route sent to this
	// node (a holder) or to another holder.
	routedSelf   = metrics.NewCounter(`sluice_hot_routed_total{to="self"}`)
	routedHolder = metrics.NewCounter(`sluice_hot_routed_total{to="holder"}`)

	// Gossip.
	msgsSent     = metrics.NewCounter(`sluice_hot_messages_sent_total`)
	msgsFailed   = metrics.NewCounter(`sluice_hot_messages_failed_total`)
	msgsReceived = metrics.NewCounter(`sluice_hot_messages_received_total`)
	msgsRejected = metrics.NewCounter(`sluice_hot_messages_rejected_total`)
)
