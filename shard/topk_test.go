package shard

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

// zipfKeys returns a reproducible stream of n keys drawn from a Zipf
// distribution over distinct keys, and the true count of each key.
func zipfKeys(n, distinct int, s float64, seed uint64) ([]string, map[string]uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	z := newZipf(r, s, distinct)
	stream := make([]string, n)
	truth := map[string]uint64{}
	names := make([]string, distinct)
	for i := range names {
		names[i] = "k" + strconv.Itoa(i)
	}
	for i := range stream {
		k := names[z()]
		stream[i] = k
		truth[k]++
	}
	return stream, truth
}

// newZipf returns a sampler of ranks 0..n-1 with P(rank) ∝ 1/(rank+1)^s,
// by inverting the cumulative distribution.
func newZipf(r *rand.Rand, s float64, n int) func() int {
	cdf := make([]float64, n)
	sum := 0.0
	for i := range cdf {
		sum += 1 / math.Pow(float64(i+1), s)
		cdf[i] = sum
	}
	return func() int {
		u := r.Float64() * sum
		lo, hi := 0, n-1
		for lo < hi {
			mid := (lo + hi) / 2
			if cdf[mid] < u {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return lo
	}
}

func entriesByKey(es []Entry) map[string]Entry {
	m := make(map[string]Entry, len(es))
	for _, e := range es {
		m[e.Key] = e
	}
	return m
}

func TestTopKExactWhenFewKeys(t *testing.T) {
	tk := NewTopK(4)
	for i, k := range []string{"a", "b", "a", "c", "a", "b"} {
		tk.Observe(k, 1)
		if i == 0 {
			tk.Observe(k, 0) // ignored
		}
	}
	tk.Observe("d", 10)
	got := tk.Top(nil)
	want := []Entry{{Key: "d", Count: 10}, {Key: "a", Count: 3}, {Key: "b", Count: 2}, {Key: "c", Count: 1}}
	if len(got) != len(want) {
		t.Fatalf("Top = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("Top[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if tk.Total() != 16 {
		t.Errorf("Total = %d, want 16", tk.Total())
	}
}

// TestTopKReplacement follows Space-Saving step by step: a new key takes
// the minimum counter and inherits its count as error.
func TestTopKReplacement(t *testing.T) {
	tk := NewTopK(2)
	steps := []struct {
		key  string
		n    uint64
		want []Entry
	}{
		{"a", 2, []Entry{{Key: "a", Count: 2}}},
		{"b", 1, []Entry{{Key: "a", Count: 2}, {Key: "b", Count: 1}}},
		{"c", 1, []Entry{{Key: "a", Count: 2}, {Key: "c", Count: 2, Err: 1}}},
		// a and c tie at 2: c, with the larger error, is evicted.
		{"d", 3, []Entry{{Key: "d", Count: 5, Err: 2}, {Key: "a", Count: 2}}},
		{"c", 4, []Entry{{Key: "c", Count: 6, Err: 2}, {Key: "d", Count: 5, Err: 2}}},
		{"d", 1, []Entry{{Key: "c", Count: 6, Err: 2}, {Key: "d", Count: 6, Err: 2}}},
	}
	for i, s := range steps {
		tk.Observe(s.key, s.n)
		got := tk.Top(nil)
		if len(got) != len(s.want) {
			t.Fatalf("step %d: Top = %+v, want %+v", i, got, s.want)
		}
		for j := range got {
			if got[j] != s.want[j] {
				t.Fatalf("step %d: Top = %+v, want %+v", i, got, s.want)
			}
		}
	}
}

// TestTopKGuarantees checks Space-Saving's guarantees on skewed streams:
// every count brackets the true count within its error, errors are at most
// N/k, every key above N/k is tracked, and the heaviest keys are exact.
func TestTopKGuarantees(t *testing.T) {
	for _, tc := range []struct {
		name     string
		k        int
		s        float64
		distinct int
	}{
		{"zipf1.1", 64, 1.1, 10_000},
		{"zipf0.8", 128, 0.8, 50_000},
		{"zipf1.5", 16, 1.5, 1_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream, truth := zipfKeys(200_000, tc.distinct, tc.s, 42)
			tk := NewTopK(tc.k)
			for _, k := range stream {
				tk.Observe(k, 1)
			}
			n := uint64(len(stream))
			es := tk.Top(nil)
			if len(es) != tc.k {
				t.Fatalf("tracked %d keys, want %d", len(es), tc.k)
			}
			var sum uint64
			for _, e := range es {
				sum += e.Count
				tr := truth[e.Key]
				if e.Count < tr || e.Count-e.Err > tr {
					t.Errorf("%s: count %d err %d does not bracket true %d", e.Key, e.Count, e.Err, tr)
				}
				if e.Err > n/uint64(tc.k) {
					t.Errorf("%s: err %d > N/k = %d", e.Key, e.Err, n/uint64(tc.k))
				}
			}
			if sum != n {
				t.Errorf("sum of counts %d, want N = %d", sum, n)
			}
			byKey := entriesByKey(es)
			heavy := 0
			for k, c := range truth {
				if c > n/uint64(tc.k) {
					heavy++
					if _, ok := byKey[k]; !ok {
						t.Errorf("heavy hitter %s (%d > N/k = %d) not tracked", k, c, n/uint64(tc.k))
					}
				}
			}
			// The top of a skewed stream is counted exactly: the heaviest
			// keys arrive early and are never evicted.
			for rank := range 3 {
				k := "k" + strconv.Itoa(rank)
				if e := byKey[k]; e.Count != truth[k] || e.Err != 0 {
					t.Errorf("rank %d key %s: count %d err %d, want exact %d", rank, k, e.Count, e.Err, truth[k])
				}
			}
			t.Logf("N=%d k=%d: %d heavy hitters, all tracked", n, tc.k, heavy)
		})
	}
}

func TestTopKSampled(t *testing.T) {
	tk, err := NewTopKConfig(TopKConfig{K: 32, Sample: 16})
	if err != nil {
		t.Fatal(err)
	}
	const n = 320_000
	var heavyTrue uint64
	for i := range n {
		k := "cold-" + strconv.Itoa(i%5000)
		if i%10 < 3 {
			k = "hot"
			heavyTrue++
		}
		tk.Observe(k, 1)
	}
	es := tk.Top(nil)
	if es[0].Key != "hot" {
		t.Fatalf("Top[0] = %+v, want the hot key", es[0])
	}
	// The hot key is sampled ~6000 times (σ ≈ 75, 1.3%): a 10% bound is
	// eight standard deviations.
	if got := float64(es[0].Count); math.Abs(got-float64(heavyTrue)) > 0.1*float64(heavyTrue) {
		t.Errorf("sampled count of hot key %v, true %d: off by more than 10%%", got, heavyTrue)
	}
	if got := float64(tk.Total()); math.Abs(got-n) > 0.05*n {
		t.Errorf("sampled total %v, true %d: off by more than 5%%", got, n)
	}
}

func TestTopKRate(t *testing.T) {
	tk := NewTopK(8) // rate half-life 2s
	tk.Observe("a", 500)
	tk.Tick(t0) // starts the first window: the 500 are counted, not rated
	if r := tk.Rate("a"); r != 0 {
		t.Fatalf("rate before the first window closed = %v", r)
	}
	if c := tk.Top(nil)[0].Count; c != 500 {
		t.Fatalf("count = %d, want 500", c)
	}
	tk.Observe("a", 1000)
	tk.Tick(t0.Add(time.Second))
	if r := tk.Rate("a"); r != 1000 {
		t.Fatalf("rate after one 1s window of 1000 = %v, want 1000", r)
	}
	// A second window at 3000/s moves the average by 1-2^(-1/2) of the
	// difference.
	tk.Observe("a", 3000)
	tk.Tick(t0.Add(2 * time.Second))
	want := 1000 + (1-math.Exp2(-0.5))*2000
	if r := tk.Rate("a"); math.Abs(r-want) > 1e-9 {
		t.Fatalf("rate = %v, want %v", r, want)
	}
	// A Tick that does not move time forward changes nothing.
	tk.Observe("a", 99999)
	tk.Tick(t0.Add(2 * time.Second))
	tk.Tick(t0.Add(time.Second))
	if r := tk.Rate("a"); math.Abs(r-want) > 1e-9 {
		t.Fatalf("rate after non-advancing Ticks = %v, want %v", r, want)
	}
	if r := tk.Rate("unknown"); r != 0 {
		t.Fatalf("rate of an untracked key = %v", r)
	}

	// Steady traffic converges to its rate whatever the tick length; the
	// window spans the 99999 above, so allow for its decay.
	now := t0.Add(2 * time.Second)
	for i := range 60 {
		d := time.Duration(500+i%3*250) * time.Millisecond
		tk.Observe("a", uint64(2000*d.Seconds()))
		now = now.Add(d)
		tk.Tick(now)
	}
	if r := tk.Rate("a"); math.Abs(r-2000) > 1 {
		t.Fatalf("steady 2000/s converged to %v", r)
	}
	if e := tk.Top(nil)[0]; e.Rate != tk.Rate("a") {
		t.Fatalf("Top rate %v != Rate %v", e.Rate, tk.Rate("a"))
	}
}

func TestTopKDecay(t *testing.T) {
	tk, err := NewTopKConfig(TopKConfig{K: 2, CountHalfLife: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tk.Observe("old", 1000)
	tk.Observe("mid", 100)
	tk.Tick(t0)
	tk.Tick(t0.Add(10 * time.Second))
	es := tk.Top(nil)
	if es[0].Count != 500 || es[1].Count != 50 || tk.Total() != 550 {
		t.Fatalf("after one half-life: %+v total %d, want 500, 50, 550", es, tk.Total())
	}
	// Once the old key has decayed, a new key overtakes it.
	tk.Tick(t0.Add(60 * time.Second)) // old ≈ 15.6, mid ≈ 1.6
	tk.Observe("new", 20)             // replaces mid: 21.6, err 1.6
	es = tk.Top(nil)
	if es[0].Key != "new" || es[0].Count != 22 || es[0].Err != 2 || es[1].Key != "old" || es[1].Count != 16 {
		t.Fatalf("after decay: %+v", es)
	}
}

func TestTopKConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg   TopKConfig
		field string
	}{
		{TopKConfig{K: -1}, "k:"},
		{TopKConfig{K: maxTopK + 1}, "k:"},
		{TopKConfig{Sample: -2}, "sample:"},
		{TopKConfig{Sample: maxSample + 1}, "sample:"},
		{TopKConfig{RateHalfLife: -time.Second}, "rate_half_life:"},
		{TopKConfig{CountHalfLife: -time.Second}, "count_half_life:"},
	} {
		_, err := NewTopKConfig(tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("NewTopKConfig(%+v) = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	if tk := NewTopK(-5); tk.K() != 128 {
		t.Errorf("NewTopK(-5).K() = %d", tk.K())
	}
	if tk := NewTopK(1 << 30); tk.K() != maxTopK {
		t.Errorf("NewTopK(1<<30).K() = %d", tk.K())
	}
	if _, err := NewTopKConfig(DefaultTopKConfig()); err != nil {
		t.Errorf("DefaultTopKConfig: %v", err)
	}
}

// TestTopKConcurrent is for the race detector; without sampling the total
// must also be exact.
func TestTopKConcurrent(t *testing.T) {
	tk := NewTopK(16)
	var wg sync.WaitGroup
	const workers, each = 4, 5000
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				tk.Observe("k"+strconv.Itoa((i*7+w)%40), 1)
				if i%1000 == 0 {
					tk.Tick(t0.Add(time.Duration(w*each+i) * time.Millisecond))
					tk.Top(nil)
					tk.Rate("k1")
				}
			}
		})
	}
	wg.Wait()
	if got := tk.Total(); got != workers*each {
		t.Fatalf("Total = %d, want %d", got, workers*each)
	}
}

func BenchmarkTopKObserve(b *testing.B) {
	stream, _ := zipfKeys(1<<16, 100_000, 1.1, 7)
	for _, sample := range []int{1, 8, 32} {
		b.Run("sample="+strconv.Itoa(sample), func(b *testing.B) {
			tk, err := NewTopKConfig(TopKConfig{K: 128, Sample: sample})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.IntN(len(stream))
				for pb.Next() {
					tk.Observe(stream[i&(len(stream)-1)], 1)
					i++
				}
			})
		})
	}
}

func BenchmarkTopKTick(b *testing.B) {
	tk := NewTopK(128)
	stream, _ := zipfKeys(1<<14, 10_000, 1.1, 7)
	for _, k := range stream {
		tk.Observe(k, 1)
	}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		tk.Tick(now)
	}
}
