package bench

import (
	"context"
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
