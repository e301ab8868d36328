package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestHistogramBuckets(t *testing.T) {
	// Every value maps to a bucket whose range holds it, and bucket ranges
	// are contiguous and increasing.
	var prevHi int64 = -1
	for i := range histBuckets {
		lo, hi := bucketRange(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d]: bucketOf(lo)=%d bucketOf(hi)=%d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= subCount && float64(hi-lo+1)/float64(lo) > 1.0/subCount+1e-12 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/%d of its value", i, lo, hi, subCount)
		}
		prevHi = hi
	}
	if prevHi != int64(MaxHistogramValue) {
		t.Fatalf("last bucket ends at %d, want %d", prevHi, MaxHistogramValue)
	}
}

func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name   string
		values []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"one", []time.Duration{100}, 0.99, 100},
		{"exact small", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.5, 5},
		{"exact small p90", []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.9, 9},
		{"min", []time.Duration{30, 10, 20}, 0, 10},
		{"max", []time.Duration{30, 10, 20}, 1, 30},
		{"clamped to max", []time.Duration{time.Millisecond}, 0.5, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Histogram
			for _, v := range tt.values {
				h.Record(v)
			}
			if got := h.Quantile(tt.q); got != tt.want {
				t.Errorf("Quantile(%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

// TestHistogramAgainstSort checks every percentile against the exact order
// statistic of random data: within the bucket precision (1/128).
func TestHistogramAgainstSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h, a, b Histogram
	vals := make([]time.Duration, 20000)
	for i := range vals {
		// log-uniform between 1µs and 1s
		v := time.Duration(float64(time.Microsecond) * math.Pow(10, rng.Float64()*6))
		vals[i] = v
		h.Record(v)
		if i%2 == 0 {
			a.Record(v)
		} else {
			b.Record(v)
		}
	}
	a.Merge(&b)
	slices.Sort(vals)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999} {
		exact := vals[int(q*float64(len(vals))+0.999999)-1]
		got := h.Quantile(q)
		if d := float64(got-exact) / float64(exact); d > 1.0/subCount || d < -1.0/subCount {
			t.Errorf("q=%v: got %v, exact %v (rel err %.4f)", q, got, exact, d)
		}
		if m := a.Quantile(q); m != got {
			t.Errorf("q=%v: merged halves give %v, whole gives %v", q, m, got)
		}
	}
	if h.Count() != uint64(len(vals)) || h.Min() != vals[0] || h.Max() != vals[len(vals)-1] {
		t.Errorf("count/min/max = %d/%v/%v", h.Count(), h.Min(), h.Max())
	}
}

func TestHistogramClampsNegativeAndHuge(t *testing.T) {
	var h Histogram
	h.Record(-5)
	h.Record(MaxHistogramValue * 4)
	if h.Count() != 2 || h.Quantile(0.01) != 0 {
		t.Fatalf("negative not clamped to 0: %v", h.Quantile(0.01))
	}
}

func BenchmarkHistogramRecord(b *testing.B) {
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var h Histogram
		v := time.Duration(12345)
		for pb.Next() {
			h.Record(v)
			v = (v*31 + 7) % time.Second
		}
	})
}
