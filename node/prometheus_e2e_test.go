//go:build e2e

package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// TestE2EPrometheusDashboard: a real Prometheus (Debian's) scrapes a node
// under load, and every query of the Grafana dashboard in deploy/ is
// evaluated by it: each must be valid PromQL, and each histogram_quantile
// panel (the p50/p99 that were empty on Prometheus with VictoriaMetrics'
// vmrange buckets) must return a finite value.
func TestE2EPrometheusDashboard(t *testing.T) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus not found: make e2e installs it (apt-get install prometheus)")
	}
	addr := startScrapedNode(t)
	prom := startPrometheus(t, bin, addr)

	// Wait for data: an event (Prometheus has ingested a few rates' worth
	// of scrapes of the node under load), polled with a bound.
	ready := `count_over_time(sluice_check_duration_seconds_count[1m]) >= 6`
	for i := 0; ; i++ {
		if res, err := prom.query(ready); err == nil && len(res) > 0 {
			break
		}
		if i == 600 {
			t.Fatalf("Prometheus did not ingest 6 scrapes of %s", addr)
		}
		time.Sleep(100 * time.Millisecond) // a real Prometheus scraping on its own schedule
	}

	exprs := dashboardExprs(t, filepath.Join("..", "deploy", "grafana-dashboard.json"))
	quantiles := 0
	for _, e := range exprs {
		q := strings.NewReplacer(`$instance`, `.*`, `$__rate_interval`, `15s`).Replace(e)
		res, err := prom.query(q)
		if err != nil {
			t.Errorf("dashboard query rejected by Prometheus: %s\n  %v", e, err)
			continue
		}
		if !strings.Contains(e, "histogram_quantile") {
			continue
		}
		quantiles++
		finite := 0
		for _, r := range res {
			if v, err := strconv.ParseFloat(r.Value[1].(string), 64); err == nil && !math.IsNaN(v) && !math.IsInf(v, 0) {
				finite++
			}
		}
		if finite == 0 {
			t.Errorf("histogram_quantile panel has no finite value on Prometheus: %s\n  result %+v", q, res)
		} else {
			t.Logf("ok (%d series): %s", finite, q)
		}
	}
	if quantiles < 3 {
		t.Errorf("%d histogram_quantile queries in the dashboard, want the 3 latency panels", quantiles)
	}
}

// startScrapedNode starts a node on the memory store with a rule, and a
// bounded load of checks on it for the test's life.
func startScrapedNode(t *testing.T) string {
	t.Helper()
	set, err := rules.Parse([]byte("rules:\n  - name: per-key\n    algorithm: token_bucket\n    limit: 50\n    period: 1s\n"))
	if err != nil {
		t.Fatal(err)
	}
	store := lease.NewMemoryStore(lease.DefaultMemoryStoreConfig())
	mgr := lease.NewManager(store, lease.DefaultConfig())
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	addr := ln.Addr().String()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		c := &http.Client{Timeout: 5 * time.Second}
		for i := 0; i < 2_000_000; i++ { // bounded; stopped at cleanup
			select {
			case <-stop:
				return
			default:
			}
			res, err := c.Get("http://" + addr + "/v1/check?rule=per-key&key=k" + strconv.Itoa(i%100))
			if err == nil {
				res.Body.Close()
			}
			if i%200 == 199 {
				time.Sleep(50 * time.Millisecond) // a steady rate, not a busy loop
			}
		}
	})
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		<-served
		mgr.Close()
		store.Close()
	})
	return addr
}

type promServer struct {
	base string
	http *http.Client
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  []any             `json:"value"`
}

// query evaluates an instant PromQL query: its vector, or Prometheus'
// error.
func (p *promServer) query(q string) ([]promSample, error) {
	res, err := p.http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return nil, err
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("%s", body.Error)
	}
	if body.Data.ResultType != "vector" {
		return nil, nil // a scalar: valid, no series
	}
	var v []promSample
	err = json.Unmarshal(body.Data.Result, &v)
	return v, err
}

// startPrometheus runs Prometheus on a free loopback port, scraping target
// every second, with its storage in a temporary directory.
func startPrometheus(t *testing.T, bin, target string) *promServer {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "prometheus.yml")
	cfg := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: sluice\n    static_configs:\n      - targets: [%q]\n", target)
	if err := os.WriteFile(conf, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(bin, "--config.file="+conf, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("prometheus output:\n%s", logs.String())
		}
	})
	p := &promServer{base: "http://" + listen, http: &http.Client{Timeout: 10 * time.Second}}
	for i := 0; ; i++ {
		if res, err := p.http.Get(p.base + "/-/ready"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				return p
			}
		}
		select {
		case <-done:
			t.Fatalf("prometheus exited:\n%s", logs.String())
		default:
		}
		if i == 300 {
			t.Fatalf("prometheus not ready on %s", listen)
		}
		time.Sleep(100 * time.Millisecond) // a real process starting: polled through its /-/ready
	}
}

// dashboardExprs returns every target expression of the Grafana dashboard.
func dashboardExprs(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func(any)
	walk = func(x any) {
		switch x := x.(type) {
		case map[string]any:
			if e, ok := x["expr"].(string); ok && e != "" {
				out = append(out, e)
			}
			for _, y := range x {
				walk(y)
			}
		case []any:
			for _, y := range x {
				walk(y)
			}
		}
	}
	walk(v)
	if len(out) == 0 {
		t.Fatalf("%s: no queries", path)
	}
	return out
}
