// Package pace is the paced, bounded load loop of the fault tests: a few
// workers that call a round function at a steady rate, all together, until
// stopped, a time bound or a count bound. A worker that falls behind (a
// stalled call) skips ahead instead of bursting to catch up, so a fault
// sees the same offered load as the baseline.
package pace

import (
	"sync"
	"sync/atomic"
	"time"
)

// Config shapes a load.
type Config struct {
	// Workers is the number of goroutines calling the round function, each
	// waiting for its call to return before the next. Zero means 1.
	Workers int
	// Rate is the rounds per second of all workers together, spread
	// evenly (worker w starts w/Workers of an interval late). Zero means
	// as fast as the calls return.
	Rate float64
	// Max bounds how long the load runs, whatever its caller does (a test
	// that fails before Stop). Zero means DefaultMax.
	Max time.Duration
	// MaxRounds bounds the rounds of all workers together. Zero means no
	// bound but Max.
	MaxRounds int64
}

// DefaultMax is Config.Max's default: longer than any fault test's run,
// short enough that a forgotten load ends.
const DefaultMax = 90 * time.Second

// behind is how late a worker may fall before it stops catching up.
const behind = 100 * time.Millisecond

// Load is a running load.
type Load struct {
	stop   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
	done   chan struct{}
	rounds atomic.Int64
}

// Start starts cfg.Workers goroutines calling round(worker, i) for their
// i-th round (i from 0), paced at cfg.Rate, until Stop, cfg.Max or
// cfg.MaxRounds.
func Start(cfg Config, round func(worker, i int)) *Load {
	workers := max(cfg.Workers, 1)
	limit := cfg.Max
	if limit <= 0 {
		limit = DefaultMax
	}
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(workers) / cfg.Rate)
	}
	l := &Load{stop: make(chan struct{}), done: make(chan struct{})}
	end := time.Now().Add(limit)
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			next := time.Now().Add(time.Duration(w) * interval / time.Duration(workers))
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				now := time.Now()
				if now.After(end) {
					return
				}
				if interval > 0 {
					if d := next.Sub(now); d > 0 {
						select {
						case <-time.After(d):
						case <-l.stop:
							return
						}
					} else if -d > behind {
						next = now // fell behind: no burst to catch up
					}
					next = next.Add(interval)
				}
				if n := l.rounds.Add(1); cfg.MaxRounds > 0 && n > cfg.MaxRounds {
					l.rounds.Add(-1)
					return
				}
				round(w, i)
			}
		}()
	}
	go func() {
		l.wg.Wait()
		close(l.done)
	}()
	return l
}

// Rounds returns the rounds started so far.
func (l *Load) Rounds() int64 { return l.rounds.Load() }

// Done is closed once every worker has returned (after Stop, Max or
// MaxRounds).
func (l *Load) Done() <-chan struct{} { return l.done }

// Stop ends the load and waits for the rounds in progress. It is
// idempotent.
func (l *Load) Stop() {
	l.once.Do(func() { close(l.stop) })
	<-l.done
}
