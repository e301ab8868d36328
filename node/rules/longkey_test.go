package rules

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/node/api"
)

// givenKeyRefused reports whether the public API refuses k as a key given
// as is (a check's "key").
func givenKeyRefused(t *testing.T, k string) bool {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"rule": "r", "key": k})
	var req api.CheckRequest
	err := api.DecodeCheck(body, &req)
	return err != nil && strings.Contains(err.Error(), "key")
}

// TestLongKeyDigest: a long key's counter key is its digest form, within
// the key bound, valid as an internal key (forwardable), and a form no key
// given as is can take; the 256-byte string that named the long key's
// counter (239 bytes, '#', 16 hex digits of the xxhash) is another key.
func TestLongKeyDigest(t *testing.T) {
	s := mustParse(t, twoSourceRules)
	auth := func(rule string, hdrs ...string) string {
		t.Helper()
		for _, m := range s.MatchAuth(&authReq("GET", "/v1/auth", hdrs...).Header, net.ParseIP("192.0.2.1"), nil) {
			if m.Rule.Name == rule {
				return m.Key
			}
		}
		t.Fatalf("no match of %s for %q", rule, hdrs)
		return ""
	}
	long := strings.Repeat("k", 300)
	key := auth("one", "X-One", long)
	crafted := long[:239] + "#" + fmt.Sprintf("%016x", xxhash.Sum64String(long))
	if key == crafted {
		t.Fatalf("the long key's counter key is the crafted key %q", crafted)
	}
	if givenKeyRefused(t, crafted) {
		t.Errorf("the crafted key %q is refused; it is a plain key", crafted)
	}
	seen := map[string]string{}
	for _, tc := range []struct {
		name, rule string
		hdrs       []string
	}{
		{"plain", "one", []string{"X-One", long}},
		{"plain, one byte more", "one", []string{"X-One", long + "k"}},
		{"escapes at the cut", "one", []string{"X-One", strings.Repeat(`|`, 300)}},
		{"escapes off by one", "one", []string{"X-One", "k" + strings.Repeat(`\`, 300)}},
		{"UTF-8 at the cut", "one", []string{"X-One", strings.Repeat("é", 200)}},
		{"UTF-8 off by one", "one", []string{"X-One", "k" + strings.Repeat("€", 200)}},
		{"fallback", "one", []string{"X-Other", long}},
		{"two values", "tu", []string{"X-Tenant", long, "X-User", "u"}},
		{"two values, split elsewhere", "tu", []string{"X-Tenant", long[:299], "X-User", "ku"}},
	} {
		k := auth(tc.rule, tc.hdrs...)
		if len(k) > api.MaxKeyLen || !api.ValidKey(k) || !utf8.ValidString(k) {
			t.Errorf("%s: counter key %q (%d bytes) is not a valid key", tc.name, k, len(k))
		}
		if !givenKeyRefused(t, k) {
			t.Errorf("%s: a check may name the counter key %q as is", tc.name, k)
		}
		if prev, dup := seen[tc.rule+":"+k]; dup {
			t.Errorf("%s and %s share the counter key %q", tc.name, prev, k)
		}
		seen[tc.rule+":"+k] = tc.name
	}
}

// FuzzLongKeyDigest: the digest form of any key built from values is
// within the bound, valid when the values are, and never a key a check
// may give as is.
func FuzzLongKeyDigest(f *testing.F) {
	f.Add(`a\b`, 300)
	f.Add("|", 257)
	f.Add("é", 1000)
	f.Fuzz(func(t *testing.T, v string, n int) {
		if v == "" || n < 0 || n > 4096 {
			return
		}
		var b []byte
		for len(b) <= api.MaxKeyLen+n%64 {
			b = appendEscaped(b, v)
		}
		valid := api.ValidKey(v) // then every piece of b is valid too
		k := string(ShortenKey(b))
		if len(k) > api.MaxKeyLen {
			t.Fatalf("%d bytes", len(k))
		}
		if valid && !api.ValidKey(k) {
			t.Fatalf("digest form %q of valid values is not a valid key", k)
		}
		if valid && !givenKeyRefused(t, k) {
			t.Fatalf("a check may name the digest form %q", k)
		}
	})
}
