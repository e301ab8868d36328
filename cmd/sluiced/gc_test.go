package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestGCPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		pct  int
		want int
	}{
		{0, 25, 100},
		{10 * mib, 25, 100},       // a small heap collects as Go's default
		{32 * mib, 25, 100},       // headroom 32 MiB: still the default
		{64 * mib, 25, 50},        // headroom held at 32 MiB
		{100 * mib, 25, 32},       // 32 MiB of 100
		{128 * mib, 25, 25},       // 32 MiB is 25%
		{1024 * mib, 25, 25},      // never below the setting
		{1024 * mib, 10, 10},      // a lower setting
		{64 * mib, 100, 100},      // 100: Go's default at every size
		{1024 * mib, 100, 100},    //
		{1 << 50, 25, 25},         // no overflow
		{gcFloor + 1, 25, 99},     // just past the floor
		{gcFloor * 4, 25, 25},     // the floor meets the setting
		{gcFloor*4 - mib, 25, 25}, // rounding down: 25.2%
	} {
		if got := gcPercentFor(c.live, c.pct); got != c.want {
			t.Errorf("gcPercentFor(%d MiB, %d) = %d, want %d", c.live/mib, c.pct, got, c.want)
		}
	}
}

func TestGCPolicyOnlyWithoutGOGCOrGOMEMLIMIT(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	for _, c := range []struct {
		env  map[string]string
		pct  int
		want bool
	}{
		{nil, 25, true},
		{map[string]string{"GOGC": "100"}, 25, false},
		{map[string]string{"GOGC": "off"}, 25, false},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, 25, false},
		{map[string]string{"GOGC": "50", "GOMEMLIMIT": "1GiB"}, 25, false},
		{map[string]string{"GODEBUG": "gctrace=1"}, 25, true},
		{nil, 100, false}, // Go's default: nothing to set
	} {
		if got := gcPolicyOn(c.pct, env(c.env)); got != c.want {
			t.Errorf("gcPolicyOn(%d, %v) = %v, want %v", c.pct, c.env, got, c.want)
		}
	}
}

// gogc is the GC percent in force.
func gogc() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return int(s[0].Value.Uint64())
}

// TestGCTunerSetsPercentAfterCollections: once started, every collection
// sets the GC percent for the live heap it found, until stop restores
// Go's default. The test's heap is under gcFloor, so the percent set is
// 100 (TestGCPercentFor covers larger heaps).
func TestGCTunerSetsPercentAfterCollections(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tuned := make(chan int, 1)
	tn := &gcTuner{pct: 25, tuned: func(p int) {
		select {
		case tuned <- p:
		default:
		}
	}}
	tn.arm()
	debug.SetGCPercent(70) // as if set by an earlier collection
	runtime.GC()
	if p := <-tuned; p != 100 || gogc() != 100 {
		t.Fatalf("after a collection of a small heap: tuned %d, GOGC %d; want 100 (the heap is under the floor)", p, gogc())
	}
	runtime.GC() // the tuner re-armed itself: the next collection tunes again
	<-tuned
	tn.stop()
	debug.SetGCPercent(70)
	runtime.GC()
	runtime.GC()
	select {
	case p := <-tuned:
		t.Fatalf("tuned to %d after stop", p)
	default:
	}
	if gogc() != 70 {
		t.Fatalf("GOGC %d after stop, want the 70 set since", gogc())
	}
}

func TestStartGCPolicyLeavesGOGCAlone(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	debug.SetGCPercent(80) // what GOGC=80 in the environment sets
	stop := startGCPolicy(25, func(k string) string {
		if k == "GOGC" {
			return "80"
		}
		return ""
	})
	runtime.GC()
	stop()
	if gogc() != 80 {
		t.Fatalf("GOGC %d, want the environment's 80", gogc())
	}
}
