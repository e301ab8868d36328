package node

import (
	"testing"
)

func TestRulesMsg(t *testing.T) {
	for _, v := range []uint64{0, 1, 127, 128, 1 << 40} {
		msg := appendRulesMsg(nil, v)
		if !isRulesMsg(msg) {
			t.Errorf("%d: not a rules message", v)
		}
		if got, ok := parseRulesMsg(msg); !ok || got != v {
			t.Errorf("parseRulesMsg(appendRulesMsg(%d)) = %d, %v", v, got, ok)
		}
	}
	for _, bad := range [][]byte{nil, {'R'}, {'R', 1}, {'R', 2, 1}, {'H', 1, 1}, {'R', 1, 0x80}, {'R', 1, 1, 1}} {
		if _, ok := parseRulesMsg(bad); ok {
			t.Errorf("parseRulesMsg(%v) accepted", bad)
		}
	}
}

// FuzzRulesMsg: no gossip message makes the parser panic, and what it
// accepts re-encodes to the same bytes.
func FuzzRulesMsg(f *testing.F) {
	f.Add(appendRulesMsg(nil, 42))
	f.Add([]byte{'R', 1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte("H\x01garbage"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		v, ok := parseRulesMsg(msg)
		if ok && string(appendRulesMsg(nil, v)) != string(msg) {
			t.Errorf("%q parsed as %d, which encodes as %q", msg, v, appendRulesMsg(nil, v))
		}
	})
}

// FuzzAdminRules: no body or path makes the admin API panic, and a
// refused write changes nothing.
func FuzzAdminRules(f *testing.F) {
	f.Add("PUT", "/v1/rules/x", `{"algorithm":"gcra","limit":1,"period":"1s"}`)
	f.Add("PUT", "/v1/rules", "rules:\n  - {name: a, algorithm: gcra, limit: 1, period: 1s}\n")
	f.Add("POST", "/v1/rules:validate", `{"rules":[]}`)
	f.Add("POST", "/v1/rules:test", `{"method":"GET","path":"/a","headers":{"X-API-Key":"k"}}`)
	f.Add("DELETE", "/v1/rules/per-key?dry_run=1", "")
	f.Add("PUT", "/v1/rules/x", `{"algorithm":"token_bucket","limit":1,"period":"1s","overrides":[{"key":"[","limit":1}]}`)
	f.Fuzz(func(t *testing.T, method, path, body string) {
		n := New(Config{}, nil)
		n.SetRules(mustParse(t, testRules))
		ctx := newCtx(method, path, body, "127.0.0.1")
		n.handle(ctx)
		st := ctx.Response.StatusCode()
		if st != 200 && n.eng.Table().Set().Len() != mustParse(t, testRules).Len() {
			t.Errorf("%s %s answered %d but changed the rules", method, path, st)
		}
	})
}
