package bench

import (
	"math"
	"math/bits"
	"time"
)

// Histogram records durations in log-linear buckets, like HdrHistogram:
// values below 2^subBits nanoseconds are exact, and every power of two above
// is split into 2^subBits equal buckets, so a recorded value is known to
// within 1/128 (0.8%) of itself. Values above MaxHistogramValue are clamped.
// The zero value is ready to use. Not safe for concurrent use: give each
// worker its own and Merge them.
type Histogram struct {
	counts [histBuckets]uint64
	n      uint64
	sum    float64
	min    int64
	max    int64
}

const (
	subBits     = 7
	subCount    = 1 << subBits
	maxExp      = 40 // 2^40 ns ≈ 18 min
	histBuckets = subCount + (maxExp-subBits+1)*subCount
)

// MaxHistogramValue is the largest value a Histogram distinguishes.
const MaxHistogramValue = time.Duration(1<<(maxExp+1) - 1)

func bucketOf(v int64) int {
	if v < subCount {
		if v < 0 {
			return 0
		}
		return int(v)
	}
	if v > int64(MaxHistogramValue) {
		v = int64(MaxHistogramValue)
	}
	e := bits.Len64(uint64(v)) - 1 // ≥ subBits
	shift := e - subBits
	sub := int(v>>shift) - subCount
	return subCount + (e-subBits)*subCount + sub
}

// bucketRange returns the smallest and largest value that map to bucket i.
func bucketRange(i int) (lo, hi int64) {
	if i < subCount {
		return int64(i), int64(i)
	}
	j := i - subCount
	e := j/subCount + subBits
	sub := j % subCount
	shift := e - subBits
	lo = int64(subCount+sub) << shift
	return lo, lo + (int64(1) << shift) - 1
}

// Record adds one value.
func (h *Histogram) Record(d time.Duration) {
	v := int64(d)
	if v < 0 {
		v = 0
	}
	h.counts[bucketOf(v)]++
	if h.n == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.n++
	h.sum += float64(v)
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.n }

// Min and Max are the exact extremes (0 when empty).
func (h *Histogram) Min() time.Duration { return time.Duration(h.min) }

// Max is the largest recorded value.
func (h *Histogram) Max() time.Duration { return time.Duration(h.max) }

// Mean is the exact mean (0 when empty).
func (h *Histogram) Mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}

// Merge adds o's values to h.
func (h *Histogram) Merge(o *Histogram) {
	if o.n == 0 {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.n == 0 || o.min < h.min {
		h.min = o.min
	}
	if o.max > h.max {
		h.max = o.max
	}
	h.n += o.n
	h.sum += o.sum
}

// Quantile returns the value below or at which a fraction q (0..1) of the
// recorded values lie: the midpoint of the bucket holding the value of rank
// ceil(q·n), clamped to [Min, Max]. It is 0 for an empty histogram.
func (h *Histogram) Quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	if q <= 0 {
		return h.Min()
	}
	if q >= 1 {
		return h.Max()
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	if rank == 0 {
		rank = 1
	}
	var cum uint64
	for i, c := range h.counts {
		cum += c
		if cum >= rank {
			lo, hi := bucketRange(i)
			v := lo + (hi-lo)/2
			v = max(v, h.min)
			v = min(v, h.max)
			return time.Duration(v)
		}
	}
	return h.Max()
}

// Percentiles is the summary the reports print.
type Percentiles struct {
	P50  time.Duration `json:"p50_ns"`
	P90  time.Duration `json:"p90_ns"`
	P99  time.Duration `json:"p99_ns"`
	P999 time.Duration `json:"p999_ns"`
	Max  time.Duration `json:"max_ns"`
	Mean time.Duration `json:"mean_ns"`
}

// Summary returns p50, p90, p99, p99.9, max and mean.
func (h *Histogram) Summary() Percentiles {
	return Percentiles{
		P50: h.Quantile(0.5), P90: h.Quantile(0.9), P99: h.Quantile(0.99),
		P999: h.Quantile(0.999), Max: h.Max(), Mean: h.Mean(),
	}
}
