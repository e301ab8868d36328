package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/node/client"
)

// CompareConfig configures Compare: a client.Limiter (a gateway deciding
// in its own process) against the plain Go client (client.Client.Check,
// one POST /v1/check per check) on the same node, in the same run, each
// phase with keys no other phase used.
type CompareConfig struct {
	// Addr is the node's host:port; Token its client token.
	Addr, Token string
	// Rule is a rule whose limit no phase reaches (every check allowed),
	// so that what is measured is the cost of a decision, not a denial's.
	// "" means "bench-big" (the suite's rule file has it).
	Rule string
	// FirstTouches is the keys each side decides for the first time in
	// the first-touch phase, one after another, alternately. 0 means 2000.
	FirstTouches int
	// Stream is the length of the cold-stream phases (a fresh Limiter,
	// then the Go client, on the same Zipf stream over Keys). 0 means 4s.
	Stream time.Duration
	// Goroutines decide at once in the stream phases. 0 means 2.
	Goroutines int
	// Keys is the cold stream's key count, ZipfS its exponent. 0 means
	// 1,000,000 and 1.1.
	Keys  int
	ZipfS float64
	// WarmKeys is the warm-up phase's key count (a fresh Limiter on Zipf
	// over them, timed until its checks stop needing the node). 0 means
	// 10,000; WarmFor bounds the phase, 0 means 3s.
	WarmKeys int
	WarmFor  time.Duration
	// Leased is the length of each leased phase (one key; Zipf over
	// WarmKeys, warm). 0 means 2s.
	Leased time.Duration
	// Prefix starts every key (unique per run); "" means "c<unix time>-".
	Prefix string
	// LeaseRequests is the Limiters' LimiterConfig.LeaseRequests (0: its
	// default).
	LeaseRequests int
	// NodeCPU, when not nil, reads the node's CPU seconds: each phase
	// reports the node's CPU per decision.
	NodeCPU func() float64
	// Log receives a line per phase; nil means none.
	Log io.Writer
}

// Side is one side's figures in a phase.
type Side struct {
	Decisions int64         `json:"decisions"`
	Errors    int64         `json:"errors"`
	Degraded  int64         `json:"degraded"`
	Elapsed   time.Duration `json:"elapsed_ns"`
	DPS       float64       `json:"decisions_per_s"`
	// ExactDPS counts only the decisions that were not Degraded (made by
	// on_store_failure while no node answered, or answered 429).
	ExactDPS float64      `json:"exact_decisions_per_s"`
	Latency  *Percentiles `json:"latency,omitempty"`
	// NodeCPUPerK is the node's CPU milliseconds per 1000 decisions (0
	// without CompareConfig.NodeCPU); SelfCPUPerK this process's.
	NodeCPUPerK float64 `json:"node_cpu_ms_per_1k"`
	SelfCPUPerK float64 `json:"self_cpu_ms_per_1k"`
	// Allocs is heap allocations per decision (the leased phases).
	Allocs   float64 `json:"allocs_per_decision,omitempty"`
	FirstErr string  `json:"first_error,omitempty"`
}

// WarmWindow is one 100ms window of the warm-up phase.
type WarmWindow struct {
	End       time.Duration `json:"end_ns"`
	Decisions int64         `json:"decisions"`
	// Store is the checks that waited for a lease call (the Limiter's
	// Manager's StoreDecisions) in the window.
	Store int64 `json:"store_decisions"`
}

// Comparison is what Compare measured.
type Comparison struct {
	FirstLimiter, FirstClient Side
	// FirstRatio is the Limiter's first-touch p50 over the client's.
	FirstRatio              float64
	ColdLimiter, ColdClient Side
	// ColdRatio is the Limiter's decisions/s over the client's, counting
	// only decisions that were not Degraded.
	ColdRatio float64
	// WarmAt is when the warm-up phase's Limiter became warm: the end of
	// the first 100ms window in which at most 1% of its checks waited for
	// the node (-1: not within WarmFor).
	WarmAt      time.Duration
	WarmWindows []WarmWindow
	Warm        Side // the warm-up phase as a whole
	LeasedOne   Side // one leased key
	LeasedZipf  Side // Zipf over WarmKeys, every key leased
}

func (c *CompareConfig) defaults() {
	if c.Rule == "" {
		c.Rule = "bench-big"
	}
	if c.FirstTouches <= 0 {
		c.FirstTouches = 2000
	}
	if c.Stream <= 0 {
		c.Stream = 4 * time.Second
	}
	if c.Goroutines <= 0 {
		c.Goroutines = 2
	}
	if c.Keys <= 0 {
		c.Keys = 1_000_000
	}
	if c.ZipfS <= 0 {
		c.ZipfS = 1.1
	}
	if c.WarmKeys <= 0 {
		c.WarmKeys = 10_000
	}
	if c.WarmFor <= 0 {
		c.WarmFor = 3 * time.Second
	}
	if c.Leased <= 0 {
		c.Leased = 2 * time.Second
	}
	if c.Prefix == "" {
		c.Prefix = "c" + strconv.FormatInt(time.Now().Unix(), 10) + "-"
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
}

// Compare runs the phases against one node: first touches (the Limiter's
// and the client's, alternately, each timed), the cold Zipf stream (a
// fresh Limiter, then the client, for Stream each), the warm-up of a fresh
// Limiter on WarmKeys, and the leased phases (that Limiter on one key,
// then on every WarmKey). Every phase is bounded in time.
func Compare(ctx context.Context, cfg CompareConfig) (*Comparison, error) {
	cfg.defaults()
	cli, err := client.New(client.Config{Nodes: []string{cfg.Addr}, Timeout: 2 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("cannot start the Go client: %w", err)
	}
	defer cli.Close()
	newLimiter := func(idle time.Duration) (*client.Limiter, error) {
		lc := client.LimiterConfig{Nodes: []string{cfg.Addr}, Token: cfg.Token, Timeout: 2 * time.Second, LeaseRequests: cfg.LeaseRequests}
		lc.Lease.Idle = idle
		l, err := client.NewLimiter(lc)
		if err != nil {
			return nil, fmt.Errorf("cannot start the Limiter: %w", err)
		}
		return l, nil
	}
	out := &Comparison{}
	check := func(_ int, key string) (bool, error) {
		r, err := cli.Check(ctx, cfg.Rule, key, 1)
		return r.Degraded, err
	}

	// First touches, alternately: the same load on both.
	l, err := newLimiter(0)
	if err != nil {
		return nil, err
	}
	allow := func(l *client.Limiter) func(int, string) (bool, error) {
		return func(_ int, key string) (bool, error) {
			d, err := l.Allow(ctx, cfg.Rule, key, 1)
			if err == nil && !d.Allowed && !d.Shadow {
				err = errors.New("denied: the rule must admit every check")
			}
			return d.Degraded, err
		}
	}
	var hl, hc Histogram
	var sl, sc Side
	cpuL, cpuC := cpuMeter{read: cfg.NodeCPU}, cpuMeter{read: cfg.NodeCPU}
	for i := 0; i < cfg.FirstTouches && ctx.Err() == nil; i++ {
		k := strconv.Itoa(i)
		cpuL.start()
		timeOne(&hl, &sl, allow(l), cfg.Prefix+"ft-l-"+k)
		cpuL.stop()
		cpuC.start()
		timeOne(&hc, &sc, check, cfg.Prefix+"ft-c-"+k)
		cpuC.stop()
	}
	_ = l.Close()
	out.FirstLimiter, out.FirstClient = sl, sc
	finishFirst(&out.FirstLimiter, &hl, &cpuL)
	finishFirst(&out.FirstClient, &hc, &cpuC)
	if p := out.FirstClient.Latency.P50; p > 0 {
		out.FirstRatio = float64(out.FirstLimiter.Latency.P50) / float64(p)
	}
	fmt.Fprintf(cfg.Log, "first touch: Limiter p50 %v p99 %v, client p50 %v p99 %v: %.2f×\n",
		out.FirstLimiter.Latency.P50, out.FirstLimiter.Latency.P99, out.FirstClient.Latency.P50, out.FirstClient.Latency.P99, out.FirstRatio)

	// The cold stream: the same draws for both, each with its own keys.
	kc := KeyConfig{Keys: cfg.Keys, Dist: Zipf, ZipfS: cfg.ZipfS}
	draws, err := compareDraws(kc, cfg.Goroutines)
	if err != nil {
		return nil, err
	}
	if l, err = newLimiter(0); err != nil {
		return nil, err
	}
	kc.Prefix = cfg.Prefix + "cold-l-"
	out.ColdLimiter = stream(ctx, cfg, kc.KeyNames(), draws, cfg.Stream, allow(l))
	_ = l.Close()
	kc.Prefix = cfg.Prefix + "cold-c-"
	out.ColdClient = stream(ctx, cfg, kc.KeyNames(), draws, cfg.Stream, check)
	if out.ColdClient.ExactDPS > 0 {
		out.ColdRatio = out.ColdLimiter.ExactDPS / out.ColdClient.ExactDPS
	}
	fmt.Fprintf(cfg.Log, "cold stream (Zipf %.1f over %d keys, %d goroutines, %v): Limiter %.0f/s (%d degraded), client %.0f/s: %.2f×\n",
		cfg.ZipfS, cfg.Keys, cfg.Goroutines, cfg.Stream, out.ColdLimiter.ExactDPS, out.ColdLimiter.Degraded, out.ColdClient.ExactDPS, out.ColdRatio)

	// Warm-up, then the leased phases on the same Limiter (no key goes
	// back idle meanwhile).
	if l, err = newLimiter(time.Hour); err != nil {
		return nil, err
	}
	defer l.Close()
	wk := KeyConfig{Keys: cfg.WarmKeys, Dist: Zipf, ZipfS: cfg.ZipfS, Prefix: cfg.Prefix + "warm-"}
	wdraws, err := compareDraws(wk, cfg.Goroutines)
	if err != nil {
		return nil, err
	}
	wkeys := wk.KeyNames()
	out.Warm, out.WarmWindows, out.WarmAt = warmUp(ctx, cfg, l, wkeys, wdraws, allow(l))
	fmt.Fprintf(cfg.Log, "warm-up (Zipf %.1f over %d keys): warm after %v; %.0f decisions/s over the phase\n",
		cfg.ZipfS, cfg.WarmKeys, out.WarmAt, out.Warm.DPS)
	var lw sync.WaitGroup // lease the keys the stream did not reach, 64 at a time
	for w := range 64 {
		lw.Go(func() {
			for i := w; i < len(wkeys) && ctx.Err() == nil; i += 64 {
				_, _ = l.Allow(ctx, cfg.Rule, string(wkeys[i]), 1)
			}
		})
	}
	lw.Wait()
	one := [][]byte{[]byte(cfg.Prefix + "one")}
	_, _ = l.Allow(ctx, cfg.Rule, string(one[0]), 1)
	oneDraws := make([][]int32, cfg.Goroutines)
	for g := range oneDraws {
		oneDraws[g] = []int32{0}
	}
	out.LeasedOne = stream(ctx, cfg, one, oneDraws, cfg.Leased, allow(l))
	out.LeasedZipf = stream(ctx, cfg, wkeys, wdraws, cfg.Leased, allow(l))
	fmt.Fprintf(cfg.Log, "leased: one key %.1fM/s (%.2f allocs), Zipf over %d keys %.1fM/s (%.2f allocs)\n",
		out.LeasedOne.DPS/1e6, out.LeasedOne.Allocs, cfg.WarmKeys, out.LeasedZipf.DPS/1e6, out.LeasedZipf.Allocs)
	return out, ctx.Err()
}

// cpuMeter adds up the node's CPU seconds over the spans it is started
// and stopped (nothing without read).
type cpuMeter struct {
	read    func() float64
	at, sum float64
}

func (m *cpuMeter) start() {
	if m.read != nil {
		m.at = m.read()
	}
}

func (m *cpuMeter) stop() {
	if m.read != nil {
		m.sum += m.read() - m.at
	}
}

// timeOne decides key once with decide and records its latency.
func timeOne(h *Histogram, s *Side, decide func(int, string) (bool, error), key string) {
	t0 := time.Now()
	degraded, err := decide(0, key)
	d := time.Since(t0)
	s.Elapsed += d
	switch {
	case err != nil:
		s.Errors++
		if s.FirstErr == "" {
			s.FirstErr = err.Error()
		}
	default:
		s.Decisions++
		h.Record(d)
		if degraded {
			s.Degraded++
		}
	}
}

func finishFirst(s *Side, h *Histogram, m *cpuMeter) {
	p := h.Summary()
	s.Latency = &p
	if s.Elapsed > 0 {
		s.DPS = float64(s.Decisions) / s.Elapsed.Seconds()
		s.ExactDPS = float64(s.Decisions-s.Degraded) / s.Elapsed.Seconds()
	}
	if s.Decisions > 0 {
		s.NodeCPUPerK = 1e6 * m.sum / float64(s.Decisions)
	}
}

// compareDraws draws one key sequence per goroutine (1<<19 each, walked
// round).
func compareDraws(kc KeyConfig, goroutines int) ([][]int32, error) {
	out := make([][]int32, goroutines)
	for g := range out {
		kc.Seed = uint64(g + 1)
		s, err := NewKeySampler(kc)
		if err != nil {
			return nil, err
		}
		out[g] = s.Sequence(1 << 19)
	}
	return out, nil
}

// stream decides keys[draws[g][i]] from len(draws) goroutines for d, and
// reports the decisions made, this process's allocations per decision and
// both processes' CPU.
func stream(ctx context.Context, cfg CompareConfig, keys [][]byte, draws [][]int32, d time.Duration, decide func(int, string) (bool, error)) Side {
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = string(k)
	}
	var (
		n, errs, degraded atomic.Int64
		firstErr          atomic.Pointer[string]
		wg                sync.WaitGroup
		stop              atomic.Bool
	)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	node := cpuMeter{read: cfg.NodeCPU}
	node.start()
	self0 := selfCPU()
	t0 := time.Now()
	for g := range draws {
		wg.Go(func() {
			seq := draws[g]
			var done, bad, deg int64
			for i := 0; !stop.Load(); i++ {
				// 256 decisions between looks at the clock: a leased
				// decision costs tens of ns, a clock reading about as much.
				for j := 0; j < 256; j++ {
					dg, err := decide(g, ks[seq[(i*256+j)&(len(seq)-1)]])
					switch {
					case err != nil:
						bad++
						if firstErr.Load() == nil {
							s := err.Error()
							firstErr.CompareAndSwap(nil, &s)
						}
					default:
						done++
						if dg {
							deg++
						}
					}
				}
				if time.Since(t0) >= d || ctx.Err() != nil {
					stop.Store(true)
				}
			}
			n.Add(done)
			errs.Add(bad)
			degraded.Add(deg)
		})
	}
	wg.Wait()
	el := time.Since(t0)
	self := selfCPU() - self0
	node.stop()
	runtime.ReadMemStats(&ms1)
	s := Side{Decisions: n.Load(), Errors: errs.Load(), Degraded: degraded.Load(), Elapsed: el}
	if p := firstErr.Load(); p != nil {
		s.FirstErr = *p
	}
	s.DPS = float64(s.Decisions) / el.Seconds()
	s.ExactDPS = float64(s.Decisions-s.Degraded) / el.Seconds()
	if s.Decisions > 0 {
		s.NodeCPUPerK = 1e6 * node.sum / float64(s.Decisions)
		s.SelfCPUPerK = 1e6 * self / float64(s.Decisions)
		s.Allocs = float64(ms1.Mallocs-ms0.Mallocs) / float64(s.Decisions)
	}
	return s
}

// warmUp decides keys[draws[g][i]] from len(draws) goroutines with a
// fresh Limiter for at most cfg.WarmFor, and cuts the run into 100ms
// windows: it is warm at the end of the first window in which at most 1%
// of the checks waited for a lease call (-1: never).
func warmUp(ctx context.Context, cfg CompareConfig, l *client.Limiter, keys [][]byte, draws [][]int32, decide func(int, string) (bool, error)) (Side, []WarmWindow, time.Duration) {
	var (
		n    atomic.Int64
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	ks := make([]string, len(keys))
	for i, k := range keys {
		ks[i] = string(k)
	}
	t0 := time.Now()
	for g := range draws {
		wg.Go(func() {
			seq := draws[g]
			for i := 0; !stop.Load(); i++ {
				if _, err := decide(g, ks[seq[i&(len(seq)-1)]]); err == nil {
					n.Add(1)
				}
			}
		})
	}
	var ws []WarmWindow
	warmAt := time.Duration(-1)
	lastN, lastS := int64(0), l.Manager().Stats().StoreDecisions
	tick := time.NewTicker(100 * time.Millisecond)
	for range tick.C {
		el := time.Since(t0)
		cur, st := n.Load(), l.Manager().Stats().StoreDecisions
		w := WarmWindow{End: el, Decisions: cur - lastN, Store: st - lastS}
		ws = append(ws, w)
		lastN, lastS = cur, st
		if warmAt < 0 && w.Decisions > 0 && w.Store*100 <= w.Decisions {
			warmAt = el
		}
		if el >= cfg.WarmFor || ctx.Err() != nil || (warmAt >= 0 && el >= warmAt+time.Second) {
			break
		}
	}
	tick.Stop()
	stop.Store(true)
	wg.Wait()
	el := time.Since(t0)
	s := Side{Decisions: n.Load(), Elapsed: el, DPS: float64(n.Load()) / el.Seconds()}
	return s, ws, warmAt
}
