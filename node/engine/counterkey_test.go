package engine

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestCounterKey: views stay intact while the buffer grows past its first
// size, and after a reset the buffer is reused.
func TestCounterKey(t *testing.T) {
	st := &Batch{}
	var got, want []string
	for i := range 10 { // 10 × 261 bytes: the buffer is replaced several times
		key := fmt.Sprintf("%03d", i) + strings.Repeat("k", 253)
		got = append(got, st.counterKey("rule:", key))
		want = append(want, "rule:"+key)
	}
	if !slices.Equal(got, want) {
		t.Fatal("a counter key changed while the buffer grew")
	}
	c := cap(st.keys)
	st.keys = st.keys[:0]
	if k := st.counterKey("r:", "x"); k != "r:x" || cap(st.keys) != c {
		t.Errorf("after reset: %q, cap %d → %d", k, c, cap(st.keys))
	}
}
