package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
