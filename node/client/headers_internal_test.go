package client

import (
	"net/http"
	"strconv"
	"testing"
)

// WriteHeaders writes the node's rate-limit headers, readable with
// http.Header.Get as if set with Set; a key with an override of its
// rule gets its own policy.
func TestWriteHeaders(t *testing.T) {
	s := startSeam(t, seamRules+`
  - name: tiered
    algorithm: token_bucket
    limit: 100
    period: 1h
    overrides:
      - {key: "ent-*", limit: 500}
`)
	l := seamLimiter(t, s, nil)
	for _, tt := range []struct {
		rule, key     string
		hits          int64
		policy, limit string
	}{
		{"per-key", "h1", 1, `"per-key";q=100;w=3600`, "100"},
		{"tiered", "ent-1", 1, `"tiered";q=500;w=3600`, "500"},
		{"tiered", "free-1", 1, `"tiered";q=100;w=3600`, "100"},
		{"per-key", "h1", 200, `"per-key";q=100;w=3600`, "100"}, // denied: more than the capacity
	} {
		d, err := l.Allow(t.Context(), tt.rule, tt.key, tt.hits)
		if err != nil {
			t.Fatal(err)
		}
		h := http.Header{}
		l.WriteHeaders(h, tt.rule, tt.key, &d)
		rem, reset := strconv.FormatInt(d.Remaining, 10), strconv.FormatInt(ceilSeconds(d.Reset), 10)
		retry := ""
		if !d.Allowed {
			retry = strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10)
		}
		got := []string{h.Get("RateLimit-Policy"), h.Get("X-RateLimit-Limit"), h.Get("RateLimit"), h.Get("X-RateLimit-Remaining"),
			h.Get("X-RateLimit-Reset"), h.Get("Retry-After")}
		want := []string{tt.policy, tt.limit, strconv.Quote(tt.rule) + ";r=" + rem + ";t=" + reset, rem, reset, retry}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s %s: headers %q, want %q (decision %+v)", tt.rule, tt.key, got, want, d)
				break
			}
		}
	}
	// What a leased key's headers cost: their values, and no more.
	d, _ := l.Allow(t.Context(), "per-key", "h1", 1)
	h := http.Header{}
	if n := testing.AllocsPerRun(100, func() { l.WriteHeaders(h, "per-key", "h1", &d) }); n > 8 {
		t.Errorf("WriteHeaders: %v allocations, want at most 8", n)
	}
}
