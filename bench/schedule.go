package bench

import (
	"errors"
	"math/bits"
	"time"
)

// Schedule is an open-loop arrival schedule: request i (from 0) is due at
// Start + i/Rate, computed from i alone so that rounding never accumulates.
// Intended times are fixed before the run, whatever the server does: this is
// what keeps the latency figures free of coordinated omission.
type Schedule struct {
	// Rate is requests per second, > 0.
	Rate int64
	// Duration bounds the schedule: requests due at or after it are not
	// scheduled.
	Duration time.Duration
}

// ErrBadSchedule means a Schedule's Rate or Duration is not positive.
var ErrBadSchedule = errors.New("schedule: rate and duration must be > 0")

// Validate reports whether s can be run.
func (s Schedule) Validate() error {
	if s.Rate <= 0 || s.Duration <= 0 {
		return ErrBadSchedule
	}
	return nil
}

// At returns the offset from the start at which request i is due:
// floor(i·1e9/Rate) nanoseconds, exact for every i ≥ 0.
func (s Schedule) At(i int64) time.Duration {
	hi, lo := bits.Mul64(uint64(i), uint64(time.Second))
	if hi >= uint64(s.Rate) { // quotient would overflow; beyond any real run
		return time.Duration(1<<63 - 1)
	}
	q, _ := bits.Div64(hi, lo, uint64(s.Rate))
	if q > 1<<63-1 {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(q)
}

// Count is the number of requests due before Duration: the smallest i with
// At(i) ≥ Duration.
func (s Schedule) Count() int64 {
	if s.Validate() != nil {
		return 0
	}
	// i·1e9/Rate < D  ⇔  i < D·Rate/1e9; count = ceil(D·Rate/1e9).
	hi, lo := bits.Mul64(uint64(s.Duration), uint64(s.Rate))
	if hi >= uint64(time.Second) {
		return 1<<63 - 1
	}
	q, r := bits.Div64(hi, lo, uint64(time.Second))
	if r != 0 {
		q++
	}
	return int64(q)
}
