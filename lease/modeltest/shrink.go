package modeltest

import (
	"testing"
	"time"
)

// shrinkBudget bounds the replays spent shrinking one failure.
const (
	shrinkRuns = 400
	shrinkTime = 30 * time.Second
)

// shrink cuts ops down to a shorter list that still fails (delta
// debugging: remove chunks, halving their size down to single ops).
func (h Harness) shrink(t testing.TB, sc *scenario, ops []op) []op {
	t.Helper()
	runs, start := 0, time.Now()
	fails := func(cand []op) bool {
		runs++
		return h.exec(t, sc, cand, false).fail != nil
	}
	// Only the prefix up to the failing op matters.
	if r := h.exec(t, sc, ops, false); r.fail != nil {
		ops = ops[:r.fail.step+1]
	}
	n := 2
	for len(ops) >= 2 && runs < shrinkRuns && time.Since(start) < shrinkTime {
		chunk := (len(ops) + n - 1) / n
		removed := false
		for i := 0; i < len(ops) && runs < shrinkRuns; i += chunk {
			cand := append(append([]op(nil), ops[:i]...), ops[min(i+chunk, len(ops)):]...)
			if len(cand) > 0 && fails(cand) {
				ops, removed = cand, true
				n = max(n-1, 2)
				break
			}
		}
		if !removed {
			if chunk == 1 {
				break
			}
			n = min(2*n, len(ops))
		}
	}
	// Each failing run stops at its violation: drop the ops after it.
	if r := h.exec(t, sc, ops, false); r.fail != nil {
		ops = ops[:r.fail.step+1]
	}
	return ops
}
