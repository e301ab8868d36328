package rules

import (
	"errors"
	"testing"
)

func TestScope(t *testing.T) {
	const head = "rules:\n  - name: g\n    algorithm: token_bucket\n    limit: 100\n    period: 1s\n"
	s, err := Parse([]byte(head))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Get("g"); r.Global || r.Spec.Scope != "" || r.RegionalFloor != 0 {
		t.Fatalf("default scope: Global %v, Spec.Scope %q, floor %v; want region", r.Global, r.Spec.Scope, r.RegionalFloor)
	}
	s, err = Parse([]byte(head + "    scope: region\n"))
	if err != nil || s.Get("g").Global || s.Get("g").Spec.Scope != "" {
		t.Fatalf("scope: region: %v; want region, normalized to empty", err)
	}
	s, err = Parse([]byte(head + "    scope: global\n    regional_floor: 0.1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := s.Get("g"); !r.Global || r.Spec.Scope != "global" || r.RegionalFloor != 0.1 {
		t.Fatalf("scope: global: Global %v, Spec.Scope %q, floor %v", r.Global, r.Spec.Scope, r.RegionalFloor)
	}
	for _, c := range []struct{ add, field string }{
		{"    scope: world\n", "scope"},
		{"    scope: [global]\n", "scope"},
		{"    regional_floor: 0.1\n", "regional_floor"}, // region scope
		{"    scope: global\n    regional_floor: 1.5\n", "regional_floor"},
		{"    scope: global\n    regional_floor: -0.1\n", "regional_floor"},
		{"    scope: global\n    regional_floor: .nan\n", "regional_floor"},
		{"    scope: global\n    regional_floor: lots\n", "regional_floor"},
	} {
		_, err := Parse([]byte(head + c.add))
		var e *Error
		if !errors.As(err, &e) || e.Field != c.field {
			t.Errorf("%q: %v, want an error naming %s", c.add, err, c.field)
		}
	}
	_, err = Parse([]byte("rules:\n  - name: g\n    algorithm: sliding_log\n    limit: 10\n    period: 1s\n    scope: global\n"))
	var e *Error
	if !errors.As(err, &e) || e.Field != "scope" {
		t.Errorf("global sliding_log: %v, want an error naming scope", err)
	}
}
