package bench

import (
	"errors"
	"math"
	"sync/atomic"
	"time"
)

// Limit is the rule a run is measured against: a token bucket of Burst
// tokens refilled at Limit per Period. (The suite writes this rule into the
// node's rule file, so the bench knows exactly what the node enforces.)
type Limit struct {
	Limit  int64         `json:"limit"`
	Period time.Duration `json:"period_ns"`
	Burst  int64         `json:"burst"`
}

// ErrBadLimit means a Limit's fields are not all positive.
var ErrBadLimit = errors.New("limit: limit, period and burst must be > 0")

// MaxAllowed is the most hits a correct token bucket can admit to one key
// over d when the bucket starts full: Burst + Limit·d/Period. The run's
// decisions all fall between its start and the last answer, so d is that
// span; it can only overstate the bound, never understate it.
func (l Limit) MaxAllowed(d time.Duration) float64 {
	if l.Period <= 0 || d < 0 {
		return float64(l.Burst)
	}
	return float64(l.Burst) + float64(l.Limit)*float64(d)/float64(l.Period)
}

// Rate is the refill rate in hits per second.
func (l Limit) Rate() float64 {
	if l.Period <= 0 {
		return 0
	}
	return float64(l.Limit) / l.Period.Seconds()
}

// Accuracy compares what a limiter admitted with what the rule allows.
//
// For each key k with offered hits o_k, admitted hits a_k and bound
// m = MaxAllowed(duration):
//   - over-admission is max(0, a_k − floor(m)): hits admitted beyond what
//     any correct limiter could; it must be 0;
//   - the ideal is min(o_k, floor(m)): what a perfect limiter would admit
//     if the key's traffic were evenly spread; under-admission is
//     Σ max(0, ideal_k − a_k) / Σ ideal_k. Traffic is random, so a perfect
//     limiter can also fall a little short of the ideal on keys offered
//     close to the limit: read small percentages as an upper bound.
type Accuracy struct {
	Keys          int     `json:"keys"`           // keys offered at least one hit
	Offered       int64   `json:"offered"`        // hits offered
	Admitted      int64   `json:"admitted"`       // hits admitted
	Ideal         int64   `json:"ideal"`          // Σ min(offered, bound)
	Bound         float64 `json:"bound_per_key"`  // MaxAllowed(duration)
	OverKeys      int     `json:"over_keys"`      // keys admitted beyond the bound
	OverAdmitted  int64   `json:"over_admitted"`  // hits admitted beyond the bound
	UnderAdmitted int64   `json:"under_admitted"` // Σ max(0, ideal − admitted)
	UnderPct      float64 `json:"under_pct"`      // UnderAdmitted / Ideal × 100
	OverPct       float64 `json:"over_pct"`       // OverAdmitted / Ideal × 100
}

// ScoreAccuracy computes Accuracy from per-key offered and admitted hits
// (same length) over a run of duration d.
func ScoreAccuracy(l Limit, d time.Duration, offered, admitted []int64) Accuracy {
	bound := l.MaxAllowed(d)
	m := int64(math.Floor(bound + 1e-9))
	a := Accuracy{Bound: bound}
	for k, o := range offered {
		if o == 0 && admitted[k] == 0 {
			continue
		}
		ad := admitted[k]
		a.Keys++
		a.Offered += o
		a.Admitted += ad
		ideal := min(o, m)
		a.Ideal += ideal
		if ad > m {
			a.OverKeys++
			a.OverAdmitted += ad - m
		}
		if ad < ideal {
			a.UnderAdmitted += ideal - ad
		}
	}
	if a.Ideal > 0 {
		a.UnderPct = 100 * float64(a.UnderAdmitted) / float64(a.Ideal)
		a.OverPct = 100 * float64(a.OverAdmitted) / float64(a.Ideal)
	}
	return a
}

// Tally counts offered and admitted hits per key, and the admitted hits of
// key 0 (the hottest key under Zipf and Hot) per time slot, for the
// accuracy-over-time chart. Safe for concurrent use.
type Tally struct {
	offered  []atomic.Int64
	admitted []atomic.Int64
	slot     time.Duration
	hotAdm   []atomic.Int64 // per slot
	hotOff   []atomic.Int64
}

// NewTally makes counters for keys keys and a timeline of span/slot slots.
func NewTally(keys int, span, slot time.Duration) *Tally {
	if slot <= 0 {
		slot = 100 * time.Millisecond
	}
	n := int(span/slot) + 1
	return &Tally{
		offered:  make([]atomic.Int64, keys),
		admitted: make([]atomic.Int64, keys),
		slot:     slot,
		hotAdm:   make([]atomic.Int64, n),
		hotOff:   make([]atomic.Int64, n),
	}
}

// Add records one check of key k for hits, made at offset at from the start.
func (t *Tally) Add(k int32, hits int64, allowed bool, at time.Duration) {
	t.offered[k].Add(hits)
	if allowed {
		t.admitted[k].Add(hits)
	}
	if k == 0 {
		s := int(at / t.slot)
		if s >= 0 && s < len(t.hotAdm) {
			t.hotOff[s].Add(hits)
			if allowed {
				t.hotAdm[s].Add(hits)
			}
		}
	}
}

// Counts copies out the per-key offered and admitted hits.
func (t *Tally) Counts() (offered, admitted []int64) {
	offered = make([]int64, len(t.offered))
	admitted = make([]int64, len(t.admitted))
	for i := range offered {
		offered[i] = t.offered[i].Load()
		admitted[i] = t.admitted[i].Load()
	}
	return offered, admitted
}

// Timeline is key 0's admitted and offered hits per slot, as rates per
// second, for the slots up to span.
type Timeline struct {
	Slot     time.Duration `json:"slot_ns"`
	Admitted []float64     `json:"admitted_per_s"`
	Offered  []float64     `json:"offered_per_s"`
}

// HotTimeline returns key 0's timeline up to span.
func (t *Tally) HotTimeline(span time.Duration) Timeline {
	n := min(int(span/t.slot), len(t.hotAdm))
	tl := Timeline{Slot: t.slot, Admitted: make([]float64, n), Offered: make([]float64, n)}
	per := float64(time.Second) / float64(t.slot)
	for i := range n {
		tl.Admitted[i] = float64(t.hotAdm[i].Load()) * per
		tl.Offered[i] = float64(t.hotOff[i].Load()) * per
	}
	return tl
}

// localKeys is how many of the lowest key indices (the hottest under Zipf
// and Hot) a LocalTally counts in plain per-worker arrays.
const localKeys = 4096

// LocalTally is one worker's view of a Tally: the hottest keys and the
// timeline are counted without atomics (shared counters on hot keys would
// bounce cache lines between cores and make the generator the bottleneck);
// other keys go straight to the shared atomic counters. Not safe for
// concurrent use; Flush when the worker is done.
type LocalTally struct {
	t              *Tally
	off, adm       []int64
	hotOff, hotAdm []int64
}

// Local returns a LocalTally feeding t.
func (t *Tally) Local() *LocalTally {
	n := min(localKeys, len(t.offered))
	return &LocalTally{t: t, off: make([]int64, n), adm: make([]int64, n),
		hotOff: make([]int64, len(t.hotOff)), hotAdm: make([]int64, len(t.hotAdm))}
}

// Add is Tally.Add.
func (l *LocalTally) Add(k int32, hits int64, allowed bool, at time.Duration) {
	if int(k) >= len(l.off) {
		l.t.Add(k, hits, allowed, at)
		return
	}
	l.off[k] += hits
	if allowed {
		l.adm[k] += hits
	}
	if k == 0 {
		s := int(at / l.t.slot)
		if s >= 0 && s < len(l.hotAdm) {
			l.hotOff[s] += hits
			if allowed {
				l.hotAdm[s] += hits
			}
		}
	}
}

// Flush adds the local counts to the Tally and zeroes them.
func (l *LocalTally) Flush() {
	flush := func(dst []atomic.Int64, src []int64) {
		for i, v := range src {
			if v != 0 {
				dst[i].Add(v)
				src[i] = 0
			}
		}
	}
	flush(l.t.offered, l.off)
	flush(l.t.admitted, l.adm)
	flush(l.t.hotOff, l.hotOff)
	flush(l.t.hotAdm, l.hotAdm)
}
