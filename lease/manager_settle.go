package lease

import "time"

// Settle waits until the background work the Manager has started so far
// (prefetches, returns of replaced buckets) has finished. With a fake clock
// (Config.Now) and no sweeper (SweepInterval < 0), a caller that settles
// after every call it makes sees a deterministic Manager: lease/modeltest
// does, so that a seed replays exactly. Settle must not run concurrently
// with calls that start background work (Take, TakeMany).
func (m *Manager) Settle() { m.bg.wg.Wait() }

// SweepIdle runs the idle sweep once at now, as the sweeper goroutine does
// every SweepInterval: keys unchecked since now - Idle give their tokens
// back and are dropped, but those it keeps (Config.KeepIdle). It is for callers that turn the sweeper off
// (SweepInterval < 0) and move a fake clock. It returns the number of keys
// dropped.
func (m *Manager) SweepIdle(now time.Time) int { return m.sweep(now) }

// Holds reports whether the Manager has a bucket for key: it leased the
// key and has not dropped it since. It is for harnesses that mirror the
// Manager (lease/modeltest), to learn which idle keys a sweep kept.
func (m *Manager) Holds(key string) bool { return m.buckets.load(key) != nil }
