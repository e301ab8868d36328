package bench

import (
	"math"
	"testing"
	"time"
)

func TestMaxAllowed(t *testing.T) {
	l := Limit{Limit: 100, Period: time.Second, Burst: 50}
	tests := []struct {
		d    time.Duration
		want float64
	}{
		{0, 50},
		{time.Second, 150},
		{10 * time.Second, 1050},
		{1500 * time.Millisecond, 200},
		{-time.Second, 50},
	}
	for _, tt := range tests {
		if got := l.MaxAllowed(tt.d); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("MaxAllowed(%v) = %v, want %v", tt.d, got, tt.want)
		}
	}
	if r := (Limit{Limit: 60, Period: time.Minute}).Rate(); r != 1 {
		t.Errorf("Rate = %v, want 1", r)
	}
}

func TestScoreAccuracy(t *testing.T) {
	l := Limit{Limit: 10, Period: time.Second, Burst: 10}
	d := 2 * time.Second // bound = 10 + 20 = 30 per key
	tests := []struct {
		name              string
		offered, admitted []int64
		over, overKeys    int64
		under, ideal      int64
		underPct          float64
	}{
		{"perfect", []int64{100, 5, 0}, []int64{30, 5, 0}, 0, 0, 0, 35, 0},
		{"over by 2 on one key", []int64{100, 100}, []int64{32, 30}, 2, 1, 0, 60, 0},
		{"under on hot key", []int64{100, 5}, []int64{20, 5}, 0, 0, 10, 35, 100 * 10.0 / 35},
		{"cold key denied", []int64{5}, []int64{4}, 0, 0, 1, 5, 20},
		{"both", []int64{100, 8}, []int64{31, 6}, 1, 1, 2, 38, 100 * 2.0 / 38},
		{"nothing", []int64{0, 0}, []int64{0, 0}, 0, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := ScoreAccuracy(l, d, tt.offered, tt.admitted)
			if a.Bound != 30 {
				t.Fatalf("bound %v, want 30", a.Bound)
			}
			if a.OverAdmitted != tt.over || int64(a.OverKeys) != tt.overKeys {
				t.Errorf("over = %d on %d keys, want %d on %d", a.OverAdmitted, a.OverKeys, tt.over, tt.overKeys)
			}
			if a.UnderAdmitted != tt.under || a.Ideal != tt.ideal {
				t.Errorf("under = %d of ideal %d, want %d of %d", a.UnderAdmitted, a.Ideal, tt.under, tt.ideal)
			}
			if math.Abs(a.UnderPct-tt.underPct) > 1e-9 {
				t.Errorf("under%% = %v, want %v", a.UnderPct, tt.underPct)
			}
		})
	}
}

func TestScoreAccuracyFractionalBound(t *testing.T) {
	// 10/s over 1.25s with burst 1: bound 13.5 → at most 13 whole hits.
	a := ScoreAccuracy(Limit{Limit: 10, Period: time.Second, Burst: 1}, 1250*time.Millisecond, []int64{20}, []int64{14})
	if a.OverAdmitted != 1 || a.Ideal != 13 {
		t.Fatalf("over %d ideal %d, want 1 and 13", a.OverAdmitted, a.Ideal)
	}
}

func TestTally(t *testing.T) {
	tl := NewTally(3, time.Second, 100*time.Millisecond)
	tl.Add(0, 2, true, 50*time.Millisecond)
	tl.Add(0, 2, false, 60*time.Millisecond)
	tl.Add(0, 1, true, 250*time.Millisecond)
	tl.Add(2, 1, true, 0)
	tl.Add(0, 1, true, time.Hour) // beyond the timeline: counted, not charted
	off, adm := tl.Counts()
	if off[0] != 6 || adm[0] != 4 || off[1] != 0 || off[2] != 1 || adm[2] != 1 {
		t.Fatalf("counts %v %v", off, adm)
	}
	line := tl.HotTimeline(300 * time.Millisecond)
	want := []float64{20, 0, 10}
	if len(line.Admitted) != 3 {
		t.Fatalf("timeline has %d slots", len(line.Admitted))
	}
	for i := range want {
		if line.Admitted[i] != want[i] {
			t.Errorf("slot %d: admitted %v/s, want %v", i, line.Admitted[i], want[i])
		}
	}
	if line.Offered[0] != 40 {
		t.Errorf("slot 0 offered %v/s, want 40", line.Offered[0])
	}
}

func TestLocalTallyMatchesTally(t *testing.T) {
	direct := NewTally(localKeys+10, time.Second, 100*time.Millisecond)
	viaLocal := NewTally(localKeys+10, time.Second, 100*time.Millisecond)
	a, b := viaLocal.Local(), viaLocal.Local()
	for i := range 20000 {
		k := int32(i*7919) % int32(localKeys+10)
		if i%3 == 0 {
			k = 0
		}
		allowed := i%5 != 0
		at := time.Duration(i) * 50 * time.Microsecond
		direct.Add(k, 2, allowed, at)
		if i%2 == 0 {
			a.Add(k, 2, allowed, at)
		} else {
			b.Add(k, 2, allowed, at)
		}
	}
	a.Flush()
	b.Flush()
	b.Flush() // idempotent once flushed
	o1, a1 := direct.Counts()
	o2, a2 := viaLocal.Counts()
	for k := range o1 {
		if o1[k] != o2[k] || a1[k] != a2[k] {
			t.Fatalf("key %d: direct %d/%d, local %d/%d", k, o1[k], a1[k], o2[k], a2[k])
		}
	}
	t1, t2 := direct.HotTimeline(time.Second), viaLocal.HotTimeline(time.Second)
	for i := range t1.Admitted {
		if t1.Admitted[i] != t2.Admitted[i] || t1.Offered[i] != t2.Offered[i] {
			t.Fatalf("slot %d differs", i)
		}
	}
}
