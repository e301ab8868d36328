package hot

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/logkey"
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

// Announcer gossips a message to every other member (not to this node).
// *member.Cluster implements it; messages are at most [MaxMessageSize]
// bytes.
type Announcer interface {
	Broadcast(msg []byte) error
}

// Stats are one Hot's counters.
type Stats struct {
	Started  uint64  // splits started as owner
	Ended    uint64  // splits ended as owner
	Active   int     // splits in the table
	Tracked  int     // keys in the sketch
	NodeRate float64 // smoothed checks/s observed, as of the last Tick
	Sent     uint64  // gossip messages broadcast
	Failed   uint64  // broadcasts that failed or plans that could not be encoded
	Received uint64  // gossip messages received
	Rejected uint64  // gossip messages refused as malformed
}

// Hot is a node's hot-key machinery. See the package doc.
type Hot struct {
	cfg      Config
	log      *slog.Logger
	ann      Announcer // nil: no gossip
	sketch   *shard.TopK
	splitter *shard.Splitter
	table    *shard.Table
	halfLife float64 // seconds, of the node rate's smoothing

	// Sampling by Observe: record a call when rand.Uint32() < below (0:
	// every call), with weight.
	below  uint64
	weight uint64

	sampled atomic.Uint64 // observations recorded since the last Tick
	ring    atomic.Pointer[shard.Ring]
	onEnd   atomic.Pointer[func(string)]
	// ends holds the splits that ended within Recent, by key: an
	// immutable snapshot replaced under applyMu, read lock-free by
	// PlansFor.
	ends atomic.Pointer[map[string]ended]

	// applyMu serialises updates of table and ends, so that each
	// transition of a key (split, moved, ended) is seen exactly once.
	applyMu sync.Mutex

	met *hotMetrics

	// loop serialises Tick and SetRing: the owner side.
	loop struct {
		sync.Mutex
		last         time.Time // the last Tick
		nodeRate     float64
		rated        bool // nodeRate has a value
		lastAnnounce time.Time
		ownEnds      []ended // ends this node announced within Recent
		tracked      int     // the last keysTracked contribution
		entries      []shard.Entry
		loads        []shard.Load
	}

	// stats; Active is the table's.
	started, endedN, sent, failed, received, rejected atomic.Uint64
	nodeRate                                          atomic.Uint64 // float64 bits
	tracked                                           atomic.Int64

	run struct {
		sync.Mutex
		started, closed bool
		stop, done      chan struct{}
	}
}

type ended struct {
	plan shard.Plan
	at   time.Time
}

// New returns the hot-key machinery of the member cfg.Self, gossiping
// through a (nil: no gossip, for a single node or tests). Call SetRing
// with the first ring before the node serves, and Run to start the loop.
// It returns an error naming the field if cfg is invalid.
func New(cfg Config, a Announcer) (*Hot, error) {
	switch {
	case cfg.Self == "":
		return nil, errors.New("hot: self: must not be empty")
	case cfg.Tick < 0:
		return nil, fmt.Errorf("hot: tick: must be ≥ 0, got %s", cfg.Tick)
	case !(cfg.CapacityShare >= 0 && cfg.CapacityShare <= 1):
		return nil, fmt.Errorf("hot: capacity_share: must be between 0 and 1, got %v", cfg.CapacityShare)
	case !(cfg.DefaultThreshold >= 0) || math.IsInf(cfg.DefaultThreshold, 0):
		return nil, fmt.Errorf("hot: default_threshold: must be a finite number ≥ 0, got %v", cfg.DefaultThreshold)
	case !(cfg.MinRate >= 0) || math.IsInf(cfg.MinRate, 0):
		return nil, fmt.Errorf("hot: min_rate: must be a finite number ≥ 0, got %v", cfg.MinRate)
	case cfg.Recent < 0:
		return nil, fmt.Errorf("hot: recent: must be ≥ 0, got %s", cfg.Recent)
	}
	d := DefaultConfig()
	if cfg.Tick == 0 {
		cfg.Tick = d.Tick
	}
	if cfg.MinRate == 0 {
		cfg.MinRate = d.MinRate
	}
	if cfg.Reannounce == 0 {
		cfg.Reannounce = d.Reannounce
	}
	if cfg.Recent == 0 {
		cfg.Recent = d.Recent
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.GetDefaultSet()
	}
	// Observe samples; the sketch records what it is given.
	tk := cfg.TopK
	sample := tk.Sample
	tk.Sample = 0
	sketch, err := shard.NewTopKConfig(tk)
	if err != nil {
		return nil, fmt.Errorf("hot: %w", err)
	}
	if sample < 0 || sample > 1<<16 { // NewTopKConfig checked the rest
		return nil, fmt.Errorf("hot: topk: sample: must be between 0 and %d, got %d", 1<<16, sample)
	}
	splitter, err := shard.NewSplitter(cfg.Self, cfg.Split)
	if err != nil {
		return nil, fmt.Errorf("hot: %w", err)
	}
	h := &Hot{
		cfg:      cfg,
		met:      newHotMetrics(cfg.Metrics),
		log:      cfg.Logger.With("component", "hot"),
		ann:      a,
		sketch:   sketch,
		splitter: splitter,
		table:    shard.NewTable(),
		halfLife: cmp.Or(tk.RateHalfLife, 2*time.Second).Seconds(),
		weight:   1,
	}
	if sample > 1 {
		h.below = (1 << 32) / uint64(sample)
		h.weight = uint64(sample)
	}
	empty := map[string]ended{}
	h.ends.Store(&empty)
	h.run.stop = make(chan struct{})
	h.run.done = make(chan struct{})
	return h, nil
}

// Observe records one check of counterKey served by this node. It is
// meant for the hot path: with sampling, most calls return after one
// random draw; none allocates once the key is tracked. counterKey may
// alias a reused buffer.
func (h *Hot) Observe(counterKey string) {
	if h.below != 0 && uint64(rand.Uint32()) >= h.below {
		return
	}
	h.sampled.Add(1)
	h.sketch.Observe(counterKey, h.weight)
}

// Route tells where a check of counterKey goes if the key is split: split
// is false when it is not (route by the ring's owner); otherwise self
// reports that this node is a holder and serves it, else holder is the
// holder chosen by pick (a random number: checks spread evenly over the
// holders). It is lock-free and does not allocate.
//
// A holder that has left the cluster stays in the plan until the owner
// announces new holders (at its next ring change); a check sent to it
// fails over like any unavailable peer.
func (h *Hot) Route(counterKey string, pick uint64) (holder string, split, self bool) {
	p, ok := h.table.Lookup(counterKey)
	if !ok {
		return "", false, false
	}
	if p.Has(h.cfg.Self) {
		h.met.routedSelf.Inc()
		return h.cfg.Self, true, true
	}
	h.met.routedHolder.Inc()
	return p.Holders[pick%uint64(len(p.Holders))], true, false
}

// Lookup returns the split of counterKey as this node knows it.
func (h *Hot) Lookup(counterKey string) (shard.Plan, bool) { return h.table.Lookup(counterKey) }

// OnEnd sets f, called with the counter key when this node stops holding
// a split key that it does not own (the split ended, or its new holders
// leave this node out): the node returns the key's leased tokens
// (lease.Manager.ReturnKeys). f is called synchronously from whichever
// call applied the plan (Tick, SetRing, Receive, ApplyPlans), outside
// Hot's locks; it must not block for long. Nil removes it.
func (h *Hot) OnEnd(f func(counterKey string)) {
	if f == nil {
		h.onEnd.Store(nil)
		return
	}
	h.onEnd.Store(&f)
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

// Tick runs one step of the loop at now: it closes the sketch's window,
// updates the node's rate, decides splits for the keys this node owns,
// applies and announces the resulting plans, re-announces the active ones
// when due, and forgets old ends. Run calls it every Config.Tick; tests
// call it directly.
func (h *Hot) Tick(now time.Time) {
	h.loop.Lock()
	defer h.loop.Unlock()
	h.sketch.Tick(now)
	h.updateRateLocked(now)

	h.loop.entries = h.sketch.Top(h.loop.entries[:0])
	loads := h.loop.loads[:0]
	for _, e := range h.loop.entries {
		thr, split := h.threshold(e.Key, h.loop.nodeRate)
		loads = append(loads, shard.Load{Key: e.Key, Rate: e.Rate, Threshold: thr, Split: split})
	}
	h.loop.loads = loads
	start, end := h.splitter.Decide(now, loads, h.ring.Load())
	plans := append(start, end...)
	h.publishLocked(now, plans)

	if h.cfg.Reannounce > 0 && now.Sub(h.loop.lastAnnounce) >= h.cfg.Reannounce {
		again := h.splitter.Plans(nil)
		for _, e := range h.loop.ownEnds {
			again = append(again, e.plan)
		}
		h.broadcast(again)
		h.loop.lastAnnounce = now
	}
	h.forgetLocked(now)

	n := len(h.loop.entries)
	h.met.keysTracked.Add(float64(n - h.loop.tracked))
	h.loop.tracked = n
	h.tracked.Store(int64(n))
}

// threshold returns the Load threshold and split of key.
func (h *Hot) threshold(key string, nodeRate float64) (float64, int) {
	thr, split, ok := 0.0, 0, true
	if h.cfg.Threshold != nil {
		thr, split, ok = h.cfg.Threshold(key)
	}
	if !ok {
		return 0, 0
	}
	if !(thr > 0) || math.IsInf(thr, 0) {
		thr = h.cfg.DefaultThreshold
	}
	if h.cfg.CapacityShare > 0 {
		c := max(h.cfg.CapacityShare*nodeRate, h.cfg.MinRate)
		if !(thr > 0) || c < thr {
			thr = c
		}
	}
	return thr, max(split, 0)
}

// updateRateLocked closes the node rate's window, smoothed like the
// sketch's rates.
func (h *Hot) updateRateLocked(now time.Time) {
	if h.loop.last.IsZero() {
		h.sampled.Store(0)
		h.loop.last = now
		return
	}
	dt := now.Sub(h.loop.last).Seconds()
	if dt <= 0 {
		return
	}
	h.loop.last = now
	inst := float64(h.sampled.Swap(0)*h.weight) / dt
	if !h.loop.rated {
		h.loop.nodeRate, h.loop.rated = inst, true
	} else {
		h.loop.nodeRate += (1 - math.Exp2(-dt/h.halfLife)) * (inst - h.loop.nodeRate)
	}
	h.nodeRate.Store(math.Float64bits(h.loop.nodeRate))
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

// Stats returns this Hot's counters.
func (h *Hot) Stats() Stats {
	return Stats{
		Started:  h.started.Load(),
		Ended:    h.endedN.Load(),
		Active:   h.table.Len(),
		Tracked:  int(h.tracked.Load()),
		NodeRate: math.Float64frombits(h.nodeRate.Load()),
		Sent:     h.sent.Load(),
		Failed:   h.failed.Load(),
		Received: h.received.Load(),
		Rejected: h.rejected.Load(),
	}
}

// Run starts the loop: a goroutine owned by h that calls Tick at once and
// then every Config.Tick with Config.Now(), until Close. It returns at
// once; calling it again, or after Close, does nothing.
func (h *Hot) Run() {
	h.run.Lock()
	defer h.run.Unlock()
	if h.run.started || h.run.closed {
		return
	}
	h.run.started = true
	go h.loopRun(h.run.stop, h.run.done)
}

func (h *Hot) loopRun(stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(h.cfg.Tick)
	defer t.Stop()
	h.Tick(h.cfg.Now())
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			h.Tick(h.cfg.Now())
		}
	}
}

// Close stops the loop and waits for it. It is idempotent. The table
// stays readable (Route, PlansFor, AppendJSON) after Close.
func (h *Hot) Close() {
	h.run.Lock()
	if h.run.closed {
		h.run.Unlock()
		return
	}
	h.run.closed = true
	close(h.run.stop)
	started := h.run.started
	h.run.Unlock()
	if started {
		<-h.run.done
	}
}
