package node

import (
	"sort"
	"time"
)

// The ring of /v1/stats: per rule, the checks of each decision in
// StatsBuckets buckets of StatsBucket, fed by the sampler (stats.go).

// counts are one rule's checks per decision.
type counts [numDecisions]uint64

// statsRing holds per-rule counts in n buckets of width. It is pure (the
// time is passed in) and not safe for concurrent use: statsState's mutex
// guards it.
type statsRing struct {
	width int64 // ns
	slots []statsSlot
	// last is each rule's cumulative counts at the previous sample; a
	// rule never sampled has a zero baseline (its counters start at zero
	// and live as long as the process).
	last map[string]counts
}

// statsSlot is one bucket: idx is its index (unix ns / width), counts
// its per-rule counts; a slot whose idx is not the one asked for is stale.
type statsSlot struct {
	idx    int64
	counts map[string]*counts
}

func newStatsRing(width time.Duration, n int) *statsRing {
	r := &statsRing{width: int64(width), slots: make([]statsSlot, n), last: map[string]counts{}}
	for i := range r.slots {
		r.slots[i] = statsSlot{idx: -1, counts: map[string]*counts{}}
	}
	return r
}

func (r *statsRing) index(now time.Time) int64 { return now.UnixNano() / r.width }

func (r *statsRing) slot(idx int64) *statsSlot {
	return &r.slots[int(idx%int64(len(r.slots)))]
}

// observe records rule's cumulative counts cum at now: what they grew by
// since the previous sample goes to now's bucket. A counter that went
// backwards (it cannot, but a test's fake may) counts from zero.
func (r *statsRing) observe(now time.Time, rule string, cum counts) {
	prev := r.last[rule]
	r.last[rule] = cum
	var d counts
	var any bool
	for i := range cum {
		if cum[i] >= prev[i] {
			d[i] = cum[i] - prev[i]
		} else {
			d[i] = cum[i]
		}
		any = any || d[i] != 0
	}
	if !any {
		return
	}
	idx := r.index(now)
	s := r.slot(idx)
	if s.idx != idx {
		if s.idx > idx { // a sample older than the ring's newest bucket: dropped
			return
		}
		clear(s.counts)
		s.idx = idx
	}
	c := s.counts[rule]
	if c == nil {
		c = new(counts)
		s.counts[rule] = c
	}
	for i := range d {
		c[i] += d[i]
	}
}

// statsRule is one rule's row of /v1/stats: a count per bucket, oldest
// first, for each decision.
type statsRule struct {
	Rule         string   `json:"rule"`
	Allowed      []uint64 `json:"allowed"`
	Denied       []uint64 `json:"denied"`
	ShadowDenied []uint64 `json:"shadow_denied"`
	Unavailable  []uint64 `json:"unavailable"`
	Degraded     []uint64 `json:"degraded"`
	// LocalFallback is allowed from node memory with the Store down.
	LocalFallback []uint64 `json:"local_fallback"`
	// Shed is answered 503 because the key's owner, alive, did not
	// answer in time (overload; see the node package doc).
	Shed []uint64 `json:"shed"`
}

func newStatsRule(name string, n int) statsRule {
	return statsRule{
		Rule:    name,
		Allowed: make([]uint64, n), Denied: make([]uint64, n),
		ShadowDenied: make([]uint64, n), Unavailable: make([]uint64, n),
		Degraded: make([]uint64, n), LocalFallback: make([]uint64, n),
		Shed: make([]uint64, n),
	}
}

// row returns the slice of decision d.
func (s *statsRule) row(d int) []uint64 {
	switch d {
	case decAllowed:
		return s.Allowed
	case decDenied:
		return s.Denied
	case decShadowDenied:
		return s.ShadowDenied
	case decUnavailable:
		return s.Unavailable
	case decLocal:
		return s.LocalFallback
	case decShed:
		return s.Shed
	}
	return s.Degraded
}

// add adds o's counts, o's bucket 0 falling on s's bucket shift. Buckets
// after s's last one (a peer whose clock is ahead, or whose current
// bucket began while it was asked) count in s's last, current bucket;
// buckets before s's first are out of the window.
func (s *statsRule) add(o *statsRule, shift int) {
	for d := range numDecisions {
		dst, src := s.row(d), o.row(d)
		for i, v := range src {
			j := min(i+shift, len(dst)-1)
			if j >= 0 {
				dst[j] += v
			}
		}
	}
}

// snapshot returns the window ending with now's bucket: the start of its
// oldest bucket and a row per rule, sorted by name, for every rule in
// names (the current set) or with counts in the window.
func (r *statsRing) snapshot(now time.Time, names []string) (start time.Time, rows []statsRule) {
	n := len(r.slots)
	cur := r.index(now)
	first := cur - int64(n) + 1
	byName := make(map[string]*statsRule, len(names))
	get := func(name string) *statsRule {
		row := byName[name]
		if row == nil {
			nr := newStatsRule(name, n)
			row = &nr
			byName[name] = row
		}
		return row
	}
	for _, name := range names {
		get(name)
	}
	for i := range n {
		idx := first + int64(i)
		s := r.slot(idx)
		if s.idx != idx {
			continue
		}
		for name, c := range s.counts {
			row := get(name)
			for d := range numDecisions {
				row.row(d)[i] = c[d]
			}
		}
	}
	rows = make([]statsRule, 0, len(byName))
	for _, row := range byName {
		rows = append(rows, *row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Rule < rows[j].Rule })
	return time.Unix(0, first*r.width), rows
}
