package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
)

func TestReloaderLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, rulesV1)
	r := &reloader{path: path, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	step := func(name string, force bool, wantSet, wantErr bool) {
		t.Helper()
		set, err := r.load(force)
		if (set != nil) != wantSet || (err != nil) != wantErr {
			t.Errorf("%s: set %v err %v; want set %v err %v", name, set != nil, err, wantSet, wantErr)
		}
	}
	step("first", false, true, false)
	step("unchanged", false, false, false)
	step("forced (SIGHUP)", true, true, false)
	// Same content, new mtime: read and hashed, not reloaded.
	writeFile(t, path, rulesV1)
	os.Chtimes(path, time.Now(), time.Now().Add(time.Hour))
	step("touched", false, false, false)
	writeFile(t, path, rulesV2)
	step("changed", false, true, false)
	writeFile(t, path, "rules: [")
	step("broken", false, false, true)
	step("still broken, unchanged", false, false, false)
	step("still broken, forced", true, false, true)
	os.Remove(path)
	_, err := r.load(false)
	if err == nil || !strings.Contains(err.Error(), "rules.yaml") {
		t.Errorf("missing file: %v", err)
	}
	writeFile(t, path, rulesV1)
	step("back", false, true, false)
}

// TestReloadRefusesEmptiedFile: a running node whose rule file is emptied,
// truncated to comments, or cut short before its list keeps its last good
// rules (checks are still limited, forward-auth still denies) and /readyz
// shows why (finding 4 of issue 9: it reloaded "rules=0"); only an
// explicit "rules: []" empties the set. The reloader's own path: load,
// reload, SetRules / SetRulesError on a real node.
func TestReloadRefusesEmptiedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	const limited = "rules:\n  - name: per-key\n    algorithm: token_bucket\n    limit: 1\n    period: 1h\n    key: header:X-API-Key\n"
	writeFile(t, path, limited)
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	t.Cleanup(func() { store.Close() })
	mgr := lease.NewManager(store, lease.DefaultConfig())
	t.Cleanup(func() { mgr.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg := node.DefaultConfig()
	cfg.Logger = logger
	n := node.New(cfg, mgr)
	r := &reloader{path: path, node: n, log: logger}
	if err := r.initial(); err != nil {
		t.Fatal(err)
	}
	do := func(method, uri, body string, hdr ...string) (int, string) {
		var ctx fasthttp.RequestCtx
		// From loopback: /readyz shows the reload's reason to admin callers
		// only, and a node without an admin token admits loopback.
		ctx.SetRemoteAddr(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000})
		ctx.Request.Header.SetMethod(method)
		ctx.Request.SetRequestURI(uri)
		for i := 0; i+1 < len(hdr); i += 2 {
			ctx.Request.Header.Set(hdr[i], hdr[i+1])
		}
		ctx.Request.SetBodyString(body)
		n.Handler()(&ctx)
		return ctx.Response.StatusCode(), string(ctx.Response.Body())
	}
	if code, body := do("POST", "/v1/check", `{"rule":"per-key","key":"k"}`); code != 200 {
		t.Fatalf("first check: %d %s", code, body)
	}
	for _, f := range []string{"", "# all rules removed\n", "rules:\n", "rules:\n# - name: per-key\n"} {
		writeFile(t, path, f)
		r.reload(true)
		if code, body := do("POST", "/v1/check", `{"rule":"per-key","key":"k"}`); code != 429 {
			t.Errorf("file %q: check %d %s, want 429 from the last good rules", f, code, body)
		}
		if code, _ := do("GET", "/v1/auth", "", "X-API-Key", "k"); code != 429 {
			t.Errorf("file %q: forward-auth %d, want 429 from the last good rules", f, code)
		}
		code, body := do("GET", "/readyz", "")
		var rz struct {
			Rules           int    `json:"rules"`
			LastReloadError string `json:"last_reload_error"`
		}
		json.Unmarshal([]byte(body), &rz)
		if code != 200 || rz.Rules != 1 || !strings.Contains(rz.LastReloadError, "rules: []") {
			t.Errorf("file %q: /readyz %d %s, want 200 with 1 rule and the reason", f, code, body)
		}
	}
	// Said explicitly, an empty set is loaded.
	writeFile(t, path, "rules: []\n")
	r.reload(true)
	if code, body := do("GET", "/readyz", ""); code != 200 || !strings.Contains(body, `"rules":0`) || strings.Contains(body, "last_reload_error") {
		t.Errorf("rules: []: /readyz %d %s, want 0 rules and no error", code, body)
	}
	// At start, an emptied file is refused like any bad file.
	writeFile(t, path, "")
	r2 := &reloader{path: path, node: node.New(cfg, mgr), log: logger}
	if err := r2.initial(); err == nil || !strings.Contains(err.Error(), "rules: []") {
		t.Errorf("start with an empty file: %v, want refused", err)
	}
}

func FuzzParseOptions(f *testing.F) {
	f.Add("-listen", ":8080", "SLUICE_LEASE_HORIZON", "100ms")
	f.Add("-lease-idle", "1h", "SLUICE_CLUSTER_KEY", "MDEyMzQ1Njc4OWFiY2RlZg==")
	f.Add("-join", "a:1,b:2", "SLUICE_LOG_LEVEL", "debug")
	f.Fuzz(func(t *testing.T, flagName, flagVal, envName, envVal string) {
		o, err := parseOptions([]string{flagName, flagVal}, env(map[string]string{envName: envVal}), io.Discard)
		if err == nil && (o.leaseHorizon <= 0 || o.leaseIdle <= 0 || o.storeTimeout <= 0 || o.rulesPoll <= 0 || o.listen == "") {
			t.Errorf("accepted invalid options %+v", o)
		}
	})
}
