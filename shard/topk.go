package shard

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Entry is one key of a [TopK] sketch.
type Entry struct {
	Key string
	// Count is the key's estimated (possibly decayed) weight: never less
	// than the true weight, and at most Err more (exactly so without
	// sampling; with sampling, of the sampled stream scaled up).
	Count uint64
	// Err bounds Count's overestimation: Count-Err ≤ true ≤ Count.
	Err uint64
	// Rate is the key's smoothed rate in events per second, as of the
	// last [TopK.Tick] (0 before the key's first Tick).
	Rate float64
}

// TopKConfig configures a [TopK] sketch.
type TopKConfig struct {
	// K is the number of keys tracked. Zero means 128. Space-Saving
	// guarantees that every key with more than 1/K of the total weight is
	// tracked.
	K int
	// Sample makes Observe record only one call in Sample (chosen at
	// random), scaling its weight by Sample. Zero or one means every call
	// (exact Space-Saving).
	Sample int
	// RateHalfLife is the half-life of the rate estimates' exponential
	// smoothing. Zero means 2s.
	RateHalfLife time.Duration
	// CountHalfLife makes counts decay at every Tick, so that keys that
	// were hot long ago give way to new ones. Zero means counts never
	// decay (the sketch covers the whole stream).
	CountHalfLife time.Duration
}

// DefaultTopKConfig is the configuration for a node counting the keys it
// serves:
//   - K 128: the hot keys of a node are a handful; 128 leaves room for the
//     keys of several rules and costs ~20 KB.
//   - Sample 8: Observe is called on every check; sampling runs the
//     mutex-protected part for one call in eight, which makes Observe
//     about 4 times cheaper under parallel load (BenchmarkTopKObserve),
//     while a key at a hot-key threshold of 20,000 checks/s is still
//     sampled 2,500 times a second (its rate is known within ~2% per
//     one-second window).
//   - RateHalfLife 2s: a key crossing a threshold is seen within a few
//     ticks of one second, while a one-tick burst moves its rate by only
//     29% of the burst.
//   - CountHalfLife 60s: Top shows what was hot in the last minutes.
func DefaultTopKConfig() TopKConfig {
	return TopKConfig{K: 128, Sample: 8, RateHalfLife: 2 * time.Second, CountHalfLife: time.Minute}
}

// Limits on TopKConfig.
const (
	maxTopK   = 1 << 20
	maxSample = 1 << 16
)

// TopK is a Space-Saving sketch of the heaviest keys of a stream, with
// per-key rate estimates. It keeps K counters; a key that is not tracked
// takes over the counter with the smallest count and inherits that count
// as its error bound. Counts and errors are kept as floats so that decay
// and sampling scale them without rounding; without either they are exact
// integers.
//
// TopK is safe for concurrent use. Observe takes the mutex only for the
// calls it samples; everything else takes it for the whole call.
type TopK struct {
	k            int
	sampleBelow  uint64  // with sampling, observe when a random uint32 < sampleBelow
	scale        float64 // weight of one sampled observation: 2^32/sampleBelow
	rateHalfLife float64 // seconds
	cntHalfLife  float64 // seconds; 0 = no decay

	mu struct {
		sync.Mutex
		index map[string]*counter
		heap  []*counter // min-heap on count
		total float64    // weight observed (decayed like the counts)
		last  time.Time  // the last Tick
	}
}

type counter struct {
	key   string
	count float64 // Space-Saving count (over-estimate)
	err   float64 // over-estimation bound
	win   float64 // weight observed since the last Tick
	rate  float64 // smoothed events/s
	fresh bool    // no Tick since the key took this counter
	pos   int     // index in heap
}

// NewTopK returns an exact (unsampled, undecayed) sketch of the k heaviest
// keys, with the default rate smoothing. k ≤ 0 means 128; k is capped at
// 2^20.
func NewTopK(k int) *TopK {
	t, _ := NewTopKConfig(TopKConfig{K: min(max(k, 0), maxTopK)}) // every field is in range
	return t
}

// NewTopKConfig returns a sketch configured by cfg, or an error naming the
// field that is out of range.
func NewTopKConfig(cfg TopKConfig) (*TopK, error) {
	switch {
	case cfg.K < 0 || cfg.K > maxTopK:
		return nil, fmt.Errorf("topk: k: must be between 0 and %d, got %d", maxTopK, cfg.K)
	case cfg.Sample < 0 || cfg.Sample > maxSample:
		return nil, fmt.Errorf("topk: sample: must be between 0 and %d, got %d", maxSample, cfg.Sample)
	case cfg.RateHalfLife < 0:
		return nil, fmt.Errorf("topk: rate_half_life: must be ≥ 0, got %s", cfg.RateHalfLife)
	case cfg.CountHalfLife < 0:
		return nil, fmt.Errorf("topk: count_half_life: must be ≥ 0, got %s", cfg.CountHalfLife)
	}
	if cfg.K == 0 {
		cfg.K = 128
	}
	if cfg.RateHalfLife == 0 {
		cfg.RateHalfLife = 2 * time.Second
	}
	t := &TopK{
		k:            cfg.K,
		rateHalfLife: cfg.RateHalfLife.Seconds(),
		cntHalfLife:  cfg.CountHalfLife.Seconds(),
		scale:        1,
	}
	if cfg.Sample > 1 {
		t.sampleBelow = (1 << 32) / uint64(cfg.Sample)
		t.scale = float64(1<<32) / float64(t.sampleBelow)
	}
	t.mu.index = make(map[string]*counter, cfg.K)
	t.mu.heap = make([]*counter, 0, cfg.K)
	return t, nil
}

// Observe records n events of key (n = 0 is ignored). It copies key only
// when the key takes over a counter, so key may alias a reused buffer.
func (t *TopK) Observe(key string, n uint64) {
	if n == 0 {
		return
	}
	w := float64(n)
	if t.sampleBelow != 0 {
		if uint64(rand.Uint32()) >= t.sampleBelow {
			return
		}
		w *= t.scale
	}
	t.mu.Lock()
	t.observeLocked(key, w)
	t.mu.Unlock()
}

func (t *TopK) observeLocked(key string, w float64) {
	t.mu.total += w
	if c := t.mu.index[key]; c != nil {
		c.count += w
		c.win += w
		t.down(c.pos)
		return
	}
	if len(t.mu.heap) < t.k {
		c := &counter{key: strings.Clone(key), count: w, win: w, fresh: true, pos: len(t.mu.heap)}
		t.mu.heap = append(t.mu.heap, c)
		t.mu.index[c.key] = c
		t.up(c.pos)
		return
	}
	// Space-Saving: the new key replaces the minimum, inheriting its count
	// as error.
	c := t.mu.heap[0]
	delete(t.mu.index, c.key)
	*c = counter{key: strings.Clone(key), count: c.count + w, err: c.count, win: w, fresh: true, pos: 0}
	t.mu.index[c.key] = c
	t.down(0)
}

// less orders the heap: the smallest count first and, among equal counts,
// the largest error (the key with the least evidence is evicted first).
func (t *TopK) less(i, j int) bool {
	a, b := t.mu.heap[i], t.mu.heap[j]
	return a.count < b.count || a.count == b.count && a.err > b.err
}

func (t *TopK) swap(i, j int) {
	h := t.mu.heap
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}

func (t *TopK) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !t.less(i, p) {
			return
		}
		t.swap(i, p)
		i = p
	}
}

func (t *TopK) down(i int) {
	n := len(t.mu.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && t.less(r, l) {
			m = r
		}
		if !t.less(m, i) {
			return
		}
		t.swap(i, m)
		i = m
	}
}

// Tick closes the window that began at the previous Tick: it updates every
// tracked key's rate with the events observed in the window, and decays
// counts if so configured. The first Tick only starts the first window
// (events observed before it are counted but not rated). A Tick at or
// before the previous one does nothing. Call it at a steady pace (the node
// does every second).
func (t *TopK) Tick(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.mu.last.IsZero() {
		t.mu.last = now
		for _, c := range t.mu.heap {
			c.win = 0
		}
		return
	}
	dt := now.Sub(t.mu.last).Seconds()
	if dt <= 0 {
		return
	}
	t.mu.last = now
	// alpha is the weight of this window in the moving average, for a
	// half-life measured in time rather than in ticks.
	alpha := 1 - math.Exp2(-dt/t.rateHalfLife)
	decay := 1.0
	if t.cntHalfLife > 0 {
		decay = math.Exp2(-dt / t.cntHalfLife)
		t.mu.total *= decay
	}
	for _, c := range t.mu.heap {
		inst := c.win / dt
		if c.fresh {
			c.rate, c.fresh = inst, false
		} else {
			c.rate += alpha * (inst - c.rate)
		}
		c.win = 0
		// Scaling every count and error by the same factor keeps the
		// heap order.
		c.count *= decay
		c.err *= decay
	}
}

// Rate returns key's smoothed rate in events per second as of the last
// Tick, or 0 if the key is not tracked.
func (t *TopK) Rate(key string) float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if c := t.mu.index[key]; c != nil {
		return c.rate
	}
	return 0
}

// Top appends the tracked keys to dst, heaviest first (ties by key), and
// returns the extended slice.
func (t *TopK) Top(dst []Entry) []Entry {
	t.mu.Lock()
	start := len(dst)
	for _, c := range t.mu.heap {
		dst = append(dst, Entry{Key: c.key, Count: round(c.count), Err: round(c.err), Rate: c.rate})
	}
	t.mu.Unlock()
	slices.SortFunc(dst[start:], func(a, b Entry) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		return strings.Compare(a.Key, b.Key)
	})
	return dst
}

// Total is the total weight observed (decayed like the counts; with
// sampling, an estimate). Every key with more than Total/K is tracked.
func (t *TopK) Total() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return round(t.mu.total)
}

// K is the number of keys the sketch tracks at most.
func (t *TopK) K() int { return t.k }

func round(f float64) uint64 {
	if f <= 0 {
		return 0
	}
	if f >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(math.Round(f))
}
