package lease

import (
	"strings"
	"testing"
)

// TestAlgorithmTable checks that every row of the algorithm table is
// complete: a unique name that parses back, a kind, and code whose
// memory-store state serves that kind (a row that forgot one would panic
// at the first call of its algorithm instead).
func TestAlgorithmTable(t *testing.T) {
	as := Algorithms()
	if len(as) < 6 {
		t.Fatalf("Algorithms() = %v", as)
	}
	seen := map[string]bool{}
	for i, a := range as {
		if a != Algorithm(i+1) {
			t.Errorf("Algorithms()[%d] = %d: the rows are not the constants 1, 2, ...", i, a)
		}
		row := algorithms[a]
		if row.name == "" || seen[row.name] || strings.ContainsAny(row.name, " ,") {
			t.Errorf("algorithm %d: name %q empty, repeated or not a plain word", a, row.name)
		}
		seen[row.name] = true
		if got, err := ParseAlgorithm(row.name); err != nil || got != a {
			t.Errorf("ParseAlgorithm(%q) = %v, %v; want %v", row.name, got, err, a)
		}
		if row.code == nil {
			t.Errorf("%v: no code", a)
			continue
		}
		st := row.code.newState()
		switch row.kind {
		case kindRefill, kindWindow:
			if panics(func() { row.code.coverAt(newBucket("", &Policy{Algorithm: a, Limit: 1, Period: 1e9}), 1, 1) }) {
				t.Errorf("%v is leased but its code has no view (it embeds exactCode)", a)
			}
			if _, ok := st.(leasedState); !ok {
				t.Errorf("%v is leased but its state %T is not a leasedState", a, st)
			}
		case kindLog:
			if _, ok := st.(logState); !ok {
				t.Errorf("%v is kindLog but its state %T is not a logState", a, st)
			}
		case kindSlots:
			if _, ok := st.(slotState); !ok {
				t.Errorf("%v is kindSlots but its state %T is not a slotState", a, st)
			}
		default:
			t.Errorf("%v: no kind", a)
		}
	}
	if a := Algorithms()[len(Algorithms())-1] + 1; a.valid() || a.Leased() || a.HasBurst() || a.HasMinInterval() || a.StoresEveryHit() || a.Acquired() {
		t.Errorf("the algorithm past the table has a trait")
	}
	if Algorithm(0).Leased() || Algorithm(0).valid() {
		t.Errorf("the zero Algorithm is valid or leased")
	}
}

// TestAlgorithmTraits pins what each algorithm's row says, which rules,
// RLS configurations and the Manager's paths rely on.
func TestAlgorithmTraits(t *testing.T) {
	for _, c := range []struct {
		a                                          Algorithm
		leased, burst, minInterval, everyHit, slot bool
	}{
		{TokenBucket, true, true, false, false, false},
		{GCRA, true, true, false, false, false},
		{FixedWindow, true, false, false, false, false},
		{SlidingWindow, true, false, false, false, false},
		{SlidingLog, false, false, true, true, false},
		{Concurrency, false, false, false, false, true},
	} {
		got := [...]bool{c.a.Leased(), c.a.HasBurst(), c.a.HasMinInterval(), c.a.StoresEveryHit(), c.a.Acquired()}
		if want := [...]bool{c.leased, c.burst, c.minInterval, c.everyHit, c.slot}; got != want {
			t.Errorf("%v: leased, burst, min_interval, every hit, slots = %v, want %v", c.a, got, want)
		}
	}
	if got, want := JoinAlgorithms(Algorithms(), "or"), "token_bucket, gcra, fixed_window, sliding_window, sliding_log or concurrency"; got != want {
		t.Errorf("JoinAlgorithms = %q, want %q", got, want)
	}
}

func panics(f func()) (panicked bool) {
	defer func() { panicked = recover() != nil }()
	f()
	return false
}
