package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Mode is how load is offered.
type Mode uint8

// The modes.
const (
	// Closed: every worker sends its next request as soon as the previous
	// one is answered; measures the maximum throughput.
	Closed Mode = iota
	// Open: requests are sent on a fixed schedule (constant arrival rate)
	// whatever the answers; measures latency at a given load.
	Open
)

func (m Mode) String() string {
	if m == Open {
		return "open"
	}
	return "closed"
}

// RunConfig is one measured run.
type RunConfig struct {
	// Name labels the run in reports.
	Name string
	Mode Mode
	// Rate is the open-loop rate in requests per second (a batch is one
	// request). Required for Open.
	Rate int64
	// Duration bounds the run (sending stops then; answers are awaited for
	// at most Grace more). Required, ≤ MaxDuration.
	Duration time.Duration
	// Grace is how long after Duration in-flight requests may finish; 0
	// means 2s. An open-loop run stops sending requests that are still
	// unsent Grace/2 after Duration (they count as Missed).
	Grace time.Duration
	// Workers is the number of requests in flight at most; 0 means 64.
	Workers int
	// Batch is the checks per request; 0 means 1.
	Batch int
	// Hits per check, for accuracy accounting; 0 means 1 (the driver must be
	// configured with the same).
	Hits int64
	// Keys is the workload's key distribution (the driver's key table must
	// be Keys.KeyNames()).
	Keys KeyConfig
	// Limit, when set, turns on per-key accuracy accounting against it.
	Limit *Limit
	// SeqLen is the length of the precomputed key sequence; 0 means 1<<20.
	SeqLen int
}

// MaxDuration bounds one run.
const MaxDuration = 10 * time.Minute

// RunResult is what one run measured.
type RunResult struct {
	Name       string  `json:"name"`
	Driver     string  `json:"driver"`
	Mode       string  `json:"mode"`
	Workers    int     `json:"workers"`
	Batch      int     `json:"batch"`
	Dist       string  `json:"dist"`
	Keys       int     `json:"keys"`
	OfferedRPS float64 `json:"offered_rps,omitempty"` // open loop: scheduled requests/s
	Scheduled  int64   `json:"scheduled,omitempty"`   // open loop: requests due within Duration
	Missed     int64   `json:"missed,omitempty"`      // open loop: due but never sent (generator or server could not keep up)

	Requests  int64         `json:"requests"`  // answered requests
	Decisions int64         `json:"decisions"` // answered checks
	Allowed   int64         `json:"allowed"`
	Denied    int64         `json:"denied"`
	Errors    int64         `json:"errors"`   // failed requests + failed batch items
	Degraded  int64         `json:"degraded"` // decisions made by a failure mode (Store unavailable or too slow)
	Elapsed   time.Duration `json:"elapsed_ns"`
	RPS       float64       `json:"rps"`             // requests/s
	DPS       float64       `json:"decisions_per_s"` // decisions/s
	Latency   Percentiles   `json:"latency"`         // per request; open loop: from the intended send time
	// SendLag (open loop) is how late requests were sent after their
	// intended time: the part of Latency spent waiting for a free worker
	// or connection, or for the generator to get a CPU. When it is large
	// the generator or the machine, not the server, set the latency.
	SendLag  *Percentiles `json:"send_lag,omitempty"`
	FirstErr string       `json:"first_error,omitempty"`
	GenCPU   float64      `json:"generator_cpu_s"` // this process's user+system CPU during the run

	Accuracy *Accuracy `json:"accuracy,omitempty"`
	Timeline *Timeline `json:"hot_key_timeline,omitempty"`

	// Filled by the suite.
	ServerCPU       float64          `json:"server_cpu_s,omitempty"`
	OtherCPU        float64          `json:"other_cpu_s"` // busy CPU of every other process on the machine during the run
	RedisCalls      map[string]int64 `json:"redis_calls,omitempty"`
	RedisPerDec     float64          `json:"redis_script_calls_per_decision,omitempty"` // EVAL/EVALSHA/FCALL: Store operations (inproc: Store lease calls)
	RedisCmdsPerDec float64          `json:"redis_commands_per_decision,omitempty"`     // every command, including those run inside scripts
	// FirstTouches are the node's SET NX tries of first touches during
	// the run, ClockSamples its TIME commands sent on their own (its
	// /metrics; the lua package).
	FirstTouches int64 `json:"redis_first_touches,omitempty"`
	ClockSamples int64 `json:"redis_clock_samples,omitempty"`
	// RedisCPU is redis-server's user+system CPU during the run (what
	// INFO's used_cpu_user + used_cpu_sys count), RedisUsPerDec that per
	// decision, in µs.
	RedisCPU      float64 `json:"redis_cpu_s,omitempty"`
	RedisUsPerDec float64 `json:"redis_cpu_us_per_decision,omitempty"`
	// Naive is the naive counter's figures for the same workload on the
	// same Redis, run right after this one.
	Naive        *Baseline `json:"naive,omitempty"`
	CeilingRPS   float64   `json:"ceiling_rps,omitempty"`
	CeilingRatio float64   `json:"ceiling_ratio,omitempty"`
	Note         string    `json:"note,omitempty"`
	// Warm is how long the workload ran unmeasured before the run, with
	// the same keys (0: the run's keys were new to the node).
	Warm time.Duration `json:"warm_ns,omitempty"`
	hist *Histogram
}

// Baseline is the naive counter's run beside a run on Redis.
type Baseline struct {
	Run           string  `json:"run"`
	Decisions     int64   `json:"decisions"`
	RedisUsPerDec float64 `json:"redis_cpu_us_per_decision"`
	// Ratio is the run's Redis CPU per decision over the naive counter's.
	Ratio float64 `json:"ratio"`
}

// Histogram returns the run's merged latency histogram.
func (r *RunResult) Histogram() *Histogram { return r.hist }

// ErrBadRun means a RunConfig is unusable; the message names the field.
var ErrBadRun = errors.New("bad run config")

func (c *RunConfig) normalize() error {
	if c.Workers == 0 {
		c.Workers = 64
	}
	if c.Batch == 0 {
		c.Batch = 1
	}
	if c.Hits == 0 {
		c.Hits = 1
	}
	if c.SeqLen == 0 {
		c.SeqLen = 1 << 20
	}
	if c.Keys.Dist == Cycle {
		// One whole cycle: positions wrap without breaking it.
		c.SeqLen = c.Keys.withDefaults().Keys
	}
	if c.Grace == 0 {
		c.Grace = 2 * time.Second
	}
	switch {
	case c.Duration <= 0 || c.Duration > MaxDuration:
		return fmt.Errorf("%w: duration: must be in (0, %v], got %v", ErrBadRun, MaxDuration, c.Duration)
	case c.Workers < 1 || c.Workers > 100_000:
		return fmt.Errorf("%w: workers: must be between 1 and 100000, got %d", ErrBadRun, c.Workers)
	case c.Batch < 1 || c.Batch > 1000:
		return fmt.Errorf("%w: batch: must be between 1 and 1000, got %d", ErrBadRun, c.Batch)
	case c.Hits < 0:
		return fmt.Errorf("%w: hits: must be ≥ 0", ErrBadRun)
	case c.Mode == Open && c.Rate <= 0:
		return fmt.Errorf("%w: rate: open loop needs a rate > 0", ErrBadRun)
	case c.SeqLen < c.Batch || c.SeqLen > 1<<26:
		return fmt.Errorf("%w: seq-len: must be between batch and 2^26", ErrBadRun)
	}
	return c.Keys.Validate()
}

// Run drives d with cfg until cfg.Duration (plus Grace for answers) or ctx
// ends, and returns what it measured.
func Run(ctx context.Context, d Driver, cfg RunConfig) (*RunResult, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	sampler, err := NewKeySampler(cfg.Keys)
	if err != nil {
		return nil, err
	}
	keys := cfg.Keys.withDefaults().Keys
	seq := sampler.Sequence(cfg.SeqLen)
	var tally *Tally
	if cfg.Limit != nil {
		tally = NewTally(keys, cfg.Duration+cfg.Grace, 100*time.Millisecond)
	}
	sched := Schedule{Rate: cfg.Rate, Duration: cfg.Duration}
	total := int64(-1)
	if cfg.Mode == Open {
		total = sched.Count()
	}
	sessions := make([]Session, cfg.Workers)
	for i := range sessions {
		if sessions[i], err = d.NewSession(); err != nil {
			return nil, fmt.Errorf("cannot start session: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration+cfg.Grace)
	defer cancel()

	stats := make([]workerStats, cfg.Workers)
	var next, cyclePos atomic.Int64
	var wg sync.WaitGroup
	cpu0 := selfCPU()
	mach0, _ := MachineCPU()
	start := time.Now()
	// Open loop: requests still unsent this long after Duration are given
	// up (counted as Missed) so that answers can arrive within Grace.
	sendDeadline := cfg.Duration + cfg.Grace/2
	for w := range cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[w]
			st.hist = new(Histogram)
			st.lag = new(Histogram)
			pos := (len(seq) / cfg.Workers) * w
			out := make([]Outcome, cfg.Batch)
			batch := make([]int32, cfg.Batch)
			var local *LocalTally
			if tally != nil {
				local = tally.Local()
				defer local.Flush()
			}
			timer := time.NewTimer(time.Hour)
			timer.Stop()
			defer timer.Stop()
			for ctx.Err() == nil {
				var due time.Duration
				if cfg.Mode == Open {
					i := next.Add(1) - 1
					if i >= total {
						return
					}
					due = sched.At(i)
					now := time.Since(start)
					if now >= sendDeadline { // too late to send
						return
					}
					if wait := due - now; wait > 0 {
						timer.Reset(wait)
						select {
						case <-timer.C:
						case <-ctx.Done():
							return
						}
					}
				} else {
					due = time.Since(start)
					if due >= cfg.Duration {
						return
					}
				}
				if cfg.Keys.Dist == Cycle {
					// Shared: keys are checked in cycle order whichever
					// worker sends them.
					pos = int((cyclePos.Add(int64(cfg.Batch)) - int64(cfg.Batch)) % int64(len(seq)))
				}
				for j := range batch {
					if pos >= len(seq) {
						pos = 0
					}
					batch[j] = seq[pos]
					pos++
				}
				if cfg.Mode == Open {
					st.lag.Record(time.Since(start) - due)
				}
				err := sessions[w].Do(batch, out)
				done := time.Since(start)
				st.hist.Record(done - due)
				st.last = done
				if err != nil {
					st.errors += int64(cfg.Batch)
					if st.firstErr == nil {
						st.firstErr = err
					}
					if cfg.Mode == Closed {
						// A server that fails fast (refused connections)
						// must not turn the loop into a busy spin.
						time.Sleep(time.Millisecond)
					}
					continue
				}
				st.requests++
				for j, o := range out {
					switch o {
					case Allowed, AllowedDegraded:
						st.allowed++
					case Denied, DeniedDegraded:
						st.denied++
					default:
						st.errors++
						continue
					}
					if o.IsDegraded() {
						st.degraded++
					}
					if local != nil {
						local.Add(batch[j], cfg.Hits, o.IsAllowed(), done)
					}
				}
			}
		}()
	}
	wg.Wait()
	cpu1 := selfCPU()
	mach1, _ := MachineCPU()

	r := &RunResult{
		Name: cfg.Name, Driver: d.Name(), Mode: cfg.Mode.String(), Workers: cfg.Workers,
		Batch: cfg.Batch, Dist: cfg.Keys.Dist.String(), Keys: keys, GenCPU: cpu1 - cpu0,
		hist: new(Histogram), OtherCPU: max(0, mach1-mach0-(cpu1-cpu0)),
	}
	lag := new(Histogram)
	for i := range stats {
		st := &stats[i]
		r.hist.Merge(st.hist)
		lag.Merge(st.lag)
		r.Requests += st.requests
		r.Allowed += st.allowed
		r.Denied += st.denied
		r.Errors += st.errors
		r.Degraded += st.degraded
		r.Elapsed = max(r.Elapsed, st.last)
		if st.firstErr != nil && r.FirstErr == "" {
			r.FirstErr = st.firstErr.Error()
		}
	}
	r.Decisions = r.Allowed + r.Denied
	if cfg.Mode == Open {
		r.OfferedRPS = float64(cfg.Rate)
		r.Scheduled = total
		r.Missed = max(0, total-int64(r.hist.Count()))
		// Throughput of an open-loop run is over the scheduled span.
		r.Elapsed = max(r.Elapsed, cfg.Duration)
	}
	if r.Elapsed > 0 {
		r.RPS = float64(r.Requests) / r.Elapsed.Seconds()
		r.DPS = float64(r.Decisions) / r.Elapsed.Seconds()
	}
	r.Latency = r.hist.Summary()
	if cfg.Mode == Open {
		l := lag.Summary()
		r.SendLag = &l
	}
	if tally != nil {
		off, adm := tally.Counts()
		a := ScoreAccuracy(*cfg.Limit, r.Elapsed, off, adm)
		r.Accuracy = &a
		tl := tally.HotTimeline(r.Elapsed)
		r.Timeline = &tl
	}
	return r, nil
}

type workerStats struct {
	hist, lag                                   *Histogram
	requests, allowed, denied, errors, degraded int64
	last                                        time.Duration
	firstErr                                    error
	_                                           [64]byte // keep workers' counters off each other's cache lines
}

// selfCPU is this process's user+system CPU seconds (getrusage).
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tvSec(ru.Utime) + tvSec(ru.Stime)
}

func tvSec(tv syscall.Timeval) float64 {
	return float64(tv.Sec) + float64(tv.Usec)/1e6
}
