package modeltest

import (
	"strings"
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
	r := h.exec(t, sc, ops, false)
	if r.fail == nil {
		return ops
	}
	// Only the prefix up to the failing op matters, and a shorter list
	// must fail the same way (not find another bug on the way).
	ops = ops[:r.fail.step+1]
	want := kindOf(r.fail.msg)
	fails := func(cand []op) bool {
		runs++
		f := h.exec(t, sc, cand, false).fail
		return f != nil && kindOf(f.msg) == want
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
	// Then the items of each batch, one at a time.
	for i := 0; i < len(ops) && runs < shrinkRuns && time.Since(start) < shrinkTime; i++ {
		for j := 0; j < len(ops[i].items) && len(ops[i].items) > 1; {
			cand := append([]op(nil), ops...)
			cand[i].items = append(append([]item(nil), ops[i].items[:j]...), ops[i].items[j+1:]...)
			if fails(cand) {
				ops = cand
				continue
			}
			j++
		}
	}
	// Each failing run stops at its violation: drop the ops after it.
	if r := h.exec(t, sc, ops, false); r.fail != nil {
		ops = ops[:r.fail.step+1]
	}
	return ops
}

// kindOf classifies a violation, so that shrinking keeps its kind.
func kindOf(msg string) string {
	for _, k := range []string{"more than", "peek never denies", "unjustified", "held only", "made up", "in flight", "in the window", "unexpected error", "degraded"} {
		if strings.Contains(msg, k) {
			return k
		}
	}
	return msg
}
