package rules

import (
	"os"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/node/api"
)

func FuzzParse(f *testing.F) {
	f.Add([]byte(fullFile))
	f.Add([]byte(matchFile))
	if b, err := os.ReadFile("../../deploy/rules.example.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"", "rules: [", "rules:\n  - &a {name: a, algorithm: gcra, limit: 1, period: 1s}\n  - *a\n",
		rule("algorithm: gcra", "limit: 1", "period: 1s", "overrides: [{key: 'a\\*?*', limit: 2, period: 2s}]"),
		rule("algorithm: sliding_log", "limit: 1", "period: 1s", "min_interval: 1ms", "key: 'jwt:sub,query:q,method,host,path'"),
		rule("algorithm: token_bucket", "limit: 1", "period: 1s", "hot: {threshold: 1.5e3, split: 2}", "match: {methods: GET}"),
		"rules: {a: 1}", "rules:\n  - {name: a, name: b}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error %v is not an *Error", err)
			}
			return
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatalf("Marshal: %v", err)
		}
		s2, err := Parse(out)
		if err != nil {
			t.Fatalf("accepted set does not re-validate: %v\n%s", err, out)
		}
		if !s.Equal(s2) {
			t.Fatalf("round trip differs:\n%s", out)
		}
		// Matching never panics on any accepted set.
		var req fasthttp.Request
		req.SetRequestURI("/v1/auth/api/x?user=u")
		req.Header.Set("X-API-Key", "k")
		req.Header.Set("Authorization", jwt(`{"sub":"s","tenant":"t"}`))
		_ = s.MatchAuth(&req.Header, nil, nil)
		_ = s.MatchDescriptors([]api.Descriptor{{Name: "ip", Value: "1.2.3.4"}, {Name: "path", Value: "/a"}}, nil)
		for _, r := range s.Rules() {
			_ = r.PolicyFor("ent-x")
		}
	})
}

func FuzzGlob(f *testing.F) {
	f.Add("a*b?c", "axxbyc")
	f.Add("\\*", "*")
	f.Fuzz(func(t *testing.T, p, s string) {
		if globMsg(p) != "" {
			return
		}
		globMatch(p, s)
		if !globMatch(p, p) && !containsMeta(p) {
			t.Fatalf("literal %q does not match itself", p)
		}
	})
}

func containsMeta(p string) bool {
	for i := 0; i < len(p); i++ {
		if p[i] == '*' || p[i] == '?' || p[i] == '\\' {
			return true
		}
	}
	return false
}

// FuzzMatchAuth feeds arbitrary forward-auth headers to MatchAuth: it never
// panics, and every key is non-empty and at most api.MaxKeyLen bytes.
func FuzzMatchAuth(f *testing.F) {
	s, err := Parse([]byte(matchFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add("/v1/auth/api/x?user=u", "/login?next=/", "POST", "Example.com:80", "1.2.3.4, 5.6.7.8", jwt(`{"tenant":"t"}`), "k")
	f.Add("/v1/auth", "https://h/api/?user=%zz", "", "[::1]:8080", "", "Bearer a.b", "")
	f.Add("/v1/authx", "", "get", ":", ",", "bearer ..", "\x00")
	f.Fuzz(func(t *testing.T, uri, fwdURI, method, host, xff, authz, apiKey string) {
		var req fasthttp.Request
		req.SetRequestURI(uri)
		for h, v := range map[string]string{"X-Forwarded-Uri": fwdURI, "X-Forwarded-Method": method,
			"X-Forwarded-Host": host, "X-Forwarded-For": xff, "Authorization": authz, "X-API-Key": apiKey} {
			if v != "" {
				req.Header.Set(h, v)
			}
		}
		for _, m := range s.MatchAuth(&req.Header, nil, nil) {
			if m.KeyMissing && m.Missing != MissingFallback {
				if m.Key != "" {
					t.Fatalf("rule %s: key %q for a missing key", m.Rule.Name, m.Key)
				}
				continue
			}
			if m.Key == "" || len(m.Key) > api.MaxKeyLen {
				t.Fatalf("rule %s: key %q", m.Rule.Name, m.Key)
			}
		}
	})
}
