package rules

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/lease"
)

// TestMaxHolders: max_holders, in a rule file and in the admin API's JSON,
// defaults to lease.DefaultMaxHolders, takes 1 to lease.MaxKeyHolders,
// and refuses anything else, and any value for an exact algorithm, naming
// the field.
func TestMaxHolders(t *testing.T) {
	const head = "rules:\n  - name: r\n    algorithm: token_bucket\n    limit: 100\n    period: 1m\n"
	s, err := Parse([]byte(head))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Get("r").MaxHolders; got != lease.DefaultMaxHolders {
		t.Fatalf("default max_holders %d, want %d", got, lease.DefaultMaxHolders)
	}
	for _, v := range []string{"0", "~"} {
		if s, err := Parse([]byte(head + "    max_holders: " + v + "\n")); err != nil || s.Get("r").MaxHolders != lease.DefaultMaxHolders {
			t.Fatalf("max_holders %s: %v, want the default", v, err)
		}
	}
	for _, n := range []int{1, 7, lease.MaxKeyHolders} {
		s, err := Parse([]byte(head + "    max_holders: " + itoa(n) + "\n"))
		if err != nil || s.Get("r").MaxHolders != n || s.Get("r").Spec.MaxHolders != n {
			t.Fatalf("max_holders %d: %v", n, err)
		}
	}
	for _, bad := range []string{"-1", itoa(lease.MaxKeyHolders + 1), "1.5", "x", "[1]", "99999999999999999999"} {
		_, err := Parse([]byte(head + "    max_holders: " + bad + "\n"))
		var e *Error
		if !errors.As(err, &e) || e.Field != "max_holders" {
			t.Errorf("max_holders %s: %v, want an error naming max_holders", bad, err)
		}
	}
	const log = "rules:\n  - name: r\n    algorithm: sliding_log\n    limit: 100\n    period: 1m\n    max_holders: 8\n"
	var e *Error
	if _, err := Parse([]byte(log)); !errors.As(err, &e) || e.Field != "max_holders" || !strings.Contains(e.Error(), "leased") {
		t.Errorf("max_holders on sliding_log: %v, want an error naming max_holders", err)
	}
	// The admin API's JSON, both ways.
	spec, err := ParseSpec([]byte(`{"name":"j","algorithm":"gcra","limit":10,"period":"1s","max_holders":12}`))
	if err != nil || spec.MaxHolders != 12 {
		t.Fatalf("JSON max_holders 12: %+v, %v", spec, err)
	}
	r, err := Compile(spec)
	if err != nil || r.MaxHolders != 12 {
		t.Fatalf("Compile: %v", err)
	}
	b, err := json.Marshal(r.Spec)
	if err != nil || !strings.Contains(string(b), `"max_holders":12`) {
		t.Fatalf("the rule as JSON: %s, %v", b, err)
	}
	if _, err := Compile(Spec{Name: "p", Algorithm: "token_bucket", Limit: 1, Period: "1s", MaxHolders: -3}); !errors.As(err, &e) || e.Field != "max_holders" {
		t.Errorf("Compile(max_holders -3): %v, want an error naming max_holders", err)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
