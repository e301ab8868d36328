package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestGlobalFlagsAnywhere: -o, -addr, -token and -timeout work before the
// command, between rules and its command, and after it.
func TestGlobalFlagsAnywhere(t *testing.T) {
	addr := startNode(t, "s3cret")
	env := map[string]string{"SLUICE_ADDR": "http://wrong.invalid"}
	isJSON := func(r result) {
		t.Helper()
		var v map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Errorf("not JSON: %q", r.stdout)
		}
	}
	isJSON(sluice(env, "-o", "json", "-addr", addr, "-token", "s3cret", "members").ok(t))
	isJSON(sluice(env, "members", "-o", "json", "-addr", addr, "-token", "s3cret").ok(t))
	isJSON(sluice(env, "-addr", addr, "members", "-token", "s3cret", "-o", "json").ok(t))
	isJSON(sluice(env, "-o", "json", "-timeout", "5s", "rules", "-addr", addr, "get", "-token", "s3cret").ok(t))
	r := sluice(env, "-o", "yaml", "rules", "get", "-addr", addr, "-token", "s3cret").ok(t)
	if !strings.HasPrefix(r.stdout, "rules:") {
		t.Errorf("-o yaml rules get printed %q", r.stdout)
	}
	// After the command, the command's -o wins over the global one.
	if r := sluice(env, "-o", "json", "-addr", addr, "-token", "s3cret", "members", "-o", "table").ok(t); !strings.Contains(r.stdout, "NAME") {
		t.Errorf("members -o table printed %q", r.stdout)
	}
	// A format the command does not offer is refused, wherever -o is.
	sluice(env, "-o", "yaml", "members").failed(t, exitUsage, "-o yaml: want table, json")
	sluice(env, "-o", "xml", "rules", "lint", examplePath).failed(t, exitUsage, "-o xml")
	sluice(env, "members", "-timeout", "0s").failed(t, exitUsage, "-timeout")
	sluice(env, "rules", "-nope", "get").failed(t, exitUsage, "-nope")
}

// TestHelpEverywhere: -h, -help and --help on every command and on rules
// print that command's usage on stdout and exit 0, wherever they are.
func TestHelpEverywhere(t *testing.T) {
	for _, cmd := range commands {
		for _, h := range []string{"-h", "-help", "--help"} {
			args := append(strings.Fields(cmd.name), h)
			r := sluice(nil, args...)
			want := "Usage: sluice " + cmd.name + " " + cmd.args
			if r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, want) || !strings.Contains(r.stdout, cmd.summary) {
				t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit 0 and %q", strings.Join(args, " "), r.code, r.stdout, r.stderr, want)
			}
		}
		// sluice help CMD is the same text; the top usage lists CMD.
		if a, b := sluice(nil, append(strings.Fields(cmd.name), "-h")...), sluice(nil, append([]string{"help"}, strings.Fields(cmd.name)...)...); a != b {
			t.Errorf("sluice help %s = %+v, want %+v", cmd.name, b, a)
		}
		if !strings.Contains(usage, "\n  "+cmd.name+" ") {
			t.Errorf("sluice -h does not list %q", cmd.name)
		}
	}
	// After arguments and other flags too.
	for _, args := range [][]string{{"rules", "get", "login", "-o", "yaml", "-h"}, {"check", "r", "k", "--help"}, {"-o", "json", "members", "-h"}} {
		if r := sluice(nil, args...); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: sluice ") {
			t.Errorf("sluice %s: exit %d, %q", strings.Join(args, " "), r.code, r.stdout)
		}
	}
	for _, args := range [][]string{{"rules", "-h"}, {"rules", "--help"}, {"help", "rules"}} {
		if r := sluice(nil, args...); r.code != 0 || !strings.HasPrefix(r.stdout, "Usage: sluice rules get|apply") {
			t.Errorf("sluice %s: exit %d, %q", strings.Join(args, " "), r.code, r.stdout)
		}
	}
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		if r := sluice(nil, args...); r.code != 0 || r.stdout != usage {
			t.Errorf("sluice %s: exit %d, %q", strings.Join(args, " "), r.code, r.stdout)
		}
	}
	sluice(nil, "help", "frobnicate").failed(t, exitUsage, `unknown command "frobnicate"`)
	sluice(nil, "rules", "frob", "-h").failed(t, exitUsage, `unknown command "frob"`)
}

// TestHotKeysAlone: on a node that runs alone, hotkeys says why it shows
// no key however much traffic there is.
func TestHotKeysAlone(t *testing.T) {
	env := map[string]string{"SLUICE_ADDR": startNode(t, "")}
	sluice(env, "rules", "apply", "-f", examplePath).ok(t)
	for range 50 {
		sluice(env, "check", "per-ip", "10.0.0.1", "-hits", "0").ok(t)
	}
	if r := sluice(env, "hotkeys").ok(t); !strings.Contains(r.stdout, "no hot keys: they are tracked in a cluster, and this node runs alone") {
		t.Errorf("hotkeys printed %q", r.stdout)
	}
}

func TestVersion(t *testing.T) {
	r := sluice(nil, "version").ok(t)
	if !strings.HasPrefix(r.stdout, "sluice ") || !strings.Contains(r.stdout, " go1.") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("version printed %q", r.stdout)
	}
	var v struct{ Program, Go string }
	if r := sluice(nil, "-o", "json", "version").ok(t); json.Unmarshal([]byte(r.stdout), &v) != nil || v.Program != "sluice" || v.Go == "" {
		t.Errorf("version -o json printed %q", r.stdout)
	}
	sluice(nil, "version", "extra").failed(t, exitUsage, `unexpected "extra"`)
	// -version and --version, as every other Go tool and sluiced take
	// it, are sluice version.
	for _, f := range []string{"-version", "--version"} {
		if r := sluice(nil, f).ok(t); r.stdout != sluice(nil, "version").stdout {
			t.Errorf("sluice %s printed %q", f, r.stdout)
		}
		if r := sluice(nil, "-o", "json", f).ok(t); json.Unmarshal([]byte(r.stdout), &v) != nil || v.Program != "sluice" {
			t.Errorf("sluice -o json %s printed %q", f, r.stdout)
		}
		sluice(nil, f, "members").failed(t, exitUsage, `unexpected "members"`)
	}
}

// silentNode is a node that accepts connections and never answers. It
// returns its address and a channel that receives each accepted
// connection.
func silentNode(t *testing.T) (string, <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-conns:
				c.Close()
			default:
				return
			}
		}
	})
	return "http://" + ln.Addr().String(), conns
}

// notifyWriter is a stderr that reports each write.
type notifyWriter struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes chan struct{}
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.b.Write(p)
	select {
	case w.writes <- struct{}{}:
	default:
	}
	return n, err
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// TestWaitingNotice: a node that accepts the connection and never answers
// is named on stderr once the notice delay (one second) passes, and the
// request still ends (here: the node hangs up). The delay is a channel the
// test fires: no wall clock.
func TestWaitingNotice(t *testing.T) {
	addr, conns := silentNode(t)
	fire := make(chan time.Time)
	asked := make(chan time.Duration, 1)
	var out bytes.Buffer
	errOut := &notifyWriter{writes: make(chan struct{}, 1)}
	c := &cli{getenv: func(string) string { return "" }, out: &out, errOut: errOut, timeout: time.Hour,
		after: func(d time.Duration) <-chan time.Time { asked <- d; return fire }}
	code := make(chan int, 1)
	go func() { code <- c.exit(c.main([]string{"-addr", addr, "members"})) }()

	conn := <-conns // the request is in flight
	if d := <-asked; d != time.Second {
		t.Errorf("notice after %v, want 1s", d)
	}
	if s := errOut.String(); s != "" {
		t.Fatalf("stderr before the notice: %q", s)
	}
	fire <- time.Time{}
	<-errOut.writes
	want := "sluice: waiting for GET " + addr + "/v1/members (up to -timeout 1h0m0s)\n"
	if s := errOut.String(); s != want {
		t.Errorf("stderr %q, want %q", s, want)
	}
	conn.Close() // the node hangs up: the request fails, once
	if c := <-code; c != exitFail {
		t.Errorf("exit %d, want %d", c, exitFail)
	}
	if lines := strings.Split(strings.TrimSpace(errOut.String()), "\n"); len(lines) != 2 || !strings.Contains(lines[1], "cannot reach "+addr) {
		t.Errorf("stderr %q: want the notice, then the failure", errOut.String())
	}
}

// TestTimeout: a node that never answers fails the command after
// -timeout, naming what went unanswered.
func TestTimeout(t *testing.T) {
	addr, _ := silentNode(t)
	// A real timeout: 50ms of a real wait (the notice never fires).
	var out bytes.Buffer
	var errOut bytes.Buffer
	c := &cli{getenv: func(string) string { return "" }, out: &out, errOut: &errOut, timeout: time.Hour,
		after: func(time.Duration) <-chan time.Time { return nil }}
	if code := c.exit(c.main([]string{"members", "-addr", addr, "-timeout", "50ms"})); code != exitFail {
		t.Errorf("exit %d, want %d", code, exitFail)
	}
	want := "sluice: no answer to GET " + addr + "/v1/members within -timeout 50ms\n"
	if errOut.String() != want {
		t.Errorf("stderr %q, want %q", errOut.String(), want)
	}
}

// TestMembersShowsPartition: sluice members says which alive members do
// not answer the asked node, and that the node is the minority of a
// partition (issue 35: the table showed every member alive).
func TestMembersShowsPartition(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"self":"n3","ready":false,"vnodes":8192,"members":[`+
			`{"name":"n1","http_addr":"10.0.0.1:8080","gossip_addr":"10.0.0.1:7946","state":"alive","answering":false},`+
			`{"name":"n2","http_addr":"10.0.0.2:8080","gossip_addr":"10.0.0.2:7946","state":"dead","answering":false},`+
			`{"name":"n3","http_addr":"10.0.0.3:8080","gossip_addr":"10.0.0.3:7946","state":"alive","answering":true}],`+
			`"ring":["n1","n3"],"quorum":{"seen":1,"known":3,"missing":["n1","n2"],"minority":true}}`)
	}))
	t.Cleanup(srv.Close)
	r := sluice(map[string]string{"SLUICE_ADDR": srv.URL}, "members").ok(t)
	for _, want := range []string{"alive, not answering", "n3 sees 1 of the 3 members it last knew (missing: n1, n2): the minority of a partition"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("members printed %q, want %q in it", r.stdout, want)
		}
	}
}
