package clocktest

import (
	"testing"
	"time"
)

// Eventually is the one wait of Sluice's tests: it polls cond, backing off
// from 1ms to 50ms between calls, until cond holds, and fails t (Fatal)
// naming what it waited for if timeout passes first. The timeout is a
// bound on something a real process or goroutine must do, not a timing
// assertion: pick it generous. Call it from the test's goroutine.
//
// Where code under test runs on a Clock, advance the clock instead; wait
// with Eventually only for what real time drives (a goroutine reaching a
// point, a server starting, gossip converging).
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyState(t, timeout, what, func() (bool, string) { return cond(), "" })
}

// EventuallyState is Eventually for a cond that also describes the state
// it saw; the last description goes into the failure message.
func EventuallyState(t testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	t.Helper()
	start := time.Now()
	pause := time.Millisecond
	for {
		ok, state := cond()
		if ok {
			return
		}
		if waited := time.Since(start); waited >= timeout {
			if state == "" {
				state = "cond still false"
			}
			t.Fatalf("waited %v for %s; last state: %s", waited.Round(time.Millisecond), what, state)
			return
		}
		time.Sleep(pause)
		pause = min(2*pause, 50*time.Millisecond)
	}
}
