package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua/redistest"
)

// The Redis keys of the rule set (lua.Store.RulesKeys with the default
// prefix), written here as an attacker with Redis access would.
const (
	rulesSetKey = "{sl:rules}:set"
	rulesVerKey = "{sl:rules}:version"
	rulesSigKey = "{sl:rules}:sig"
)

func redisClient(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func redisDo(t *testing.T, c rueidis.Client, args ...string) {
	t.Helper()
	if err := c.Do(context.Background(), c.B().Arbitrary(args...).Build()).Error(); err != nil {
		t.Fatalf("redis %v: %v", args, err)
	}
}

// readyz returns /readyz's last reload error.
func readyzError(t *testing.T, base string) string {
	t.Helper()
	_, _, body := adminDo(t, "GET", base+"/readyz", "", "")
	var m struct {
		LastReloadError string `json:"last_reload_error"`
	}
	json.Unmarshal([]byte(body), &m)
	return m.LastReloadError
}

// waitRefusedOrInstalled waits until the node at base either reports
// that it refused stored version v (in /readyz) or has installed rule
// name; it returns the reload error.
func waitRefusedOrInstalled(t *testing.T, base, v, name string) string {
	t.Helper()
	var last string
	clocktest.EventuallyState(t, 20*time.Second, "version "+v+" refused or rule "+name+" installed", func() (bool, string) {
		last = readyzError(t, base)
		code, _, _ := adminDo(t, "GET", base+"/v1/rules/"+name, "", "")
		return strings.Contains(last, "version "+v+" ") || code == 200, last
	})
	return last
}

// TestRedisCannotInstallRules: with a cluster key, write access to Redis
// alone cannot install rules: a set injected in Redis (unsigned, badly
// signed, a signed set of the past stored again, a version out of range)
// is refused, logged in /readyz and counted, and the node keeps its last
// good set and its ETag; a write through the admin API (conditional on
// that ETag, too) replaces the refused set with a version above all of
// them. Before, an HSET and a version bump installed a rule on every
// node within a poll.
func TestRedisCannotInstallRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis")
	}
	addr := redistest.Start(t)
	rc := redisClient(t, addr)
	d, base := startLocal(t, "-redis", "redis://"+addr, "-cluster-key", testClusterKey, "-rules-poll", "10ms")
	defer d.stop(true)
	put := func(name, ifMatch string) (int, string, string) {
		return adminDo(t, "PUT", base+"/v1/rules/"+name, `{"algorithm":"gcra","limit":1,"period":"1h","key":"ip"}`, ifMatch)
	}
	if code, _, body := put("good", ""); code != 200 {
		t.Fatalf("PUT good = %d %s", code, body)
	}
	// A signed set of the past: version 1, captured.
	ctx := context.Background()
	oldSet, err := rc.Do(ctx, rc.B().Hgetall().Key(rulesSetKey).Build()).AsStrMap()
	if err != nil {
		t.Fatal(err)
	}
	oldSig, err := rc.Do(ctx, rc.B().Get().Key(rulesSigKey).Build()).ToString()
	if err != nil || oldSig == "" {
		t.Fatalf("no signature stored for version 1: %q %v", oldSig, err)
	}
	code, etag, body := put("good2", "")
	if code != 200 || etag != `"2"` {
		t.Fatalf("PUT good2 = %d %s %s", code, etag, body)
	}
	injected := `{"pos":9,"rule":{"name":"injected","algorithm":"gcra","limit":1000000,"period":"1s"}}`
	for _, tc := range []struct {
		name, version, reason string
		write                 func()
	}{
		{"unsigned", "3", "unsigned", func() {
			redisDo(t, rc, "HSET", rulesSetKey, "injected", injected)
			redisDo(t, rc, "SET", rulesVerKey, "3")
		}},
		{"badly signed", "4", "bad_signature", func() {
			redisDo(t, rc, "SET", rulesSigKey, "v1.4."+strings.Repeat("ab", 32))
			redisDo(t, rc, "SET", rulesVerKey, "4")
		}},
		{"a signed set of the past", "1", "rollback", func() {
			redisDo(t, rc, "DEL", rulesSetKey)
			for k, v := range oldSet {
				redisDo(t, rc, "HSET", rulesSetKey, k, v)
			}
			redisDo(t, rc, "SET", rulesSigKey, oldSig)
			redisDo(t, rc, "SET", rulesVerKey, "1")
		}},
		// Beyond 2^53 (exact in every JSON client): refused, and the
		// next write does not continue from it.
		{"a version out of range", "9007199254740993", "version_range", func() {
			redisDo(t, rc, "SET", rulesVerKey, "9007199254740993")
		}},
	} {
		tc.write()
		msg := waitRefusedOrInstalled(t, base, tc.version, "injected")
		if code, _, _ := adminDo(t, "GET", base+"/v1/rules/injected", "", ""); code != 404 {
			t.Fatalf("%s: the injected rule was installed (%d)", tc.name, code)
		}
		if !strings.Contains(msg, "refused rules version "+tc.version) || strings.Contains(msg, testClusterKey) {
			t.Errorf("%s: /readyz says %q, want the refused version (and no key)", tc.name, msg)
		}
		_, e, body := adminDo(t, "GET", base+"/v1/rules", "", "")
		if e != `"2"` || !strings.Contains(body, `"good2"`) {
			t.Errorf("%s: GET /v1/rules = ETag %s %s; want version 2 kept", tc.name, e, body)
		}
		_, _, metrics := adminDo(t, "GET", base+"/metrics", "", "")
		if !strings.Contains(metrics, `sluice_rules_store_refused_total{reason="`+tc.reason+`"} 1`) {
			t.Errorf("%s: /metrics does not count reason %s", tc.name, tc.reason)
		}
	}
	// A conditional write on the node's ETag replaces the refused set,
	// above every version seen.
	code, etag, body = put("good3", `"2"`)
	if code != 200 || etag != `"5"` {
		t.Fatalf("PUT If-Match \"2\" over a refused set = %d %s %s; want 200 version 5", code, etag, body)
	}
	if v, err := rc.Do(ctx, rc.B().Get().Key(rulesVerKey).Build()).ToString(); err != nil || v != "5" {
		t.Errorf("stored version %q, %v; want 5", v, err)
	}
	if code, _, _ := adminDo(t, "GET", base+"/v1/rules/injected", "", ""); code != 404 {
		t.Error("the injected rule came back")
	}
}

// TestUnsignedRulesUpgrade: a set written by a release that did not sign
// (no signature key in Redis) makes a node refuse it and stay not ready,
// unless -accept-unsigned-rules; with it, the node installs the set and
// the next write through the admin API (even one that changes nothing)
// signs it, after which a node without the flag installs it.
func TestUnsignedRulesUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis")
	}
	addr := redistest.Start(t)
	rc := redisClient(t, addr)
	// What the previous release stored.
	redisDo(t, rc, "HSET", rulesSetKey, "old", `{"pos":0,"rule":{"name":"old","algorithm":"gcra","limit":1,"period":"1h"}}`)
	redisDo(t, rc, "SET", rulesVerKey, "4")

	d, base := startLocal(t, "-redis", "redis://"+addr, "-cluster-key", testClusterKey, "-rules-poll", "10ms")
	code, _, body := adminDo(t, "GET", base+"/readyz", "", "")
	if code != 503 || !strings.Contains(body, "refused rules version 4") || !strings.Contains(body, "not signed") {
		t.Errorf("/readyz on an unsigned set = %d %s; want 503 naming the refused version", code, body)
	}
	d.stop(true)

	d, base = startLocal(t, "-redis", "redis://"+addr, "-cluster-key", testClusterKey, "-rules-poll", "10ms", "-accept-unsigned-rules")
	if code, e, body := adminDo(t, "GET", base+"/v1/rules/old", "", ""); code != 200 || e != `"4"` {
		t.Fatalf("with -accept-unsigned-rules: GET /v1/rules/old = %d %s %s", code, e, body)
	}
	// The same rule again: no change, but saved to sign it.
	code, e, body := adminDo(t, "PUT", base+"/v1/rules/old", `{"algorithm":"gcra","limit":1,"period":"1h"}`, `"4"`)
	if code != 200 || e != `"5"` {
		t.Fatalf("re-signing write = %d %s %s; want 200 version 5", code, e, body)
	}
	d.stop(true)

	d, base = startLocal(t, "-redis", "redis://"+addr, "-cluster-key", testClusterKey, "-rules-poll", "10ms")
	defer d.stop(true)
	if code, e, body := adminDo(t, "GET", base+"/v1/rules/old", "", ""); code != 200 || e != `"5"` {
		t.Fatalf("after signing, without the flag: GET /v1/rules/old = %d %s %s", code, e, body)
	}
}

// TestNoOpWriteReplacesTamperedRules: a write through the admin API
// replaces a stored set that is not this node's signed one, even a write
// that changes no rule: a set edited in Redis under the node's own
// version (which the node, polling versions, never reloads) and a set
// injected under a new version (which the node refused). Before, such a
// write answered "no change" and left the tampered set in Redis, where
// every node started next would meet it. The stored set read back after
// the write is the node's, signed: a node started afresh installs it.
func TestNoOpWriteReplacesTamperedRules(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis")
	}
	addr := redistest.Start(t)
	rc := redisClient(t, addr)
	args := []string{"-redis", "redis://" + addr, "-cluster-key", testClusterKey, "-rules-poll", "10ms"}
	d, base := startLocal(t, args...)
	defer d.stop(true)
	const rule = `{"algorithm":"gcra","limit":1,"period":"1h","key":"ip"}`
	if code, _, body := adminDo(t, "PUT", base+"/v1/rules/good", rule, ""); code != 200 {
		t.Fatalf("PUT good = %d %s", code, body)
	}
	ctx := context.Background()
	stored := func() (version string, set map[string]string, sig string) {
		t.Helper()
		version, _ = rc.Do(ctx, rc.B().Get().Key(rulesVerKey).Build()).ToString()
		set, _ = rc.Do(ctx, rc.B().Hgetall().Key(rulesSetKey).Build()).AsStrMap()
		sig, _ = rc.Do(ctx, rc.B().Get().Key(rulesSigKey).Build()).ToString()
		return version, set, sig
	}
	_, good, _ := stored()
	for _, tc := range []struct {
		name   string
		tamper func()
	}{
		{"edited under the node's version, unsigned", func() {
			redisDo(t, rc, "HSET", rulesSetKey, "good", strings.Replace(good["good"], `"limit":1`, `"limit":1000000`, 1))
			redisDo(t, rc, "DEL", rulesSigKey)
		}},
		{"injected under a new version", func() {
			v, _, _ := stored()
			redisDo(t, rc, "HSET", rulesSetKey, "injected", `{"pos":9,"rule":{"name":"injected","algorithm":"gcra","limit":1000000,"period":"1s"}}`)
			redisDo(t, rc, "SET", rulesVerKey, v+"0")
			waitRefusedOrInstalled(t, base, v+"0", "injected")
		}},
	} {
		tc.tamper()
		before, _, _ := stored()
		// The same rule again: no change to the node's rules.
		code, etag, body := adminDo(t, "PUT", base+"/v1/rules/good", rule, "")
		if code != 200 {
			t.Fatalf("%s: the no-op PUT = %d %s", tc.name, code, body)
		}
		v, set, sig := stored()
		if v == before || etag != `"`+v+`"` || !strings.HasPrefix(sig, "v1."+v+".") {
			t.Errorf("%s: after the no-op write Redis holds version %q (was %q, ETag %s) signed %q; want a new version, signed", tc.name, v, before, etag, sig)
		}
		if len(set) != 1 || set["good"] != good["good"] {
			t.Errorf("%s: after the no-op write Redis holds %v; want the node's rule alone, %s", tc.name, set, good["good"])
		}
	}
	// A node started afresh (it refuses an unsigned or badly signed set)
	// installs what the write stored.
	d2, base2 := startLocal(t, args...)
	defer d2.stop(true)
	v, _, _ := stored()
	if code, e, body := adminDo(t, "GET", base2+"/v1/rules", "", ""); code != 200 || e != `"`+v+`"` || !strings.Contains(body, `"good"`) || strings.Contains(body, "injected") {
		t.Errorf("a new node: GET /v1/rules = %d %s %s; want version %s with good alone", code, e, body, v)
	}
}
