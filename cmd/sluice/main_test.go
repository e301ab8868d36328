package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// The CLI's tests run it against a real Node (real Manager, in-memory
// Store) serving on a loopback port, with rules kept in memory.

const examplePath = "../../deploy/rules.example.yaml"

// startNode starts a node with no rules and admin token token; it returns
// its address http://127.0.0.1:port.
func startNode(t *testing.T, token string) string {
	t.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	mgr := lease.NewManager(store, lease.DefaultConfig())
	cfg := node.DefaultConfig()
	cfg.AdminToken = token
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	n := node.New(cfg, mgr)
	n.SetRules(nil)
	if err := n.StartRules(node.RulesConfig{}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		<-served
		mgr.Close()
		store.Close()
	})
	return "http://" + ln.Addr().String()
}

type result struct {
	code           int
	stdout, stderr string
}

// sluice runs the CLI with env (SLUICE_ADDR etc.) and args.
func sluice(env map[string]string, args ...string) result {
	var out, errb bytes.Buffer
	code := run(args, func(k string) string { return env[k] }, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// ok fails the test unless r exited 0.
func (r result) ok(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	return r
}

// failed checks that r exited with code and one line on stderr holding
// want.
func (r result) failed(t *testing.T, code int, want string) {
	t.Helper()
	if r.code != code || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "sluice: ") ||
		!strings.Contains(r.stderr, want) {
		t.Errorf("exit %d, stderr %q; want exit %d and one line holding %q", r.code, r.stderr, code, want)
	}
}

func writeFile(t *testing.T, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCLIRulesRoundTrip: rules apply of the example file, then rules get
// -o yaml gives back an equivalent file.
func TestCLIRulesRoundTrip(t *testing.T) {
	env := map[string]string{"SLUICE_ADDR": startNode(t, "")}
	r := sluice(env, "rules", "apply", "-f", examplePath).ok(t)
	if !strings.Contains(r.stdout, "version 1 -> 2") || !strings.Contains(r.stdout, "+ per-key") {
		t.Errorf("apply printed %q", r.stdout)
	}
	r = sluice(env, "rules", "get", "-o", "yaml").ok(t)
	got, err := rules.Parse([]byte(r.stdout))
	if err != nil {
		t.Fatalf("rules get -o yaml is not a valid rule file: %v\n%s", err, r.stdout)
	}
	want, err := rules.Load(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equal(want) {
		t.Errorf("round trip differs:\n%s", r.stdout)
	}
	// Applying the output again changes nothing.
	r = sluice(env, "rules", "apply", "-f", writeFile(t, r.stdout)).ok(t)
	if strings.TrimSpace(r.stdout) != "no change (version 2)" {
		t.Errorf("re-apply printed %q", r.stdout)
	}

	// The table, one rule, JSON.
	r = sluice(env, "rules", "get").ok(t)
	if !strings.Contains(r.stdout, "version 2, source memory, 7 rules") || !strings.Contains(r.stdout, "NAME") ||
		!strings.Contains(r.stdout, "login") {
		t.Errorf("rules get printed %q", r.stdout)
	}
	r = sluice(env, "rules", "get", "login", "-o", "yaml").ok(t)
	if !strings.HasPrefix(r.stdout, "name: login\nalgorithm: sliding_log\n") {
		t.Errorf("rules get login -o yaml printed %q", r.stdout)
	}
	sluice(env, "-o", "xml", "rules", "get").failed(t, exitUsage, "-o xml")
	r = sluice(env, "rules", "get", "-o", "json").ok(t)
	var rs struct {
		Version uint64
		Source  string
		Rules   []map[string]any
	}
	if err := json.Unmarshal([]byte(r.stdout), &rs); err != nil || rs.Version != 2 || rs.Source != "memory" || len(rs.Rules) != 7 {
		t.Errorf("rules get -o json = %s (%v)", r.stdout, err)
	}
}

func TestCLIRulesWrites(t *testing.T) {
	env := map[string]string{"SLUICE_ADDR": startNode(t, "")}
	sluice(env, "rules", "apply", "-f", examplePath).ok(t)

	// diff: what apply would change; nothing written.
	example, _ := os.ReadFile(examplePath)
	changed := strings.Replace(string(example), "limit: 3\n", "limit: 4\n", 1) // login
	r := sluice(env, "rules", "diff", "-f", writeFile(t, changed)).ok(t)
	if !strings.Contains(r.stdout, "dry run") || !strings.Contains(r.stdout, "~ login") {
		t.Errorf("diff printed %q", r.stdout)
	}
	if r := sluice(env, "rules", "diff", "-f", examplePath).ok(t); strings.TrimSpace(r.stdout) != "no change (version 2)" {
		t.Errorf("diff of the applied file printed %q", r.stdout)
	}

	// apply -dry-run, -if-match.
	r = sluice(env, "rules", "apply", "-f", writeFile(t, changed), "-dry-run").ok(t)
	if !strings.Contains(r.stdout, "~ login") || !strings.Contains(r.stdout, "nothing written") {
		t.Errorf("apply -dry-run printed %q", r.stdout)
	}
	sluice(env, "rules", "apply", "-f", writeFile(t, changed), "-if-match", "1").failed(t, exitFail, "HTTP 412")
	r = sluice(env, "rules", "apply", "-f", writeFile(t, changed), "-if-match", "2", "-o", "json").ok(t)
	var ch struct {
		Version uint64
		Changed []string
	}
	if json.Unmarshal([]byte(r.stdout), &ch) != nil || ch.Version != 3 || len(ch.Changed) != 1 {
		t.Errorf("apply -o json printed %q", r.stdout)
	}

	// delete.
	r = sluice(env, "rules", "delete", "login").ok(t)
	if !strings.Contains(r.stdout, "version 3 -> 4") || !strings.Contains(r.stdout, "- login") {
		t.Errorf("delete printed %q", r.stdout)
	}
	sluice(env, "rules", "delete", "login").failed(t, exitFail, `no rule named "login"`)

	// An invalid file: one line naming the rule and field, exit 1.
	bad := strings.Replace(string(example), "limit: 20\n", "limit: -20\n", 1) // per-ip
	sluice(env, "rules", "apply", "-f", writeFile(t, bad)).failed(t, exitFail, "rules[2].limit")
	if r := sluice(env, "rules", "get", "-o", "json").ok(t); !strings.Contains(r.stdout, `"version": 4`) {
		t.Errorf("a refused apply changed the rules: %s", r.stdout)
	}
}

func TestCLICheckAndTest(t *testing.T) {
	env := map[string]string{"SLUICE_ADDR": startNode(t, "")}
	if r := sluice(env, "rules", "test", "-path", "/login").ok(t); !strings.Contains(r.stdout, "no rule matches (version 1)") {
		t.Errorf("rules test on no rules printed %q", r.stdout)
	}
	sluice(env, "rules", "apply", "-f", examplePath).ok(t)

	r := sluice(env, "check", "per-key", "demo").ok(t)
	if !strings.Contains(r.stdout, "allowed") || !strings.Contains(r.stdout, "per-key") {
		t.Errorf("check printed %q", r.stdout)
	}
	r = sluice(env, "check", "per-key", "demo", "-hits", "100")
	if r.code != exitDenied || !strings.Contains(r.stdout, "denied") {
		t.Errorf("a denied check: exit %d, %q", r.code, r.stdout)
	}
	r = sluice(env, "check", "per-key", "demo", "-hits", "0", "-o", "json").ok(t)
	var cr map[string]any
	if json.Unmarshal([]byte(r.stdout), &cr) != nil || cr["remaining"] != 4.0 || cr["limit"] != 5.0 {
		t.Errorf("check -o json printed %q", r.stdout)
	}
	sluice(env, "check", "nope", "demo").failed(t, exitFail, "rule")
	sluice(env, "check", "per-key").failed(t, exitUsage, "want RULE KEY")

	r = sluice(env, "rules", "test", "-method", "POST", "-path", "/login", "-ip", "10.0.0.1", "-H", "X-API-Key: demo").ok(t)
	if !strings.Contains(r.stdout, "RULE") || !regexpLine(r.stdout, "per-key", "demo") || !regexpLine(r.stdout, "login", "10.0.0.1") {
		t.Errorf("rules test printed %q", r.stdout)
	}
	r = sluice(env, "rules", "test", "-path", "/elsewhere").ok(t)
	if strings.Contains(r.stdout, "login") || strings.Contains(r.stdout, "per-key") {
		t.Errorf("rules test -path /elsewhere printed %q", r.stdout)
	}

	r = sluice(env, "members").ok(t)
	if !strings.Contains(r.stdout, "local (self)") || !strings.Contains(r.stdout, "alive") {
		t.Errorf("members printed %q", r.stdout)
	}
	r = sluice(env, "hotkeys").ok(t)
	if !strings.Contains(r.stdout, "no hot keys") {
		t.Errorf("hotkeys printed %q", r.stdout)
	}
	if r := sluice(env, "hotkeys", "-o", "json").ok(t); !json.Valid([]byte(r.stdout)) {
		t.Errorf("hotkeys -o json printed %q", r.stdout)
	}
}

// regexpLine reports whether a line of out holds the fields a and b.
func regexpLine(out, a, b string) bool {
	for l := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == a && f[1] == b {
			return true
		}
	}
	return false
}

func TestCLITokenAndErrors(t *testing.T) {
	addr := startNode(t, "s3cret")
	sluice(map[string]string{"SLUICE_ADDR": addr}, "rules", "get").failed(t, exitFail, "the node wants a token (HTTP 401): set -token or SLUICE_ADMIN_TOKEN")
	// A wrong token is told apart from an unreachable node, and named
	// by where it comes from, never echoed.
	for _, args := range [][]string{{"rules", "get"}, {"members"}, {"hotkeys"}} {
		r := sluice(map[string]string{"SLUICE_ADDR": addr, "SLUICE_ADMIN_TOKEN": "not-s3cret"}, args...)
		r.failed(t, exitFail, "the node refused the token (HTTP 403): check -token or SLUICE_ADMIN_TOKEN")
		if strings.Contains(r.stderr, "not-s3cret") || strings.Contains(r.stderr, "reach") {
			t.Errorf("sluice %v with a wrong token: %q", args, r.stderr)
		}
	}
	sluice(map[string]string{"SLUICE_ADDR": addr, "SLUICE_ADMIN_TOKEN": "s3cret"}, "rules", "get").ok(t)
	sluice(map[string]string{"SLUICE_ADDR": "http://wrong"}, "-addr", addr, "-token", "s3cret", "members").ok(t)

	// Unreachable node, bad address, usage.
	sluice(map[string]string{"SLUICE_ADDR": "127.0.0.1:1"}, "members").failed(t, exitFail, "cannot reach http://127.0.0.1:1")
	sluice(map[string]string{"SLUICE_ADDR": "ftp://x"}, "members").failed(t, exitUsage, "node address")
	sluice(nil, "frobnicate").failed(t, exitUsage, `unknown command "frobnicate"`)
	sluice(nil, "rules", "get", "-o", "xml").failed(t, exitUsage, "-o xml")
	sluice(nil).failed(t, exitUsage, "no command")
	if r := sluice(nil, "-h"); r.code != 0 || !strings.Contains(r.stdout, "Usage: sluice") {
		t.Errorf("-h: exit %d %q", r.code, r.stdout)
	}
}

func TestCLILint(t *testing.T) {
	r := sluice(nil, "rules", "lint", examplePath).ok(t)
	if !strings.Contains(r.stdout, "ok, 7 rules") {
		t.Errorf("lint printed %q", r.stdout)
	}
	bad := writeFile(t, "rules:\n  - name: x\n    algorithm: leaky\n    limit: 1\n    period: 1m\n")
	sluice(nil, "rules", "lint", bad).failed(t, exitFail, `rule "x": algorithm`)
	sluice(nil, "rules", "lint", "/nonexistent.yaml").failed(t, exitFail, "no such file")
	// The help and the error name every algorithm of lease's table.
	help := sluice(nil, "rules", "lint", "-h").ok(t).stdout
	msg := sluice(nil, "rules", "lint", bad).stderr
	for _, a := range lease.Algorithms() {
		if !strings.Contains(help, a.String()) || !strings.Contains(msg, a.String()) {
			t.Errorf("rules lint -h (%q) or its error for an unknown algorithm (%q) does not name %v", help, msg, a)
		}
	}
}
