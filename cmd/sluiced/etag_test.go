package main

import (
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/lua/redistest"
)

// adminDo sends an admin request with an optional If-Match and returns
// the status, the ETag and the body.
func adminDo(t *testing.T, method, url, body, ifMatch string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if ifMatch != "" {
		req.Header.Set("If-Match", ifMatch)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header.Get("ETag"), string(b)
}

// TestConditionalWrites: on every writable rule source (data dir, with
// and without an RLS configuration; Redis; memory) the ETag a GET returns
// is the one a conditional write accepts, every change gives a new ETag,
// a tag that does not match (stale, or not one the node gave) is 412 and
// "*" matches the current set; a file-backed node answers every write
// 409. On a fresh -data-dir node with -rls-config, the ETag read before
// any write used to be refused ("another write made version 0").
func TestConditionalWrites(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Redis")
	}
	rls := []string{"-rls-listen", "127.0.0.1:0", "-rls-config", filepath.Join("..", "..", "deploy", "gateways", "ratelimit-config.yaml")}
	rule := func(limit string) string { return `{"algorithm":"gcra","limit":` + limit + `,"period":"1h"}` }
	for _, tc := range []struct {
		name string
		args func(t *testing.T) []string
	}{
		{"data_dir", func(t *testing.T) []string { return []string{"-data-dir", t.TempDir()} }},
		{"data_dir+rls", func(t *testing.T) []string { return append([]string{"-data-dir", t.TempDir()}, rls...) }},
		{"redis+rls", func(t *testing.T) []string {
			return append([]string{"-redis", "redis://" + redistest.Start(t), "-cluster-key", testClusterKey}, rls...)
		}},
		{"memory+rls", func(t *testing.T) []string { return rls }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, base := startLocal(t, tc.args(t)...)
			defer d.stop(true)
			_, e0, body := adminDo(t, "GET", base+"/v1/rules", "", "")
			if e0 == "" {
				t.Fatalf("GET /v1/rules: no ETag (%s)", body)
			}
			// The ETag read before any write is the current one.
			code, e1, body := adminDo(t, "PUT", base+"/v1/rules/a", rule("1"), e0)
			if code != 200 || e1 == e0 {
				t.Fatalf("PUT If-Match %s (from GET) = %d ETag %s %s; want 200 and a new ETag", e0, code, e1, body)
			}
			if _, e, _ := adminDo(t, "GET", base+"/v1/rules", "", ""); e != e1 {
				t.Fatalf("GET after the write: ETag %s, want the write's %s", e, e1)
			}
			if _, e, _ := adminDo(t, "GET", base+"/v1/rules/a", "", ""); e != e1 {
				t.Fatalf("GET /v1/rules/a: ETag %s, want %s", e, e1)
			}
			for _, stale := range []string{e0, `"stale-0"`, `W/"x"`, `"` + strings.Repeat("9", 30) + `"`} {
				if code, e, body := adminDo(t, "PUT", base+"/v1/rules/b", rule("1"), stale); code != 412 || e != e1 {
					t.Errorf("PUT If-Match %s = %d ETag %s %s; want 412 with ETag %s", stale, code, e, body, e1)
				}
			}
			// "*" matches the current set; a change gives a new ETag.
			code, e2, body := adminDo(t, "PUT", base+"/v1/rules/a", rule("2"), "*")
			if code != 200 || e2 == e1 || e2 == e0 {
				t.Fatalf("PUT If-Match * = %d ETag %s %s; want 200 and a new ETag", code, e2, body)
			}
			// Unconditional writes too; each change a new ETag.
			code, e3, body := adminDo(t, "PUT", base+"/v1/rules/c", rule("3"), "")
			if code != 200 || e3 == e2 || e3 == e1 || e3 == e0 {
				t.Fatalf("PUT = %d ETag %s %s; want 200 and a new ETag", code, e3, body)
			}
			if code, e4, body := adminDo(t, "DELETE", base+"/v1/rules/c", "", `"x", `+e3); code != 200 || e4 == e3 {
				t.Fatalf("DELETE If-Match \"x\", %s = %d ETag %s %s", e3, code, e4, body)
			}
		})
	}
	t.Run("file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "rules.yaml")
		writeFile(t, path, rulesV1)
		d, base := startLocal(t, append([]string{"-rules", path}, rls...)...)
		defer d.stop(true)
		_, e0, _ := adminDo(t, "GET", base+"/v1/rules", "", "")
		for _, im := range []string{e0, `"stale-0"`, "*", ""} {
			if code, e, body := adminDo(t, "PUT", base+"/v1/rules/a", rule("1"), im); code != 409 || e != e0 {
				t.Errorf("PUT If-Match %q on a file-backed node = %d ETag %s %s; want 409 with ETag %s", im, code, e, body, e0)
			}
		}
	})
}
