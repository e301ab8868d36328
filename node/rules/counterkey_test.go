package rules

import (
	"net"
	"testing"

	"github.com/sluicehq/sluice/node/api"
)

const twoSourceRules = `
rules:
  - name: tu
    algorithm: gcra
    limit: 1
    period: 1s
    key: header:X-Tenant,header:X-User
    descriptor: tenant,user
  - name: one
    algorithm: gcra
    limit: 1
    period: 1s
    key: header:X-One
    on_missing_key: header:X-Other
`

// TestCounterKeysEscaped: joined identities cannot collide (finding 5 of
// issue 10): "a|b"+"c" and "a"+"b|c" give different keys, by forward-auth
// and by descriptors alike, while values without '|' or '\' keep the keys
// they had before escaping (users upgrading keep their counters).
func TestCounterKeysEscaped(t *testing.T) {
	s := mustParse(t, twoSourceRules)
	auth := func(hdrs ...string) string {
		t.Helper()
		got := applied(s.MatchAuth(&authReq("GET", "/v1/auth", hdrs...).Header, net.ParseIP("192.0.2.1"), nil))
		for _, m := range got {
			if m.Rule.Name == "tu" {
				return m.Key
			}
		}
		t.Fatalf("no match of tu for %q", hdrs)
		return ""
	}
	desc := func(tenant, user string) string {
		t.Helper()
		got := s.MatchDescriptors([]api.Descriptor{{Name: "tenant", Value: tenant}, {Name: "user", Value: user}}, nil)
		if len(got) != 1 {
			t.Fatalf("descriptors %q %q: %d matches", tenant, user, len(got))
		}
		return got[0].Key
	}
	tests := []struct{ tenant, user, key string }{
		{"a", "c", "a|c"}, // unchanged by escaping
		{"a|b", "c", `a\|b|c`},
		{"a", "b|c", `a|b\|c`},
		{`a\`, "c", `a\\|c`},
		{"a", `\|c`, `a|\\\|c`},
	}
	seen := map[string]string{}
	for _, tt := range tests {
		a := auth("X-Tenant", tt.tenant, "X-User", tt.user)
		d := desc(tt.tenant, tt.user)
		if a != tt.key || d != tt.key {
			t.Errorf("tenant %q user %q: forward-auth key %q, descriptor key %q, want %q", tt.tenant, tt.user, a, d, tt.key)
		}
		if prev, dup := seen[a]; dup {
			t.Errorf("tenant %q user %q share key %q with %s", tt.tenant, tt.user, a, prev)
		}
		seen[a] = tt.tenant + "/" + tt.user
	}
	// One source: a plain value is the key itself; a fallback key never
	// equals a regular one.
	one := func(hdrs ...string) string {
		t.Helper()
		for _, m := range s.MatchAuth(&authReq("GET", "/v1/auth", hdrs...).Header, nil, nil) {
			if m.Rule.Name == "one" {
				return m.Key
			}
		}
		t.Fatalf("no match of one for %q", hdrs)
		return ""
	}
	if k := one("X-One", "plain"); k != "plain" {
		t.Errorf("one source: key %q, want plain", k)
	}
	fb, forged := one("X-Other", "x"), one("X-One", `\?x`)
	if fb != `\?x` || forged == fb {
		t.Errorf("fallback key %q, a regular value \\?x gives %q: want \\?x and a different key", fb, forged)
	}
}

// TestDescriptorKeyNoAlloc: a single-descriptor key without '|' or '\' is
// the value itself, not a copy (the descriptor hot path).
func TestDescriptorKeyNoAlloc(t *testing.T) {
	s := mustParse(t, "rules:\n  - {name: d, algorithm: gcra, limit: 1, period: 1s, descriptor: k}\n")
	d := []api.Descriptor{{Name: "k", Value: "user-1"}}
	dst := make([]Match, 0, 4)
	if n := testing.AllocsPerRun(100, func() { dst = s.MatchDescriptors(d, dst[:0]) }); n != 0 {
		t.Errorf("%v allocations per descriptor match, want 0", n)
	}
}

// FuzzCounterKeyJoin: two different lists of two non-empty values never
// join to one key.
func FuzzCounterKeyJoin(f *testing.F) {
	f.Add("a|b", "c", "a", "b|c")
	f.Add(`a\`, "|c", "a", `\|c`)
	f.Add("x", "y", "x", "y")
	f.Fuzz(func(t *testing.T, a1, a2, b1, b2 string) {
		if a1 == "" || a2 == "" || b1 == "" || b2 == "" {
			return
		}
		join := func(x, y string) string {
			return string(appendEscaped(append(appendEscaped(nil, x), '|'), y))
		}
		if join(a1, a2) == join(b1, b2) && (a1 != b1 || a2 != b2) {
			t.Fatalf("%q+%q and %q+%q share the key %q", a1, a2, b1, b2, join(a1, a2))
		}
	})
}
