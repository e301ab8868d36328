package main

import (
	"bytes"
	"strings"
	"testing"
)

// TestVersionFlag: sluiced -version prints one line naming the build and
// exits 0, even with settings that would stop the node from starting.
func TestVersionFlag(t *testing.T) {
	for _, e := range []map[string]string{nil, {"SLUICE_JOIN": "10.0.0.1:7946"}} { // a cluster without a key
		for _, f := range []string{"-version", "--version"} {
			var out bytes.Buffer
			code := run([]string{f}, env(e), &out)
			if code != 0 || !strings.HasPrefix(out.String(), "sluiced ") || !strings.Contains(out.String(), " go1.") || strings.Count(out.String(), "\n") != 1 {
				t.Errorf("env %v: %s: exit %d, %q", e, f, code, out.String())
			}
		}
	}
	var out bytes.Buffer
	run([]string{"-h"}, env(nil), &out)
	if !strings.Contains(out.String(), "-version") {
		t.Errorf("-h lacks -version:\n%s", out.String())
	}
}
