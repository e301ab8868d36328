package client

import (
	"strings"
	"testing"

	"github.com/sluicehq/sluice/node/api"
)

func TestRenumber(t *testing.T) {
	for _, tt := range []struct {
		in   string
		i    int
		want string
	}{
		{"checks[0].key", 17, "checks[17].key"},
		{"checks[12]", 3, "checks[3]"},
		{"checks[4].descriptors.api_key", 9, "checks[9].descriptors.api_key"},
		{"rule", 5, "rule"},
		{"checks[", 5, "checks["},
	} {
		if got := renumber(tt.in, tt.i); got != tt.want {
			t.Errorf("renumber(%q, %d) = %q, want %q", tt.in, tt.i, got, tt.want)
		}
	}
}

func TestSplitLeaseID(t *testing.T) {
	for _, tt := range []struct {
		id, rule, key string
		ok            bool
	}{
		{"uploads~dXNlci00Mg~abc", "uploads", "user-42", true},
		{"uploads~~abc", "", "", false}, // long-key form: no key inside
		{"uploads~!!~abc", "", "", false},
		{"nope", "", "", false},
		{"a b~dXNlci00Mg~abc", "", "", false},
	} {
		rule, key, ok := splitLeaseID(tt.id)
		if rule != tt.rule || key != tt.key || ok != tt.ok {
			t.Errorf("splitLeaseID(%q) = %q %q %v", tt.id, rule, key, ok)
		}
	}
}

func FuzzSplitLeaseID(f *testing.F) {
	for _, s := range []string{"uploads~dXNlci00Mg~abc", "uploads~~abc", "~~", "a~b~c~d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		rule, key, ok := splitLeaseID(id)
		if !ok {
			return
		}
		if !api.ValidName(rule) || !api.ValidKey(key) || !strings.HasPrefix(id, rule+"~") {
			t.Fatalf("splitLeaseID(%q) = %q %q", id, rule, key)
		}
	})
}

// The client refuses what the node refuses: every check the client
// accepts decodes at the node, and every field error names a field.
func FuzzCheckMsg(f *testing.F) {
	f.Add("per-key", "user-42", "", "", int64(1))
	f.Add("", "", "api_key", "k1", int64(0))
	f.Add("a b", "\x01", "", "", int64(-1))
	f.Fuzz(func(t *testing.T, rule, key, dn, dv string, hits int64) {
		var ds []api.Descriptor
		if dn != "" || dv != "" {
			ds = []api.Descriptor{{Name: dn, Value: dv}}
		}
		fe := checkMsg(rule, key, ds, hits, -1)
		if fe != nil {
			if fe.Field == "" {
				t.Fatalf("error without a field: %v", fe)
			}
			return
		}
		body := api.AppendCheckRequest(nil, &api.CheckRequest{Rule: rule, Key: key, Descriptors: ds, Hits: hits, HitsSet: true})
		var got api.CheckRequest
		if err := api.DecodeCheck(body, &got); err != nil {
			t.Fatalf("client accepted %q that the node refuses: %v", body, err)
		}
	})
}
