package bench

import (
	"context"
	"math"
	"time"
)

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
