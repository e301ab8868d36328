package lease

import (
	"sync/atomic"
	"time"
)

// coarseClock is a Unix clock in nanoseconds that a ticker goroutine
// refreshes every tick, so that the Manager's fast path reads the time with
// one atomic load instead of calling time.Now. Its resolution is the tick
// while its ticker goroutine gets a CPU; on a node whose CPUs are busy it
// can lag far longer (milliseconds to seconds). The Manager uses it for
// reporting (Reset, RetryAfter), idle detection, deny-until and the
// half-TTL life of token_bucket and gcra loans (minutes: a lag costs
// nothing there), never to decide how many tokens exist, nor for the
// windows, whose tokens end with their window (checks of window policies
// read the precise clock: clock.nanosFor).
//
// The ticker sleeps when nobody reads the clock for coarseIdleTicks ticks
// (an idle node must not wake 1000 times a second: about 2% of a core);
// Nanos then answers 0, the reader asks time.Now, and the read wakes the
// ticker for the next ones.
//
// Nanos is safe for concurrent use. Stop must be called exactly once, by
// the clock's owner.
type coarseClock struct {
	ns   atomic.Int64
	used atomic.Bool // read since the ticker last looked
	wake chan struct{}
	stop chan struct{}
	done chan struct{}
}

// coarseTick is the coarse clock's resolution: well under the smallest
// Decision duration anyone reports (milliseconds), cheap enough to keep
// while checks arrive (about 1000 wake-ups per second per Manager).
const coarseTick = time.Millisecond

// coarseIdleTicks is how many ticks without a read put the ticker to
// sleep: 100ms at the default tick.
const coarseIdleTicks = 100

func startCoarseClock(tick time.Duration) *coarseClock {
	c := &coarseClock{wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	c.ns.Store(time.Now().UnixNano())
	go c.run(tick)
	return c
}

func (c *coarseClock) run(tick time.Duration) {
	defer close(c.done)
	t := time.NewTicker(tick)
	defer t.Stop()
	idle := 0
	for {
		select {
		case <-c.stop:
			return
		case now := <-t.C:
			if c.used.Swap(false) {
				idle = 0
			} else if idle++; idle >= coarseIdleTicks {
				c.ns.Store(0) // readers ask time.Now and wake us
				t.Stop()
				select {
				case <-c.stop:
					return
				case <-c.wake:
				}
				idle = 0
				now = time.Now()
				t.Reset(tick)
			}
			c.ns.Store(now.UnixNano())
		}
	}
}

// Nanos returns the time, at most one tick old, in Unix nanoseconds, or 0
// while the ticker sleeps or once the clock is stopped (its reader then
// asks time.Now).
func (c *coarseClock) Nanos() int64 {
	ns := c.ns.Load()
	if ns == 0 {
		select {
		case c.wake <- struct{}{}:
		default:
		}
		return 0
	}
	if !c.used.Load() {
		c.used.Store(true)
	}
	return ns
}

// Stop ends the ticker goroutine and waits for it.
func (c *coarseClock) Stop() {
	close(c.stop)
	<-c.done
	c.ns.Store(0)
}

// clock is a Manager's clock: the fast path's coarse clock (nil when
// Config.Now was given: then now, the caller's), the precise one, and its
// timers (Config.AfterFunc, or real ones). Set once by NewManager.
type clock struct {
	coarse *coarseClock
	now    func() time.Time
	after  func(d time.Duration, f func()) (stop func() bool)
}

// nanos is the fast path's clock.
func (c *clock) nanos() int64 {
	if c.coarse != nil {
		if ns := c.coarse.Nanos(); ns != 0 {
			return ns
		}
	}
	return c.now().UnixNano()
}

// nanosFor is the clock a check of p reads: the coarse clock, but for
// the windows, whose tokens on hand end with their window (1ms early, see
// Manager.Take) and whose shares ahead start with theirs: the coarse
// clock lags by its tick only while its ticker goroutine gets a CPU, and
// on a node whose CPUs are busy it can wait far longer (four goroutines
// busy on two CPUs: most reads 5ms stale or more, up to 2s), so that a
// check reading it would spend a window's tokens in the next window.
func (c *clock) nanosFor(p *Policy) int64 {
	if p.Algorithm.Windowed() {
		return c.precise()
	}
	return c.nanos()
}

// precise is the clock read precisely (not the fast path's coarse
// clock, which may lag a tick): for when a Store's answer came.
func (c *clock) precise() int64 { return c.now().UnixNano() }

// afterFunc runs f after d on the timer clock (Config.AfterFunc, else real timers).
func (c *clock) afterFunc(d time.Duration, f func()) (stop func() bool) {
	if c.after != nil {
		return c.after(d, f)
	}
	return time.AfterFunc(d, f).Stop
}
