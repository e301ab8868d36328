package pace_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/pace"
)

func TestMaxRoundsBoundsTheLoad(t *testing.T) {
	var calls atomic.Int64
	seen := make([]atomic.Int64, 3)
	l := pace.Start(pace.Config{Workers: 3, MaxRounds: 50}, func(w, _ int) {
		calls.Add(1)
		seen[w].Add(1)
	})
	<-l.Done() // ends by itself: a hang here is the bug
	if n := calls.Load(); n != 50 || l.Rounds() != 50 {
		t.Fatalf("%d calls, Rounds() %d; want 50", n, l.Rounds())
	}
	l.Stop() // after Done: returns at once
	l.Stop()
}

func TestMaxBoundsTheLoad(t *testing.T) {
	l := pace.Start(pace.Config{Workers: 2, Max: time.Millisecond}, func(int, int) {})
	<-l.Done() // ends by itself after Max
}

func TestStopWaitsForRoundsInProgress(t *testing.T) {
	var inRound, after atomic.Int64
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	l := pace.Start(pace.Config{Workers: 1, Rate: 1}, func(int, int) {
		inRound.Add(1)
		started <- struct{}{}
		<-release
		after.Add(1)
	})
	<-started
	go func() { close(release) }()
	l.Stop()
	if inRound.Load() != 1 || after.Load() != 1 {
		t.Fatalf("Stop returned with %d rounds started, %d finished; want 1 finished", inRound.Load(), after.Load())
	}
}

func TestStopEndsAPacedWait(t *testing.T) {
	// One round a minute: the second round's wait ends at Stop, not in a
	// minute.
	first := make(chan struct{}, 1)
	l := pace.Start(pace.Config{Workers: 1, Rate: 1.0 / 60}, func(int, int) { first <- struct{}{} })
	<-first
	l.Stop()
	if l.Rounds() != 1 {
		t.Fatalf("%d rounds, want 1", l.Rounds())
	}
}
