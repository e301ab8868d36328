package lua

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/lua/redistest"
)

// TestRulesStore runs the rule store's save, load and version on a real
// standalone Redis and a real 3-master Cluster (both keys in one slot).
func TestRulesStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis")
	}
	for _, tc := range []struct {
		name  string
		addrs func(t *testing.T) []string
	}{
		{"standalone", func(t *testing.T) []string { return []string{redistest.Start(t)} }},
		{"cluster", func(t *testing.T) []string { return redistest.StartCluster(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, tc.addrs(t)...)
			ctx := context.Background()

			v, specs, sig, err := s.LoadRules(ctx)
			if err != nil || v != 0 || len(specs) != 0 || sig != nil {
				t.Fatalf("LoadRules on an empty Redis = %d, %q, %q, %v; want 0, none, nil", v, specs, sig, err)
			}
			if v, err := s.RulesVersion(ctx); err != nil || v != 0 {
				t.Fatalf("RulesVersion = %d, %v; want 0", v, err)
			}

			// Saved in order; the order survives the hash.
			names := []string{"zeta", "alpha", "mid"}
			var in [][]byte
			for _, n := range names {
				in = append(in, []byte(`{"name":"`+n+`","limit":1}`))
			}
			v, ok, err := s.SaveRules(ctx, 0, 1, names, in, []byte("sig-1"))
			if err != nil || !ok || v != 1 {
				t.Fatalf("SaveRules(expect 0) = %d, %v, %v; want 1, true", v, ok, err)
			}
			// A writer that read version 0 is refused: nothing written.
			v, ok, err = s.SaveRules(ctx, 0, 1, []string{"other"}, [][]byte{[]byte(`{}`)}, nil)
			if err != nil || ok || v != 1 {
				t.Fatalf("stale SaveRules = %d, %v, %v; want 1, false", v, ok, err)
			}
			v, specs, sig, err = s.LoadRules(ctx)
			if err != nil || v != 1 || len(specs) != 3 || string(sig) != "sig-1" {
				t.Fatalf("LoadRules = %d, %q, %q, %v", v, specs, sig, err)
			}
			for i, n := range names {
				if !strings.Contains(string(specs[i]), `"`+n+`"`) {
					t.Errorf("rule %d = %s, want %s", i, specs[i], n)
				}
			}

			// A smaller set replaces the whole hash, at the version the
			// writer gives (above the one it replaces); no signature
			// removes the old one.
			v, ok, err = s.SaveRules(ctx, 1, 5, []string{"alpha"}, [][]byte{[]byte(`{"name":"alpha","limit":2}`)}, nil)
			if err != nil || !ok || v != 5 {
				t.Fatalf("SaveRules(expect 1, next 5) = %d, %v, %v", v, ok, err)
			}
			v, specs, sig, err = s.LoadRules(ctx)
			if err != nil || v != 5 || len(specs) != 1 || string(specs[0]) != `{"name":"alpha","limit":2}` || sig != nil {
				t.Fatalf("LoadRules = %d, %q, %q, %v", v, specs, sig, err)
			}
			if v, err := s.RulesVersion(ctx); err != nil || v != 5 {
				t.Fatalf("RulesVersion = %d, %v; want 5", v, err)
			}
			// The empty set is a version too.
			if v, ok, err := s.SaveRules(ctx, 5, 6, nil, nil, []byte("sig-6")); err != nil || !ok || v != 6 {
				t.Fatalf("SaveRules(empty) = %d, %v, %v", v, ok, err)
			}
			if v, specs, sig, err := s.LoadRules(ctx); err != nil || v != 6 || len(specs) != 0 || string(sig) != "sig-6" {
				t.Fatalf("LoadRules = %d, %q, %q, %v", v, specs, sig, err)
			}
			if _, _, err := s.SaveRules(ctx, 6, 0, nil, nil, nil); err == nil {
				t.Fatal("SaveRules(next 0) succeeded")
			}
		})
	}
}
