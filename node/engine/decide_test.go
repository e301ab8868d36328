package engine

import (
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/rules"
)

// TestCombineOne: combine's short path for a request of one item gives
// what combineItems gives, for every state of the item.
func TestCombineOne(t *testing.T) {
	for mask := range 1 << 5 {
		bit := func(i int) bool { return mask&(1<<i) != 0 }
		it := Item{Decided: bit(0), ri: &Rule{rule: &rules.Rule{Shadow: bit(1)}}}
		it.Decision = lease.Decision{Allowed: bit(2), Unavailable: bit(3), Degraded: bit(4), RetryAfter: time.Second}
		s1, r1, g1, d1 := combineOne(&it)
		s2, r2, g2, d2 := combineItems([]Item{it})
		if s1 != s2 || r1 != r2 || g1 != g2 || d1 != d2 {
			t.Errorf("decided=%v shadow=%v allowed=%v unavailable=%v degraded=%v: combineOne %d %d %v %v, combineItems %d %d %v %v",
				bit(0), bit(1), bit(2), bit(3), bit(4), s1, r1, g1, d1, s2, r2, g2, d2)
		}
	}
}

// TestKeySet: a key is new once, then seen, across growth and resets.
func TestKeySet(t *testing.T) {
	var s keySet
	for round := range 3 {
		for i := range 1000 {
			if s.add(fmt.Sprint("k", i)) {
				t.Fatalf("round %d: key %d seen before it was added", round, i)
			}
		}
		for i := range 1000 {
			if !s.add(fmt.Sprint("k", i)) {
				t.Fatalf("round %d: key %d not seen after it was added", round, i)
			}
		}
		if s.n != 1000 || 2*s.n > len(s.slots) {
			t.Fatalf("round %d: %d keys in %d slots", round, s.n, len(s.slots))
		}
		s.reset()
	}
}
