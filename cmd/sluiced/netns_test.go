//go:build netns

package main

// The partition table of docs/faults.md, run by `make faults`:
//
//	go test -tags netns -count=1 -timeout 20m -v -run '^TestNetns$' ./cmd/sluiced/
//
// Three sluiced processes, Redis and a load client, each in its own
// network namespace on one bridge (netns_lab_test.go); a node cut off with
// iptables for 15 s under a paced load (netns_client_test.go: for each of
// six rules, fixed_window and token_bucket × on_store_failure local, open,
// closed, limit 1000/h, one key at 100/s and 100 keys at 1/s, offered
// evenly to the three nodes); then a checker over every answer. Each row
// prints "partition row: | … |". SLUICE_NETNS_ROWS (a comma list of row
// names) runs some rows; SLUICE_NETNS_SLUICED runs a prebuilt sluiced.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	nsLimit    = 1000
	nsPeriod   = time.Hour
	nsWarm     = 4 * time.Second
	nsCut      = 15 * time.Second
	nsAfter    = 6 * time.Second
	nsToken    = "netns-admin-token"
	nsKey      = "MDEyMzQ1Njc4OWFiY2RlZg=="
	nsReadyMax = 2 * time.Second
)

var nsRules = []string{"fw-local", "fw-open", "fw-closed", "tb-local", "tb-open", "tb-closed"}

func nsRulesYAML() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for _, r := range nsRules {
		alg := map[byte]string{'f': "fixed_window", 't': "token_bucket"}[r[0]]
		fmt.Fprintf(&b, "  - name: %s\n    algorithm: %s\n    limit: %d\n    period: 1h\n    on_store_failure: %s\n", r, alg, nsLimit, r[3:])
	}
	return b.String()
}

const nsSprayRules = "rules:\n  - name: spray\n    algorithm: fixed_window\n    limit: 100\n    period: 1h\n"

// nsRow is one row of the table.
type nsRow struct {
	name  string
	redis bool
	// fault starts the fault; it returns when the fault is made (a cut) or
	// over (a stall).
	fault func(t *testing.T, l *lab, nodes []*daemonProc)
	// cut is the node cut off from the others (its readiness is checked),
	// -1 for none; sides are the nodes whose /v1/stats must say partial.
	cut      int
	sides    []int
	spray    bool
	storeCut bool // the fault cuts a node from the Store
}

func cutNode(t *testing.T, l *lab, _ []*daemonProc) {
	l.drop(t, "n3", "n1", "n2")
	l.drop(t, "n1", "n3")
	l.drop(t, "n2", "n3")
}

func nsRows() []nsRow {
	asym := func(t *testing.T, l *lab, _ []*daemonProc) { l.drop(t, "n1", "n3") }
	return []nsRow{
		{name: "node-cut/redis", redis: true, fault: cutNode, cut: 2, sides: []int{2, 0}},
		{name: "redis-cut/redis", redis: true, cut: -1, storeCut: true, fault: func(t *testing.T, l *lab, _ []*daemonProc) {
			l.drop(t, "n3", "redis")
			l.drop(t, "redis", "n3")
		}},
		{name: "node-isolated/memory", fault: cutNode, cut: 2, sides: []int{2, 0}},
		{name: "asymmetric/redis", redis: true, fault: asym, cut: -1, sides: []int{0, 2}},
		{name: "asymmetric/memory", fault: asym, cut: -1, sides: []int{0, 2}},
		{name: "stall-150ms/redis", redis: true, cut: -1, fault: func(t *testing.T, _ *lab, nodes []*daemonProc) {
			for end := time.Now().Add(nsCut); time.Now().Before(end); {
				_ = nodes[2].cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(150 * time.Millisecond) // the stall: a real process stopped this long
				_ = nodes[2].cmd.Process.Signal(syscall.SIGCONT)
				time.Sleep(850 * time.Millisecond)
			}
		}},
		{name: "spray-noisy/redis", redis: true, cut: -1, spray: true},
		{name: "spray-noisy-2/redis", redis: true, cut: -1, spray: true},
	}
}

func TestNetns(t *testing.T) {
	l := newLab(t)
	bin := os.Getenv("SLUICE_NETNS_SLUICED")
	if bin == "" {
		bin = buildSluiced(t)
	}
	want := os.Getenv("SLUICE_NETNS_ROWS")
	for _, row := range nsRows() {
		if want != "" && !slices.Contains(strings.Split(want, ","), row.name) {
			continue
		}
		t.Run(strings.ReplaceAll(row.name, "/", "-"), func(t *testing.T) { runNsRow(t, l, bin, row) })
	}
}

func runNsRow(t *testing.T, l *lab, bin string, row nsRow) {
	dir := t.TempDir()
	rules := filepath.Join(dir, "rules.yaml")
	if row.spray {
		writeFile(t, rules, nsSprayRules)
	} else {
		writeFile(t, rules, nsRulesYAML())
	}
	var redisArgs []string
	if row.redis {
		startNsRedis(t, l)
		redisArgs = []string{"-redis", l.ip["redis"] + ":6379"}
	}
	var nodes []*daemonProc
	var bases []string
	for _, role := range []string{"n1", "n2", "n3"} {
		args := append(l.cmd(role, bin, "-listen", l.ip[role]+":8080", "-gossip", l.ip[role]+":7946",
			"-join", l.ip["n1"]+":7946", "-rules", rules, "-node-name", role,
			"-cluster-key", nsKey, "-admin-token", nsToken), redisArgs...)
		p := startDaemon(t, args[0], true, args[1:]...)
		t.Cleanup(func() { killNsNode(t, p) })
		nodes = append(nodes, p)
		bases = append(bases, "http://"+l.ip[role]+":8080")
	}
	cfg := nsConfig{Nodes: bases, Rules: nsRules, Prefix: fmt.Sprintf("r%d-", time.Now().UnixNano()%1e6),
		HotRate: 100, ColdKeys: 100, Length: nsWarm + nsCut + nsAfter, Token: nsToken,
		Out: filepath.Join(dir, "result.json"), ReadyEvery: 100 * time.Millisecond, StatsEvery: 500 * time.Millisecond,
		WaitMembers: 60 * time.Second, MaxDuration: 3 * time.Minute}
	if row.spray {
		cfg.Rules, cfg.Spray, cfg.SprayWorkers, cfg.SprayKeys, cfg.SprayChecks = []string{"spray"}, true, 32, 100, 30000
	}
	cfgPath := filepath.Join(dir, "client.json")
	b, _ := json.Marshal(cfg)
	writeFile(t, cfgPath, string(b))
	exe, _ := os.Executable()
	cargs := l.cmd("client", exe, "-test.run", "^TestNetnsClient$", "-test.count=1")
	client := exec.Command(cargs[0], cargs[1:]...)
	client.Env = append(os.Environ(), "SLUICE_NETNS_CLIENT="+cfgPath)
	client.Stderr = os.Stderr
	out, err := client.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Process.Kill() })
	started := make(chan int64, 1)
	var clientOut strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ns int64
			if _, err := fmt.Sscanf(sc.Text(), "LOAD-START %d", &ns); err == nil {
				started <- ns
			}
			clientOut.WriteString(sc.Text() + "\n")
		}
	}()
	var start int64
	select {
	case start = <-started:
	case <-time.After(90 * time.Second):
		t.Fatalf("the client did not start its load")
	}
	var cut, heal time.Time
	burn := make(chan struct{})
	if row.spray {
		for range 2 { // the noisy neighbour: two CPU burners beside the cluster
			go func() {
				for end := time.Now().Add(3 * time.Minute); time.Now().Before(end); {
					select {
					case <-burn:
						return
					default:
					}
				}
			}()
		}
	} else {
		time.Sleep(time.Until(time.Unix(0, start).Add(nsWarm))) // the baseline before the fault (real time)
		cut = time.Now()
		row.fault(t, l, nodes)
		time.Sleep(time.Until(cut.Add(nsCut))) // the fault lasts this long (real time)
		heal = time.Now()
		l.heal(t)
	}
	werr := client.Wait()
	close(burn)
	if werr != nil {
		t.Fatalf("client: %v\n%s", werr, clientOut.String())
	}
	var res nsResult
	rb, err := os.ReadFile(cfg.Out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rb, &res); err != nil {
		t.Fatal(err)
	}
	nsCheck(t, row, &cfg, &res, cut, heal, nodes)
}

// killNsNode kills a row's node and waits until it is gone: the next row
// listens on the same addresses in the same namespaces (a node still
// exiting failed the next row's start with "address already in use").
func killNsNode(t *testing.T, p *daemonProc) {
	_ = p.cmd.Process.Kill()
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		t.Errorf("sluiced (pid %d) still running 30 s after SIGKILL", p.cmd.Process.Pid)
	}
}

// startNsRedis starts redis-server in the lab's redis namespace.
func startNsRedis(t *testing.T, l *lab) {
	t.Helper()
	args := l.cmd("redis", "redis-server", "--bind", l.ip["redis"], "--port", "6379", "--save", "", "--appendonly", "no", "--protected-mode", "no")
	cmd := exec.Command(args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	for deadline := time.Now().Add(10 * time.Second); ; {
		out, _ := exec.Command("ip", "netns", "exec", l.ns["redis"], "redis-cli", "-h", l.ip["redis"], "ping").Output()
		if strings.TrimSpace(string(out)) == "PONG" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not answer")
		}
		time.Sleep(50 * time.Millisecond) // polling a real process
	}
}
