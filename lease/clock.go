package lease

import (
	"sync/atomic"
	"time"
)

// coarseClock is a Unix clock in nanoseconds that a ticker goroutine
// refreshes every tick, so that the Manager's fast path reads the time with
// one atomic load instead of calling time.Now. Its resolution is the tick;
// the Manager uses it for reporting (Reset, RetryAfter), idle detection,
// deny-until, and the end of a windowed lease (set 1ms early, which covers
// one tick of lag), never to decide how many tokens exist.
//
// Nanos is safe for concurrent use. Stop must be called exactly once, by
// the clock's owner.
type coarseClock struct {
	ns   atomic.Int64
	stop chan struct{}
	done chan struct{}
}

// coarseTick is the coarse clock's resolution: well under the smallest
// Decision duration anyone reports (milliseconds), cheap enough to keep
// (about 1000 wake-ups per second per Manager).
const coarseTick = time.Millisecond

func startCoarseClock(tick time.Duration) *coarseClock {
	c := &coarseClock{stop: make(chan struct{}), done: make(chan struct{})}
	c.ns.Store(time.Now().UnixNano())
	go func() {
		defer close(c.done)
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case now := <-t.C:
				c.ns.Store(now.UnixNano())
			}
		}
	}()
	return c
}

// Nanos returns the time, at most one tick old, in Unix nanoseconds, or 0
// once the clock is stopped (its reader then asks time.Now).
func (c *coarseClock) Nanos() int64 { return c.ns.Load() }

// Stop ends the ticker goroutine and waits for it.
func (c *coarseClock) Stop() {
	close(c.stop)
	<-c.done
	c.ns.Store(0)
}
