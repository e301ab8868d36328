package main

import (
	"bufio"
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestMetricsHelp starts nodes with every feature that registers metrics
// (a two-node cluster on Redis, the Envoy RLS server, the lease protocol,
// a global tier upstream), makes each count something, and reads
// /metrics: every family has a # HELP line with text (what it counts, in
// which unit) and a # TYPE line, each once. Then every metric name the
// source registers (a "sluice_…" literal in a package that imports
// VictoriaMetrics/metrics), exposed or not yet, has its text. A failure
// names the family and where to add its words: the MetricsHelp function
// of the package that registers it (see node/metrics.go).
func TestMetricsHelp(t *testing.T) {
	tc := newTestCluster(t, regionRules) // skips with -short
	global, err := startRegionNode(t, globalRules, "-client-token", upstreamToken)
	if err != nil {
		t.Fatal(err)
	}
	tc.member = steadyMembership
	tc.args = []string{"-upstream", global.base, "-upstream-token", upstreamToken, "-region", "eu",
		"-client-token", upstreamToken, "-rls-listen", "127.0.0.1:0",
		"-rls-config", filepath.Join("..", "..", "deploy", "gateways", "ratelimit-config.yaml")}
	a := tc.start("node-a")
	b := tc.start("node-b", a)
	tc.converge("node-a,node-b", a, b)

	// Checks of a region rule and of two global ones, on keys both nodes
	// own (so that some are forwarded).
	for i := range 16 {
		for _, rule := range []string{"r", "g", "h"} {
			res, err := tc.http.Post(a.base+"/v1/check", "application/json",
				strings.NewReader(`{"rule":"`+rule+`","key":"k`+strconv.Itoa(i)+`"}`))
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	// A gateway's lease.
	req, _ := http.NewRequest("POST", a.base+"/v1/lease", strings.NewReader(
		`{"holder":"0123456789abcdef0123456789abcdef","ops":[{"op":"lease","rule":"r","key":"gw","want":1,"need":1,"ttl_ms":10000}]}`))
	req.Header.Set("Authorization", "Bearer "+upstreamToken)
	if res, err := tc.http.Do(req); err != nil || res.StatusCode != 200 {
		t.Fatalf("POST /v1/lease: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	// An Envoy RLS call.
	conn, err := grpc.NewClient(a.d.rls.ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := rlsv3.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "apis",
		Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0.0.1"}}}}}); err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}

	// Both nodes' /metrics (the lease went to its key's owner).
	reg := registrations(t)
	families := map[string]bool{}
	for _, n := range []*testNode{a, b} {
		res, err := tc.http.Get(n.base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		for fam := range checkExposition(t, n.name, string(body), reg) {
			families[fam] = true
		}
	}
	for _, want := range []string{"sluice_checks_total", "sluice_forward_items_total", "sluice_hot_keys_tracked", "sluice_rls_calls_total",
		"sluice_rls_total_hits", "sluice_gateway_tokens_granted_total", "sluice_upstream_tokens_lent", "sluice_redis_clock_samples_total",
		"sluice_store_calls_total", "sluice_gossip_rejected_packets_total", "sluice_members", "go_goroutines", "process_cpu_seconds_total"} {
		if !families[want] {
			t.Errorf("/metrics has no family %s: the test no longer makes it count (%d families)", want, len(families))
		}
	}
	t.Logf("/metrics of both nodes: %d families, each with help text", len(families))

	// Families registered lazily (a reason not met, a status not
	// answered) have their text too.
	for fam, at := range reg {
		if a.d.node.MetricHelp(fam) == "" && !families[fam] {
			t.Errorf("metric family %s has no help text: add it to %s", fam, whereToAdd(fam, at))
		}
	}
}

// checkExposition checks every family of a Prometheus text exposition for
// a # HELP line with text and a # TYPE line, once each, and returns the
// families.
func checkExposition(t *testing.T, node, text string, reg map[string][]string) map[string]bool {
	t.Helper()
	help, types := map[string][]string{}, map[string][]string{}
	samples := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "# HELP "):
			fam, txt, _ := strings.Cut(strings.TrimPrefix(line, "# HELP "), " ")
			help[fam] = append(help[fam], strings.TrimSpace(txt))
		case strings.HasPrefix(line, "# TYPE "):
			fam, typ, _ := strings.Cut(strings.TrimPrefix(line, "# TYPE "), " ")
			types[fam] = append(types[fam], typ)
		case line == "" || strings.HasPrefix(line, "#"):
		default:
			name := line[:strings.IndexAny(line, "{ ")]
			if _, ok := types[name]; !ok {
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, cut := strings.CutSuffix(name, suffix); cut && len(types[base]) > 0 {
						name = base
						break
					}
				}
			}
			samples[name] = true
		}
	}
	fams := map[string]bool{}
	for fam := range samples {
		fams[fam] = true
	}
	for fam := range help {
		fams[fam] = true
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for f := range fams {
			if !yield(f) {
				return
			}
		}
	})
	for _, fam := range names {
		switch h := help[fam]; {
		case len(h) == 0:
			t.Errorf("%s: metric family %s has no # HELP line", node, fam)
		case len(h) > 1:
			t.Errorf("%s: metric family %s has %d # HELP lines: its samples must be written together, with one # HELP and one # TYPE", node, fam, len(h))
		case h[0] == "":
			t.Errorf("%s: metric family %s has no help text: add it to %s", node, fam, whereToAdd(fam, reg[fam]))
		}
		if ty := types[fam]; len(ty) != 1 || ty[0] == "" {
			t.Errorf("%s: metric family %s has %d # TYPE lines %q, want one", node, fam, len(ty), ty)
		}
	}
	return fams
}

// whereToAdd says where the help text of fam goes, from where the source
// registers it (file:line of each "sluice_…" literal naming it).
func whereToAdd(fam string, at []string) string {
	if len(at) == 0 {
		if strings.HasPrefix(fam, "go_") || strings.HasPrefix(fam, "process_") {
			return "runtimeMetricsHelp in node/metrics_runtime.go (github.com/VictoriaMetrics/metrics writes this family)"
		}
		return "the MetricsHelp function of the package that writes it (no literal of this repository names it)"
	}
	dir := filepath.Dir(strings.Split(at[0], ":")[0])
	return "the MetricsHelp function of " + dir + " (which registers it at " + strings.Join(at, ", ") + "); a package " +
		"without one needs one, combined in node/metrics.go's metricsHelp or, for a package node does not import, " +
		"in cmd/sluiced/daemon.go's ncfg.MetricsHelp"
}

// metricName is a metric name at the start of a literal: a family, then
// the end or its labels.
var metricName = regexp.MustCompile(`^(sluice_[a-z0-9_]+)(\{|$)`)

// registrations finds the metric families the source names: each
// "sluice_…" string literal in a non-test file of a package that imports
// github.com/VictoriaMetrics/metrics, but for map keys (help texts), by
// family, with where (file:line, relative to the repository).
func registrations(t *testing.T) map[string][]string {
	t.Helper()
	root := filepath.Join("..", "..")
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "testdata", "contrib", "bench", ".git":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(f.Imports, func(s *ast.ImportSpec) bool { return s.Path.Value == `"github.com/VictoriaMetrics/metrics"` }) {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		keys := map[ast.Expr]bool{} // map keys: a MetricsHelp's, not a registration
		ast.Inspect(f, func(n ast.Node) bool {
			if kv, ok := n.(*ast.KeyValueExpr); ok {
				keys[kv.Key] = true
			}
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || keys[lit] {
				return true
			}
			s, err := strconv.Unquote(lit.Value)
			if m := metricName.FindStringSubmatch(s); err == nil && m != nil {
				fam := m[1]
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, cut := strings.CutSuffix(fam, suffix); cut && out[base] != nil {
						fam = base
					}
				}
				out[fam] = append(out[fam], rel+":"+strconv.Itoa(fset.Position(lit.Pos()).Line))
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 50 {
		t.Fatalf("found %d metric families in the source; the scan is broken", len(out))
	}
	return out
}
