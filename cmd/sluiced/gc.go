package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
)

// The node's garbage-collection policy (-gc-headroom). Go's collector lets
// the heap grow past what survived the last collection by GOGC percent of
// it (100 by default) before it collects again, so a node holding many
// keys has a resident set of about twice its live heap. The collector's
// CPU is about proportional to the rate the node allocates divided by that
// headroom, whatever the heap's size; a node's checks allocate little, and
// a small heap's headroom is small in bytes anyway. So the node keeps Go's
// default while the headroom is at most gcFloor, holds it at gcFloor as
// the heap grows, and lets it fall to -gc-headroom percent of the live heap
// once that is larger. GOGC or GOMEMLIMIT in the environment turn the
// policy off: the operator's setting stands.

// gcFloor is the headroom below which the node keeps Go's default: a node
// with a live heap under gcFloor collects as any Go program does.
const gcFloor = 32 << 20

// gcPercentFor is the GC percent for a live heap of live bytes: Go's 100
// while 100% of live is at most gcFloor, then what makes the headroom
// gcFloor, and never below pct.
func gcPercentFor(live uint64, pct int) int {
	if live <= gcFloor {
		return 100
	}
	return max(pct, int(gcFloor*100/live))
}

// gcPolicyOn reports whether the node may set its GC percent: neither
// GOGC nor GOMEMLIMIT is set, and pct is below Go's default.
func gcPolicyOn(pct int, getenv func(string) string) bool {
	return pct < 100 && getenv("GOGC") == "" && getenv("GOMEMLIMIT") == ""
}

// gcTuner sets the GC percent after every collection from the live heap
// it found (gcPercentFor).
type gcTuner struct {
	pct int
	// tuned, if set, is called after each setting (tests).
	tuned func(percent int)

	mu      sync.Mutex
	stopped bool // guarded by mu
}

// startGCPolicy starts tuning with headroom pct when gcPolicyOn allows it;
// the returned func stops it and restores Go's default. Otherwise it does
// nothing.
func startGCPolicy(pct int, getenv func(string) string) (stop func()) {
	if !gcPolicyOn(pct, getenv) {
		return func() {}
	}
	t := &gcTuner{pct: pct}
	t.arm()
	return t.stop
}

// gcSentinel is the object whose cleanup tells the tuner that a collection
// ran: it is unreachable as soon as armed, so the next collection frees
// it. (Not a tiny allocation: those may share a block with live objects.)
type gcSentinel struct {
	_ [16]byte
	_ *gcTuner
}

func (t *gcTuner) arm() {
	runtime.AddCleanup(new(gcSentinel), (*gcTuner).collected, t)
}

// collected runs after a collection: it sets the GC percent for the live
// heap the collection found and arms the tuner for the next one.
func (t *gcTuner) collected() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	p := gcPercentFor(s[0].Value.Uint64(), t.pct)
	debug.SetGCPercent(p)
	if t.tuned != nil {
		t.tuned(p)
	}
	t.arm()
}

func (t *gcTuner) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.stopped {
		t.stopped = true
		debug.SetGCPercent(100)
	}
}
