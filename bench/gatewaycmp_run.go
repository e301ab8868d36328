package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// CompareRunConfig configures RunCompare: Compare against a node on the
// memory store and one on Redis, each started for the run.
type CompareRunConfig struct {
	// Sluiced is the node binary; RedisServer the redis-server binary
	// ("" means from PATH).
	Sluiced, RedisServer string
	// Stores are the nodes' stores, "memory" and/or "redis"; empty means
	// both.
	Stores []string
	// Compare is each node's comparison (Addr, Token, NodeCPU and Prefix
	// are set per node).
	Compare CompareConfig
	// PerfDir, when set, records the node's CPU profile with `perf
	// record -g` during its first-touch and cold-stream phases
	// (PerfDir/node-<store>.perf.data; perf report -i reads it). The
	// profiler's own cost shows in the figures: profile in a run of its
	// own.
	PerfDir string
	// Log receives progress lines; nil means os.Stderr.
	Log io.Writer
}

// CompareRun is one Compare per store.
type CompareRun struct {
	Started time.Time              `json:"started"`
	Host    HostInfo               `json:"host"`
	Stores  map[string]*Comparison `json:"stores"`
}

// RunCompare starts each store's node (and Redis), runs Compare against
// it, and stops what it started.
func RunCompare(ctx context.Context, cfg CompareRunConfig) (*CompareRun, error) {
	if cfg.Sluiced == "" {
		return nil, fmt.Errorf("sluiced: the node binary is required")
	}
	if len(cfg.Stores) == 0 {
		cfg.Stores = []string{"memory", "redis"}
	}
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	tmp, err := os.MkdirTemp("", "sluice-compare-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// The suite's node start-up and rule file (its bench-big rule).
	st := &suite{cfg: SuiteConfig{Sluiced: cfg.Sluiced, RedisServer: cfg.RedisServer, Limit: DefaultSuiteConfig().Limit}, tmp: tmp, log: cfg.Log,
		s: &Suite{Started: time.Now().UTC()}}
	rules, err := st.ruleFile()
	if err != nil {
		return nil, err
	}
	out := &CompareRun{Started: st.s.Started, Host: HostInfo{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, CPUModel: cpuModel()},
		Stores: map[string]*Comparison{}}
	for _, store := range cfg.Stores {
		var redisAddr string
		switch store {
		case "memory":
		case "redis":
			rp, addr, err := StartRedis(cfg.RedisServer, tmp)
			if err != nil {
				return out, err
			}
			defer rp.Stop(5 * time.Second)
			redisAddr = addr
		default:
			return out, fmt.Errorf("stores: %q is neither memory nor redis", store)
		}
		node, addr, err := st.startNode("sluiced-"+store, rules, redisAddr)
		if err != nil {
			return out, err
		}
		cc := cfg.Compare
		cc.Addr, cc.Token, cc.NodeCPU = addr, st.token, node.CPU
		cc.Prefix = store + strconv.FormatInt(time.Now().Unix()%100000, 10) + "-"
		cc.Log = prefixed{cfg.Log, store + ": "}
		var stopPerf func()
		if cfg.PerfDir != "" {
			if stopPerf, err = perfRecord(filepath.Join(cfg.PerfDir, "node-"+store+".perf.data"), node.Pid()); err != nil {
				node.Stop(5 * time.Second)
				return out, err
			}
		}
		fmt.Fprintf(cfg.Log, "%s: node pid %d on %s\n", store, node.Pid(), addr)
		c, err := Compare(ctx, cc)
		if stopPerf != nil {
			stopPerf()
		}
		node.Stop(5 * time.Second)
		if err != nil {
			return out, fmt.Errorf("%s: %w", store, err)
		}
		out.Stores[store] = c
	}
	return out, nil
}

// perfRecord starts `perf record -g` on pid, writing to path; stop ends it
// (SIGINT, as perf expects) and waits for the file.
func perfRecord(path string, pid int) (stop func(), err error) {
	cmd := exec.Command("perf", "record", "-g", "-F", "999", "-o", path, "-p", strconv.Itoa(pid))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot start perf: %w", err)
	}
	return func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}, nil
}

// prefixed writes each Write with a prefix (one Fprintf = one line).
type prefixed struct {
	w      io.Writer
	prefix string
}

func (p prefixed) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}

// WriteCompare writes r as a Markdown table, the targets of issue 34
// beside each figure.
func WriteCompare(w io.Writer, r *CompareRun, cfg CompareConfig) {
	cfg.defaults()
	fmt.Fprintf(w, "| figure | store | Limiter | Go client | ratio | target |\n|---|---|---|---|---|---|\n")
	for _, store := range []string{"memory", "redis"} {
		c := r.Stores[store]
		if c == nil {
			continue
		}
		fl, fc := c.FirstLimiter.Latency, c.FirstClient.Latency
		fmt.Fprintf(w, "| first touch p50 (p99), %d keys each | %s | %v (%v) | %v (%v) | %.2f× | ≤ 1.1× |\n",
			cfg.FirstTouches, store, fl.P50, fl.P99, fc.P50, fc.P99, c.FirstRatio)
		fmt.Fprintf(w, "| node CPU per 1k first touches | %s | %.1f ms | %.1f ms | %.2f× | — |\n",
			store, c.FirstLimiter.NodeCPUPerK, c.FirstClient.NodeCPUPerK, ratio(c.FirstLimiter.NodeCPUPerK, c.FirstClient.NodeCPUPerK))
		fmt.Fprintf(w, "| cold stream, Zipf %.1f over %d keys, %d goroutines, %v: decisions/s (degraded) | %s | %.0f (%d) | %.0f (%d) | %.2f× | ≥ 1× |\n",
			cfg.ZipfS, cfg.Keys, cfg.Goroutines, cfg.Stream, store, c.ColdLimiter.ExactDPS, c.ColdLimiter.Degraded,
			c.ColdClient.ExactDPS, c.ColdClient.Degraded, c.ColdRatio)
		fmt.Fprintf(w, "| cold stream: node CPU per 1k decisions | %s | %.1f ms | %.1f ms | %.2f× | — |\n",
			store, c.ColdLimiter.NodeCPUPerK, c.ColdClient.NodeCPUPerK, ratio(c.ColdLimiter.NodeCPUPerK, c.ColdClient.NodeCPUPerK))
		fmt.Fprintf(w, "| cold stream: this process's CPU per 1k decisions | %s | %.1f ms | %.1f ms | %.2f× | — |\n",
			store, c.ColdLimiter.SelfCPUPerK, c.ColdClient.SelfCPUPerK, ratio(c.ColdLimiter.SelfCPUPerK, c.ColdClient.SelfCPUPerK))
		warm := "not within the phase"
		if c.WarmAt >= 0 {
			warm = c.WarmAt.String()
		}
		fmt.Fprintf(w, "| warm (≤ 1%% of checks wait for the node), Zipf %.1f over %d keys | %s | %s | — | — | ≤ 1s |\n",
			cfg.ZipfS, cfg.WarmKeys, store, warm)
		fmt.Fprintf(w, "| leased key, %d goroutines: decisions/s (allocs) | %s | %.1fM (%.2f) | — | — | ≥ 20M, 0 |\n",
			cfg.Goroutines, store, c.LeasedOne.DPS/1e6, c.LeasedOne.Allocs)
		fmt.Fprintf(w, "| Zipf over %d leased keys: decisions/s (allocs) | %s | %.1fM (%.2f) | — | — | ≥ 5M, 0 |\n",
			cfg.WarmKeys, store, c.LeasedZipf.DPS/1e6, c.LeasedZipf.Allocs)
		for _, s := range []*Side{&c.FirstLimiter, &c.FirstClient, &c.ColdLimiter, &c.ColdClient, &c.LeasedOne, &c.LeasedZipf} {
			if s.Errors > 0 || s.Degraded > 0 {
				fmt.Fprintf(w, "\n%s: %d errors (first: %s), %d degraded decisions in a phase\n", store, s.Errors, s.FirstErr, s.Degraded)
				break
			}
		}
	}
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}
