package main

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// TestKeylessClusterRefused: a node asked to form or join a cluster
// without a cluster key refuses to start (exit 2, a message naming both
// ways out) instead of running an open cluster.
func TestKeylessClusterRefused(t *testing.T) {
	cases := []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"-listen", "127.0.0.1:0", "-gossip", "127.0.0.1:0"}, nil},
		{[]string{"-listen", "127.0.0.1:0", "-join", "127.0.0.1:7946"}, nil},
		{[]string{"-listen", "127.0.0.1:0"}, map[string]string{"SLUICE_JOIN": "127.0.0.1:7946"}},
		{[]string{"-listen", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-insecure-cluster=false"}, map[string]string{"SLUICE_INSECURE_CLUSTER": "true"}},
	}
	for _, c := range cases {
		var out bytes.Buffer
		code := run(c.args, env(c.env), &out)
		msg := out.String()
		if code != 2 || !strings.Contains(msg, "refusing to form or join a cluster without a cluster key") ||
			!strings.Contains(msg, "SLUICE_CLUSTER_KEY") || !strings.Contains(msg, "SLUICE_INSECURE_CLUSTER=true") {
			t.Errorf("%v %v: exit %d, output %q; want 2 and the refusal", c.args, c.env, code, msg)
		}
	}
	// start refuses too, whoever built the options.
	o, err := parseOptions([]string{"-listen", "127.0.0.1:0"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o.gossip, o.gossipSet = "127.0.0.1:0", true
	if d, err := start(o, slog.New(slog.DiscardHandler), hooks{}); !errors.Is(err, errNoClusterKey) {
		if d != nil {
			d.stop(false)
		}
		t.Fatalf("start without a key: %v, want errNoClusterKey", err)
	}
	// A key alone, or no cluster at all, is fine.
	for _, args := range [][]string{nil, {"-cluster-key", testClusterKey}, {"-insecure-cluster"}} {
		if _, err := parseOptions(args, env(nil), io.Discard); err != nil {
			t.Errorf("%v: %v", args, err)
		}
	}
}

// TestInsecureClusterWarns: -insecure-cluster starts a keyless member,
// with a warning at start.
func TestInsecureClusterWarns(t *testing.T) {
	o, err := parseOptions([]string{"-listen", "127.0.0.1:0", "-gossip", "127.0.0.1:0", "-insecure-cluster"}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	d, err := start(o, slog.New(slog.NewTextHandler(&logs, nil)), hooks{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop(false)
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "insecure cluster") {
		t.Errorf("no warning at start:\n%s", logs.String())
	}
}

// TestKeyedClusterRefusesOutsiders: a node without the cluster key (run
// with -insecure-cluster) or with another key cannot join a keyed
// cluster, and the cluster never lists it.
func TestKeyedClusterRefusesOutsiders(t *testing.T) {
	tc := newTestCluster(t, clusterRules)
	a := tc.start("a")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"keyless", []string{"-cluster-key=", "-insecure-cluster"}},
		{"other-key", []string{"-cluster-key", "MTIzNDU2Nzg5MGFiY2RlZg=="}},
	} {
		tc.args = c.args
		x := tc.start(c.name, a) // tries to join a in the background
		tc.args = nil
		n, err := x.d.cluster.Join([]string{a.gossip})
		if n != 0 || err == nil {
			t.Errorf("%s: Join = %d, %v; want 0 and an error", c.name, n, err)
		}
		if x.d.cluster.Ready() {
			t.Errorf("%s: ready although the seed refused it", c.name)
		}
		tc.kill(x)
	}
	var names []string
	for _, m := range a.d.cluster.Members() {
		names = append(names, m.Name)
	}
	if !slices.Equal(names, []string{"a"}) {
		t.Errorf("a lists %v, want only itself", names)
	}
}
