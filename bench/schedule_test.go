package bench

import (
	"testing"
	"time"
)

func TestScheduleAtExact(t *testing.T) {
	tests := []struct {
		rate int64
		i    int64
		want time.Duration
	}{
		{1000, 0, 0},
		{1000, 1, time.Millisecond},
		{1000, 999, 999 * time.Millisecond},
		{1000, 1_000_000, 1000 * time.Second},
		{3, 1, 333_333_333}, // floor(1e9/3)
		{3, 2, 666_666_666}, // floor(2e9/3), not 2×floor(1e9/3)
		{3, 3, time.Second}, // no drift
		{7, 7_000_000, 1_000_000 * time.Second},
		{1_000_000, 123_456_789, 123_456_789 * time.Microsecond},
		{1 << 40, 1 << 40, time.Second},
	}
	for _, tt := range tests {
		if got := (Schedule{Rate: tt.rate, Duration: time.Hour}).At(tt.i); got != tt.want {
			t.Errorf("rate %d At(%d) = %d, want %d", tt.rate, tt.i, got, tt.want)
		}
	}
}

func TestScheduleMonotonicAndCount(t *testing.T) {
	tests := []struct {
		rate int64
		d    time.Duration
		want int64
	}{
		{1000, time.Second, 1000},
		{1000, time.Second + 1, 1001},
		{3, time.Second, 3},
		{3, 2 * time.Second, 6},
		{7, 999 * time.Millisecond, 7}, // 7th due at 857ms
		{1, time.Nanosecond, 1},
	}
	for _, tt := range tests {
		s := Schedule{Rate: tt.rate, Duration: tt.d}
		n := s.Count()
		if n != tt.want {
			t.Errorf("rate %d over %v: Count = %d, want %d", tt.rate, tt.d, n, tt.want)
		}
		// The definition: the last scheduled is due before D, the next is not.
		if s.At(n-1) >= tt.d || s.At(n) < tt.d {
			t.Errorf("rate %d over %v: At(%d)=%v At(%d)=%v straddle wrong", tt.rate, tt.d, n-1, s.At(n-1), n, s.At(n))
		}
	}
	s := Schedule{Rate: 333_333, Duration: time.Second}
	for i := int64(1); i < s.Count(); i++ {
		gap := s.At(i) - s.At(i-1)
		if gap != 3000 && gap != 3001 {
			t.Fatalf("gap %d→%d is %v; want 3µs (±1ns rounding)", i-1, i, gap)
		}
	}
}

func TestScheduleValidate(t *testing.T) {
	for _, s := range []Schedule{{}, {Rate: 1}, {Duration: 1}, {Rate: -1, Duration: 1}} {
		if s.Validate() == nil || s.Count() != 0 {
			t.Errorf("%+v: want invalid", s)
		}
	}
}
