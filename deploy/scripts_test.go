// Package deploy_test runs the scripts of deploy/ and the Makefile targets
// that wrap them, as a newcomer would, and checks what they say and do.
// They start nothing that listens: each case stops before a server would
// (a stub build that fails, a cluster that is not running).
package deploy_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// root is the repository (this package's parent directory).
func root(t *testing.T) string {
	t.Helper()
	r, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// script runs a bash script with args and extra environment, and returns
// its stdout, stderr and exit status.
func script(t *testing.T, env []string, path string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command("bash", append([]string{path}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s %v: %v", path, args, err)
	}
	return o.String(), e.String(), code
}

// TestMakeRunListensOnLoopback: make run starts a node on 127.0.0.1:8080,
// not on every interface (its admin API answers loopback callers without
// a token, and a newcomer's laptop is on other networks); LISTEN moves it,
// :8080 included.
func TestMakeRunListensOnLoopback(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	listen := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("make", append([]string{"-n", "--no-print-directory", "run"}, args...)...)
		cmd.Dir = root(t)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n run %v: %v\n%s", args, err, out)
		}
		for line := range strings.SplitSeq(string(out), "\n") {
			if f := strings.Fields(line); len(f) >= 3 && strings.HasSuffix(f[0], "/sluiced") && f[1] == "-listen" {
				return f[2]
			}
		}
		t.Fatalf("make -n run %v starts no sluiced -listen:\n%s", args, out)
		return ""
	}
	if got := listen(); got != "127.0.0.1:8080" {
		t.Errorf("make run listens on %q, want 127.0.0.1:8080", got)
	}
	if got := listen("LISTEN=:8080"); got != ":8080" {
		t.Errorf("make run LISTEN=:8080 listens on %q", got)
	}
}
