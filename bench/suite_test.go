package bench

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

func TestHeadlineAndReport(t *testing.T) {
	run := func(name string, batch int, rps float64) *RunResult {
		return &RunResult{Name: name, Batch: batch, RPS: rps, DPS: rps * float64(batch), Decisions: int64(rps * float64(batch) * 8),
			Elapsed: 8 * time.Second, ServerCPU: 8, GenCPU: 4, Mode: "closed",
			Accuracy: &Accuracy{OverAdmitted: 1}, Degraded: 2}
	}
	st := &suite{s: &Suite{Host: HostInfo{CPUs: 2}, Limit: Limit{Limit: 100, Period: time.Second, Burst: 100}}}
	st.s.Runs = []*RunResult{
		run("mem-single", 1, 40_000), run("ceiling-single", 1, 50_000), run("ceiling-single#2", 1, 50_000), run("mem-single#2", 1, 30_000),
		run("mem-batch100", 100, 6000), run("ceiling-batch100", 100, 20_000), run("ceiling-batch100#2", 100, 20_000), run("mem-batch100#2", 100, 8000),
	}
	for _, r := range st.s.Runs {
		if strings.HasPrefix(r.Name, "ceiling-") {
			r.Accuracy = nil
		}
	}
	st.headline()
	h := st.s.Headline
	if h.SingleRatio != 0.7 || h.SingleRPS != 35_000 || h.CeilingRPS != 50_000 {
		t.Errorf("single %v / ceiling %v = %v, want 35000/50000 = 0.7", h.SingleRPS, h.CeilingRPS, h.SingleRatio)
	}
	if h.BatchDPS != 700_000 || !strings.Contains(h.BatchLimitedBy, "node, not the generator") {
		t.Errorf("batch %v: %q", h.BatchDPS, h.BatchLimitedBy)
	}
	// Every node run here has degraded decisions: their over-admission is
	// counted apart from the lease contract's.
	if h.OverAdmitted != 0 || h.OverAdmittedDegraded != 4 || h.Degraded != 8 || len(h.DegradedRuns) != 4 {
		t.Errorf("over %d / in degraded runs %d, degraded %d in %v; want 0, 4, 8 in 4 node runs", h.OverAdmitted, h.OverAdmittedDegraded, h.Degraded, h.DegradedRuns)
	}
	if r := st.find("mem-single#2"); r.CeilingRatio != 0.6 {
		t.Errorf("mem-single#2 ratio %v, want 0.6 against ceiling-single#2", r.CeilingRatio)
	}
	dir := t.TempDir()
	if err := WriteReport(dir, st.s); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	for _, want := range []string{"**70%** of the ceiling", "700.0k decisions/s", "| mem-batch100#2 |", "runs with degraded decisions"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestRerender(t *testing.T) {
	dir := t.TempDir()
	s := &Suite{Runs: []*RunResult{{Name: "mem-single", RPS: 10, Batch: 1}, {Name: "ceiling-single", RPS: 20, Batch: 1}}, Headline: Headline{PeakRPS: 10}}
	if err := WriteReport(dir, s); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadSuite(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Rerender(dir, loaded); err != nil {
		t.Fatal(err)
	}
	if loaded.Headline.SingleRatio != 0.5 || loaded.Headline.PeakRPS != 10 {
		t.Fatalf("headline %+v", loaded.Headline)
	}
}

// TestRedisCompareValidated: -redis-compare must be a query the node's
// -redis URL accepts, checked before anything starts.
func TestRedisCompareValidated(t *testing.T) {
	for q, ok := range map[string]bool{"max_batch=1": true, "max_batch=0": false, "bogus=1": false} {
		c := DefaultSuiteConfig()
		c.Self, c.RedisCompare = "sluice-bench", q
		err := c.defaults()
		if ok && err != nil || !ok && (err == nil || !strings.Contains(err.Error(), "redis-compare")) {
			t.Errorf("RedisCompare %q: %v", q, err)
		}
	}
}

// TestReportScriptRuns: the Redis table shows the scripts run (TIME calls
// inside them) beside the script calls (a batched call runs several), and
// the first touches, whose TIME (and the node's clock samples) are no
// scripts.
func TestReportScriptRuns(t *testing.T) {
	r := &RunResult{Name: "redis-x", Batch: 1, Decisions: 1000, RedisPerDec: 0.01,
		RedisCalls:   map[string]int64{"evalsha": 10, "time": 192, "get": 150, "set": 140},
		FirstTouches: 40, ClockSamples: 2,
		Naive: &Baseline{Run: "naive-x", Decisions: 1000, RedisUsPerDec: 4, Ratio: 2}}
	s := &Suite{Runs: []*RunResult{r}}
	dir := t.TempDir()
	if err := WriteReport(dir, s); err != nil {
		t.Fatal(err)
	}
	md, _ := os.ReadFile(filepath.Join(dir, "report.md"))
	if !bytes.Contains(md, []byte("| **2.00×** | 1.0% | 15.0% | 4.0% |")) {
		t.Errorf("the Redis table lacks script calls 1.0%%, scripts run 15.0%% and first touches 4.0%%:\n%s", md)
	}
}

// A warmed run's Store operations have no first-touch floor, keys that
// come back in a cycle included (a node may keep their loans past the
// idle spell); a cold run's floor is its keys over its decisions.
func TestFloorNote(t *testing.T) {
	cold := &RunResult{Decisions: 400, Dist: Uniform.String(), Accuracy: &Accuracy{Keys: 100}}
	if got := floorNote(cold); got != "floor 25.0%" {
		t.Fatalf("cold run: %q, want the floor of 100 keys over 400 decisions", got)
	}
	for _, d := range []Dist{Uniform, Cycle} {
		warm := &RunResult{Decisions: 400, Dist: d.String(), Warm: 15 * time.Second, Accuracy: &Accuracy{Keys: 100}}
		if got := floorNote(warm); !strings.Contains(got, "warmed") {
			t.Fatalf("%s keys warmed first: %q, want no floor", d, got)
		}
	}
}

// TestNodeFirstTouches reads the lua package's counters as a node's
// /metrics writes them (VictoriaMetrics/metrics, with metadata lines).
func TestNodeFirstTouches(t *testing.T) {
	set := metrics.NewSet()
	set.GetOrCreateCounter(`sluice_redis_first_touches_total{result="wrote"}`).Add(30)
	set.GetOrCreateCounter(`sluice_redis_first_touches_total{result="had_state"}`).Add(4)
	set.GetOrCreateCounter(`sluice_redis_first_touches_total{result="skipped"}`).Add(100)
	set.GetOrCreateCounter(`sluice_redis_clock_samples_total`).Add(2)
	metrics.ExposeMetadata(true)
	defer metrics.ExposeMetadata(false)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { set.WritePrometheus(w) }))
	defer srv.Close()
	tries, samples, err := nodeFirstTouches(strings.TrimPrefix(srv.URL, "http://"))
	if err != nil || tries != 34 || samples != 2 {
		t.Errorf("nodeFirstTouches = %d tries, %d samples, %v; want 34 (wrote and had_state) and 2", tries, samples, err)
	}
}
