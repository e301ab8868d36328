package main

import (
	"io"
	"strings"
	"testing"
	"time"
)

// TestCheckBudgetOptions: -check-budget (SLUICE_CHECK_BUDGET) defaults to
// 20ms, 0 turns it off, and a forward timeout not above it is refused
// (the sender would shed what an owner answers within its budget).
func TestCheckBudgetOptions(t *testing.T) {
	o, err := parseOptions(nil, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.checkBudget != 20*time.Millisecond || o.forwardTimeout != 50*time.Millisecond {
		t.Fatalf("defaults: check budget %v, forward timeout %v; want 20ms, 50ms", o.checkBudget, o.forwardTimeout)
	}
	o, err = parseOptions([]string{"-check-budget", "0", "-forward-timeout", "5ms"}, env(nil), io.Discard)
	if err != nil || o.checkBudget != 0 {
		t.Fatalf("-check-budget 0: %v, %v", o.checkBudget, err)
	}
	o, err = parseOptions(nil, env(map[string]string{"SLUICE_CHECK_BUDGET": "30ms"}), io.Discard)
	if err != nil || o.checkBudget != 30*time.Millisecond {
		t.Fatalf("SLUICE_CHECK_BUDGET=30ms: %v, %v", o.checkBudget, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-check-budget", "50ms"}, "-forward-timeout"},
		{[]string{"-check-budget", "-1ms"}, "check-budget"},
		{[]string{"-check-budget", "2m"}, "check-budget"},
		{[]string{"-check-budget", "soon"}, "check-budget"},
	} {
		if _, err := parseOptions(c.args, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: error %v, want one naming %s", c.args, err, c.want)
		}
	}
}
