package client

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/node/rules"
)

// Allow's table of rules finds every rule by its name and nothing else:
// names of every length from 1 to 64 bytes, names that differ in one
// byte anywhere, and names whose words collide (the same last 8 bytes
// and length, differing before them; a short name whose word is a longer
// one's).
func TestRuleTableFindsExactlyItsRules(t *testing.T) {
	var names []string
	for n := 1; n <= 64; n++ {
		names = append(names, strings.Repeat("a", n))
	}
	for i := range 200 {
		// The same length and last 8 bytes, one byte apart in the middle.
		b := []byte("tenant-000-requests-per-minute")
		b[7], b[8], b[9] = '0'+byte(i/100), '0'+byte(i/10%10), '0'+byte(i%10)
		names = append(names, string(b))
	}
	for i := range 100 {
		// 9 to 16 bytes (read as two words), the same last 8 bytes, one
		// byte apart at the start.
		names = append(names, fmt.Sprintf("%d%s", i, "-per-min"[:i%8]+"-per-minute"[:8]))
	}
	names = append(names, "aaab", "baaa", "ab", "ba", "abc", "acb", "a.b-c_d", "A")
	snap := &ruleSnap{}
	var rs []*limRule
	for _, name := range names {
		rs = append(rs, &limRule{r: &rules.Rule{Name: name}})
	}
	snap.index(rs)
	for _, r := range rs {
		// A copy of the name: found by its bytes, not its address.
		if got := snap.rule(strings.Clone(r.r.Name)); got != r {
			t.Fatalf("rule(%q) = %v, want its rule", r.r.Name, got)
		}
	}
	for _, name := range []string{
		"", "b", "aab", "aaba", "abab", "bb", "ca", "acbd", strings.Repeat("a", 65), strings.Repeat("a", 200),
		"tenant-200-requests-per-minute", "tenant-000-requests-per-minutes", "xenant-000-requests-per-minute",
		"tenant-000-requests-per-minut", "a.b-c_e", "a", // "a" is there: checked below
		"100-per-minute", "x0-per-minute", "0-per-minutf", "0-pe-per-minute",
	} {
		got := snap.rule(name)
		if name == "a" {
			if got == nil || got.r.Name != "a" {
				t.Fatalf(`rule("a") = %v`, got)
			}
			continue
		}
		if got != nil {
			t.Errorf("rule(%q) found %q", name, got.r.Name)
		}
	}
}
