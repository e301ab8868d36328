package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/lua/redistest"
)

// The suite starts this binary again as the ceiling server; under `go
// test` that binary is the test binary, which then acts as main.
func TestMain(m *testing.M) {
	if os.Getenv("H5_BENCH_AS_MAIN") == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{nil, 2, "usage"},
		{[]string{"nope"}, 2, "unknown command"},
		{[]string{"run", "-dist", "pareto"}, 2, "dist:"},
		{[]string{"run", "-mode", "sideways"}, 2, "mode:"},
		{[]string{"run", "-keys", "-5"}, 2, "keys:"},
		{[]string{"run", "-driver", "raw", "-url", "x"}, 2, "url:"},
		{[]string{"run", "-driver", "client", "-addr", "127.0.0.1:1"}, 2, "cannot start the Go client"},
		{[]string{"run", "-duration", "0s"}, 2, "duration:"},
		{[]string{"run", "-driver", "naive"}, 2, "naive: addr: required"},
		{[]string{"suite", "-phase", "1ns"}, 1, "phase:"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		code := run(tt.args, &out, &errb)
		if code != tt.code || !strings.Contains(errb.String(), tt.msg) {
			t.Errorf("%v: code %d, stderr %q; want %d and %q", tt.args, code, errb.String(), tt.code, tt.msg)
		}
	}
}

// TestVersion: sluice-bench version (or -version, --version) prints one
// line naming the build, as sluice and sluiced do.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"version", "-version", "--version"} {
		var out, errb bytes.Buffer
		code := run([]string{arg}, &out, &errb)
		if code != 0 || !strings.HasPrefix(out.String(), "sluice-bench ") || !strings.Contains(out.String(), " go1.") ||
			strings.Count(out.String(), "\n") != 1 || errb.Len() != 0 {
			t.Errorf("sluice-bench %s: exit %d, stdout %q, stderr %q", arg, code, out.String(), errb.String())
		}
	}
	var out bytes.Buffer
	run([]string{"-h"}, &out, io.Discard)
	if !strings.Contains(out.String(), "version") {
		t.Errorf("usage lacks version:\n%s", out.String())
	}
}

func ceiling(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go bench.ServeCeiling(ln, bench.SyntheticCanned(10)) //nolint:errcheck // ends when ln closes
	return ln.Addr().String()
}

func TestRunAgainstCeiling(t *testing.T) {
	addr := ceiling(t)
	js := filepath.Join(t.TempDir(), "r.json")
	var out, errb bytes.Buffer
	code := run([]string{"run", "-driver", "batch", "-batch", "10", "-addr", addr, "-duration", "200ms", "-workers", "2",
		"-limit", "1000", "-json", js}, &out, &errb)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "decisions/s") || !strings.Contains(out.String(), "accuracy:") {
		t.Fatalf("output: %s", out.String())
	}
	var r bench.RunResult
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &r); err != nil || r.Decisions == 0 || r.Decisions != 10*r.Requests {
		t.Fatalf("json %v: %+v", err, r)
	}
	// Raw driver, open loop.
	out.Reset()
	code = run([]string{"run", "-driver", "raw", "-method", "GET", "-url", "/v1/auth?k={{key}}", "-addr", addr,
		"-mode", "open", "-rate", "500", "-duration", "200ms"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "100 scheduled") {
		t.Fatalf("code %d: %s %s", code, out.String(), errb.String())
	}
}

// TestSuiteWithoutNode runs the whole suite with tiny phases and no node:
// the ceiling (a child process) and in-process phases run, the report is
// written, and it says why the node phases are missing.
func TestSuiteWithoutNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Setenv("H5_BENCH_AS_MAIN", "1")
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := run([]string{"suite", "-phase", "150ms", "-out", dir, "-keys", "1000"}, &out, &errb)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	res := strings.TrimSpace(out.String())
	md, err := os.ReadFile(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"no sluiced binary given", "ceiling-batch100", "inproc-manager", "## Headline"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	var s bench.Suite
	b, _ := os.ReadFile(filepath.Join(filepath.Dir(res), "run.json"))
	if err := json.Unmarshal(b, &s); err != nil || len(s.Runs) < 5 {
		t.Fatalf("run.json: %v, %d runs", err, len(s.Runs))
	}
	for _, r := range s.Runs {
		if r.Errors == 0 {
			continue
		}
		// A request that outlasts the driver's 2s timeout (waiting for a
		// connection, a dial, the answer) is the machine's load, not the
		// suite's: seen once at load ~13 ("ceiling-single: 1 errors: error
		// when dialing ...: fasthttp: dialing to the given tcp address
		// timed out"). Any other error (a bad answer, a refused
		// connection) is the suite's. Only the first error is kept, so a
		// phase whose first error is a timeout passes unexamined.
		if timedOut(r.FirstErr) {
			t.Logf("%s: %d errors, the first a timeout (a loaded machine): %s", r.Name, r.Errors, r.FirstErr)
			continue
		}
		t.Errorf("%s: %d errors: %s", r.Name, r.Errors, r.FirstErr)
	}
	svg, err := os.ReadFile(filepath.Join(filepath.Dir(res), "accuracy.svg"))
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		if _, err := dec.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("accuracy.svg: %v", err)
		}
	}
}

// timedOut reports whether a driver error is a timeout (fasthttp's
// ErrTimeout, ErrDialTimeout, ErrNoFreeConns after MaxConnWaitTimeout).
func timedOut(msg string) bool {
	for _, e := range []error{fasthttp.ErrTimeout, fasthttp.ErrDialTimeout, fasthttp.ErrNoFreeConns} {
		if strings.Contains(msg, e.Error()) {
			return true
		}
	}
	return false
}

// TestRunNaive: the naive counter driver on a real redis-server counts one
// INCRBY and one EXPIRE per check, and admits up to the limit per window.
func TestRunNaive(t *testing.T) {
	addr := redistest.Start(t)
	js := filepath.Join(t.TempDir(), "r.json")
	var out, errb bytes.Buffer
	code := run([]string{"run", "-driver", "naive", "-redis", addr, "-keys", "5", "-dist", "uniform", "-duration", "200ms",
		"-workers", "2", "-mode", "open", "-rate", "500", "-limit", "1000000", "-period", "1h", "-json", js}, &out, &errb)
	if code != 0 {
		t.Fatalf("code %d: %s", code, errb.String())
	}
	var r bench.RunResult
	b, _ := os.ReadFile(js)
	if err := json.Unmarshal(b, &r); err != nil || r.Decisions != 100 || r.Allowed != r.Decisions {
		t.Fatalf("json %v: %+v, want 100 decisions, all allowed", err, r)
	}
	if !strings.Contains(out.String(), "incrby") || !strings.Contains(out.String(), "expire") {
		t.Errorf("output names no INCRBY and EXPIRE per decision: %s", out.String())
	}
}
