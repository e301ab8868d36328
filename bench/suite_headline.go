package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// Headline holds the figures the performance budgets ask for
// (docs/performance.md).
type Headline struct {
	BatchDPS        float64 `json:"batch100_decisions_per_s"`
	BatchLimitedBy  string  `json:"batch100_limited_by,omitempty"`
	SingleRPS       float64 `json:"single_rps"`
	CeilingRPS      float64 `json:"ceiling_single_rps"`
	SingleRatio     float64 `json:"single_ratio_to_ceiling"`
	PeakRPS         float64 `json:"peak_single_rps"`
	P99AtHalf       string  `json:"p99_at_half_peak"`
	RedisPerDecZipf float64 `json:"redis_script_calls_per_decision_zipf"`
	RedisPerDecHot  float64 `json:"redis_script_calls_per_decision_hot"`
	// OverAdmitted is over runs where every decision was made by leasing;
	// runs with degraded decisions (the Store was unavailable or slower
	// than its timeout, and on_store_failure decided) are counted apart.
	OverAdmitted         int64    `json:"over_admitted_total"`
	OverAdmittedDegraded int64    `json:"over_admitted_in_degraded_runs"`
	Degraded             int64    `json:"degraded_decisions_total"`
	DegradedRuns         []string `json:"degraded_runs,omitempty"`
	UnderPctHalfPeak     float64  `json:"under_admission_pct_half_peak"`
	InprocDPS            float64  `json:"inproc_decisions_per_s"`
	InprocStorePerDec    float64  `json:"inproc_store_calls_per_decision"`
	// The node's CPU seconds per 1M decisions: made by a gateway
	// (client.Limiter, leased) and answered over HTTP (single checks).
	GatewayDPS         float64 `json:"gateway_decisions_per_s,omitempty"`
	GatewayNodeCPUPerM float64 `json:"gateway_node_cpu_s_per_1m,omitempty"`
	SingleNodeCPUPerM  float64 `json:"single_node_cpu_s_per_1m,omitempty"`
}

func (st *suite) find(name string) *RunResult {
	for _, r := range st.s.Runs {
		if r.Name == name {
			return r
		}
	}
	return nil
}

func (st *suite) headline() {
	st.s.Headline = Headline{PeakRPS: st.peak}
	h := &st.s.Headline
	ceil := map[string]*RunResult{}
	for _, r := range st.s.Runs {
		if after, ok := strings.CutPrefix(r.Name, "ceiling-"); ok {
			ceil[after] = r
		}
	}
	for _, r := range st.s.Runs {
		if after, ok := strings.CutPrefix(r.Name, "mem-"); ok {
			if c := ceil[after]; c != nil && c.RPS > 0 {
				r.CeilingRPS = c.RPS
				r.CeilingRatio = r.RPS / c.RPS
			}
		}
		if a := r.Accuracy; a != nil && !strings.HasPrefix(r.Name, "ceiling-") {
			if r.Degraded == 0 {
				h.OverAdmitted += a.OverAdmitted
			} else {
				h.OverAdmittedDegraded += a.OverAdmitted
				h.Degraded += r.Degraded
				h.DegradedRuns = append(h.DegradedRuns, r.Name)
			}
		}
	}
	if runs := st.findAll("mem-batch100", "mem-batch100#2"); len(runs) > 0 {
		var dec, srv, gen, other, sec float64
		for _, r := range runs {
			dec += float64(r.Decisions)
			srv += r.ServerCPU
			gen += r.GenCPU
			other += r.OtherCPU
			sec += r.Elapsed.Seconds()
		}
		h.BatchDPS = st.mean("mem-batch100", "mem-batch100#2")
		if h.BatchDPS < 1e6 && sec > 0 && dec > 0 {
			h.BatchLimitedBy = fmt.Sprintf("CPU: the node spent %.2f µs of CPU per decision (%.2f cores), the load generator %.2f cores and other processes %.2f, of the machine's %d",
				1e6*srv/dec, srv/sec, gen/sec, other/sec, st.s.Host.CPUs)
			if c := st.mean("ceiling-batch100", "ceiling-batch100#2"); c > 0 {
				if c >= 1e6 {
					h.BatchLimitedBy += fmt.Sprintf("; the same generator drove the ceiling to %s decisions/s, so the node, not the generator, is the limit", human(c))
				} else {
					h.BatchLimitedBy += fmt.Sprintf("; the ceiling reached only %s decisions/s with the same generator: this machine cannot show 1M/s over HTTP", human(c))
				}
			}
		}
	}
	h.SingleRPS = st.mean("mem-single", "mem-single#2")
	h.CeilingRPS = st.mean("ceiling-single", "ceiling-single#2")
	if h.CeilingRPS > 0 {
		h.SingleRatio = h.SingleRPS / h.CeilingRPS
	}
	if r := st.find("mem-open-050%"); r != nil {
		h.P99AtHalf = dur(r.Latency.P99)
		if r.Accuracy != nil {
			h.UnderPctHalfPeak = r.Accuracy.UnderPct
		}
	}
	if r := st.find("redis-batch100-zipf1M"); r != nil {
		h.RedisPerDecZipf = r.RedisPerDec
	}
	if r := st.find("redis-batch100-hotkey"); r != nil {
		h.RedisPerDecHot = r.RedisPerDec
	}
	if r := st.find("inproc-manager"); r != nil {
		h.InprocDPS, h.InprocStorePerDec = r.DPS, r.RedisPerDec
	}
	if r := st.find("gateway-leased"); r != nil && r.Decisions > 0 {
		h.GatewayDPS, h.GatewayNodeCPUPerM = r.DPS, 1e6*r.ServerCPU/float64(r.Decisions)
		var cpu, dec float64
		for _, s := range st.findAll("mem-single", "mem-single#2") {
			cpu += s.ServerCPU
			dec += float64(s.Decisions)
		}
		if dec > 0 {
			h.SingleNodeCPUPerM = 1e6 * cpu / dec
		}
	}
}

// findAll returns the named runs that exist.
func (st *suite) findAll(names ...string) []*RunResult {
	var out []*RunResult
	for _, n := range names {
		if r := st.find(n); r != nil {
			out = append(out, r)
		}
	}
	return out
}

// mean is the mean RPS of the named runs that exist (decisions/s for
// batch runs).
func (st *suite) mean(names ...string) float64 {
	var sum float64
	n := 0
	for _, r := range st.findAll(names...) {
		if r.Batch > 1 {
			sum += r.DPS
		} else {
			sum += r.RPS
		}
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// LoadSuite reads a run.json written by WriteReport.
func LoadSuite(path string) (*Suite, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read suite results: %w", err)
	}
	var s Suite
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("cannot parse %s: %w", path, err)
	}
	return &s, nil
}

// Rerender recomputes s's headline and ratios from its runs and rewrites
// the report in dir (sluice-bench report): the figures are the measured
// ones, only their presentation changes.
func Rerender(dir string, s *Suite) error {
	st := &suite{s: s, peak: s.Headline.PeakRPS}
	st.headline()
	s.Dir = dir
	return WriteReport(dir, s)
}
