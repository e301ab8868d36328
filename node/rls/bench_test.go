package rls_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rls"
	"github.com/sluicehq/sluice/node/rules"
)

// benchNode starts a node (memory store) serving HTTP and Envoy RLS on
// loopback ports, each deciding the same kind of limit (fixed_window, never
// reached): rule "per-key" over HTTP, domain "bench" descriptor "user" over
// RLS, served by grpc-go's transport at rlsAddr and by TransportLean at
// leanAddr. stop shuts them down.
func benchNode(tb testing.TB) (httpAddr, rlsAddr, leanAddr string, stop func()) {
	store := lease.NewMemoryStore(lease.DefaultMemoryStoreConfig())
	mgr := lease.NewManager(store, lease.DefaultConfig())
	n := node.New(node.DefaultConfig(), mgr)
	set, err := rules.Parse([]byte("rules:\n  - name: per-key\n    algorithm: fixed_window\n    limit: 1000000000\n    period: 1s\n"))
	if err != nil {
		tb.Fatal(err)
	}
	n.SetRules(set)
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go n.Serve(httpLn)
	c, err := rls.Parse(rls.Doc{Name: "bench.yaml", Data: []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")})
	if err != nil {
		tb.Fatal(err)
	}
	var srvs []*rls.Server
	var addrs []string
	for i, tr := range []rls.Transport{rls.TransportGRPC, rls.TransportLean} {
		cfg := rls.ServerConfig{Engine: n, Transport: tr}
		if i == 0 {
			cfg.Metrics = n.MetricsSet() // the other's metrics in a set of its own: one set has each name once
		}
		srv := rls.NewServer(cfg)
		srv.SetConfig(c)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		go srv.Serve(ln)
		srvs, addrs = append(srvs, srv), append(addrs, ln.Addr().String())
	}
	return httpLn.Addr().String(), addrs[0], addrs[1], func() {
		for _, srv := range srvs {
			srv.Close(context.Background())
		}
		n.Shutdown(context.Background())
		mgr.Close()
		store.Close()
	}
}

// benchCalls are the calls the benchmarks compare, over 1000 keys.
type benchCalls struct {
	// rls is an Envoy RLS call: one descriptor, go-control-plane's client
	// on one HTTP/2 connection, set up as Envoy's rate limit filter calls
	// (see envoyDialOptions).
	rls func(i int) error
	// http is an HTTP POST /v1/check (fasthttp client, keep-alive
	// connections).
	http func(i int) error
	// health is gRPC's health Check on the RLS port and connection: gRPC's
	// own cost per call, with a handler that does next to nothing.
	health func(i int) error
	stop   func()
}

// envoyRLSTimeout is the deadline of each benchmark RLS call. Envoy's rate
// limit filter sends one with every call (its timeout, 20 ms by default, as
// the grpc-timeout header), which the server arms a timer for; a longer one
// here, so that a loaded machine's slow call does not fail the benchmark.
const envoyRLSTimeout = 10 * time.Second

// envoyDialOptions are the client's HTTP/2 settings as Envoy's: fixed
// flow-control windows (its defaults: 16 MiB per stream, 24 MiB per
// connection), so no BDP pings for the server to answer, as Envoy sends
// none.
func envoyDialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(16 << 20),
		grpc.WithInitialConnWindowSize(24 << 20),
	}
}

func newBenchCalls(tb testing.TB, httpAddr, rlsAddr string) benchCalls {
	conn, err := grpc.NewClient(rlsAddr, envoyDialOptions()...)
	if err != nil {
		tb.Fatal(err)
	}
	client := rlsv3.NewRateLimitServiceClient(conn)
	health := healthpb.NewHealthClient(conn)
	hc := &fasthttp.Client{MaxConnsPerHost: 256}
	url := "http://" + httpAddr + "/v1/check"
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}
	return benchCalls{
		rls: func(i int) error {
			ctx, cancel := context.WithTimeout(context.Background(), envoyRLSTimeout)
			defer cancel()
			_, err := client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "bench",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: keys[i%len(keys)]}}}}})
			return err
		},
		http: func(i int) error {
			req := fasthttp.AcquireRequest()
			res := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			req.SetRequestURI(url)
			req.Header.SetMethod("POST")
			req.SetBodyString(`{"rule":"per-key","key":"` + keys[i%len(keys)] + `"}`)
			if err := hc.Do(req, res); err != nil {
				return err
			}
			if res.StatusCode() != fasthttp.StatusOK {
				return fmt.Errorf("POST /v1/check: %d %s", res.StatusCode(), res.Body())
			}
			return nil
		},
		health: func(int) error {
			ctx, cancel := context.WithTimeout(context.Background(), envoyRLSTimeout)
			defer cancel()
			r, err := health.Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				err = fmt.Errorf("health: %v", r.GetStatus())
			}
			return err
		},
		stop: func() { conn.Close() },
	}
}

// BenchmarkRLSvsHTTP compares, in one run on one node, an Envoy RLS call
// with an HTTP POST /v1/check deciding the same kind of limit (see
// benchCalls), client and server in this process. It reports calls/s, the
// p99 latency and the allocations of each (client and server):
//
//	go test -run '^$' -bench RLSvsHTTP -benchtime 3s ./node/rls/
//
// It runs three rounds, each RLS (grpc-go's transport, then
// TransportLean) then HTTP.
func BenchmarkRLSvsHTTP(b *testing.B) {
	httpAddr, rlsAddr, leanAddr, stop := benchNode(b)
	defer stop()
	calls, lean := newBenchCalls(b, httpAddr, rlsAddr), newBenchCalls(b, httpAddr, leanAddr)
	defer calls.stop()
	defer lean.stop()
	// Rounds interleave them, so that a shared machine's load shifts hit
	// all alike (compare within a round).
	for r := 1; r <= 3; r++ {
		b.Run("round"+strconv.Itoa(r)+"/rls", func(b *testing.B) { run(b, calls.rls, nil) })
		b.Run("round"+strconv.Itoa(r)+"/rls-lean", func(b *testing.B) { run(b, lean.rls, nil) })
		b.Run("round"+strconv.Itoa(r)+"/http", func(b *testing.B) { run(b, calls.http, nil) })
	}
}

// BenchmarkServerCPU is BenchmarkRLSvsHTTP with the node in a process of
// its own (this test binary, running TestBenchServer), so that the CPU
// time the node spends per call can be read apart from the clients'. It
// reports calls/s, server-µs/call (user + system CPU of the node's process
// per call), server-allocs/call (the node's heap allocations per call, a
// count that does not swing with the machine's load) and client-µs/call
// (this process's CPU per call: calls/s is what clients and node leave
// each other on a shared machine, whereas a node's own capacity is its
// cores over server-µs/call). Each of three rounds runs RLS on grpc-go's
// transport (rls) and on TransportLean (rls-lean), HTTP, the health
// Check on each transport (grpc-health, lean-health: the transport's own
// cost per call, next to no handler) and RLS (grpc-go's) on a second node
// process run with GOGC=400 (grpc-go's allocations make the garbage
// collector a large part of its calls).
//
//	go test -run '^$' -bench ServerCPU -benchtime 3s -tags vtprotobuf ./node/rls/
func BenchmarkServerCPU(b *testing.B) {
	httpAddr, rlsAddr, leanAddr, stop := startBenchServer(b, true)
	defer stop()
	gcHTTPAddr, gcRLSAddr, _, stopGC := startBenchServer(b, false, "GOGC=400")
	defer stopGC()
	stats, gcStats := serverStats(b, httpAddr), serverStats(b, gcHTTPAddr)
	calls, lean, gcCalls := newBenchCalls(b, httpAddr, rlsAddr), newBenchCalls(b, httpAddr, leanAddr), newBenchCalls(b, gcHTTPAddr, gcRLSAddr)
	defer calls.stop()
	defer lean.stop()
	defer gcCalls.stop()
	for r := 1; r <= 3; r++ {
		b.Run("round"+strconv.Itoa(r)+"/rls", func(b *testing.B) { run(b, calls.rls, stats) })
		b.Run("round"+strconv.Itoa(r)+"/rls-lean", func(b *testing.B) { run(b, lean.rls, stats) })
		b.Run("round"+strconv.Itoa(r)+"/http", func(b *testing.B) { run(b, calls.http, stats) })
		b.Run("round"+strconv.Itoa(r)+"/grpc-health", func(b *testing.B) { run(b, calls.health, stats) })
		b.Run("round"+strconv.Itoa(r)+"/lean-health", func(b *testing.B) { run(b, lean.health, stats) })
		b.Run("round"+strconv.Itoa(r)+"/rls-gogc400", func(b *testing.B) { run(b, gcCalls.rls, gcStats) })
	}
}

// startBenchServer starts a node process for BenchmarkServerCPU (this test
// binary running TestBenchServer, with env added to its environment) and
// returns its addresses; stop ends it. With custom, the process takes the
// test flags in $SLUICE_RLS_BENCH_SERVER_FLAGS (such as "-test.cpuprofile
// node.pprof") and runs under the command in $SLUICE_RLS_BENCH_SERVER_EXEC
// (such as valgrind: see testdata/server-instructions.sh).
func startBenchServer(b *testing.B, custom bool, env ...string) (httpAddr, rlsAddr, leanAddr string, stop func()) {
	args := []string{os.Args[0], "-test.run", "^TestBenchServer$"}
	if custom {
		args = append(strings.Fields(os.Getenv("SLUICE_RLS_BENCH_SERVER_EXEC")), append(args, strings.Fields(os.Getenv("SLUICE_RLS_BENCH_SERVER_FLAGS"))...)...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(append(os.Environ(), "SLUICE_RLS_BENCH_SERVER=1"), env...)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	stop = func() {
		in.Close() // the server process ends when its stdin does
		cmd.Wait()
	}
	sc := bufio.NewScanner(out)
	for httpAddr == "" && sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "bench-server" {
			httpAddr, rlsAddr, leanAddr = f[1], f[2], f[3]
		}
	}
	if httpAddr == "" {
		stop()
		b.Fatal("the server process printed no addresses")
	}
	return httpAddr, rlsAddr, leanAddr, stop
}

// serverStats returns a reader of a node's CPU time so far (user +
// system, 10 ms steps) and its count of heap allocations, from its
// /metrics at httpAddr.
func serverStats(b *testing.B, httpAddr string) func() (time.Duration, int64) {
	return func() (time.Duration, int64) {
		code, body, err := fasthttp.Get(nil, "http://"+httpAddr+"/metrics")
		if err != nil || code != fasthttp.StatusOK {
			b.Fatalf("GET /metrics: %d %v", code, err)
		}
		var (
			cpu     float64
			mallocs int64
			found   int
		)
		for _, line := range strings.Split(string(body), "\n") {
			if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
				cpu, err = strconv.ParseFloat(v, 64)
				found++
			} else if v, ok := strings.CutPrefix(line, "go_memstats_mallocs_total "); ok {
				mallocs, err = strconv.ParseInt(v, 10, 64)
				found++
			}
			if err != nil {
				b.Fatalf("GET /metrics: %q: %v", line, err)
			}
		}
		if found != 2 {
			b.Fatal("GET /metrics: no process_cpu_seconds_total or go_memstats_mallocs_total")
		}
		return time.Duration(cpu * float64(time.Second)), mallocs
	}
}

// TestBenchServer is BenchmarkServerCPU's node process, not a test: with
// SLUICE_RLS_BENCH_SERVER=1 it serves benchNode, prints its addresses and
// runs until its stdin ends.
func TestBenchServer(t *testing.T) {
	if os.Getenv("SLUICE_RLS_BENCH_SERVER") == "" {
		t.Skip("BenchmarkServerCPU's server process (SLUICE_RLS_BENCH_SERVER=1)")
	}
	httpAddr, rlsAddr, leanAddr, stop := benchNode(t)
	defer stop()
	fmt.Println("bench-server", httpAddr, rlsAddr, leanAddr)
	_, _ = bufio.NewReader(os.Stdin).ReadString(0) // until EOF
}

// run calls call b.N times from 16 goroutines per core and reports
// calls/s and the p99 latency, and with server (a node's CPU time and
// allocation count so far) what the node spent per call.
func run(b *testing.B, call func(i int) error, server func() (time.Duration, int64)) {
	b.ReportAllocs()
	b.SetParallelism(16)
	var (
		mu   sync.Mutex
		lat  []time.Duration
		next atomic.Int64
	)
	var (
		cpu0    time.Duration
		allocs0 int64
	)
	if server != nil {
		cpu0, allocs0 = server()
	}
	self0 := selfCPU(b)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		for pb.Next() {
			i := int(next.Add(1))
			t0 := time.Now()
			if err := call(i); err != nil {
				b.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "calls/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	if server != nil {
		cpu, allocs := server()
		b.ReportMetric(float64((cpu-cpu0).Microseconds())/float64(len(lat)), "server-µs/call")
		b.ReportMetric(float64(allocs-allocs0)/float64(len(lat)), "server-allocs/call")
		b.ReportMetric(float64((selfCPU(b)-self0).Microseconds())/float64(len(lat)), "client-µs/call")
	}
}

// selfCPU is this process's CPU time so far (user + system).
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkShouldRateLimitDirect is the server's own work per call, without
// gRPC: ShouldRateLimit called in process, on a node deciding the same
// limit as benchNode's.
func BenchmarkShouldRateLimitDirect(b *testing.B) {
	store := lease.NewMemoryStore(lease.DefaultMemoryStoreConfig())
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
	defer mgr.Close()
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(nil)
	srv := rls.NewServer(rls.ServerConfig{Engine: n, Metrics: n.MetricsSet()})
	c, err := rls.Parse(rls.Doc{Name: "bench.yaml", Data: []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")})
	if err != nil {
		b.Fatal(err)
	}
	srv.SetConfig(c)
	reqs := make([]*rlsv3.RateLimitRequest, 1000)
	for i := range reqs {
		reqs[i] = &rlsv3.RateLimitRequest{Domain: "bench",
			Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: "user-" + strconv.Itoa(i)}}}}}
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if _, err := srv.ShouldRateLimit(context.Background(), reqs[i%len(reqs)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
