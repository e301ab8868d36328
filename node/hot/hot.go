package hot

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/shard"
)

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
