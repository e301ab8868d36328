package hot

import (
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/shard"
)

// Config configures a [Hot]. The zero value of every field but Self is
// valid and means the default documented on the field.
type Config struct {
	// Self is this node's member name, as on the ring. Required.
	Self string
	// Tick is the period of the loop that [Hot.Run] starts: rates are
	// measured and splits decided once per Tick. Zero means
	// DefaultConfig's.
	Tick time.Duration
	// TopK configures the sketch of the keys this node serves. Its Sample
	// is applied by Observe (one call in Sample is recorded, with weight
	// Sample). The zero value is an exact sketch of 128 keys;
	// DefaultConfig uses shard.DefaultTopKConfig.
	TopK shard.TopKConfig
	// Split configures the owner side (cooling period).
	Split shard.SplitConfig
	// Threshold returns the hot-key settings of the rule of a counter key
	// ("rule:key"): its hot.threshold in checks/s (≤ 0: the rule sets
	// none, DefaultThreshold applies) and its hot.split (0: every member).
	// ok false means no rule has the key (a rule was deleted): the key is
	// never split and a split of it ends. It is called once per tracked
	// key per Tick, from the loop, and must not call back into Hot. Nil
	// means every key has threshold 0 and split 0.
	Threshold func(counterKey string) (threshold float64, split int, ok bool)
	// DefaultThreshold is the threshold in checks/s of keys whose rule
	// sets none. Zero means none: such keys are hot only through
	// CapacityShare.
	DefaultThreshold float64
	// CapacityShare, in [0, 1], makes a key hot when it takes more than
	// this share of the checks/s this node serves (and at least MinRate),
	// even if its rule's threshold is higher or unset. Zero turns it off.
	CapacityShare float64
	// MinRate is the least rate, in checks/s, at which CapacityShare makes
	// a key hot, so that a quiet node does not split its busiest key. Zero
	// means DefaultConfig's.
	MinRate float64
	// Reannounce is how often the owner gossips its active splits and its
	// recent ends again: gossip is best effort, and members that joined
	// later or missed a message learn them this way. Zero means
	// DefaultConfig's; a
	// negative value turns it off.
	Reannounce time.Duration
	// Recent is how long an ended split is remembered as news: re-gossiped
	// by its owner, and attached by [Hot.PlansFor] to forwarding replies
	// for senders that still route by the old plan. Zero means
	// DefaultConfig's.
	Recent time.Duration
	// Now is the clock of SetRing, Receive and ApplyPlans (Tick takes
	// now as an argument). Nil means time.Now.
	Now func() time.Time
	// Logger receives split starts and ends (info) and gossip problems
	// (warn, debug). Nil means slog.Default().
	Logger *slog.Logger
	// Metrics is the set the sluice_hot_* metrics are registered in. Nil
	// means the process's default set (which metrics.WritePrometheus
	// writes); give each Hot its own when several share a process (a test
	// cluster), or their counts mix.
	Metrics *metrics.Set
}

// DefaultConfig returns the configuration of a node; New gives zero Tick,
// MinRate, Reannounce and Recent these values. Why each:
func DefaultConfig() Config {
	return Config{
		// A key crossing its threshold is split within a few seconds (the
		// rate's half-life is 2 s), and the loop costs nothing.
		Tick: time.Second,
		// 128 keys, one check in 8 sampled.
		TopK: shard.DefaultTopKConfig(),
		// A 10 s cooling period.
		Split: shard.DefaultSplitConfig(),
		// Where forwarding one key to one owner starts to cost more than
		// leasing it on every node.
		DefaultThreshold: 20000,
		// CapacityShare stays 0 (off): the node's current rate is a poor
		// proxy for its capacity; operators opt in. A quiet node does not
		// split its busiest key below 1000 checks/s.
		MinRate: 1000,
		// Members that missed a gossip message learn the splits within
		// 10 s; an ended split is news for 30 s, three re-announcements.
		Reannounce: 10 * time.Second,
		Recent:     30 * time.Second,
	}
}
