// Package clocktest is the one fake clock of Sluice's tests: a time that
// moves only when a test advances it, with timers that fire when it
// passes their deadline. Code under test takes a Now function (and, where
// it waits, an AfterFunc); tests pass these methods.
//
// A Clock is safe for concurrent use. Timer functions run synchronously
// inside Advance, in deadline order, without the clock's lock held (they
// may read the clock or set new timers).
//
// The package also holds the one wait of the tests, Eventually, for what
// real time drives and a fake clock cannot.
package clocktest

import (
	"slices"
	"sync"
	"time"
)

// Epoch is where New clocks start: a round instant (a multiple of every
// period the tests use), so fake-clock answers are exact.
var Epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a settable clock.
type Clock struct {
	// mu protects now, timers and seq.
	mu     sync.Mutex
	now    time.Time
	timers []*timer
	seq    uint64
}

type timer struct {
	at      time.Time
	seq     uint64 // creation order, for timers due at the same instant
	f       func()
	stopped bool
}

// New returns a Clock at Epoch.
func New() *Clock { return At(Epoch) }

// At returns a Clock at t.
func At(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d, running every timer that falls
// due on the way at its own instant (the clock reads the timer's deadline
// while it runs). A negative d panics: time does not go back.
func (c *Clock) Advance(d time.Duration) {
	if d < 0 {
		panic("clocktest: Advance with a negative duration")
	}
	c.mu.Lock()
	end := c.now.Add(d)
	c.mu.Unlock()
	for {
		c.mu.Lock()
		t := c.nextDue(end)
		if t == nil {
			c.now = end
			c.mu.Unlock()
			return
		}
		if t.at.After(c.now) {
			c.now = t.at
		}
		t.stopped = true
		c.mu.Unlock()
		t.f()
	}
}

// Set moves the clock to t. Forward, it is Advance (timers due on the way
// run); back, it is a clock stepped back (by NTP, or a peer's skew): the
// time changes and no timer runs.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	d := t.Sub(c.now)
	if d < 0 {
		c.now = t
	}
	c.mu.Unlock()
	if d > 0 {
		c.Advance(d)
	}
}

// nextDue removes and returns the earliest live timer due at or before
// end, or nil; mu must be held.
func (c *Clock) nextDue(end time.Time) *timer {
	c.timers = slices.DeleteFunc(c.timers, func(t *timer) bool { return t.stopped })
	if len(c.timers) == 0 {
		return nil
	}
	i := 0
	for j, t := range c.timers {
		if t.at.Before(c.timers[i].at) || (t.at.Equal(c.timers[i].at) && t.seq < c.timers[i].seq) {
			i = j
		}
	}
	t := c.timers[i]
	if t.at.After(end) {
		return nil
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return t
}

// AfterFunc runs f once the clock has moved d past now (at once, inside
// the next Advance, if d ≤ 0). stop cancels it and reports whether it did
// (false if f already ran or was stopped), like time.Timer.Stop.
func (c *Clock) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &timer{at: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if t.stopped {
			return false
		}
		t.stopped = true
		return true
	}
}

// Timers returns the number of timers not yet fired or stopped: a test
// waits for code under test to set one (an event) instead of sleeping.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if !t.stopped {
			n++
		}
	}
	return n
}
