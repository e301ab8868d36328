package node

import (
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
