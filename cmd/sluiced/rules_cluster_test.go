package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/member/netsim"
)

// Rules at runtime on three nodes sharing one real Redis, no -rules: the
// rules live in Redis, a write on one node is broadcast by gossip, and a
// node that missed the broadcast catches up by polling the version.

// newRulesCluster is a test cluster whose nodes take their rules from
// Redis, polling its version every poll.
func newRulesCluster(t *testing.T, poll string) *testCluster {
	tc := newTestCluster(t, clusterRules)
	tc.rules = "" // no -rules: the rules live in Redis
	tc.args = []string{"-rules-poll", poll}
	return tc
}

// admin sends an admin request to n and returns the status and body.
func (tc *testCluster) admin(n *testNode, method, path, body string) (int, string) {
	tc.t.Helper()
	req, err := http.NewRequest(method, n.base+path, strings.NewReader(body))
	if err != nil {
		tc.t.Fatal(err)
	}
	res, err := tc.http.Do(req)
	if err != nil {
		tc.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// checkRule sends one check of rule and key to n; it returns the status.
func (tc *testCluster) checkRule(n *testNode, rule, key string) int {
	res, err := tc.http.Post(n.base+"/v1/check", "application/json",
		strings.NewReader(`{"rule":"`+rule+`","key":"`+key+`"}`))
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// version is the rule version n has installed.
func version(n *testNode) uint64 {
	v, _ := n.d.node.RulesVersion()
	return v
}

// waitVersion waits until every node has installed version v and returns
// how long that took from start, to the resolution of clocktest's polls
// (at most 50ms): the time is reported, never asserted beyond waitBound.
func waitVersion(t *testing.T, v uint64, start time.Time, nodes ...*testNode) time.Duration {
	t.Helper()
	var took time.Duration
	clocktest.EventuallyState(t, waitBound, fmt.Sprintf("version %d everywhere", v), func() (bool, string) {
		var state []string
		for _, n := range nodes {
			if got := version(n); got != v {
				state = append(state, fmt.Sprintf("%s: version %d", n.name, got))
			}
		}
		took = time.Since(start)
		return len(state) == 0, strings.Join(state, ", ")
	})
	return took
}

type change struct {
	Version uint64 `json:"version"`
}

func parseChange(t *testing.T, status int, body string) uint64 {
	t.Helper()
	var c change
	if status != 200 || json.Unmarshal([]byte(body), &c) != nil || c.Version == 0 {
		t.Fatalf("write answered %d %s", status, body)
	}
	return c.Version
}

// TestClusterRulesPropagation: a rule PUT on one node is enforced on all
// three (pushed by gossip: the nodes poll only once an hour), DELETE
// likewise, and a node restarted after a change has the rule before it
// serves. The propagation times are logged (go test -v).
func TestClusterRulesPropagation(t *testing.T) {
	tc := newRulesCluster(t, "1h")
	a, b, c := tc.startThree()
	all := []*testNode{a, b, c}

	if status, body := tc.admin(a, "GET", "/v1/rules", ""); status != 200 || !strings.Contains(body, `"source":"store"`) {
		t.Fatalf("GET /v1/rules = %d %s", status, body)
	}

	// PUT on a: every node installs the new version, pushed by gossip.
	start := time.Now()
	status, body := tc.admin(a, "PUT", "/v1/rules/burst", `{"algorithm":"fixed_window","limit":2,"period":"24h"}`)
	v := parseChange(t, status, body)
	took := waitVersion(t, v, start, all...)
	t.Logf("PUT on node-a: version %d installed on all three nodes %v after the request was sent", v, took)
	// Enforced on each: 2 allowed, then denied, whichever node owns the key.
	for _, n := range all {
		key := "k-" + n.name
		if got := []int{tc.checkRule(n, "burst", key), tc.checkRule(n, "burst", key), tc.checkRule(n, "burst", key)}; got[0] != 200 || got[1] != 200 || got[2] != 429 {
			t.Errorf("%s: burst answers %v, want [200 200 429]", n.name, got)
		}
	}

	// DELETE on b: gone everywhere.
	start = time.Now()
	status, body = tc.admin(b, "DELETE", "/v1/rules/burst", "")
	v = parseChange(t, status, body)
	took = waitVersion(t, v, start, all...)
	t.Logf("DELETE on node-b: version %d installed on all three nodes %v after the request was sent", v, took)
	for _, n := range all {
		if got := tc.checkRule(n, "burst", "k"); got != 400 {
			t.Errorf("%s: a deleted rule answers %d, want 400", n.name, got)
		}
	}

	// A node restarted after a change has the rule when start returns
	// (before it serves, so before it reports ready).
	tc.kill(c)
	status, body = tc.admin(a, "PUT", "/v1/rules/later", `{"algorithm":"gcra","limit":1,"period":"24h"}`)
	v = parseChange(t, status, body)
	c2 := tc.start("node-c", a, b)
	if got := version(c2); got != v {
		t.Errorf("restarted node: version %d, want %d", got, v)
	}
	if status, body := tc.admin(c2, "GET", "/v1/rules/later", ""); status != 200 {
		t.Errorf("restarted node: GET /v1/rules/later = %d %s", status, body)
	}
}

// TestClusterRulesMissedBroadcast: a node cut off from the others' gossip
// (netsim partition: the broadcast is dropped) while a rule changes gets
// the new version from its poll of Redis, while still cut off.
func TestClusterRulesMissedBroadcast(t *testing.T) {
	tc := newRulesCluster(t, "1h")
	a := tc.start("node-a")
	b := tc.start("node-b", a)
	tc.args = []string{"-rules-poll", "100ms"} // only c polls often
	c := tc.start("node-c", a, b)
	tc.converge("node-a,node-b,node-c", a, b, c)

	netsim.Partition([]*netsim.FilterTransport{c.ft}, []*netsim.FilterTransport{a.ft, b.ft})
	start := time.Now()
	status, body := tc.admin(a, "PUT", "/v1/rules/burst", `{"algorithm":"fixed_window","limit":1,"period":"24h"}`)
	v := parseChange(t, status, body)
	took := waitVersion(t, v, start, a, b, c)
	t.Logf("missed broadcast: node-c installed version %d by polling %v after the request was sent", v, took)
	if !c.ft.Blocked(a.gossip) || !c.ft.Blocked(b.gossip) {
		t.Fatal("node-c was not cut off")
	}
	if got := []int{tc.checkRule(c, "burst", "x"), tc.checkRule(c, "burst", "x")}; got[0] != 200 || got[1] != 429 {
		t.Errorf("node-c: burst answers %v, want [200 429]", got)
	}
	netsim.Heal([]*netsim.FilterTransport{c.ft}, []*netsim.FilterTransport{a.ft, b.ft})
}
