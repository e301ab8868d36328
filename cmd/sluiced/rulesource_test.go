package main

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// startLocal starts an in-process sluiced with args on a loopback port.
func startLocal(t *testing.T, args ...string) (*daemon, string) {
	t.Helper()
	o, err := parseOptions(append([]string{"-listen", "127.0.0.1:0"}, args...), env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	d, err := start(o, slog.New(slog.NewTextHandler(io.Discard, nil)), hooks{})
	if err != nil {
		t.Fatal(err)
	}
	return d, "http://" + d.ln.Addr().String()
}

func doHTTP(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// TestDataDir: without -rules and -redis, rules written through the admin
// API are kept in -data-dir and a restarted node has them.
func TestDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	d, base := startLocal(t, "-data-dir", dir)
	if code, body := doHTTP(t, "PUT", base+"/v1/rules/g", `{"algorithm":"gcra","limit":1,"period":"1h"}`); code != 200 {
		t.Fatalf("PUT = %d %s", code, body)
	}
	if err := d.stop(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "rules.json")); err != nil {
		t.Fatal(err)
	}
	d, base = startLocal(t, "-data-dir", dir)
	defer d.stop(true)
	code, body := doHTTP(t, "GET", base+"/v1/rules", "")
	if code != 200 || !strings.Contains(body, `"version":1,"source":"data_dir"`) || !strings.Contains(body, `"name":"g"`) {
		t.Errorf("after restart: %d %s", code, body)
	}
}

// TestRulesFileReadOnly: with -rules the admin API refuses writes with
// 409 naming the file, and -data-dir is ignored.
func TestRulesFileReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "rules.yaml")
	writeFile(t, path, rulesV1)
	d, base := startLocal(t, "-rules", path, "-data-dir", t.TempDir())
	defer d.stop(true)
	code, body := doHTTP(t, "DELETE", base+"/v1/rules/per-key", "")
	if code != 409 || !strings.Contains(body, path) {
		t.Errorf("DELETE on a file-backed node = %d %s", code, body)
	}
	if code, body := doHTTP(t, "GET", base+"/v1/rules", ""); code != 200 || !strings.Contains(body, `"source":"file"`) {
		t.Errorf("GET = %d %s", code, body)
	}
}
