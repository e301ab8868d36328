package bench

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
)

// Dist is how checks are spread over keys.
type Dist uint8

// The key distributions.
const (
	// Uniform picks every key with the same probability.
	Uniform Dist = iota
	// Zipf picks the key of rank k (1-based) with probability ∝ 1/k^s.
	Zipf
	// Hot sends a share of the checks to key 0 and spreads the rest
	// uniformly over the other keys.
	Hot
	// Cycle visits the keys in order, 0 to Keys-1 and again: at a steady
	// rate r every key comes back exactly Keys/r after its last check (the
	// workload of keys that return after an idle spell). The runner hands
	// out positions in the cycle from one counter shared by its workers.
	Cycle
)

var distNames = [...]string{Uniform: "uniform", Zipf: "zipf", Hot: "hot", Cycle: "cycle"}

func (d Dist) String() string {
	if int(d) < len(distNames) {
		return distNames[d]
	}
	return fmt.Sprintf("dist(%d)", d)
}

// ParseDist parses "uniform", "zipf", "hot" or "cycle".
func ParseDist(s string) (Dist, error) {
	for d, n := range distNames {
		if n == s {
			return Dist(d), nil
		}
	}
	return 0, fmt.Errorf("dist: unknown distribution %q (want uniform, zipf, hot or cycle)", s)
}

// KeyConfig describes the keys of a workload.
type KeyConfig struct {
	// Keys is the number of distinct keys; 0 means 10,000.
	Keys int
	// Dist is the distribution; the zero value is Uniform.
	Dist Dist
	// ZipfS is the Zipf exponent s > 0; 0 means 1.0 (web-like skew).
	ZipfS float64
	// HotShare is the share of checks to key 0 under Hot, in (0, 1]; 0
	// means 0.5.
	HotShare float64
	// Prefix starts every key, so that each run begins with fresh buckets;
	// "" means "k".
	Prefix string
	// Seed makes the sequence reproducible; runs with the same config and
	// seed send the same keys in the same order.
	Seed uint64
}

// MaxKeys bounds KeyConfig.Keys (the key table and the accuracy counters
// are held in memory).
const MaxKeys = 10_000_000

func (c KeyConfig) withDefaults() KeyConfig {
	if c.Keys == 0 {
		c.Keys = 10_000
	}
	if c.ZipfS == 0 {
		c.ZipfS = 1.0
	}
	if c.HotShare == 0 {
		c.HotShare = 0.5
	}
	if c.Prefix == "" {
		c.Prefix = "k"
	}
	return c
}

// Validate names the field at fault.
func (c KeyConfig) Validate() error {
	c = c.withDefaults()
	switch {
	case c.Keys < 1 || c.Keys > MaxKeys:
		return fmt.Errorf("keys: must be between 1 and %d, got %d", MaxKeys, c.Keys)
	case c.Dist > Cycle:
		return fmt.Errorf("dist: unknown distribution %d", c.Dist)
	case c.ZipfS < 0 || math.IsNaN(c.ZipfS) || math.IsInf(c.ZipfS, 0):
		return fmt.Errorf("zipf-s: must be > 0, got %v", c.ZipfS)
	case !(c.HotShare > 0 && c.HotShare <= 1):
		return fmt.Errorf("hot-share: must be in (0, 1], got %v", c.HotShare)
	case len(c.Prefix) > 200:
		return fmt.Errorf("prefix: at most 200 bytes")
	}
	for _, r := range c.Prefix {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.:-", r)) {
			return fmt.Errorf("prefix: %q: only letters, digits and _.:- (keys go into JSON, headers and URLs unescaped)", c.Prefix)
		}
	}
	return nil
}

// KeyNames returns the Keys key strings: Prefix followed by the index. Key 0
// is rank 1 under Zipf and the hot key under Hot.
func (c KeyConfig) KeyNames() [][]byte {
	c = c.withDefaults()
	out := make([][]byte, c.Keys)
	buf := make([]byte, 0, c.Keys*(len(c.Prefix)+8))
	for i := range out {
		start := len(buf)
		buf = append(buf, c.Prefix...)
		buf = strconv.AppendInt(buf, int64(i), 10)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}

// KeySampler draws key indices from a KeyConfig's distribution. Not safe
// for concurrent use; workers read a precomputed Sequence instead.
type KeySampler struct {
	cfg KeyConfig
	rng *rand.Rand
	cdf []float64 // Zipf: cdf[k] = P(rank ≤ k+1)
	pos int32     // Cycle: the next key
}

// NewKeySampler validates cfg and builds its tables (Zipf: one float64 per
// key).
func NewKeySampler(cfg KeyConfig) (*KeySampler, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	s := &KeySampler{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed_51c3))}
	if cfg.Dist == Zipf {
		s.cdf = ZipfCDF(cfg.Keys, cfg.ZipfS)
	}
	return s, nil
}

// ZipfCDF returns the cumulative distribution of Zipf(s) over n ranks.
func ZipfCDF(n int, s float64) []float64 {
	cdf := make([]float64, n)
	var sum float64
	for k := range cdf {
		sum += math.Pow(float64(k+1), -s)
		cdf[k] = sum
	}
	for k := range cdf {
		cdf[k] /= sum
	}
	cdf[n-1] = 1
	return cdf
}

// Next returns the next key index in [0, Keys).
func (s *KeySampler) Next() int32 {
	n := s.cfg.Keys
	switch s.cfg.Dist {
	case Zipf:
		u := s.rng.Float64()
		return int32(sort.SearchFloat64s(s.cdf, u))
	case Cycle:
		k := s.pos
		s.pos = (s.pos + 1) % int32(n)
		return k
	case Hot:
		if n == 1 || s.rng.Float64() < s.cfg.HotShare {
			return 0
		}
		return int32(1 + s.rng.IntN(n-1))
	default:
		return int32(s.rng.IntN(n))
	}
}

// Sequence returns n draws. Workers walk a shared read-only sequence from
// different offsets, so drawing a key costs one load during a run.
func (s *KeySampler) Sequence(n int) []int32 {
	out := make([]int32, n)
	for i := range out {
		out[i] = s.Next()
	}
	return out
}
