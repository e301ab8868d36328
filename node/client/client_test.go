package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/shard"
)

// ring is the ring the nodes would build for tc's current members.
func ring(tc *testCluster, ns ...*testNode) *shard.Ring {
	names := make([]string, 0, len(ns))
	for _, n := range ns {
		names = append(names, n.name)
	}
	return shard.NewRing(names, testVnodes)
}

// takeAll empties every node's records, returning the keys by node name.
func takeAll(tc *testCluster) (keys map[string][]string, paths map[string]map[string]int) {
	keys, paths = map[string][]string{}, map[string]map[string]int{}
	for _, n := range tc.nodes {
		paths[n.name], keys[n.name] = n.take()
	}
	return keys, paths
}

func TestCheckGoesToOwner(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b", "node-c")
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	if got := len(c.Members()); got != 3 {
		t.Fatalf("Members: %d, want 3", got)
	}
	takeAll(tc) // the member fetch
	r := ring(tc, tc.nodes...)
	want := map[string]int{}
	for i := range 60 {
		key := fmt.Sprintf("user-%d", i)
		res, err := c.Check(ctx, "per-key", key, 1)
		if err != nil {
			t.Fatalf("Check(%s): %v", key, err)
		}
		if !res.Allowed || res.Rule != "per-key" || res.Key != key || res.Limit != 1000 || res.Remaining != 999 {
			t.Fatalf("Check(%s) = %+v", key, res)
		}
		want[r.Owner("per-key:"+key)]++
	}
	keys, _ := takeAll(tc)
	for _, n := range tc.nodes {
		if len(keys[n.name]) != want[n.name] {
			t.Errorf("%s got %d checks, want %d", n.name, len(keys[n.name]), want[n.name])
		}
		if want[n.name] == 0 {
			t.Errorf("%s owns none of 60 keys: the test proves little", n.name)
		}
		for _, k := range keys[n.name] {
			if o := r.Owner(k); o != n.name {
				t.Errorf("%s got %s, owned by %s", n.name, k, o)
			}
		}
	}
}

func TestCheckDecisions(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b")
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	// A peek charges nothing; the third hit of a limit of 2 is denied.
	for i, tt := range []struct {
		hits      int64
		allowed   bool
		remaining int64
	}{{0, true, 2}, {1, true, 1}, {1, true, 0}, {1, false, 0}} {
		res, err := c.Check(ctx, "tight", "k", tt.hits)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if res.Allowed != tt.allowed || res.Remaining != tt.remaining {
			t.Errorf("step %d: allowed=%v remaining=%d, want %v %d", i, res.Allowed, res.Remaining, tt.allowed, tt.remaining)
		}
		if !tt.allowed && res.RetryAfterMS <= 0 {
			t.Errorf("step %d: denial without retry_after_ms: %+v", i, res)
		}
	}
}

func TestCheckManyGroupsByOwnerInOrder(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b", "node-c")
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	takeAll(tc)
	r := ring(tc, tc.nodes...)
	var checks []api.CheckRequest
	for i := range 300 {
		checks = append(checks, api.CheckRequest{Rule: "per-key", Key: fmt.Sprintf("k%d", i), Hits: int64(i%3 + 1)})
	}
	// An invalid item and one for an unknown rule are answered in place.
	checks[7] = api.CheckRequest{Rule: "per-key", Key: ""}
	checks[11] = api.CheckRequest{Rule: "nope", Key: "x"}
	results := make([]api.CheckResult, len(checks))
	if err := c.CheckMany(ctx, checks, results); err != nil {
		t.Fatalf("CheckMany: %v", err)
	}
	for i, res := range results {
		switch i {
		case 7:
			if res.Field != "checks[7].key" || res.Error == "" {
				t.Errorf("item 7: %+v, want an error on checks[7].key", res)
			}
		case 11:
			if res.Field != "checks[11].rule" || !strings.Contains(res.Error, "unknown rule") {
				t.Errorf("item 11: %+v, want the node's unknown-rule error on checks[11].rule", res)
			}
		default:
			if res.Error != "" || !res.Allowed || res.Key != checks[i].Key || res.Remaining != 1000-checks[i].Hits {
				t.Errorf("item %d: %+v for %+v", i, res, checks[i])
			}
		}
	}
	keys, paths := takeAll(tc)
	for _, n := range tc.nodes {
		if paths[n.name]["/v1/checks"] != 1 || paths[n.name]["/v1/check"] != 0 {
			t.Errorf("%s: requests %v, want one /v1/checks", n.name, paths[n.name])
		}
		for _, k := range keys[n.name] {
			if o := r.Owner(k); o != n.name && k != "nope:x" {
				t.Errorf("%s got %s, owned by %s", n.name, k, o)
			}
		}
	}
}

func TestCheckManyChunks(t *testing.T) {
	tc := newCluster(t, "solo")
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	takeAll(tc)
	checks := make([]api.CheckRequest, 2*api.MaxBatch+5)
	for i := range checks {
		checks[i] = api.CheckRequest{Rule: "per-key", Key: fmt.Sprintf("k%d", i%500)}
	}
	results := make([]api.CheckResult, len(checks))
	if err := c.CheckMany(ctx, checks, results); err != nil {
		t.Fatalf("CheckMany: %v", err)
	}
	_, paths := takeAll(tc)
	if got := paths["solo"]["/v1/checks"]; got != 3 {
		t.Errorf("%d requests for %d checks, want 3", got, len(checks))
	}
	// Each key was checked 5 times (2005 = 4×500 + 5): every result is
	// a real, distinct decision.
	allowed := 0
	for i, res := range results {
		if res.Error != "" || res.Key != checks[i].Key {
			t.Fatalf("item %d: %+v", i, res)
		}
		if res.Allowed {
			allowed++
		}
	}
	if allowed != len(checks) {
		t.Errorf("allowed %d of %d", allowed, len(checks))
	}
}

func TestDeadNodeFallsBack(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b", "node-c")
	c := newClient(t, tc, func(cfg *client.Config) {
		cfg.Nodes = []string{tc.nodes[0].addr, tc.nodes[1].addr}
		cfg.DownBackoff = time.Hour // stays down for the whole test
	})
	ctx := testCtx(t)
	r := ring(tc, tc.nodes...)
	dead := tc.byName("node-c")
	dead.stop(t)
	takeAll(tc)
	var deadKeys []string
	for i := 0; len(deadKeys) < 20 && i < 10000; i++ {
		if k := fmt.Sprintf("u%d", i); r.Owner("per-key:"+k) == "node-c" {
			deadKeys = append(deadKeys, k)
		}
	}
	for _, k := range deadKeys {
		res, err := c.Check(ctx, "per-key", k, 1)
		if err != nil || !res.Allowed {
			t.Fatalf("Check(%s) with its owner dead: %+v, %v", k, res, err)
		}
	}
	checks := make([]api.CheckRequest, len(deadKeys))
	for i, k := range deadKeys {
		checks[i] = api.CheckRequest{Rule: "per-key", Key: k}
	}
	results := make([]api.CheckResult, len(checks))
	if err := c.CheckMany(ctx, checks, results); err != nil {
		t.Fatalf("CheckMany with the owner dead: %v", err)
	}
	for i, res := range results {
		if res.Error != "" || !res.Allowed {
			t.Errorf("item %d: %+v", i, res)
		}
	}
	keys, _ := takeAll(tc)
	if got := len(keys["node-a"]) + len(keys["node-b"]); got != 2*len(deadKeys) {
		t.Errorf("live nodes got %d checks, want %d: %v", got, 2*len(deadKeys), keys)
	}
}

func TestAllNodesDead(t *testing.T) {
	tc := newCluster(t, "node-a")
	c := newClient(t, tc, nil)
	tc.nodes[0].stop(t)
	_, err := c.Check(testCtx(t), "per-key", "k", 1)
	if !errors.Is(err, client.ErrNoNodes) {
		t.Fatalf("Check with no node alive: %v, want ErrNoNodes", err)
	}
	results := make([]api.CheckResult, 2)
	err = c.CheckMany(testCtx(t), []api.CheckRequest{{Rule: "per-key", Key: "a"}, {Rule: "per-key", Key: "b"}}, results)
	if !errors.Is(err, client.ErrNoNodes) || results[0].Error == "" || results[1].Error == "" {
		t.Fatalf("CheckMany with no node alive: %v, %+v", err, results)
	}
}

// A node that accepts connections but never answers costs one Timeout,
// then its keys go elsewhere.
func TestHungNodeTimesOut(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	accepted := make(chan struct{})
	go func() {
		defer close(accepted)
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, cn) // held open, never answered
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-accepted
		for _, cn := range conns {
			cn.Close()
		}
	})
	ms := []client.Member{
		{Name: "node-a", HTTPAddr: tc.nodes[0].addr, State: "alive"},
		{Name: "node-b", HTTPAddr: tc.nodes[1].addr, State: "alive"},
		{Name: "node-h", HTTPAddr: ln.Addr().String(), State: "alive"},
	}
	tc.setMemberList(ms)
	c := newClient(t, tc, func(cfg *client.Config) {
		cfg.Timeout = 50 * time.Millisecond
		cfg.DownBackoff = time.Hour
	})
	r := shard.NewRing([]string{"node-a", "node-b", "node-h"}, testVnodes)
	var k string
	for i := 0; ; i++ {
		if k = fmt.Sprintf("h%d", i); r.Owner("per-key:"+k) == "node-h" {
			break
		}
	}
	// The hung owner may have read the check: it is not sent again
	// elsewhere (it would be charged twice), the timeout is the answer.
	if res, err := c.Check(testCtx(t), "per-key", k, 1); err == nil {
		t.Fatalf("Check with a hung owner: %+v, want the timeout", res)
	}
	if keys, _ := takeAll(tc); len(keys["node-a"])+len(keys["node-b"]) != 0 {
		t.Errorf("the timed-out check was sent again: %v", keys)
	}
	// The owner is marked down: its keys go to the other nodes.
	for range 3 {
		res, err := c.Check(testCtx(t), "per-key", k, 1)
		if err != nil || !res.Allowed {
			t.Fatalf("Check with a hung owner marked down: %+v, %v", res, err)
		}
	}
}

// TestTimedOutCheckChargedOnce: a node that answers after the client's
// timeout may still decide (charge) the check, so the client returns the
// timeout instead of sending the check to another node, which would charge
// it a second time. Fails before: the check reached both nodes.
func TestTimedOutCheckChargedOnce(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b")
	c := newClient(t, tc, func(cfg *client.Config) {
		cfg.Timeout = 50 * time.Millisecond
		cfg.DownBackoff = time.Hour
	})
	gate := make(chan struct{})
	for _, n := range tc.nodes {
		n.gate.Store(&gate)
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(gate)
		}
	}
	t.Cleanup(release)
	takeAll(tc)
	_, err := c.Check(testCtx(t), "per-key", "slow", 1)
	release() // the late answer: the node decides now
	if err == nil {
		t.Fatal("Check answered although every node answers after the timeout")
	}
	keys, _ := takeAll(tc)
	if got := len(keys["node-a"]) + len(keys["node-b"]); got != 1 {
		t.Errorf("the check reached the nodes %d times, want once: %v", got, keys)
	}
}

func TestRefreshPicksUpChanges(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b", "node-c")
	a, b, cn := tc.byName("node-a"), tc.byName("node-b"), tc.byName("node-c")
	tc.setMembers(a, b)
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	names := func() []string {
		var out []string
		for _, m := range c.Members() {
			out = append(out, m.Name)
		}
		return out
	}
	if got := names(); !slices.Equal(got, []string{"node-a", "node-b"}) {
		t.Fatalf("Members: %v", got)
	}
	// node-c joins; a dead member is listed but owns nothing.
	tc.setMemberList([]client.Member{
		{Name: "node-a", HTTPAddr: a.addr, State: "alive"},
		{Name: "node-b", HTTPAddr: b.addr, State: "alive"},
		{Name: "node-c", HTTPAddr: cn.addr, State: "alive"},
		{Name: "node-d", HTTPAddr: "127.0.0.1:1", State: "dead"},
	})
	if err := c.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if got := names(); !slices.Equal(got, []string{"node-a", "node-b", "node-c", "node-d"}) {
		t.Fatalf("Members after Refresh: %v", got)
	}
	takeAll(tc)
	r := ring(tc, a, b, cn)
	for i := range 60 {
		if _, err := c.Check(ctx, "per-key", fmt.Sprintf("x%d", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	keys, _ := takeAll(tc)
	if len(keys["node-c"]) == 0 {
		t.Fatal("the new member got no checks")
	}
	for name, ks := range keys {
		for _, k := range ks {
			if r.Owner(k) != name {
				t.Errorf("%s got %s, owned by %s", name, k, r.Owner(k))
			}
		}
	}
}

func TestBackgroundRefresh(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b")
	tc.setMembers(tc.nodes[0])
	c := newClient(t, tc, func(cfg *client.Config) { cfg.RefreshInterval = 10 * time.Millisecond })
	tc.setMembers(tc.nodes...)
	// The refresh is a real ticker (every 10ms): wait for it.
	clocktest.EventuallyState(t, 10*time.Second, "the background refresh to pick up the new member", func() (bool, string) {
		ms := c.Members()
		return len(ms) == 2, fmt.Sprint(ms)
	})
}

func TestStandaloneNode(t *testing.T) {
	tc := newCluster(t, "a", "b")
	tc.standalone()
	// Through Seeds, the deprecated name of Nodes: it still works.
	c := newClient(t, tc, func(cfg *client.Config) { cfg.Nodes, cfg.Seeds = nil, []string{tc.nodes[0].addr, tc.nodes[1].addr} })
	ms := c.Members()
	if len(ms) != 2 || ms[0].HTTPAddr != tc.nodes[0].addr {
		t.Fatalf("Members of standalone seeds: %+v", ms)
	}
	takeAll(tc)
	for i := range 10 {
		if res, err := c.Check(testCtx(t), "per-key", fmt.Sprintf("k%d", i), 1); err != nil || !res.Allowed {
			t.Fatalf("Check: %+v, %v", res, err)
		}
	}
	_, paths := takeAll(tc)
	if paths["a"]["/v1/check"] != 5 || paths["b"]["/v1/check"] != 5 {
		t.Errorf("round-robin over seeds: %v", paths)
	}
}

func TestDescriptorsRoundRobin(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b", "node-c")
	c := newClient(t, tc, nil)
	takeAll(tc)
	ds := []api.Descriptor{{Name: "api_key", Value: "k1"}}
	for i := range 9 {
		res, err := c.CheckDescriptors(testCtx(t), ds, 1)
		if err != nil || !res.Allowed || res.Rule != "by-api-key" || res.Remaining != int64(999-i) {
			// Remaining counts down across nodes only if they share a
			// Store; here each node has its own, so check it loosely.
			if err != nil || !res.Allowed || res.Rule != "by-api-key" {
				t.Fatalf("CheckDescriptors: %+v, %v", res, err)
			}
		}
	}
	_, paths := takeAll(tc)
	for _, n := range tc.nodes {
		if got := paths[n.name]["/v1/check"]; got != 3 {
			t.Errorf("%s got %d descriptor checks, want 3 (round-robin)", n.name, got)
		}
	}
}

func TestAcquireRelease(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b", "node-c")
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	r := ring(tc, tc.nodes...)
	owner := tc.byName(r.Owner("uploads:user-42"))
	takeAll(tc)
	res, err := c.Acquire(ctx, "uploads", "user-42")
	if err != nil || !res.Allowed || res.LeaseID == "" {
		t.Fatalf("Acquire: %+v, %v", res, err)
	}
	// The limit is 1: a second acquire at the same owner is denied.
	if res2, err := c.Acquire(ctx, "uploads", "user-42"); err != nil || res2.Allowed {
		t.Fatalf("second Acquire: %+v, %v, want a denial", res2, err)
	}
	if err := c.Release(ctx, "", "", res.LeaseID); err != nil {
		t.Fatalf("Release: %v", err)
	}
	res3, err := c.Acquire(ctx, "uploads", "user-42")
	if err != nil || !res3.Allowed {
		t.Fatalf("Acquire after Release: %+v, %v", res3, err)
	}
	if err := c.Release(ctx, res3.Rule, res3.Key, res3.LeaseID); err != nil {
		t.Fatalf("Release with rule and key: %v", err)
	}
	_, paths := takeAll(tc)
	if p := paths[owner.name]; p["/v1/acquire"] != 3 || p["/v1/release"] != 2 {
		t.Errorf("owner %s saw %v, want 3 acquires and 2 releases", owner.name, p)
	}
	// A lease id of a rule that is not a concurrency rule is refused by
	// the node, naming the field.
	err = c.Release(ctx, "", "", "per-key~dXNlci00Mg~abc")
	var fe *api.FieldError
	if !errors.As(err, &fe) || fe.Field != "lease_id" {
		t.Fatalf("Release of a per-key lease id: %v, want a lease_id field error", err)
	}
}

func TestBadInput(t *testing.T) {
	tc := newCluster(t, "node-a")
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	long := strings.Repeat("x", 300)
	for _, tt := range []struct {
		name  string
		call  func() error
		field string
	}{
		{"empty rule", func() error { _, err := c.Check(ctx, "", "k", 1); return err }, "rule"},
		{"bad rule", func() error { _, err := c.Check(ctx, "a b", "k", 1); return err }, "rule"},
		{"empty key", func() error { _, err := c.Check(ctx, "per-key", "", 1); return err }, "key"},
		{"long key", func() error { _, err := c.Check(ctx, "per-key", long, 1); return err }, "key"},
		{"control key", func() error { _, err := c.Check(ctx, "per-key", "a\x01", 1); return err }, "key"},
		{"negative hits", func() error { _, err := c.Check(ctx, "per-key", "k", -1); return err }, "hits"},
		{"huge hits", func() error { _, err := c.Check(ctx, "per-key", "k", api.MaxHits+1); return err }, "hits"},
		{"no descriptors", func() error { _, err := c.CheckDescriptors(ctx, nil, 1); return err }, "rule"},
		{"dup descriptors", func() error {
			_, err := c.CheckDescriptors(ctx, []api.Descriptor{{Name: "a", Value: "1"}, {Name: "a", Value: "2"}}, 1)
			return err
		}, "descriptors.a"},
		{"acquire key", func() error { _, err := c.Acquire(ctx, "uploads", ""); return err }, "key"},
		{"empty lease id", func() error { return c.Release(ctx, "", "", "") }, "lease_id"},
		{"spaced lease id", func() error { return c.Release(ctx, "", "", "a b") }, "lease_id"},
		// Refused by the node, not the client: the field still surfaces.
		{"unknown rule", func() error { _, err := c.Check(ctx, "nope", "k", 1); return err }, "rule"},
		{"acquire on a bucket", func() error { _, err := c.Acquire(ctx, "per-key", "k"); return err }, "rule"},
		{"short results", func() error {
			return c.CheckMany(ctx, []api.CheckRequest{{Rule: "per-key", Key: "k"}}, nil)
		}, "results"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			var fe *api.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, api.ErrInvalid) {
				t.Fatalf("error %v (%T), want a *api.FieldError", err, err)
			}
			if fe.Field != tt.field {
				t.Errorf("field %q, want %q (%v)", fe.Field, tt.field, err)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tt := range []struct {
		cfg   client.Config
		field string
	}{
		{client.Config{}, "Nodes"},
		{client.Config{Nodes: []string{"nohost"}}, "Nodes[0]"},
		{client.Config{Nodes: []string{"http://127.0.0.1:1", "https://127.0.0.1:2"}}, "Nodes[1]"},
		{client.Config{Nodes: []string{"http://127.0.0.1:1"}, TLS: &tls.Config{}}, "Nodes[0]"},
		{client.Config{Nodes: []string{"127.0.0.1:1"}, Timeout: -1}, "Timeout"},
		{client.Config{Nodes: []string{"127.0.0.1:1"}, MaxAttempts: -1}, "MaxAttempts"},
		// Seeds, the deprecated name, is read when Nodes is empty.
		{client.Config{Seeds: []string{"nohost"}}, "Seeds[0]"},
	} {
		_, err := client.New(tt.cfg)
		if !errors.Is(err, client.ErrConfig) || !strings.Contains(err.Error(), tt.field+":") {
			t.Errorf("New(%+v): %v, want ErrConfig naming %s", tt.cfg, err, tt.field)
		}
	}
	// No seed answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if _, err := client.New(client.Config{Nodes: []string{addr}}); !errors.Is(err, client.ErrNoNodes) {
		t.Errorf("New with a dead node: %v, want ErrNoNodes", err)
	}
}

func TestClose(t *testing.T) {
	tc := newCluster(t, "node-a")
	c := newClient(t, tc, nil)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if _, err := c.Check(testCtx(t), "per-key", "k", 1); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Check after Close: %v, want ErrClosed", err)
	}
	if err := c.Refresh(testCtx(t)); !errors.Is(err, client.ErrClosed) {
		t.Errorf("Refresh after Close: %v, want ErrClosed", err)
	}
}

func TestParseMembers(t *testing.T) {
	for _, tt := range []struct {
		body, err string
	}{
		{`{"self":"a","ready":true,"vnodes":8192,"members":[{"name":"a","http_addr":"127.0.0.1:8080","gossip_addr":"127.0.0.1:7946","state":"alive"}]}`, ""},
		{`{"members":[{"name":"a"}],"extra":1}`, ""},
		{`{"members":[]}`, "members: required"},
		{`{"members":[{"name":""}]}`, "members[0].name: required"},
		{`{"members":[{"name":"a"},{"name":"a"}]}`, `members[1].name: "a" given twice`},
		{`{"members":[{"name":"a","http_addr":"nope"}]}`, "members[0].http_addr"},
		{`{"vnodes":-1,"members":[{"name":"a"}]}`, "vnodes"},
		{`{"members":[{"name":"a"}]} {}`, "data after"},
		{`[`, "cannot parse"},
		{`{"members":"x"}`, "cannot parse"},
	} {
		_, err := client.ParseMembers([]byte(tt.body))
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("ParseMembers(%s): %v", tt.body, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("ParseMembers(%s): %v, want %q", tt.body, err, tt.err)
		}
	}
}

// keysOwnedBy returns n keys of rule whose owner in r is owner.
func keysOwnedBy(r *shard.Ring, rule, owner string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		if k := fmt.Sprintf("b%d", i); r.Owner(rule+":"+k) == owner {
			out = append(out, k)
		}
	}
	return out
}

func TestCheckBatchedBySize(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b")
	// The window never ends: batches go only when full, so the count of
	// requests is exact.
	c := newClient(t, tc, func(cfg *client.Config) { cfg.BatchWindow = time.Hour; cfg.BatchSize = 5 })
	ctx := testCtx(t)
	takeAll(tc)
	r := ring(tc, tc.nodes...)
	keys := append(keysOwnedBy(r, "per-key", "node-a", 10), keysOwnedBy(r, "per-key", "node-b", 10)...)
	errs := make(chan error, len(keys))
	for _, k := range keys {
		go func() {
			res, err := c.Check(ctx, "per-key", k, 2)
			if err == nil && (!res.Allowed || res.Key != k || res.Remaining != 998) {
				err = fmt.Errorf("Check(%s) = %+v", k, res)
			}
			errs <- err
		}()
	}
	for range keys {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	got, paths := takeAll(tc)
	for _, n := range tc.nodes {
		if p := paths[n.name]; p["/v1/checks"] != 2 || p["/v1/check"] != 0 {
			t.Errorf("%s: %v, want two batches of 5", n.name, p)
		}
		for _, k := range got[n.name] {
			if r.Owner(k) != n.name {
				t.Errorf("%s got %s", n.name, k)
			}
		}
	}
}

func TestCheckBatchedByWindow(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b")
	c := newClient(t, tc, func(cfg *client.Config) { cfg.BatchWindow = time.Millisecond })
	ctx := testCtx(t)
	takeAll(tc)
	res, err := c.Check(ctx, "tight", "k", 1)
	if err != nil || !res.Allowed || res.Remaining != 1 {
		t.Fatalf("Check: %+v, %v", res, err)
	}
	// An item refused by the node comes back as the single check's field.
	_, err = c.Check(ctx, "nope", "k", 1)
	var fe *api.FieldError
	if !errors.As(err, &fe) || fe.Field != "rule" {
		t.Fatalf("Check of an unknown rule: %v, want a field error on rule", err)
	}
	_, paths := takeAll(tc)
	if n := paths["node-a"]["/v1/checks"] + paths["node-b"]["/v1/checks"]; n != 2 {
		t.Errorf("%d batches, want 2", n)
	}
}

func TestCheckBatchedCloseAndCancel(t *testing.T) {
	tc := newCluster(t, "node-a")
	c := newClient(t, tc, func(cfg *client.Config) { cfg.BatchWindow = time.Hour })
	// A caller that gives up leaves its check in the (hour-long) batch.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := c.Check(ctx, "per-key", "k", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Check past its deadline: %v", err)
	}
	// Close answers the open batch now: it would hang for an hour otherwise.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Check(context.Background(), "per-key", "k2", 1); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Check after Close: %v, want ErrClosed", err)
	}
}

func TestMemberWithoutAddressAndBadRefresh(t *testing.T) {
	tc := newCluster(t, "node-a", "node-b")
	a := tc.byName("node-a")
	// node-x owns keys but has no HTTP address: its keys go to a live node.
	tc.setMemberList([]client.Member{
		{Name: "node-a", HTTPAddr: a.addr, State: "alive"},
		{Name: "node-x", State: "alive"},
	})
	c := newClient(t, tc, nil)
	ctx := testCtx(t)
	r := shard.NewRing([]string{"node-a", "node-x"}, testVnodes)
	for _, k := range keysOwnedBy(r, "per-key", "node-x", 5) {
		if res, err := c.Check(ctx, "per-key", k, 1); err != nil || !res.Allowed {
			t.Fatalf("Check(%s) owned by an unreachable member: %+v, %v", k, res, err)
		}
	}
	// A bad member list is refused and the view kept.
	tc.mu.Lock()
	tc.mu.members = []byte(`{"members":[{"name":""}]}`)
	tc.mu.Unlock()
	if err := c.Refresh(ctx); err == nil || !strings.Contains(err.Error(), "members[0].name") {
		t.Fatalf("Refresh of a bad list: %v, want an error naming members[0].name", err)
	}
	if got := len(c.Members()); got != 2 {
		t.Errorf("Members after a failed Refresh: %d, want the 2 kept", got)
	}
}
