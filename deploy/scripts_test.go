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

// TestRegionsScriptLeavesMakeBuildAlone: deploy/regions.sh gets its
// sluiced from make build (with the vtprotobuf tag the Envoy RLS server's
// responses need), and never writes .bin/sluiced with a go build of its
// own, which replaced make build's binary with one built without the tag.
// The script runs from a copy of deploy/ with stub make and go that log
// their arguments and fail, so it stops at its build step.
func TestRegionsScriptLeavesMakeBuildAlone(t *testing.T) {
	tmp := t.TempDir()
	if err := os.MkdirAll(filepath.Join(tmp, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root(t), "deploy", "regions.sh"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(tmp, "deploy", "regions.sh")
	if err := os.WriteFile(path, src, 0o755); err != nil {
		t.Fatal(err)
	}
	stubs := filepath.Join(tmp, "stubs")
	if err := os.MkdirAll(stubs, 0o755); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(tmp, "calls.log")
	for _, name := range []string{"make", "go"} {
		stub := "#!/bin/sh\necho \"" + name + " $*\" >>" + log + "\nexit 1\n"
		if err := os.WriteFile(filepath.Join(stubs, name), []byte(stub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, code := script(t, []string{"PATH=" + stubs + ":" + os.Getenv("PATH"), "TMPDIR=" + tmp}, path, "0")
	if code == 0 {
		t.Fatalf("regions.sh went on past a failed build (stderr %q)", stderr)
	}
	calls, _ := os.ReadFile(log)
	lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
	for _, l := range lines {
		if f := strings.Fields(l); f[0] == "go" && strings.Contains(l, "./cmd/sluiced") {
			t.Errorf("regions.sh builds sluiced itself: %q (make build's .bin/sluiced has the vtprotobuf tag)", l)
		}
	}
	if f := strings.Fields(lines[0]); f[0] != "make" || f[len(f)-1] != "build" {
		t.Errorf("regions.sh's first build is %q, want make ... build", lines[0])
	}
}

// TestLocalClusterNotRunning: with no local cluster, status and stop say
// so ("no local cluster is running"), status exits 3 (as systemctl status
// of a stopped unit: not running) and stop 0 (nothing to stop is not a
// failure); before, status said "not running" with exit 1 and stop
// "stopped (0 nodes and Redis)". State left by a cluster whose processes
// are gone (a reboot) is not a running cluster either: stop says that it
// stopped nothing and clears the state.
func TestLocalClusterNotRunning(t *testing.T) {
	path := filepath.Join(root(t), "deploy", "local-cluster.sh")
	dir := filepath.Join(t.TempDir(), "sluice-local")
	env := []string{"SLUICE_LOCAL_DIR=" + dir}
	want := "no local cluster is running"
	for _, c := range []struct {
		cmd  string
		code int
	}{{"status", 3}, {"stop", 0}, {"status", 3}} {
		out, errOut, code := script(t, env, path, c.cmd)
		if code != c.code || !strings.Contains(out+errOut, want) || !strings.Contains(out+errOut, dir) || strings.Contains(out+errOut, "stopped") {
			t.Errorf("%s with nothing in %s: exit %d, %q %q; want exit %d and %q naming the directory", c.cmd, dir, code, out, errOut, c.code, want)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("status or stop created %s (%v)", dir, err)
	}

	// A cluster's state whose processes are gone.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range map[string]string{"nodes": "3\n", "n1.pid": "999999999\n", "redis.pid": "999999998\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := script(t, env, path, "status")
	if code != 1 || !strings.Contains(out, "n1") || !strings.Contains(out, "not running") {
		t.Errorf("status of a cluster whose processes are gone: exit %d, %q %q; want exit 1 naming each node not running", code, out, errOut)
	}
	out, errOut, code = script(t, env, path, "stop")
	if code != 0 || !strings.Contains(out+errOut, "none of its processes was running") || strings.Contains(out+errOut, "stopped 3") {
		t.Errorf("stop of a cluster whose processes are gone: exit %d, %q %q; want exit 0 saying nothing ran", code, out, errOut)
	}
	if out, errOut, code := script(t, env, path, "status"); code != 3 || !strings.Contains(out+errOut, want) {
		t.Errorf("status after that stop: exit %d, %q %q; want 3, %q", code, out, errOut, want)
	}
}
