package node

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/sluicehq/sluice/node/rules"
)

// TestLongKeyCounterNotNameable: a forward-auth key longer than the key
// bound is counted under a digest form that no key given as is can name.
// The crafted key that named it (the first 239 bytes, '#', the xxhash of
// the whole) now has a counter of its own, and the digest form itself is
// refused as a key (400 naming "key"), by POST and GET /v1/check alike.
func TestLongKeyCounterNotNameable(t *testing.T) {
	tn := newTestNode(t, `
rules:
  - {name: lk, algorithm: token_bucket, limit: 5, period: 1h, key: header:X-API-Key}
`)
	long := strings.Repeat("k", 300)
	for i := range 5 {
		if r := tn.do("GET", "/v1/auth", "", "X-API-Key: "+long); r.status != 200 {
			t.Fatalf("long key, check %d: %d %s", i+1, r.status, r.body)
		}
	}
	if r := tn.do("GET", "/v1/auth", "", "X-API-Key: "+long); r.status != 429 {
		t.Fatalf("long key, 6th check: %d, want 429", r.status)
	}
	check := func(key string) resp {
		t.Helper()
		body, _ := json.Marshal(map[string]string{"rule": "lk", "key": key})
		return tn.do("POST", "/v1/check", string(body))
	}
	crafted := long[:239] + "#" + fmt.Sprintf("%016x", xxhash.Sum64String(long))
	if r := check(crafted); r.status != 200 {
		t.Errorf("the crafted key %q: %d %s, want 200 (a counter of its own)", crafted, r.status, r.body)
	}
	digest := string(rules.ShortenKey([]byte(long))) // the long key's counter key
	if r := check(digest); r.status != 400 || !strings.Contains(r.body, `"key"`) {
		t.Errorf("the digest form as a key: %d %s, want 400 naming key", r.status, r.body)
	}
	if r := tn.do("GET", "/v1/check?rule=lk&key="+url.QueryEscape(digest), ""); r.status != 400 || !strings.Contains(r.body, `"key"`) {
		t.Errorf("GET with the digest form as a key: %d %s, want 400 naming key", r.status, r.body)
	}
	// A '\' followed by '#' in a key is fine when the '\' is escaped.
	if r := check(`a\\#b`); r.status != 200 {
		t.Errorf(`key a\\#b: %d %s, want 200`, r.status, r.body)
	}
}
