package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
)

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestOptionsPrecedence(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		env     map[string]string
		horizon time.Duration
		listen  string
	}{
		{"defaults", nil, nil, 100 * time.Millisecond, ":8080"},
		{"env", nil, map[string]string{"SLUICE_LEASE_HORIZON": "250ms", "SLUICE_LISTEN": "127.0.0.1:9"}, 250 * time.Millisecond, "127.0.0.1:9"},
		{"flag over env", []string{"-lease-horizon", "1s", "-listen=:1"}, map[string]string{"SLUICE_LEASE_HORIZON": "250ms", "SLUICE_LISTEN": "127.0.0.1:9"}, time.Second, ":1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o, err := parseOptions(c.args, env(c.env), io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			if o.leaseHorizon != c.horizon || o.listen != c.listen {
				t.Errorf("horizon %v listen %q, want %v %q", o.leaseHorizon, o.listen, c.horizon, c.listen)
			}
			if o.leaseIdle != 10*time.Second || o.storeTimeout != 50*time.Millisecond || o.rulesPoll != time.Second || o.gossip != ":7946" {
				t.Errorf("other defaults: %+v", o)
			}
		})
	}
}

// TestGCHeadroomOption: -gc-headroom's default, the environment, the flag
// over it.
func TestGCHeadroomOption(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want int
	}{
		{nil, nil, 25},
		{nil, map[string]string{"SLUICE_GC_HEADROOM": "50"}, 50},
		{[]string{"-gc-headroom", "100"}, map[string]string{"SLUICE_GC_HEADROOM": "50"}, 100},
		{[]string{"-gc-headroom=10"}, nil, 10},
	} {
		o, err := parseOptions(c.args, env(c.env), io.Discard)
		if err != nil || o.gcHeadroom != c.want {
			t.Errorf("%v %v: headroom %d, %v; want %d", c.args, c.env, o.gcHeadroom, err, c.want)
		}
	}
}

// TestLeaseKeepIdleOption: -lease-keep-idle's default, the environment,
// the flag over it, and 0 (none).
func TestLeaseKeepIdleOption(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want int
	}{
		{nil, nil, 100_000},
		{nil, map[string]string{"SLUICE_LEASE_KEEP_IDLE": "5000"}, 5000},
		{[]string{"-lease-keep-idle", "0"}, map[string]string{"SLUICE_LEASE_KEEP_IDLE": "5000"}, 0},
		{[]string{"-lease-keep-idle=10000000"}, nil, 10_000_000},
	} {
		o, err := parseOptions(c.args, env(c.env), io.Discard)
		if err != nil || o.leaseKeepIdle != c.want {
			t.Errorf("%v %v: keep %d, %v; want %d", c.args, c.env, o.leaseKeepIdle, err, c.want)
		}
	}
}

// TestLeaseAheadOption: -lease-ahead's default (half the lease TTL), the
// environment, the flag over it, and 0 (none).
func TestLeaseAheadOption(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want time.Duration
	}{
		{nil, nil, lease.DefaultConfig().LeaseTTL / 2},
		{nil, map[string]string{"SLUICE_LEASE_AHEAD": "30s"}, 30 * time.Second},
		{[]string{"-lease-ahead", "0"}, map[string]string{"SLUICE_LEASE_AHEAD": "30s"}, 0},
		{[]string{"-lease-ahead=24h"}, nil, 24 * time.Hour},
	} {
		o, err := parseOptions(c.args, env(c.env), io.Discard)
		if err != nil || o.leaseAhead != c.want {
			t.Errorf("%v %v: ahead %v, %v; want %v", c.args, c.env, o.leaseAhead, err, c.want)
		}
	}
}

// TestHotOptions: -hot-split (alone, =false, or SLUICE_HOT_SPLIT) and
// -hot-capacity-share, flags over the environment.
func TestHotOptions(t *testing.T) {
	cases := []struct {
		args  []string
		env   map[string]string
		split bool
		share float64
	}{
		{nil, nil, true, 0},
		{[]string{"-hot-split=false"}, nil, false, 0},
		{[]string{"-hot-split"}, map[string]string{"SLUICE_HOT_SPLIT": "false"}, true, 0},
		{nil, map[string]string{"SLUICE_HOT_SPLIT": "false", "SLUICE_HOT_CAPACITY_SHARE": "0.25"}, false, 0.25},
		{[]string{"-hot-capacity-share", "0.5"}, map[string]string{"SLUICE_HOT_CAPACITY_SHARE": "0.25"}, true, 0.5},
	}
	for _, c := range cases {
		o, err := parseOptions(c.args, env(c.env), io.Discard)
		if err != nil {
			t.Errorf("%v %v: %v", c.args, c.env, err)
			continue
		}
		if o.hotSplit != c.split || o.hotCapacityShare != c.share {
			t.Errorf("%v %v: split %v share %v, want %v %v", c.args, c.env, o.hotSplit, o.hotCapacityShare, c.split, c.share)
		}
	}
}

func TestOptionsInvalid(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want string // in the error
	}{
		{[]string{"-lease-horizon", "soon"}, nil, "-lease-horizon"},
		{[]string{"-store-timeout", "-5ms"}, nil, "-store-timeout"},
		{[]string{"-rules-poll", "0s"}, nil, "-rules-poll"},
		{[]string{"-lease-idle", "x"}, nil, "-lease-idle"},
		{[]string{"-log-level", "loud"}, nil, "-log-level"},
		{[]string{"-listen", "nohost"}, nil, "-listen"},
		{[]string{"-cluster-key", "c2hvcnQ="}, nil, "-cluster-key"},
		{[]string{"-join", "a:1,b"}, nil, "-join"},
		{[]string{"-gossip-advertise", "nohost"}, nil, "-gossip-advertise"},
		{[]string{"-gossip", "256.0.0.1:7946"}, nil, "-gossip"},
		{[]string{"-gossip", "example.com:7946"}, nil, "-gossip"},
		{[]string{"-nope"}, nil, "-nope"},
		{[]string{"extra"}, nil, "extra"},
		{nil, map[string]string{"SLUICE_LEASE_HORIZON": "soon"}, "SLUICE_LEASE_HORIZON"},
		{nil, map[string]string{"SLUICE_CLUSTER_KEY": "!!"}, "SLUICE_CLUSTER_KEY"},
		{[]string{"-hot-split=maybe"}, nil, "-hot-split"},
		{[]string{"-hot-capacity-share", "1.5"}, nil, "-hot-capacity-share"},
		{[]string{"-hot-capacity-share", "-0.1"}, nil, "-hot-capacity-share"},
		{nil, map[string]string{"SLUICE_HOT_CAPACITY_SHARE": "NaN"}, "SLUICE_HOT_CAPACITY_SHARE"},
		{nil, map[string]string{"SLUICE_HOT_SPLIT": "no way"}, "SLUICE_HOT_SPLIT"},
		{[]string{"-gc-headroom", "5"}, nil, "-gc-headroom"},
		{[]string{"-gc-headroom", "101"}, nil, "-gc-headroom"},
		{nil, map[string]string{"SLUICE_GC_HEADROOM": "25%"}, "SLUICE_GC_HEADROOM"},
		{[]string{"-lease-keep-idle", "-1"}, nil, "-lease-keep-idle"},
		{[]string{"-lease-ahead", "-1s"}, nil, "-lease-ahead"},
		{[]string{"-lease-ahead", "25h"}, nil, "-lease-ahead"},
		{[]string{"-lease-keep-idle", "10000001"}, nil, "-lease-keep-idle"},
		{nil, map[string]string{"SLUICE_LEASE_KEEP_IDLE": "1e5"}, "SLUICE_LEASE_KEEP_IDLE"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		code := run(c.args, env(c.env), &out)
		if code != 2 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v %v: exit %d, output %q; want 2 naming %s", c.args, c.env, code, out.String(), c.want)
		}
	}
}

func TestHelp(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-h"}, env(nil), &out); code != 0 {
		t.Errorf("-h: exit %d", code)
	}
	for _, want := range []string{"-listen", "SLUICE_LISTEN", "SLUICE_RULES", "SLUICE_REDIS", "SLUICE_JOIN", "SLUICE_NODE_NAME",
		"SLUICE_GOSSIP", "SLUICE_GOSSIP_ADVERTISE", "SLUICE_CLUSTER_KEY", "SLUICE_ADMIN_TOKEN", "SLUICE_LEASE_HORIZON", "SLUICE_LOG_LEVEL",
		"SLUICE_LEASE_IDLE", "SLUICE_STORE_TIMEOUT", "SLUICE_RULES_POLL", "-hot-split", "SLUICE_HOT_SPLIT",
		"-hot-capacity-share", "SLUICE_HOT_CAPACITY_SHARE", "SLUICE_INSECURE_CLUSTER", "SLUICE_METRICS_TOKEN", "SLUICE_TLS_CERT", "SLUICE_TLS_KEY", "SLUICE_TLS_CA", "SLUICE_INTERNAL_WINDOW", "-gc-headroom", "SLUICE_GC_HEADROOM"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h lacks %s", want)
		}
	}
}

func TestStartFailures(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - name: x\n    algorithm: token_bucket\n    limit: 0\n    period: 1s\n"), 0o600)
	empty := filepath.Join(dir, "empty.yaml")
	os.WriteFile(empty, []byte("# nothing yet\n"), 0o600)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-rules", bad, "-listen", "127.0.0.1:0"}, "limit"},
		{[]string{"-rules", empty, "-listen", "127.0.0.1:0"}, "rules: []"},
		{[]string{"-rules", filepath.Join(dir, "missing.yaml"), "-listen", "127.0.0.1:0"}, "missing.yaml"},
		// Nothing listens on port 1: the node refuses to start rather than
		// run on a Store it never reached.
		{[]string{"-redis", "127.0.0.1:1", "-listen", "127.0.0.1:0"}, "cannot connect to Redis"},
		{[]string{"-redis", "sentinel://", "-listen", "127.0.0.1:0"}, "-redis"},
	}
	for _, c := range cases {
		var out bytes.Buffer
		if code := run(c.args, env(nil), &out); code != 1 || !strings.Contains(out.String(), c.want) {
			t.Errorf("%v: exit %d, output %q; want 1 mentioning %q", c.args, code, out.String(), c.want)
		}
	}
}

const rulesV1 = `rules:
  - name: per-key
    algorithm: token_bucket
    limit: 2
    period: 1h
`

const rulesV2 = `rules:
  - name: per-key
    algorithm: token_bucket
    limit: 50
    period: 1h
`

// TestDaemon builds sluiced, runs it on a free port with a rule file,
// reloads the file, breaks it, and stops the daemon with SIGTERM.
func TestDaemon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the binary")
	}
	dir := t.TempDir()
	bin := buildSluiced(t)
	rulesPath := filepath.Join(dir, "rules.yaml")
	writeFile(t, rulesPath, rulesV1)

	cmd := exec.Command(bin, "-listen", "127.0.0.1:0", "-rules", rulesPath, "-rules-poll", "20ms")
	cmd.Env = append(os.Environ(), "SLUICE_LOG_LEVEL=debug")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var logs bytes.Buffer
	addrc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		re := regexp.MustCompile(`msg=listening addr=(\S+)`)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addrc <- m[1]
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() { cmd.Process.Kill() })
	var base string
	select {
	case a := <-addrc:
		base = "http://" + a
	case err := <-exited:
		t.Fatalf("sluiced exited early: %v\n%s", err, logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("no listen address logged")
	}

	check := func(key string) (int, map[string]any) {
		t.Helper()
		res, err := http.Post(base+"/v1/check", "application/json", strings.NewReader(`{"rule":"per-key","key":"`+key+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		json.NewDecoder(res.Body).Decode(&m)
		return res.StatusCode, m
	}
	for i, want := range []int{200, 200, 429} {
		if code, m := check("a"); code != want {
			t.Fatalf("check %d: %d %v, want %d", i, code, m, want)
		}
	}

	// A new limit is picked up by polling.
	writeFile(t, rulesPath, rulesV2)
	clocktest.Eventually(t, waitBound, "the new limit", func() bool {
		_, m := check("probe")
		return m["limit"] == float64(50)
	})

	// A bad file is refused, shown in /readyz, and the last good set stays.
	writeFile(t, rulesPath, "rules:\n  - name: per-key\n    algorithm: nope\n")
	clocktest.Eventually(t, waitBound, "/readyz to report the error", func() bool {
		res, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		defer res.Body.Close()
		var m map[string]any
		json.NewDecoder(res.Body).Decode(&m)
		e, _ := m["last_reload_error"].(string)
		return res.StatusCode == 200 && strings.Contains(e, "algorithm")
	})
	if _, m := check("probe2"); m["limit"] != float64(50) {
		t.Errorf("after a bad reload: %v, want the last good limit 50", m)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit: %v\n%s", err, logs.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no exit after SIGTERM\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "msg=stopped") {
		t.Errorf("logs lack the stop message:\n%s", logs.String())
	}
}

func writeFile(t *testing.T, path, s string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// waitBound bounds the tests' waits for a daemon or a cluster to get
// somewhere: a bound for a hung test, not a timing assertion.
const waitBound = 20 * time.Second

func TestClusteredOption(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{[]string{"-join", "127.0.0.1:7946", "-insecure-cluster"}, nil, true},
		{[]string{"-gossip", ":7946", "-cluster-key", testClusterKey}, nil, true}, // explicit, even if the default value
		{nil, map[string]string{"SLUICE_GOSSIP": "127.0.0.1:7000", "SLUICE_INSECURE_CLUSTER": "true"}, true},
		{nil, map[string]string{"SLUICE_JOIN": "a:1, b:2", "SLUICE_CLUSTER_KEY": testClusterKey}, true},
		{[]string{"-cluster-key", "MDEyMzQ1Njc4OWFiY2RlZg=="}, nil, false}, // a key alone does not cluster
	}
	for _, c := range cases {
		o, err := parseOptions(c.args, env(c.env), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if o.clustered() != c.want {
			t.Errorf("%v %v: clustered %v, want %v", c.args, c.env, o.clustered(), c.want)
		}
	}
}

// TestSecretsNotEchoed: a bad cluster key or admin token is refused with a
// message naming the setting but never containing the value itself.
func TestSecretsNotEchoed(t *testing.T) {
	const secret = "c2VjcmV0LXRoYXQtaXMtYWxtb3N0LXJpZ2h0" // base64 of 27 bytes: a wrong key size
	cases := []struct {
		args []string
		env  map[string]string
		name string
	}{
		{nil, map[string]string{"SLUICE_CLUSTER_KEY": secret}, "SLUICE_CLUSTER_KEY"},
		{[]string{"-cluster-key", secret}, nil, "cluster-key"},
		{[]string{"--cluster-key=" + secret}, nil, "cluster-key"},
	}
	for _, c := range cases {
		_, err := parseOptions(c.args, env(c.env), io.Discard)
		if err == nil {
			t.Fatalf("%v %v: accepted a %d-byte key", c.args, c.env, 27)
		}
		if strings.Contains(err.Error(), secret) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%v %v: %q — want the setting named and the value redacted", c.args, c.env, err)
		}
	}
	// Other settings still show the bad value, which helps the operator.
	if _, err := parseOptions([]string{"-listen", "nope"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("-listen nope: %v", err)
	}
}
