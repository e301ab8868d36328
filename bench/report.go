package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// WriteReport writes s into dir: run.json (everything measured),
// report.md (tables) and the SVG charts throughput.svg, latency.svg,
// accuracy.svg and hotkey-rate.svg.
func WriteReport(dir string, s *Suite) error {
	if len(s.Runs) == 0 && len(s.Notes) == 0 {
		return errNoRuns
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("cannot create results folder: %w", err)
	}
	js, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), append(js, '\n'), 0o644); err != nil {
		return err
	}
	charts := map[string]*Chart{}
	if open := openRuns(s, "mem-open-"); len(open) > 0 {
		var x, y, lat50, lat99, lat999, lag99 []float64
		for _, r := range open {
			x = append(x, r.OfferedRPS)
			y = append(y, r.RPS)
			lat50 = append(lat50, ms(r.Latency.P50))
			lat99 = append(lat99, ms(r.Latency.P99))
			lat999 = append(lat999, ms(r.Latency.P999))
			l := 0.0
			if r.SendLag != nil {
				l = ms(r.SendLag.P99)
			}
			lag99 = append(lag99, l)
		}
		charts["throughput.svg"] = &Chart{
			Title: "Single checks: throughput vs offered load (open loop)", XLabel: "offered load (requests/s)", YLabel: "answered (requests/s)", YMin0: true,
			Series: []Series{{Name: "node, memory store", X: x, Y: y}, {Name: "offered", X: x, Y: x, Dashed: true}},
		}
		charts["latency.svg"] = &Chart{
			Title: "Single checks: latency vs offered load (open loop, from intended send time)", XLabel: "offered load (requests/s)", YLabel: "latency (ms)", YMin0: true,
			Series: []Series{{Name: "p50", X: x, Y: lat50}, {Name: "p99", X: x, Y: lat99}, {Name: "p99.9", X: x, Y: lat999}, {Name: "send lag p99", X: x, Y: lag99, Dashed: true}},
		}
	}
	if r := timelineRun(s); r != nil {
		tl := r.Timeline
		n := len(tl.Admitted)
		x := make([]float64, n)
		lim := make([]float64, n)
		cum := make([]float64, n)
		bound := make([]float64, n)
		slot := tl.Slot.Seconds()
		total := 0.0
		for i := range x {
			x[i] = float64(i+1) * slot // end of the slot
			lim[i] = s.Limit.Rate()
			total += tl.Admitted[i] * slot
			cum[i] = total
			bound[i] = s.Limit.MaxAllowed(time.Duration(x[i] * float64(time.Second)))
		}
		charts["accuracy.svg"] = &Chart{
			Title:  fmt.Sprintf("Accuracy: hottest key, admitted so far vs the rule's bound (%s)", r.Name),
			XLabel: "time since start (s)", YLabel: "hits", YMin0: true,
			Series: []Series{{Name: "admitted so far", X: x, Y: cum}, {Name: "burst + rate × t", X: x, Y: bound, Dashed: true}},
		}
		charts["hotkey-rate.svg"] = &Chart{
			Title:  fmt.Sprintf("Hottest key: admitted per second in 100 ms slots (%s)", r.Name),
			XLabel: "time since start (s)", YLabel: "admitted hits/s", YMin0: true,
			Series: []Series{{Name: "admitted", X: x, Y: tl.Admitted}, {Name: "rule rate", X: x, Y: lim, Dashed: true}},
		}
	}
	names := make([]string, 0, len(charts))
	for name, c := range charts {
		var b bytes.Buffer
		if err := c.WriteSVG(&b); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b.Bytes(), 0o644); err != nil {
			return err
		}
		names = append(names, name)
	}
	sort.Strings(names)
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(Markdown(s, names)), 0o644)
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func openRuns(s *Suite, prefix string) []*RunResult {
	var out []*RunResult
	for _, r := range s.Runs {
		if strings.HasPrefix(r.Name, prefix) && r.Mode == "open" {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].OfferedRPS < out[j].OfferedRPS })
	return out
}

func timelineRun(s *Suite) *RunResult {
	var first *RunResult
	for _, r := range s.Runs {
		if r.Timeline == nil || len(r.Timeline.Admitted) == 0 {
			continue
		}
		if r.Name == "mem-open-050%" {
			return r
		}
		if first == nil {
			first = r
		}
	}
	return first
}

// Markdown renders the report.
func Markdown(s *Suite, charts []string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	h := s.Headline
	w("# Sluice benchmark — %s\n\n", s.Started.Format("2006-01-02 15:04 UTC"))
	w("Machine: %d CPUs (%s), %s, %s. Load generator, node, ceiling and Redis all share this machine. ", s.Host.CPUs, orDash(s.Host.CPUModel), s.Host.GoVersion, s.Host.OS)
	var other, span float64
	for _, r := range s.Runs {
		other += r.OtherCPU
		span += r.Elapsed.Seconds()
	}
	if span > 0 {
		w("Processes outside the suite used %.2f of the %d cores on average during the runs (see *other CPU*). ", other/span, s.Host.CPUs)
	}
	w("Each run lasts %s. Rule `bench`: token_bucket, %d per %v, burst %d — accuracy is measured against it (one run, `mem-batch100-leased`, uses `bench-big`, a limit no workload reaches).\n\n", s.Phase, s.Limit.Limit, s.Limit.Period, s.Limit.Burst)

	w("## Headline\n\n| figure | measured | target |\n|---|---|---|\n")
	batch := "not measured"
	if h.BatchDPS > 0 {
		batch = fmt.Sprintf("**%s decisions/s** (mean of 2 interleaved runs)", human(h.BatchDPS))
		if h.BatchLimitedBy != "" {
			batch += "; limited by " + h.BatchLimitedBy
		}
	}
	w("| `/v1/checks`, batches of 100 (memory store) | %s | ≥ 1,000,000 decisions/s |\n", batch)
	single := "not measured"
	if h.SingleRPS > 0 {
		single = fmt.Sprintf("%s req/s (mean of 2 interleaved runs)", human(h.SingleRPS))
		if h.CeilingRPS > 0 {
			single += fmt.Sprintf(" = **%.0f%%** of the ceiling's %s req/s", 100*h.SingleRatio, human(h.CeilingRPS))
		}
	}
	for _, r := range s.Runs {
		if r.Name == "mem-batch100-leased" {
			w("| `/v1/checks`, batches of 100, every check allowed (rule `bench-big`, a limit no workload reaches, 1,000 keys; the node decides each in its memory store) | %s decisions/s | — |\n", human(r.DPS))
		}
	}
	w("| single `POST /v1/check` vs bare fasthttp ceiling | %s | ≥ 80%% |\n", single)
	if h.P99AtHalf != "" {
		w("| p99 latency at half of peak single-check load (%s req/s offered; peak = mean closed-loop single-check throughput) | **%s** (open loop, from intended send time) | — |\n", human(h.PeakRPS/2), h.P99AtHalf)
	} else {
		w("| p99 latency at half of peak load | not measured | — |\n")
	}
	w("| Redis operations (script calls) per decision, batches, Zipf over 1M keys | %s | ≤ 1%% |\n", pctOrNA(h.RedisPerDecZipf, s, "redis-batch100-zipf1M"))
	w("| Redis operations (script calls) per decision, batches, one hot key | %s | ≤ 0.1%% |\n", pctOrNA(h.RedisPerDecHot, s, "redis-batch100-hotkey"))
	w("| over-admission (hits admitted beyond burst + rate × duration), runs with no degraded decision | **%d** | 0 |\n", h.OverAdmitted)
	if h.Degraded > 0 {
		w("| over-admission in runs with degraded decisions (%s: %d decisions made by on_store_failure=local because a Store call failed or took longer than its timeout) | **%d** | outside the lease contract |\n",
			strings.Join(h.DegradedRuns, ", "), h.Degraded, h.OverAdmittedDegraded)
	}
	if h.P99AtHalf != "" {
		w("| under-admission at half of peak (Zipf) | %.2f%% | small (random arrivals; on Redis, leased tokens unused at the end) |\n", h.UnderPctHalfPeak)
	}
	if h.GatewayDPS > 0 {
		ratio := "—"
		if h.GatewayNodeCPUPerM > 0 && h.SingleNodeCPUPerM > 0 {
			ratio = fmt.Sprintf("**1/%.0f**", h.SingleNodeCPUPerM/h.GatewayNodeCPUPerM)
		}
		w("| node CPU per 1M decisions made in a gateway (`client.Limiter`, rule `bench-big`, %d goroutines, Zipf over %s keys: %s decisions/s) vs per 1M single `POST /v1/check` | %.3f s vs %.2f s = %s | ≤ 1/50 |\n",
			workersOf(s, "gateway-leased"), keysOf(s, "gateway-leased"), human(h.GatewayDPS), h.GatewayNodeCPUPerM, h.SingleNodeCPUPerM, ratio)
	}
	if h.InprocDPS > 0 {
		w("| in-process `lease.Manager.Take`, batches of 100 calls (memory store, %d goroutines, Zipf over %s keys) | %s decisions/s, %s Store lease calls per decision | — |\n", workersOf(s, "inproc-manager"), keysOf(s, "inproc-manager"), human(h.InprocDPS), pct(h.InprocStorePerDec))
	}

	var base []*RunResult
	for _, r := range s.Runs {
		if r.Naive != nil {
			base = append(base, r)
		}
	}
	if len(base) > 0 {
		w("\n## Redis CPU per decision: Sluice vs the naive counter\n\n")
		w("Each workload runs twice on the same redis-server, back to back: through a node on the Redis store, then straight to Redis as the naive counter (one pipelined `INCRBY` + `EXPIRE` per check, fixed windows of the rule's period: envoyproxy/ratelimit's design), same keys in the same order, same rate or concurrency. Redis CPU is redis-server's user+system CPU during the run (INFO's `used_cpu_user` + `used_cpu_sys`). Target: Sluice ≤ 1/4 of the naive counter in every workload.\n\n")
		w("| workload | keys | mode | Sluice decisions | Sluice Redis µs/decision | naive decisions | naive Redis µs/decision | ratio | script calls/decision | scripts run/decision | first touches/decision |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, r := range base {
			n := r.Naive
			ratio := "—"
			if n.Ratio > 0 {
				ratio = fmt.Sprintf("**%.2f×**", n.Ratio)
			}
			w("| %s | %s %s | %s | %d | %.2f | %d | %.2f | %s | %s | %s | %s |\n", r.Name, human(float64(r.Keys)), r.Dist, r.Mode, r.Decisions, r.RedisUsPerDec, n.Decisions, n.RedisUsPerDec, ratio, pct(r.RedisPerDec), pct(runsPerDec(r)), pct(firstTouchesPerDec(r)))
		}
		w("\n*First touches* are a node's first leases of keys without state, written with `SET NX` instead of a script (the lua package; the node's `sluice_redis_first_touches_total`): Store operations, not scripts.\n")
		w("\n`redis-rls1s-*` call the node's Envoy rate limit service (gRPC `ShouldRateLimit`, one descriptor per call, a `unit: second` limit: envoyproxy/ratelimit's configuration, counted as a fixed window); `redis-fw1s-*` are the same per-second workload over HTTP.\n")
	}

	w("\n## Runs\n\n")
	w("Closed loop = maximum throughput with a fixed number of requests in flight; open loop = constant arrival rate, latency from the intended send time (no coordinated omission). A batch is one request. *Send lag* (open loop) is how late requests left the generator after their intended time — waiting for a free worker or connection, or for a CPU: when it is close to the latency, the machine or the generator, not the server, set the latency. CPU is user+system seconds during the run; *server* is the node (plus redis-server for Redis runs) or the ceiling process; *other* is every other process on the machine (from /proc/stat): on a shared machine, the load the suite did not make.\n\n")
	w("| run | driver | mode | keys | in flight | offered req/s | req/s | decisions/s | vs ceiling | p50 | p90 | p99 | p99.9 | send lag p99 | errors | degraded | server CPU s | generator CPU s | other CPU s | Redis ops/decision | over | under |\n")
	w("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range s.Runs {
		offered := "—"
		if r.OfferedRPS > 0 {
			offered = human(r.OfferedRPS)
			if r.Missed > 0 {
				offered += fmt.Sprintf(" (%d not sent)", r.Missed)
			}
		}
		ratio := "—"
		if r.CeilingRatio > 0 {
			ratio = fmt.Sprintf("%.0f%%", 100*r.CeilingRatio)
		}
		redis := "—"
		if r.RedisCalls != nil || r.Name == "inproc-manager" {
			redis = pct(r.RedisPerDec)
			if r.Accuracy != nil && r.Decisions > 0 {
				redis += " (" + floorNote(r) + ")"
			}
		}
		over, under := "—", "—"
		if a := r.Accuracy; a != nil {
			over = fmt.Sprint(a.OverAdmitted)
			under = fmt.Sprintf("%.2f%%", a.UnderPct)
		}
		lag := "—"
		if r.SendLag != nil {
			lag = dur(r.SendLag.P99)
			if r.SendLag.P99 == 0 {
				lag = "0"
			}
		}
		w("| %s | %s | %s | %s %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d | %d | %.1f | %.1f | %.1f | %s | %s | %s |\n",
			r.Name, r.Driver, r.Mode, human(float64(r.Keys)), r.Dist, r.Workers, offered, human(r.RPS), human(r.DPS), ratio,
			dur(r.Latency.P50), dur(r.Latency.P90), dur(r.Latency.P99), dur(r.Latency.P999), lag, r.Errors, r.Degraded, r.ServerCPU, r.GenCPU, r.OtherCPU, redis, over, under)
	}
	var errs []string
	for _, r := range s.Runs {
		if r.FirstErr != "" {
			errs = append(errs, fmt.Sprintf("- `%s`: %d errors, first: %s", r.Name, r.Errors, r.FirstErr))
		}
		if r.Note != "" {
			errs = append(errs, fmt.Sprintf("- `%s`: %s", r.Name, r.Note))
		}
	}
	if len(errs) > 0 {
		w("\n%s\n", strings.Join(errs, "\n"))
	}
	var redisRuns []*RunResult
	for _, r := range s.Runs {
		if len(r.RedisCalls) > 0 {
			redisRuns = append(redisRuns, r)
		}
	}
	if len(redisRuns) > 0 {
		w("\n### Redis commands (INFO commandstats, after − before; includes commands run inside scripts)\n\n| run | decisions | commands |\n|---|---|---|\n")
		for _, r := range redisRuns {
			var parts []string
			for name, n := range r.RedisCalls {
				parts = append(parts, fmt.Sprintf("%s %d", name, n))
			}
			sort.Strings(parts)
			w("| %s | %d | %s |\n", r.Name, r.Decisions, strings.Join(parts, ", "))
		}
	}
	if len(charts) > 0 {
		w("\n## Charts\n\n")
		for _, c := range charts {
			w("![%s](%s)\n\n", strings.TrimSuffix(c, ".svg"), c)
		}
	}
	w("\n## How the figures are made\n\n")
	w("- Accuracy: for every key, admitted hits are compared with burst + rate × run duration (the most a correct token bucket can admit, the bucket starting full). Over-admission is any hit above it and must be 0. Under-admission is Σ max(0, min(offered, bound) − admitted) / Σ min(offered, bound): tokens leased but not spent by the end of the run show up here, and random arrivals make it an upper bound.\n")
	w("- Ceiling: a bare fasthttp server (a separate process) replaying the node's recorded answer for each path — same status, headers and body — with the same driver settings, in the same run.\n")
	w("- Redis operations per decision: `INFO commandstats` after minus before; *operations* are script calls (EVAL/EVALSHA/FCALL — one round trip and one atomic Store operation each) divided by decisions; commandstats also counts the commands each script runs inside Redis (TIME, HMGET, HSET, PEXPIRE…), shown separately as *all commands*. For `inproc-manager` the column is the Manager's Store lease calls per decision. The *floor* is keys touched / decisions: every key's first check must lease from the Store, so no lease design goes below it on a workload whose keys are mostly checked once or twice (Zipf over 1M keys in a short run).\n")
	w("- Latency: log-linear histogram (128 sub-buckets per power of two, ≤ 0.8%% error), per request.\n")
	if len(s.Notes) > 0 {
		w("\n## Notes\n\n")
		for _, n := range s.Notes {
			w("- %s\n", n)
		}
	}
	w("\nReproduce: `make bench` (runs `bench/run-suite.sh`); raw figures in `run.json`.\n")
	return b.String()
}

// pct formats a fraction as a percentage with the digits that matter.
func pct(f float64) string {
	switch p := 100 * f; {
	case p == 0:
		return "0%"
	case p >= 1:
		return fmt.Sprintf("%.1f%%", p)
	default:
		return fmt.Sprintf("%.4f%%", p)
	}
}

func keysOf(s *Suite, name string) string {
	for _, r := range s.Runs {
		if r.Name == name {
			return human(float64(r.Keys))
		}
	}
	return "?"
}

func workersOf(s *Suite, name string) int {
	for _, r := range s.Runs {
		if r.Name == name {
			return r.Workers
		}
	}
	return 0
}

func pctOrNA(v float64, s *Suite, run string) string {
	for _, r := range s.Runs {
		if r.Name == run {
			out := fmt.Sprintf("**%s**; scripts run %s (a batched script call runs several); all commands incl. inside scripts %s", pct(v), pct(runsPerDec(r)), pct(r.RedisCmdsPerDec))
			if r.Accuracy != nil && r.Decisions > 0 {
				out += fmt.Sprintf("; floor from first touches of %d keys: %s", r.Accuracy.Keys, pct(float64(r.Accuracy.Keys)/float64(r.Decisions)))
			}
			return out
		}
	}
	return "not measured (see Notes)"
}

func orDash(s string) string {
	if s == "" {
		return "unknown CPU"
	}
	return s
}

func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d >= time.Second:
		return fmt.Sprintf("%.2fs", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2fms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

// floorNote is what the first touches of a run's keys bound its Store
// operations per decision to. After a warm pass over the same keys there
// is no such bound (the keys are leased already; keys that come back in a
// cycle may still hold a slow key's loan the node kept past their idle
// spell).
func floorNote(r *RunResult) string {
	if r.Warm > 0 {
		return fmt.Sprintf("keys warmed for %v", r.Warm)
	}
	return "floor " + pct(float64(r.Accuracy.Keys)/float64(r.Decisions))
}

// errNoRuns means a suite has no run to report.
var errNoRuns = errors.New("no runs to report")
