package algo

import (
	"strings"
	"testing"
	"time"
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
		st := a.NewState()
		switch row.kind {
		case kindRefill, kindWindow:
			if panics(func() { Policy{Algorithm: a, Limit: 1, Period: 1e9}.CoverAt(Answer{ResetAt: 1}, 1) }) {
				t.Errorf("%v is leased but its code has no view (it embeds exactCode)", a)
			}
			if _, ok := st.(LeasedState); !ok {
				t.Errorf("%v is leased but its state %T is not a LeasedState", a, st)
			}
			if row.kind == kindRefill && row.ahead {
				t.Errorf("%v refills but leases ahead: only a window has windows ahead", a)
			}
		case kindLog:
			if _, ok := st.(LogState); !ok {
				t.Errorf("%v is kindLog but its state %T is not a LogState", a, st)
			}
		case kindSlots:
			if _, ok := st.(SlotState); !ok {
				t.Errorf("%v is kindSlots but its state %T is not a SlotState", a, st)
			}
		default:
			t.Errorf("%v: no kind", a)
		}
	}
	if a := Algorithms()[len(Algorithms())-1] + 1; a.valid() || a.Leased() || a.HasBurst() || a.HasMinInterval() || a.StoresEveryHit() || a.Acquired() ||
		a.Refills() || a.Windowed() || a.Logged() || a.LeasesAhead() || a.WindowReset() || a.ViewsAnswerTime() || a.NewState() != nil {
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
		a                                                                     Algorithm
		leased, refills, windowed, logged, burst, minInterval, everyHit, slot bool
		ahead, windowReset, answerTime                                        bool
		past                                                                  time.Duration
	}{
		{a: TokenBucket, leased: true, refills: true, burst: true},
		{a: GCRA, leased: true, refills: true, burst: true},
		{a: FixedWindow, leased: true, windowed: true, ahead: true, windowReset: true},
		{a: SlidingWindow, leased: true, windowed: true, answerTime: true, past: time.Minute},
		{a: SlidingLog, logged: true, minInterval: true, everyHit: true},
		{a: Concurrency, slot: true},
	} {
		a := c.a
		got := [...]bool{a.Leased(), a.Refills(), a.Windowed(), a.Logged(), a.HasBurst(), a.HasMinInterval(), a.StoresEveryHit(), a.Acquired(),
			a.LeasesAhead(), a.WindowReset(), a.ViewsAnswerTime()}
		if want := [...]bool{c.leased, c.refills, c.windowed, c.logged, c.burst, c.minInterval, c.everyHit, c.slot,
			c.ahead, c.windowReset, c.answerTime}; got != want {
			t.Errorf("%v: leased, refills, windowed, logged, burst, min_interval, every hit, slots, ahead, window reset, answer time = %v, want %v", a, got, want)
		}
		if got := (Policy{Algorithm: a, Limit: 1, Period: time.Minute}).ResetPastWindow(); got != c.past {
			t.Errorf("%v: ResetPastWindow() = %v, want %v", a, got, c.past)
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
