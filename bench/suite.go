package bench

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua"
)

// SuiteConfig configures the standard suite (`make bench`).
type SuiteConfig struct {
	// Sluiced is the node binary. "" skips every node phase (the report
	// says so).
	Sluiced string
	// Self is the sluice-bench binary, started again as the ceiling server
	// ("" means os.Executable()).
	Self string
	// RedisServer is the redis-server binary; "" means from PATH.
	RedisServer string
	// Out is the results root; the run writes Out/<UTC date>/. "" means
	// bench/results.
	Out string
	// Phase is each measured run's duration; 0 means 8s (the suite has
	// about 35 runs: ~5–6 minutes with startup).
	Phase time.Duration
	// Limit is the rule the node enforces and accuracy is measured
	// against; zero means 100 per second, burst 100.
	Limit Limit
	// Keys is the number of keys of the Zipf workloads; 0 means 10,000.
	// RedisKeys is the Redis Zipf workload's, 0 means 1,000,000.
	Keys, RedisKeys int
	// RedisOnly runs only the Redis phases (and their naive baselines).
	RedisOnly bool
	// RedisCompare, when set, is a query of the node's -redis URL (such as
	// "max_batch=1"): the Redis phases run first through a node started
	// with it, named "<phase>[<query>]", each with its naive baseline,
	// then as usual: a before and after in one run.
	RedisCompare string
	// Log receives progress lines; nil means os.Stderr.
	Log io.Writer
}

// Suite is one run of the standard suite: what the report is made of.
type Suite struct {
	Started  time.Time    `json:"started"`
	Host     HostInfo     `json:"host"`
	Limit    Limit        `json:"limit"`
	Phase    string       `json:"phase_duration"`
	Runs     []*RunResult `json:"runs"`
	Notes    []string     `json:"notes"`
	Headline Headline     `json:"headline"`
	Dir      string       `json:"-"`
}

// HostInfo describes the machine.
type HostInfo struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go"`
	OS        string `json:"os"`
	CPUModel  string `json:"cpu_model,omitempty"`
}

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

type suite struct {
	cfg     SuiteConfig
	s       *Suite
	log     io.Writer
	tmp     string
	phase   int
	peak    float64  // mean closed-loop single-check req/s on the memory node
	redis   *Process // redis-server during the Redis phases
	rlsAddr string   // the Redis node's Envoy rate limit service, during the Redis phases
	token   string   // the nodes' client token (the gateway phases lease with it)

	interrupted bool
}

// DefaultSuiteConfig returns the defaults. Phase 8s: long enough for a
// run to hold hundreds of thousands of requests and many lease horizons
// (100ms), short enough that the ~35 runs take about five minutes. Limit
// 100 per second, burst 100: under Zipf(1.0) over 10,000 keys at tens of
// thousands of checks a second, the hottest keys are denied most of the
// time and the coldest never, so both over- and under-admission show.
// RedisKeys 1M: the "Zipf over 1M keys" budget of Redis calls per
// decision (docs/performance.md).
func DefaultSuiteConfig() SuiteConfig {
	return SuiteConfig{
		Out:       filepath.Join("bench", "results"),
		Phase:     8 * time.Second,
		Limit:     Limit{Limit: 100, Period: time.Second, Burst: 100},
		Keys:      10_000,
		RedisKeys: 1_000_000,
	}
}

func (c *SuiteConfig) defaults() error {
	if c.Self == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("self: cannot find own binary: %w", err)
		}
		c.Self = exe
	}
	d := DefaultSuiteConfig()
	if c.Out == "" {
		c.Out = d.Out
	}
	if c.Phase == 0 {
		c.Phase = d.Phase
	}
	if c.Phase < 100*time.Millisecond || c.Phase > time.Minute {
		return fmt.Errorf("phase: must be between 100ms and 1m, got %v", c.Phase)
	}
	if c.Limit == (Limit{}) {
		c.Limit = d.Limit
	}
	if c.Limit.Limit <= 0 || c.Limit.Period < time.Millisecond || c.Limit.Burst <= 0 {
		return fmt.Errorf("limit: %w", ErrBadLimit)
	}
	if c.Keys == 0 {
		c.Keys = d.Keys
	}
	if c.RedisKeys == 0 {
		c.RedisKeys = d.RedisKeys
	}
	if c.Keys < 1 || c.Keys > MaxKeys || c.RedisKeys < 1 || c.RedisKeys > MaxKeys {
		return fmt.Errorf("keys: keys and redis-keys must be between 1 and %d", MaxKeys)
	}
	if c.RedisCompare != "" {
		if _, err := lua.ParseURL("redis://127.0.0.1:6379?" + c.RedisCompare); err != nil {
			return fmt.Errorf("redis-compare: %w", err)
		}
	}
	if c.Log == nil {
		c.Log = os.Stderr
	}
	return nil
}

// RunSuite runs the standard suite and writes its report. Every phase is
// bounded (Phase plus a few seconds of grace); every process it starts is
// stopped before it returns.
func RunSuite(ctx context.Context, cfg SuiteConfig) (*Suite, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "sluice-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	st := &suite{cfg: cfg, log: cfg.Log, tmp: tmp, s: &Suite{
		Started: time.Now().UTC(), Limit: cfg.Limit, Phase: cfg.Phase.String(),
		Host: HostInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPUModel: cpuModel()},
	}}
	st.run(ctx)
	st.headline()
	dir := filepath.Join(cfg.Out, st.s.Started.Format("2006-01-02"))
	st.s.Dir = dir
	if err := WriteReport(dir, st.s); err != nil {
		return st.s, err
	}
	st.logf("report written to %s", dir)
	return st.s, nil
}

func (st *suite) logf(format string, args ...any) {
	fmt.Fprintf(st.log, time.Now().UTC().Format("15:04:05 ")+format+"\n", args...)
}

func (st *suite) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	st.s.Notes = append(st.s.Notes, msg)
	st.logf("NOTE: %s", msg)
}

func (st *suite) ruleFile() (string, error) {
	l := st.cfg.Limit
	yaml := fmt.Sprintf(`# Written by sluice-bench: the rule the accuracy figures are measured against.
rules:
  - name: bench
    algorithm: token_bucket
    limit: %d
    period: %s
    burst: %d
    key: header:X-Bench-Key
  # Per-second fixed windows (envoyproxy/ratelimit's unit: second), the
  # same limit. No key: only explicit checks reach it.
  - name: bench-fw
    algorithm: fixed_window
    limit: %d
    period: 1s
  # Limits no workload reaches: every check is allowed (the node's best
  # case). No key: only explicit checks reach it.
  - name: bench-big
    algorithm: token_bucket
    limit: 1000000000
    period: 1s
`, l.Limit, l.Period, l.Burst, l.Limit)
	path := filepath.Join(st.tmp, "rules.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o644)
}

// rlsFile writes the Envoy rate limit service configuration of the RLS
// phases: envoyproxy/ratelimit's YAML, a per-second limit (unit: second,
// counted as a fixed window, as envoy counts) of the rule's limit on
// each value of the descriptor entry "user" in domain "bench".
func (st *suite) rlsFile() (string, error) {
	yaml := fmt.Sprintf(`# Written by sluice-bench: the RLS phases' configuration.
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: %d}
`, st.cfg.Limit.Limit)
	path := filepath.Join(st.tmp, "rls.yaml")
	return path, os.WriteFile(path, []byte(yaml), 0o644)
}

// startNode starts sluiced; redisAddr "" means the in-memory store. extra
// are more flags.
func (st *suite) startNode(name, rules, redisAddr string, extra ...string) (*Process, string, error) {
	addr, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	gossip, err := FreePort()
	if err != nil {
		return nil, "", err
	}
	// A cluster (of one) needs a cluster key: a fresh one per node.
	var key [32]byte
	_, _ = rand.Read(key[:])
	if st.token == "" {
		var tok [16]byte
		_, _ = rand.Read(tok[:])
		st.token = base64.RawURLEncoding.EncodeToString(tok[:])
	}
	args := []string{"-listen", addr, "-rules", rules, "-gossip", gossip, "-log-level", "warn",
		"-cluster-key", base64.StdEncoding.EncodeToString(key[:]), "-client-token", st.token}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	args = append(args, extra...)
	p, err := StartProcess(name, st.cfg.Sluiced, args...)
	if err != nil {
		return nil, "", err
	}
	if err := WaitHTTP(addr, "/healthz", p, 15*time.Second); err != nil {
		p.Stop(5 * time.Second)
		return nil, "", err
	}
	return p, addr, nil
}

// phaseSpec is one measured run of the suite.
type phaseSpec struct {
	name  string
	rule  string // "" means bench
	kind  HTTPKind
	mode  Mode
	rate  int64
	conns int
	work  int
	batch int
	keys  KeyConfig
	acc   bool
	// warm, when set, runs the workload unmeasured for that long first
	// (same keys, same order): with Cycle keys, a warm pass of one whole
	// cycle makes every measured check one of a key coming back after a
	// cycle's idle spell.
	warm time.Duration
	// naive runs the naive counter (NewNaiveDriver) on the same Redis with
	// the same workload right after the run, for the baseline.
	naive bool
	// gateway decides in this process with a client.Limiter leasing from
	// the node (NewGatewayDriver) instead of sending checks (kind unused).
	gateway bool
	// rls calls the node's Envoy rate limit service (NewRLSDriver, on
	// st.rlsAddr; kind and rule unused, conns are HTTP/2 connections).
	rls bool
}

func (st *suite) keysFor(k KeyConfig) KeyConfig {
	st.phase++
	k.Prefix = fmt.Sprintf("p%d-%d-", st.phase, st.s.Started.Unix()%100000)
	k.Seed = uint64(st.phase)
	return k
}

// measure runs one HTTP phase against addr, charging CPU to the processes
// in procs and Redis calls to redisAddr (if set).
func (st *suite) measure(ctx context.Context, addr string, ps phaseSpec, procs []*Process, redisAddr string) *RunResult {
	if ctx.Err() != nil {
		if !st.interrupted {
			st.interrupted = true
			st.note("interrupted: the remaining phases were not run")
		}
		return nil
	}
	kc := st.keysFor(ps.keys)
	rule := ps.rule
	if rule == "" {
		rule = "bench"
	}
	var d Driver
	var err error
	switch {
	case ps.gateway:
		d, err = NewGatewayDriver(GatewayConfig{Nodes: []string{addr}, Token: st.token, Rule: rule, Keys: kc.KeyNames()})
	case ps.rls:
		d, err = NewRLSDriver(RLSConfig{Addr: st.rlsAddr, Conns: ps.conns, Keys: kc.KeyNames()})
	default:
		d, err = NewHTTPDriver(HTTPConfig{Kind: ps.kind, Addr: addr, Conns: ps.conns, Rule: rule, Keys: kc.KeyNames()})
	}
	if err != nil {
		st.note("%s: %v", ps.name, err)
		return nil
	}
	defer d.Close()
	rc := RunConfig{Name: ps.name, Mode: ps.mode, Rate: ps.rate, Duration: st.cfg.Phase, Workers: ps.work, Batch: ps.batch, Keys: kc}
	if ps.warm > 0 {
		w := rc
		w.Name, w.Duration = ps.name+"-warm", ps.warm
		st.logf("%-22s warming for %v (not measured)", ps.name, ps.warm)
		if _, err := Run(ctx, d, w); err != nil {
			st.note("%s: warm pass: %v", ps.name, err)
			return nil
		}
	}
	if ps.acc {
		l := st.cfg.Limit
		rc.Limit = &l
	}
	var before map[string]int64
	var tries0, samples0 int64
	var ftErr error
	if redisAddr != "" {
		if before, err = RedisCommandStats(ctx, redisAddr); err != nil {
			st.note("%s: %v", ps.name, err)
		}
		tries0, samples0, ftErr = nodeFirstTouches(addr)
	}
	cpu0 := make([]float64, len(procs))
	for i, p := range procs {
		cpu0[i] = p.CPU()
	}
	rcpu0 := st.redisCPU(redisAddr)
	r, err := Run(ctx, d, rc)
	if err != nil {
		st.note("%s: %v", ps.name, err)
		return nil
	}
	r.Warm = ps.warm
	for i, p := range procs {
		r.ServerCPU += p.CPU() - cpu0[i]
	}
	st.setRedisCPU(r, redisAddr, rcpu0)
	r.OtherCPU = max(0, r.OtherCPU-r.ServerCPU)
	if redisAddr != "" && before != nil {
		after, err := RedisCommandStats(ctx, redisAddr)
		if err == nil {
			diff, total := DiffCommandStats(before, after)
			r.RedisCalls = diff
			if r.Decisions > 0 {
				r.RedisPerDec = float64(ScriptCalls(diff)) / float64(r.Decisions)
				r.RedisCmdsPerDec = float64(total) / float64(r.Decisions)
			}
		}
		if tries, samples, err := nodeFirstTouches(addr); err == nil && ftErr == nil {
			r.FirstTouches, r.ClockSamples = tries-tries0, samples-samples0
		} else {
			st.note("%s: the node's first-touch counters: %v (scripts run then count first touches too)", ps.name, errors.Join(ftErr, err))
		}
	}
	st.s.Runs = append(st.s.Runs, r)
	st.logf("%-22s %8.0f req/s %10.0f dec/s  p50 %-9v p99 %-9v errors %d degraded %d  cpu: server %.1fs gen %.1fs other %.1fs",
		r.Name, r.RPS, r.DPS, r.Latency.P50.Round(time.Microsecond), r.Latency.P99.Round(time.Microsecond), r.Errors, r.Degraded, r.ServerCPU, r.GenCPU, r.OtherCPU)
	if r.RedisCalls != nil {
		st.logf("  Redis: %.4f%% script calls per decision, %.4f%% scripts run, %.4f%% first touches (%.4f%% all commands)", 100*r.RedisPerDec, 100*runsPerDec(r), 100*firstTouchesPerDec(r), 100*r.RedisCmdsPerDec)
	}
	if r.FirstErr != "" {
		st.logf("  first error: %s", r.FirstErr)
	}
	if ps.naive && redisAddr != "" {
		st.naive(ctx, redisAddr, r, rc)
	}
	return r
}

// redisCPU is redis-server's CPU so far when addr is the suite's Redis.
func (st *suite) redisCPU(addr string) float64 {
	if addr == "" || st.redis == nil {
		return 0
	}
	return st.redis.CPU()
}

func (st *suite) setRedisCPU(r *RunResult, addr string, cpu0 float64) {
	if addr == "" || st.redis == nil {
		return
	}
	r.RedisCPU = st.redis.CPU() - cpu0
	if r.Decisions > 0 {
		r.RedisUsPerDec = 1e6 * r.RedisCPU / float64(r.Decisions)
	}
}

// naive runs the naive counter on Redis with rc's workload (same keys,
// same order, same rate or concurrency) and sets r.Naive. It measures no
// accuracy: a fixed window admits up to twice its limit across a window
// edge, which is its design, not a finding.
func (st *suite) naive(ctx context.Context, addr string, r *RunResult, rc RunConfig) {
	if ctx.Err() != nil {
		return
	}
	l := st.cfg.Limit
	d, err := NewNaiveDriver(NaiveConfig{Addr: addr, Keys: rc.Keys.KeyNames(), Limit: l})
	if err != nil {
		st.note("%s: naive baseline: %v", r.Name, err)
		return
	}
	defer d.Close()
	rc.Name, rc.Limit = "naive-"+strings.TrimPrefix(r.Name, "redis-"), nil
	cpu0 := st.redisCPU(addr)
	n, err := Run(ctx, d, rc)
	if err != nil {
		st.note("%s: naive baseline: %v", r.Name, err)
		return
	}
	st.setRedisCPU(n, addr, cpu0)
	n.ServerCPU = n.RedisCPU
	n.OtherCPU = max(0, n.OtherCPU-n.ServerCPU)
	n.Note = "baseline: one pipelined INCRBY + EXPIRE per check (fixed window, as envoyproxy/ratelimit)"
	st.s.Runs = append(st.s.Runs, n)
	b := &Baseline{Run: n.Name, Decisions: n.Decisions, RedisUsPerDec: n.RedisUsPerDec}
	if b.RedisUsPerDec > 0 {
		b.Ratio = r.RedisUsPerDec / b.RedisUsPerDec
	}
	r.Naive = b
	st.logf("%-22s %8.0f req/s %10.0f dec/s  Redis CPU %.2f µs/decision (Sluice %.2f: %.2f×)",
		n.Name, n.RPS, n.DPS, n.RedisUsPerDec, r.RedisUsPerDec, b.Ratio)
}

func (st *suite) run(ctx context.Context) {
	zipf := KeyConfig{Keys: st.cfg.Keys, Dist: Zipf, ZipfS: 1.0}
	closed := []phaseSpec{
		{name: "single", kind: Single, conns: 128, work: 128, batch: 1, keys: zipf, acc: true},
		{name: "pipelined", kind: Pipelined, conns: 4, work: 256, batch: 1, keys: zipf, acc: true},
		{name: "batch100", kind: Batch, conns: 16, work: 16, batch: 100, keys: zipf, acc: true},
		{name: "auth", kind: ForwardAuth, conns: 128, work: 128, batch: 1, keys: zipf, acc: true},
	}
	rules, err := st.ruleFile()
	if err != nil {
		st.note("cannot write the rule file: %v", err)
		return
	}

	if st.cfg.RedisOnly {
		if st.cfg.Sluiced != "" {
			st.redisBlocks(ctx, rules)
		}
		return
	}

	// 1. Node on the in-memory store, and the ceiling: a bare fasthttp
	// server replaying the node's answers. Each shape is measured on the
	// node and then on the ceiling, back to back, so that load from outside
	// the suite hits both alike; single checks and batches, the headline
	// figures, are measured node, ceiling, ceiling, node.
	if st.cfg.Sluiced == "" {
		st.note("no sluiced binary given: node phases skipped")
	}
	var node *Process
	var addr string
	canned := SyntheticCanned(100)
	if st.cfg.Sluiced != "" {
		if node, addr, err = st.startNode("sluiced-memory", rules, ""); err != nil {
			st.note("node on the memory store did not start, its phases are skipped: %v", err)
			node = nil
		} else {
			st.logf("node (memory store) on %s, pid %d", addr, node.Pid())
			if c, err := CaptureCanned(addr, "bench", 100); err != nil {
				st.note("cannot record the node's answers for the ceiling (using synthetic ones): %v", err)
			} else {
				canned = c
			}
		}
	}
	ceil, caddr := st.startCeiling(canned)
	var peaks []float64
	for _, ps := range closed {
		mem, cps := ps, ps
		mem.name, cps.name, cps.acc = "mem-"+ps.name, "ceiling-"+ps.name, false
		var order []bool // true: node
		if ps.kind == Single || ps.kind == Batch {
			order = []bool{true, false, false, true}
		} else {
			order = []bool{true, false}
		}
		seen := map[bool]int{}
		for _, onNode := range order {
			seen[onNode]++
			suffix := ""
			if seen[onNode] > 1 {
				suffix = fmt.Sprintf("#%d", seen[onNode])
			}
			if onNode && node != nil {
				x := mem
				x.name += suffix
				if r := st.measure(ctx, addr, x, []*Process{node}, ""); r != nil && ps.kind == Single {
					peaks = append(peaks, r.RPS)
				}
			} else if !onNode && ceil != nil {
				x := cps
				x.name += suffix
				st.measure(ctx, caddr, x, []*Process{ceil}, "")
			}
		}
	}
	if ceil != nil {
		ceil.Stop(5 * time.Second)
	}
	if node != nil {
		// The node's best case: every check allowed (on the memory store
		// the node decides each in it; on Redis, from leased tokens).
		st.measure(ctx, addr, phaseSpec{name: "mem-batch100-leased", rule: "bench-big", kind: Batch, conns: 16, work: 16, batch: 100,
			keys: KeyConfig{Keys: 1000, Dist: Uniform}}, []*Process{node}, "")
		// Decisions made in a gateway: a client.Limiter in this process
		// leases from the node and decides from memory; the node's CPU per
		// decision is set against mem-single's. Leased: every key's tokens
		// last the run (the gateway's best case); then the accuracy rule,
		// whose hot keys the gateway denies and whose cold ones it leases
		// again and again.
		st.measure(ctx, addr, phaseSpec{name: "gateway-leased", rule: "bench-big", gateway: true, work: 64, batch: 100, keys: zipf}, []*Process{node}, "")
		st.measure(ctx, addr, phaseSpec{name: "gateway-bench", gateway: true, work: 64, batch: 100, keys: zipf, acc: true}, []*Process{node}, "")
	}
	peak := 0.0
	for _, p := range peaks {
		peak += p / float64(len(peaks))
	}
	if node != nil && peak > 0 {
		// Peak: the mean of the closed-loop single-check runs.
		st.peak = peak
		for _, f := range []float64{0.1, 0.25, 0.5, 0.75, 0.9, 1.0, 1.2, 1.5} {
			st.measure(ctx, addr, phaseSpec{
				name: fmt.Sprintf("mem-open-%03.0f%%", f*100), kind: Single, mode: Open,
				rate: int64(math.Max(1, f*peak)), conns: 128, work: 256, batch: 1, keys: zipf, acc: true,
			}, []*Process{node}, "")
		}
	}
	if node != nil {
		if err := node.Stop(10 * time.Second); err != nil {
			st.note("%v", err)
		}
	}

	// 3. Node on Redis.
	if st.cfg.Sluiced != "" {
		st.redisBlocks(ctx, rules)
	}

	// 4. In-process lease.Manager on the memory store.
	st.inproc(ctx)
}

// startCeiling starts `sluice-bench ceiling` as its own process, so that
// its CPU is measured like the node's.
func (st *suite) startCeiling(canned CannedSet) (*Process, string) {
	path := filepath.Join(st.tmp, "canned.json")
	if err := SaveCanned(path, canned); err != nil {
		st.note("ceiling skipped: cannot write canned answers: %v", err)
		return nil, ""
	}
	addr, err := FreePort()
	if err != nil {
		st.note("ceiling skipped: %v", err)
		return nil, ""
	}
	p, err := StartProcess("ceiling", st.cfg.Self, "ceiling", "-listen", addr, "-canned", path)
	if err == nil {
		if err = WaitHTTP(addr, "/v1/check", p, 10*time.Second); err != nil {
			p.Stop(5 * time.Second)
		}
	}
	if err != nil {
		st.note("ceiling skipped: the ceiling server did not start: %v", err)
		return nil, ""
	}
	return p, addr
}

// redisBlocks runs the Redis phases: through a node with the
// RedisCompare query first, if set, then as configured.
func (st *suite) redisBlocks(ctx context.Context, rules string) {
	if q := st.cfg.RedisCompare; q != "" {
		st.redisPhases(ctx, rules, q)
	}
	st.redisPhases(ctx, rules, "")
}

// redisPhases runs the Redis phases on a redis-server of their own,
// through a node whose -redis URL has query (if set; the phases' names
// then end in "[query]").
func (st *suite) redisPhases(ctx context.Context, rules, query string) {
	rp, raddr, err := StartRedis(st.cfg.RedisServer, st.tmp)
	if err != nil {
		st.note("Redis phases skipped: %v", err)
		return
	}
	defer rp.Stop(5 * time.Second)
	st.redis = rp
	defer func() { st.redis = nil }()
	nodeRedis, suffix := raddr, ""
	if query != "" {
		nodeRedis, suffix = "redis://"+raddr+"?"+query, "["+query+"]"
	}
	// The node also serves the Envoy rate limit service, for the RLS phases.
	var extra []string
	rlsConf, err := st.rlsFile()
	if err == nil {
		st.rlsAddr, err = FreePort()
	}
	if err != nil {
		st.note("RLS phases skipped: %v", err)
		st.rlsAddr = ""
	} else {
		extra = []string{"-rls-listen", st.rlsAddr, "-rls-config", rlsConf}
	}
	defer func() { st.rlsAddr = "" }()
	node, addr, err := st.startNode("sluiced-redis", rules, nodeRedis, extra...)
	if err != nil {
		st.note("Redis phases skipped: the node refused -redis or did not start: %v", err)
		return
	}
	defer node.Stop(10 * time.Second)
	st.logf("node (Redis store %s) on %s, pid %d", raddr, addr, node.Pid())
	procs := []*Process{node, rp}
	zipf := KeyConfig{Keys: st.cfg.RedisKeys, Dist: Zipf, ZipfS: 1.0}
	hot := KeyConfig{Keys: 1, Dist: Hot, HotShare: 1}
	uniform := KeyConfig{Keys: 10_000, Dist: Uniform}
	// Keys coming back after an idle spell: a cycle of idleCycle at
	// idleRate checks/s, longer than a node's idle return (10s, plus up to
	// a sweep interval), warmed by one whole cycle.
	const idleRate, idleCycle = 1000, 15 * time.Second
	idle := KeyConfig{Keys: int(idleRate * idleCycle / time.Second), Dist: Cycle}
	var single *RunResult
	for _, ps := range []phaseSpec{
		{name: "redis-single", kind: Single, conns: 128, work: 128, batch: 1, keys: KeyConfig{Keys: st.cfg.Keys, Dist: Zipf}, acc: true, naive: true},
		{name: "redis-batch100-zipf1M", kind: Batch, conns: 16, work: 16, batch: 100, keys: zipf, acc: true, naive: true},
		{name: "redis-batch100-hotkey", kind: Batch, conns: 16, work: 16, batch: 100, keys: hot, acc: true, naive: true},
		{name: "redis-uniform-5k", kind: Single, mode: Open, rate: 5000, conns: 64, work: 128, batch: 1, keys: uniform, acc: true, naive: true},
		// The same workload in continuous operation: a warm pass of one
		// phase first touches all but ~2% of the keys (each is checked
		// ~4 times in it), so what is measured is keys already leased.
		{name: "redis-uniform-5k-warm", kind: Single, mode: Open, rate: 5000, conns: 64, work: 128, batch: 1, keys: uniform, acc: true, naive: true, warm: st.cfg.Phase},
		{name: "redis-idle-return", kind: Single, mode: Open, rate: idleRate, conns: 64, work: 128, batch: 1, keys: idle, acc: true, naive: true, warm: idleCycle},
		{name: "redis-fw1s-5k", rule: "bench-fw", kind: Single, mode: Open, rate: 5000, conns: 64, work: 128, batch: 1, keys: uniform, naive: true},
		// Per-second windows in continuous operation: the keys already
		// leased, with their shares of the windows ahead.
		{name: "redis-fw1s-5k-warm", rule: "bench-fw", kind: Single, mode: Open, rate: 5000, conns: 64, work: 128, batch: 1, keys: uniform, naive: true, warm: st.cfg.Phase},
		// The same through the Envoy rate limit service (unit: second):
		// what an Envoy fleet's calls cost Redis.
		{name: "redis-rls1s-5k", rls: true, mode: Open, rate: 5000, conns: 4, work: 128, batch: 1, keys: uniform, naive: true},
		{name: "redis-rls1s-5k-warm", rls: true, mode: Open, rate: 5000, conns: 4, work: 128, batch: 1, keys: uniform, naive: true, warm: st.cfg.Phase},
	} {
		if ps.rls && st.rlsAddr == "" {
			continue
		}
		ps.name += suffix
		r := st.measure(ctx, addr, ps, procs, raddr)
		if ps.name == "redis-single"+suffix {
			single = r
		}
	}
	if single != nil && single.RPS > 0 {
		st.measure(ctx, addr, phaseSpec{name: "redis-open-050%" + suffix, kind: Single, mode: Open, rate: int64(math.Max(1, single.RPS/2)),
			conns: 128, work: 256, batch: 1, keys: KeyConfig{Keys: st.cfg.Keys, Dist: Zipf}, acc: true, naive: true}, procs, raddr)
	}
}

func (st *suite) inproc(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	cfg := lease.DefaultConfig()
	cfg.Logger = nil
	mgr := lease.NewManager(store, cfg)
	defer mgr.Close()
	l := st.cfg.Limit
	kc := st.keysFor(KeyConfig{Keys: st.cfg.Keys, Dist: Zipf})
	d, err := NewInprocDriver(InprocConfig{Manager: mgr, Policy: lease.Policy{Algorithm: lease.TokenBucket, Limit: l.Limit, Period: l.Period, Burst: l.Burst}, Keys: kc.KeyNames()})
	if err != nil {
		st.note("inproc: %v", err)
		return
	}
	s0 := mgr.Stats()
	r, err := Run(ctx, d, RunConfig{Name: "inproc-manager", Mode: Closed, Duration: st.cfg.Phase, Workers: runtime.GOMAXPROCS(0) * 2, Batch: 100, Keys: kc, Limit: &l})
	if err != nil {
		st.note("inproc: %v", err)
		return
	}
	s1 := mgr.Stats()
	calls := (s1.Leases - s0.Leases) + (s1.Prefetches - s0.Prefetches)
	if r.Decisions > 0 {
		r.RedisPerDec = float64(calls) / float64(r.Decisions)
	}
	r.Note = fmt.Sprintf("latency is per 100 Take calls; %d Store lease calls (MemoryStore)", calls)
	st.s.Runs = append(st.s.Runs, r)
	st.logf("%-22s %10.0f dec/s  store calls/decision %.5f", r.Name, r.DPS, r.RedisPerDec)
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

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

var errNoRuns = errors.New("no runs to report")
