// Command sluice-bench drives Sluice (or any HTTP rate limiter) with
// open-loop or closed-loop workloads and reports throughput, latency,
// accuracy, Redis commands per decision and CPU. See package bench.
//
//	sluice-bench suite   [flags]   the standard suite (make bench): starts Redis, nodes, the ceiling; writes a report
//	sluice-bench run     [flags]   one workload against a running limiter
//	sluice-bench ceiling [flags]   the bare fasthttp ceiling server (the suite starts it)
//	sluice-bench version           the module version and VCS revision (also -version, --version)
//	sluice-bench gateway [flags]   a client.Limiter against the plain Go client on the same node (memory and Redis)
//
// Examples:
//
//	# the standard suite, as make bench runs it
//	go build -o /tmp/sluiced ./cmd/sluiced && sluice-bench suite -sluiced /tmp/sluiced
//	# 20k checks/s open loop against a node, Zipf over 100k keys, accuracy against 100/s burst 100
//	sluice-bench run -addr 127.0.0.1:8080 -mode open -rate 20000 -duration 30s -keys 100000 -limit 100 -period 1s
//	# batches of 100, closed loop, with the node's CPU and Redis commands per decision
//	sluice-bench run -driver batch -batch 100 -workers 16 -conns 16 -server-pid $(pidof sluiced) -redis 127.0.0.1:6379
//	# another limiter's HTTP API, same workload: {{key}} is replaced by the key
//	sluice-bench run -driver raw -addr 127.0.0.1:9000 -method POST -url /limit -body '{"id":"{{key}}"}' -success 200 -deny 429
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/internal/buildinfo"
	"github.com/sluicehq/sluice/lease"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: sluice-bench <command> [flags]

commands:
  suite     run the standard suite (make bench) and write bench/results/<date>/
  run       drive one workload against a running limiter
  ceiling   serve canned answers with a bare fasthttp handler (used by suite)
  report    rewrite report.md and the charts of a results folder from its run.json
  version   the module version and VCS revision it was built from (also -version, --version)
  gateway   a client.Limiter against the plain Go client on the same nodes (first touches, cold and leased keys)

"sluice-bench <command> -h" lists a command's flags.
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch args[0] {
	case "suite":
		return suiteCmd(ctx, args[1:], stdout, stderr)
	case "run":
		return runCmd(ctx, args[1:], stdout, stderr)
	case "ceiling":
		return ceilingCmd(ctx, args[1:], stderr)
	case "report":
		return reportCmd(args[1:], stdout, stderr)
	case "gateway":
		return compareCmd(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, buildinfo.Get("sluice-bench"))
		return 0
	}
	fmt.Fprintf(stderr, "unknown command %q\n%s", args[0], usage)
	return 2
}

func suiteCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("suite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := bench.DefaultSuiteConfig()
	fs.StringVar(&cfg.Sluiced, "sluiced", "", "node binary (go build ./cmd/sluiced); empty skips node phases")
	fs.StringVar(&cfg.RedisServer, "redis-server", "redis-server", "redis-server binary")
	fs.StringVar(&cfg.Out, "out", cfg.Out, "results root; the report goes to <out>/<UTC date>/")
	fs.DurationVar(&cfg.Phase, "phase", cfg.Phase, "duration of each measured run")
	fs.IntVar(&cfg.Keys, "keys", cfg.Keys, "keys of the Zipf workloads")
	fs.IntVar(&cfg.RedisKeys, "redis-keys", cfg.RedisKeys, "keys of the Redis Zipf workload")
	limit := fs.Int64("limit", cfg.Limit.Limit, "rule limit per period (accuracy is measured against it)")
	period := fs.Duration("period", cfg.Limit.Period, "rule period")
	burst := fs.Int64("burst", cfg.Limit.Burst, "rule burst")
	fs.BoolVar(&cfg.RedisOnly, "redis-only", false, "run only the Redis phases (with their naive baselines)")
	fs.StringVar(&cfg.RedisCompare, "redis-compare", "", "also run the Redis phases first through a node whose -redis URL has this query (e.g. max_batch=1), named <phase>[<query>]")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	cfg.Limit = bench.Limit{Limit: *limit, Period: *period, Burst: *burst}
	cfg.Log = stderr
	s, err := bench.RunSuite(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "sluice-bench suite: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s/report.md\n", s.Dir)
	return 0
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ", ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	driver := fs.String("driver", "single", "single, pipelined, batch, auth, raw, inproc, client, gateway or naive (the naive counter on -redis: one INCRBY + EXPIRE per check)")
	addr := fs.String("addr", "127.0.0.1:8080", "limiter host:port (HTTP drivers)")
	mode := fs.String("mode", "closed", "closed (max throughput) or open (constant arrival rate)")
	rate := fs.Int64("rate", 0, "open loop: requests per second (a batch is one request)")
	dur := fs.Duration("duration", 10*time.Second, "how long to send")
	workers := fs.Int("workers", 64, "requests in flight at most")
	conns := fs.Int("conns", 0, "connections (0: 64; pipelined: 4)")
	batch := fs.Int("batch", 1, "checks per request (batch driver)")
	hits := fs.Int64("hits", 1, "hits per check")
	rule := fs.String("rule", "bench", "rule name sent with each check")
	var kc bench.KeyConfig
	fs.IntVar(&kc.Keys, "keys", 10_000, "number of distinct keys")
	dist := fs.String("dist", "zipf", "key distribution: uniform, zipf, hot or cycle")
	fs.Float64Var(&kc.ZipfS, "zipf-s", 1.0, "Zipf exponent")
	fs.Float64Var(&kc.HotShare, "hot-share", 0.5, "hot: share of checks to the hot key")
	fs.StringVar(&kc.Prefix, "prefix", "", "key prefix (default: k<unix time>-, so every run starts with fresh buckets)")
	fs.Uint64Var(&kc.Seed, "seed", 1, "random seed of the key sequence")
	limit := fs.Int64("limit", 0, "accuracy: the rule's limit per period (0: no accuracy accounting)")
	period := fs.Duration("period", time.Second, "accuracy: the rule's period")
	burst := fs.Int64("burst", 0, "accuracy: the rule's burst (0: limit)")
	method := fs.String("method", "POST", "raw: HTTP method")
	url := fs.String("url", "", "raw: path and query, may hold {{key}}")
	body := fs.String("body", "", "raw: body template, may hold {{key}}")
	success := fs.Int("success", 200, "raw: status meaning allowed")
	deny := fs.Int("deny", 429, "raw: status meaning denied")
	var headers multiFlag
	fs.Var(&headers, "header", "raw: extra request header \"Name: value\" (repeatable)")
	jsonOut := fs.String("json", "", "write the result as JSON to this file")
	cpuProf := fs.String("cpuprofile", "", "write the generator's CPU profile to this file")
	redisAddr := fs.String("redis", "", "Redis host:port: report its commands per decision (INFO commandstats before/after)")
	serverPid := fs.Int("server-pid", 0, "pid of the limiter process: report its CPU seconds (from /proc)")
	token := fs.String("token", os.Getenv("SLUICE_CLIENT_TOKEN"), "gateway: the nodes' client token (default $SLUICE_CLIENT_TOKEN)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *cpuProf != "" {
		f, err := os.Create(*cpuProf)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	var err error
	if kc.Dist, err = bench.ParseDist(*dist); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	if kc.Prefix == "" {
		kc.Prefix = fmt.Sprintf("k%d-", time.Now().Unix())
	}
	if err := kc.Validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	rc := bench.RunConfig{Name: *driver, Duration: *dur, Rate: *rate, Workers: *workers, Batch: *batch, Hits: *hits, Keys: kc}
	switch *mode {
	case "open":
		rc.Mode = bench.Open
	case "closed":
	default:
		fmt.Fprintf(stderr, "mode: want open or closed, got %q\n", *mode)
		return 2
	}
	if *limit > 0 {
		b := *burst
		if b == 0 {
			b = *limit
		}
		rc.Limit = &bench.Limit{Limit: *limit, Period: *period, Burst: b}
	}
	keys := kc.KeyNames()
	var d bench.Driver
	switch *driver {
	case "inproc":
		store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
		defer store.Close()
		mgr := lease.NewManager(store, lease.DefaultConfig())
		defer mgr.Close()
		l := int64(*limit)
		if l == 0 {
			l = 100
		}
		b := *burst
		if b == 0 {
			b = l
		}
		d, err = bench.NewInprocDriver(bench.InprocConfig{Manager: mgr, Rule: *rule, Hits: *hits, Keys: keys,
			Policy: lease.Policy{Algorithm: lease.TokenBucket, Limit: l, Period: *period, Burst: b}})
	case "naive":
		// The baseline Redis design, on the Redis of -redis, with the
		// rule of -limit and -period (the suite runs it beside each Redis
		// phase): its Redis CPU comes from -server-pid (redis-server's).
		l := bench.Limit{Limit: *limit, Period: *period}
		if l.Limit == 0 {
			l.Limit = 100
		}
		d, err = bench.NewNaiveDriver(bench.NaiveConfig{Addr: *redisAddr, Keys: keys, Limit: l, Hits: *hits})
	case "client":
		d, err = bench.NewGoClientDriver(bench.GoClientConfig{Nodes: strings.Split(*addr, ","), Rule: *rule, Hits: *hits, Keys: keys})
	case "gateway":
		d, err = bench.NewGatewayDriver(bench.GatewayConfig{Nodes: strings.Split(*addr, ","), Token: *token, Rule: *rule, Hits: *hits, Keys: keys})
	default:
		var kind bench.HTTPKind
		if kind, err = bench.ParseHTTPKind(*driver); err == nil {
			d, err = bench.NewHTTPDriver(bench.HTTPConfig{Kind: kind, Addr: *addr, Conns: *conns, Rule: *rule, Hits: *hits, Keys: keys,
				Method: *method, URL: *url, Body: *body, Success: *success, Deny: *deny, Headers: headers})
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	defer d.Close()
	var statsBefore map[string]int64
	if *redisAddr != "" {
		if statsBefore, err = bench.RedisCommandStats(ctx, *redisAddr); err != nil {
			fmt.Fprintf(stderr, "redis: %v\n", err)
			return 1
		}
	}
	var serverCPU0 float64
	if *serverPid > 0 {
		if serverCPU0, err = bench.ProcCPU(*serverPid); err != nil {
			fmt.Fprintf(stderr, "server-pid: %v\n", err)
			return 2
		}
	}
	r, err := bench.Run(ctx, d, rc)
	if err == nil && *serverPid > 0 {
		if c, perr := bench.ProcCPU(*serverPid); perr == nil {
			r.ServerCPU = c - serverCPU0
		}
	}
	if err == nil && statsBefore != nil {
		if after, serr := bench.RedisCommandStats(ctx, *redisAddr); serr == nil {
			diff, total := bench.DiffCommandStats(statsBefore, after)
			r.RedisCalls = diff
			if r.Decisions > 0 {
				r.RedisPerDec = float64(bench.ScriptCalls(diff)) / float64(r.Decisions)
				r.RedisCmdsPerDec = float64(total) / float64(r.Decisions)
			}
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		if errors.Is(err, bench.ErrBadRun) {
			return 2
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s %s: %d requests, %d decisions (%d allowed, %d denied), %d errors in %v\n",
		r.Driver, r.Mode, r.Requests, r.Decisions, r.Allowed, r.Denied, r.Errors, r.Elapsed.Round(time.Millisecond))
	if r.Mode == "open" {
		fmt.Fprintf(stdout, "offered %.0f req/s, %d scheduled, %d not sent\n", r.OfferedRPS, r.Scheduled, r.Missed)
		if r.SendLag != nil {
			fmt.Fprintf(stdout, "send lag (sent after the intended time) p50 %v p99 %v max %v\n", r.SendLag.P50, r.SendLag.P99, r.SendLag.Max)
		}
	}
	fmt.Fprintf(stdout, "throughput %.0f req/s, %.0f decisions/s; generator CPU %.2fs\n", r.RPS, r.DPS, r.GenCPU)
	l := r.Latency
	fmt.Fprintf(stdout, "latency p50 %v p90 %v p99 %v p99.9 %v max %v\n", l.P50, l.P90, l.P99, l.P999, l.Max)
	if r.Degraded > 0 {
		fmt.Fprintf(stdout, "degraded decisions (made by the failure mode: Store unavailable or over its timeout): %d\n", r.Degraded)
	}
	if *serverPid > 0 {
		fmt.Fprintf(stdout, "server CPU %.2fs (pid %d), %.3fs per 1M decisions\n", r.ServerCPU, *serverPid, 1e6*r.ServerCPU/float64(max(r.Decisions, 1)))
	}
	if r.RedisCalls != nil {
		fmt.Fprintf(stdout, "Redis: %.6f script calls (Store operations) per decision, %.6f commands including those inside scripts; %v\n", r.RedisPerDec, r.RedisCmdsPerDec, r.RedisCalls)
	}
	if a := r.Accuracy; a != nil {
		fmt.Fprintf(stdout, "accuracy: %d keys, offered %d, admitted %d, bound %.1f per key; over-admitted %d on %d keys; under-admission %.2f%%\n",
			a.Keys, a.Offered, a.Admitted, a.Bound, a.OverAdmitted, a.OverKeys, a.UnderPct)
	}
	if r.FirstErr != "" {
		fmt.Fprintf(stdout, "first error: %s\n", r.FirstErr)
	}
	if !writeJSON(*jsonOut, r, stderr) {
		return 1
	}
	return 0
}

// writeJSON writes v as indented JSON to path ("" writes nothing); false
// after an error, told to stderr.
func writeJSON(path string, v any, stderr io.Writer) bool {
	if path == "" {
		return true
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return false
	}
	return true
}

func reportCmd(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "results folder holding run.json (bench/results/<date>)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "dir: required")
		return 2
	}
	s, err := bench.LoadSuite(filepath.Join(*dir, "run.json"))
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := bench.Rerender(*dir, s); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", filepath.Join(*dir, "report.md"))
	return 0
}

func ceilingCmd(ctx context.Context, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("ceiling", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve on")
	canned := fs.String("canned", "", "JSON file of recorded answers per path (empty: synthetic answers shaped like a node's)")
	batch := fs.Int("batch", 100, "results in the synthetic /v1/checks answer (without -canned)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	set := bench.SyntheticCanned(*batch)
	if *canned != "" {
		var err error
		if set, err = bench.LoadCanned(*canned); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "listen: %v\n", err)
		return 1
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	if err := bench.ServeCeiling(ln, set); err != nil && ctx.Err() == nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
