package rls

import (
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzWildcardMatch: wildcardMatch (envoyproxy/ratelimit's algorithm: the
// first and last parts anchored, the middle ones found leftmost in order)
// matches exactly what a glob of '*'s matches: the pattern as a regular
// expression of its parts quoted, joined by (?s).*, anchored at both ends.
func FuzzWildcardMatch(f *testing.F) {
	for _, s := range [][2]string{{"api*v2", "api-x-v2"}, {"api*v2", "apiv2"}, {"a*b*c", "acb"}, {"foo*foo", "foo"}, {"*", ""}, {"a**b", "ab"}, {"*a*", "bab"}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, value string) {
		if len(pattern) > 64 || len(value) > 256 || !utf8.ValidString(pattern) || !utf8.ValidString(value) {
			return // configurations and requests are UTF-8
		}
		parts := strings.Split(pattern, "*")
		quoted := make([]string, len(parts))
		for i, p := range parts {
			quoted[i] = regexp.QuoteMeta(p)
		}
		want := regexp.MustCompile(`^(?s:` + strings.Join(quoted, ".*") + `)$`).MatchString(value)
		if got := wildcardMatch(parts, []byte(value)); got != want {
			t.Fatalf("wildcardMatch(%q, %q) = %v, want %v", pattern, value, got, want)
		}
	})
}
