package bench

import (
	"math"
	"strings"
	"testing"
)

// TestZipfShape draws from Zipf(s) and checks that the frequency of rank 1
// over rank k is about k^s, and a chi-square statistic over the top ranks.
func TestZipfShape(t *testing.T) {
	for _, s := range []float64{0.8, 1.0, 1.2} {
		const n, draws = 1000, 400_000
		ks, err := NewKeySampler(KeyConfig{Keys: n, Dist: Zipf, ZipfS: s, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		freq := make([]float64, n)
		for range draws {
			freq[ks.Next()]++
		}
		for _, k := range []int{2, 5, 10} {
			ratio := freq[0] / freq[k-1]
			want := math.Pow(float64(k), s)
			if math.Abs(ratio-want)/want > 0.1 {
				t.Errorf("s=%v: f(1)/f(%d) = %.2f, want %.2f ±10%%", s, k, ratio, want)
			}
		}
		// chi-square over ranks 1..20 plus the tail as one cell.
		cdf := ZipfCDF(n, s)
		var chi float64
		prev := 0.0
		for k := 0; k < 20; k++ {
			exp := (cdf[k] - prev) * draws
			prev = cdf[k]
			chi += (freq[k] - exp) * (freq[k] - exp) / exp
		}
		var tail float64
		for k := 20; k < n; k++ {
			tail += freq[k]
		}
		exp := (1 - prev) * draws
		chi += (tail - exp) * (tail - exp) / exp
		// 20 degrees of freedom: p=0.001 critical value is 45.3.
		if chi > 45.3 {
			t.Errorf("s=%v: chi-square %.1f over 21 cells, want < 45.3", s, chi)
		}
	}
}

func TestUniformAndHot(t *testing.T) {
	const n, draws = 100, 200_000
	u, _ := NewKeySampler(KeyConfig{Keys: n, Dist: Uniform, Seed: 1})
	freq := make([]int, n)
	for range draws {
		freq[u.Next()]++
	}
	for k, f := range freq {
		if math.Abs(float64(f)-draws/n) > 0.1*draws/n {
			t.Fatalf("uniform: key %d drawn %d times, want %d ±10%%", k, f, draws/n)
		}
	}
	h, _ := NewKeySampler(KeyConfig{Keys: n, Dist: Hot, HotShare: 0.3, Seed: 1})
	hot := 0
	for range draws {
		k := h.Next()
		if k < 0 || int(k) >= n {
			t.Fatalf("key %d out of range", k)
		}
		if k == 0 {
			hot++
		}
	}
	if share := float64(hot) / draws; math.Abs(share-0.3) > 0.01 {
		t.Fatalf("hot share %.3f, want 0.3", share)
	}
}

func TestSequenceReproducible(t *testing.T) {
	cfg := KeyConfig{Keys: 50, Dist: Zipf, Seed: 42}
	a, _ := NewKeySampler(cfg)
	b, _ := NewKeySampler(cfg)
	sa, sb := a.Sequence(1000), b.Sequence(1000)
	for i := range sa {
		if sa[i] != sb[i] {
			t.Fatalf("draw %d differs: %d vs %d", i, sa[i], sb[i])
		}
	}
}

func TestKeyConfigValidate(t *testing.T) {
	tests := []struct {
		cfg   KeyConfig
		field string
	}{
		{KeyConfig{Keys: -1}, "keys"},
		{KeyConfig{Keys: MaxKeys + 1}, "keys"},
		{KeyConfig{ZipfS: -1}, "zipf-s"},
		{KeyConfig{ZipfS: math.NaN()}, "zipf-s"},
		{KeyConfig{HotShare: 1.5}, "hot-share"},
		{KeyConfig{Prefix: `a"b`}, "prefix"},
		{KeyConfig{Dist: 9}, "dist"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tt.field+":") {
			t.Errorf("%+v: error %v, want one naming %q", tt.cfg, err, tt.field)
		}
	}
	if err := (KeyConfig{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
}

func TestKeyNames(t *testing.T) {
	names := KeyConfig{Keys: 3, Prefix: "p1-"}.KeyNames()
	if len(names) != 3 || string(names[0]) != "p1-0" || string(names[2]) != "p1-2" {
		t.Fatalf("names = %q", names)
	}
	names[0] = append(names[0], 'x') // must not overwrite names[1]
	if string(names[1]) != "p1-1" {
		t.Fatalf("key names share capacity: %q", names[1])
	}
}
