package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

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
