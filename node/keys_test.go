package node

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
)

// TestInvalidKeyNotDecidedTwice: on two nodes with stores of their own
// (so that only owner routing makes them share a limit), forward-auth
// checks whose key is not UTF-8 must not be admitted past the limit. The
// owner refused such a forwarded item as invalid and its sender then
// decided it itself, against its own store: 10 of 20 admitted with a
// limit of 5, while a valid key admits 5. Every front end applies the
// engine's one key validation before routing: the invalid key is refused
// (400) on both nodes.
func TestInvalidKeyNotDecidedTwice(t *testing.T) {
	const yml = `
rules:
  - name: api
    algorithm: token_bucket
    limit: 5
    period: 1h
    key: header:X-API-Key
`
	stores := map[string]lease.Store{}
	nodes := newClusterNodesWith(t, func(name string) lease.Store {
		s := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
		t.Cleanup(func() { s.Close() })
		stores[name] = s
		return s
	}, map[string]string{"a": yml, "b": yml})
	auth := func(cn *clusterNode, key string) int {
		req := fasthttp.AcquireRequest()
		res := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(res)
		req.SetRequestURI("http://" + cn.addr + "/v1/auth")
		req.Header.Set("X-Forwarded-Uri", "/x")
		req.Header.Set("X-API-Key", key)
		if err := cn.client.DoTimeout(req, res, 10*time.Second); err != nil {
			t.Fatalf("auth: %v", err)
		}
		return res.StatusCode()
	}
	for _, c := range []struct {
		key        string
		admitted   int
		wantStatus int // of the refused checks
	}{
		{"good-K1", 5, 429},
		{"bad\xff\xfeK1", 0, 400},
	} {
		admitted := 0
		for _, name := range []string{"a", "b"} {
			for range 10 {
				switch st := auth(nodes[name], c.key); st {
				case 200:
					admitted++
				case c.wantStatus:
				default:
					t.Errorf("key %q on %s: status %d, want 200 or %d", c.key, name, st, c.wantStatus)
				}
			}
		}
		if admitted != c.admitted {
			t.Errorf("key %q: %d of 20 admitted, want %d (limit 5)", c.key, admitted, c.admitted)
		}
	}
}

// TestC1KeysRefused: a key holding a C1 control character (U+0080 to
// U+009F, such as NEL, U+0085) is refused as C0 controls are, by every
// front end of the node, with a 400 naming the field, and nothing is
// charged; docs/api.md says keys hold no control characters.
func TestC1KeysRefused(t *testing.T) {
	const yml = `rules:
  - name: per-key
    algorithm: token_bucket
    limit: 1
    period: 1h
    key: header:X-API-Key
  - name: slots
    algorithm: concurrency
    limit: 1
    period: 1m
`
	tn, _ := newGatewayNode(t)
	tn.n.SetRules(mustParse(t, yml))
	const nel = "\u0085"
	for _, c := range []struct {
		name, method, uri, body, field string
		hdrs                           []string
	}{
		{"check, raw UTF-8", "POST", "/v1/check", `{"rule":"per-key","key":"a` + nel + `b"}`, "key", nil},
		{"check, JSON escape", "POST", "/v1/check", `{"rule":"per-key","key":"a\u009fb"}`, "key", nil},
		{"check, query", "GET", "/v1/check?rule=per-key&key=a%C2%80b", "", "key", nil},
		{"checks", "POST", "/v1/checks", `{"checks":[{"rule":"per-key","key":"x` + nel + `"}]}`, "checks[0].key", nil},
		{"descriptors", "POST", "/v1/check", `{"descriptors":{"x-api-key":"` + nel + `"}}`, "descriptors.x-api-key", nil},
		{"acquire", "POST", "/v1/acquire", `{"rule":"slots","key":"s` + nel + `"}`, "key", nil},
		{"forward-auth", "GET", "/v1/auth", "", "key", []string{"X-Forwarded-Uri: /x", "X-API-Key: k" + nel + "k"}}, // inside: the helper trims the ends
		// A value past 256 bytes counts under a digest, which must not
		// hide what the key may not hold.
		{"forward-auth, long", "GET", "/v1/auth", "", "key", []string{"X-Forwarded-Uri: /x", "X-API-Key: " + strings.Repeat("k", 300) + nel + "k"}},
		{"lease", "POST", LeasePath, leaseBody(holderA, leaseOpJSON("per-key", "k"+nel, 1)), "ops[0].key", []string{clientAuth}},
	} {
		r := tn.do(c.method, c.uri, c.body, c.hdrs...)
		body := r.body
		if c.name == "checks" { // a bad item is answered in its place
			var m struct{ Results []map[string]any }
			if err := json.Unmarshal([]byte(body), &m); err == nil && len(m.Results) == 1 {
				b, _ := json.Marshal(m.Results[0])
				body, r.status = string(b), 400
			}
		}
		if r.status != 400 || !strings.Contains(body, `"field":"`+c.field+`"`) || !strings.Contains(body, "control characters") {
			t.Errorf("%s: %d %s; want 400 naming %s (control characters)", c.name, r.status, body, c.field)
		}
	}
	long := strings.Repeat("k", 300) + "\xffk"
	if r := tn.do("GET", "/v1/auth", "", "X-Forwarded-Uri: /x", "X-API-Key: "+long); r.status != 400 || !strings.Contains(r.body, "UTF-8") {
		t.Errorf("forward-auth, a long value with a byte that is not UTF-8: %d %s; want 400", r.status, r.body)
	}
	// Nothing was charged: per-key's one token is still there.
	if r := tn.do("POST", "/v1/check", `{"rule":"per-key","key":"ab"}`); r.status != 200 {
		t.Errorf("a valid key after the refused ones: %d %s", r.status, r.body)
	}
}
