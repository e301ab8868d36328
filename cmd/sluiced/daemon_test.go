package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/member"
)

// daemonProc is a sluiced process started by a test.
type daemonProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	http   string // http://host:port
	gossip string // advertised gossip address
	exited chan error
	mu     sync.Mutex
	logs   strings.Builder
}

func (p *daemonProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// startDaemon runs bin with args and waits for its listen (and, when
// clustered, gossip) addresses in its log.
func startDaemon(t *testing.T, bin string, clustered bool, args ...string) *daemonProc {
	t.Helper()
	p := &daemonProc{t: t, cmd: exec.Command(bin, args...), exited: make(chan error, 1)}
	p.cmd.Env = append(os.Environ(), "SLUICE_LOG_LEVEL=info")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.cmd.Process.Kill() })
	listenRE := regexp.MustCompile(`msg=listening addr=(\S+)`)
	gossipRE := regexp.MustCompile(`msg="gossip started".* gossip=(\S+)`)
	addrs := make(chan [2]string, 2)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addrs <- [2]string{"http", m[1]}
			}
			if m := gossipRE.FindStringSubmatch(line); m != nil {
				addrs <- [2]string{"gossip", m[1]}
			}
		}
		p.exited <- p.cmd.Wait()
	}()
	deadline := time.After(30 * time.Second)
	for p.http == "" || (clustered && p.gossip == "") {
		select {
		case a := <-addrs:
			if a[0] == "http" {
				p.http = "http://" + a[1]
			} else {
				p.gossip = a[1]
			}
		case err := <-p.exited:
			t.Fatalf("sluiced exited early: %v\n%s", err, p.log())
		case <-deadline:
			t.Fatalf("no addresses logged:\n%s", p.log())
		}
	}
	return p
}

// term sends SIGTERM and waits for a clean exit.
func (p *daemonProc) term() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		if err != nil {
			p.t.Errorf("exit: %v\n%s", err, p.log())
		}
	case <-time.After(20 * time.Second):
		p.t.Fatalf("no exit after SIGTERM\n%s", p.log())
	}
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// buildSluiced builds the binary once per test run.
func buildSluiced(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sluiced-test")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "sluiced")
		if out, err := exec.Command("go", "build", "-o", buildBin, ".").CombinedOutput(); err != nil {
			buildErr = err
			buildBin = string(out)
		}
	})
	if buildErr != nil {
		t.Fatalf("go build: %v\n%s", buildErr, buildBin)
	}
	return buildBin
}

// TestMain removes the binary buildSluiced built (48 MB a run) when the
// tests end.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildBin != "" && buildErr == nil {
		os.RemoveAll(filepath.Dir(buildBin))
	}
	os.Exit(code)
}

// TestDaemonCluster runs two sluiced processes in one cluster (gossip
// encrypted with a cluster key): the second joins the first, both list
// each other in /v1/members, and a SIGTERM makes the second leave (the
// first reports it "left") and exit 0.
func TestDaemonCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	bin := buildSluiced(t)
	dir := t.TempDir()
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesPath, rulesV2)
	const key = "MDEyMzQ1Njc4OWFiY2RlZg==" // 16 bytes
	// A patient forward: each node has its own memory store, so a check
	// whose forward times out (seen under -race on a loaded machine) is
	// decided by its sender against its own count: 60 of 60 admitted.
	common := []string{"-listen", "127.0.0.1:0", "-rules", rulesPath, "-gossip", "127.0.0.1:0", "-cluster-key", key, "-forward-timeout", "10s"}
	a := startDaemon(t, bin, true, append(common, "-node-name", "a")...)
	b := startDaemon(t, bin, true, append(common, "-node-name", "b", "-join", a.gossip)...)

	members := func(p *daemonProc) map[string]string {
		res, err := http.Get(p.http + "/v1/members")
		if err != nil {
			return nil
		}
		defer res.Body.Close()
		var body struct {
			Ready   bool
			Members []struct{ Name, State string }
			Ring    []string
		}
		json.NewDecoder(res.Body).Decode(&body)
		out := map[string]string{}
		for _, m := range body.Members {
			out[m.Name] = m.State
		}
		out["ring"] = strings.Join(body.Ring, ",")
		return out
	}
	// Both see each other, and both route by a ring of both: membership's
	// view reaches the ring a moment later, and a node whose ring is still
	// itself alone decides every key against its own memory store (seen
	// under make race: 52 of 60 admitted).
	clocktest.Eventually(t, waitBound, "both nodes to see each other and route by both", func() bool {
		ma, mb := members(a), members(b)
		return ma["a"] == member.StateAlive && ma["b"] == member.StateAlive &&
			mb["a"] == member.StateAlive && mb["b"] == member.StateAlive &&
			ma["ring"] == "a,b" && mb["ring"] == "a,b"
	})
	for _, p := range []*daemonProc{a, b} {
		res, err := http.Get(p.http + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("/readyz: %d", res.StatusCode)
		}
	}
	// Checks through either node share one limit (limit 50, keys routed
	// to their owner): 60 checks of one key, alternating, admit 50.
	admitted := 0
	for i := range 60 {
		p := a
		if i%2 == 1 {
			p = b
		}
		res, err := http.Post(p.http+"/v1/check", "application/json", strings.NewReader(`{"rule":"per-key","key":"shared"}`))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode == 200 {
			admitted++
		}
	}
	if admitted != 50 {
		t.Errorf("admitted %d of 60 through two nodes, want 50", admitted)
	}
	// /metrics carries each component's metrics, from the sets the node
	// gives them (forward, hot) and the process's default one (lease),
	// each once. The key has one owner: only the other node forwards.
	var all string
	for _, p := range []*daemonProc{a, b} {
		res, err := http.Get(p.http + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		types := map[string]bool{}
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "# TYPE ") {
				if types[line] {
					t.Errorf("%s/metrics: %q twice", p.http, line)
				}
				types[line] = true
			}
		}
		for _, name := range []string{"sluice_checks_total{", "sluice_forward_served_items_total ", "sluice_forward_rejected_requests_total{",
			"sluice_hot_splits_active ", "sluice_hot_keys_tracked ", "sluice_lease_decisions_total{", "sluice_store_calls_total{", "sluice_store_breaker_state "} {
			if !strings.Contains(string(body), "\n"+name) {
				t.Errorf("%s/metrics lacks %s", p.http, name)
			}
		}
		all += string(body)
	}
	if !strings.Contains(all, "\nsluice_forward_items_total{peer=") {
		t.Error("neither node's /metrics has sluice_forward_items_total{peer=...}")
	}

	b.term()
	if l := b.log(); !strings.Contains(l, "left the cluster") || !strings.Contains(l, "msg=stopped") {
		t.Errorf("b's log lacks the leave and stop messages:\n%s", l)
	}
	clocktest.Eventually(t, waitBound, "a to see b left", func() bool { return members(a)["b"] == member.StateLeft })
	a.term()
}
