package rls_test

import (
	"context"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rls"
	"github.com/sluicehq/sluice/node/rules"
)

// BenchmarkRLSvsHTTP compares, in one run on one node, an Envoy RLS call
// (one descriptor, go-control-plane's client over loopback TCP, one HTTP/2
// connection) with an HTTP POST /v1/check (fasthttp client, keep-alive
// connections) deciding the same kind of limit (fixed_window, never
// reached) over 1000 keys. It reports calls/s and the p99 latency of each:
//
//	go test -run '^$' -bench RLSvsHTTP -benchtime 3s ./node/rls/
//
// It runs three rounds, each RLS then HTTP.
func BenchmarkRLSvsHTTP(b *testing.B) {
	store := lease.NewMemoryStore(lease.DefaultMemoryStoreConfig())
	defer store.Close()
	mgr := lease.NewManager(store, lease.DefaultConfig())
	defer mgr.Close()
	n := node.New(node.DefaultConfig(), mgr)
	set, err := rules.Parse([]byte("rules:\n  - name: per-key\n    algorithm: fixed_window\n    limit: 1000000000\n    period: 1s\n"))
	if err != nil {
		b.Fatal(err)
	}
	n.SetRules(set)
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go n.Serve(httpLn)
	defer n.Shutdown(context.Background())

	srv := rls.NewServer(rls.ServerConfig{Engine: n, Metrics: n.MetricsSet()})
	c, err := rls.Parse(rls.Doc{Name: "bench.yaml", Data: []byte("domain: bench\ndescriptors:\n  - key: user\n    rate_limit: {unit: second, requests_per_unit: 1000000000}\n")})
	if err != nil {
		b.Fatal(err)
	}
	srv.SetConfig(c)
	rlsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(rlsLn)
	defer srv.Close(context.Background())

	conn, err := grpc.NewClient(rlsLn.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := rlsv3.NewRateLimitServiceClient(conn)
	hc := &fasthttp.Client{MaxConnsPerHost: 256}
	url := "http://" + httpLn.Addr().String() + "/v1/check"

	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i)
	}

	rls := func(b *testing.B) {
		run(b, func(i int) error {
			_, err := client.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "bench",
				Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: []*ratelimitv3.RateLimitDescriptor_Entry{{Key: "user", Value: keys[i%len(keys)]}}}}})
			return err
		})
	}
	http := func(b *testing.B) {
		run(b, func(i int) error {
			req := fasthttp.AcquireRequest()
			res := fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(res)
			req.SetRequestURI(url)
			req.Header.SetMethod("POST")
			req.SetBodyString(`{"rule":"per-key","key":"` + keys[i%len(keys)] + `"}`)
			return hc.Do(req, res)
		})
	}
	// Rounds interleave the two, so that a shared machine's load shifts
	// hit both alike (compare within a round).
	for r := 1; r <= 3; r++ {
		b.Run("round"+strconv.Itoa(r)+"/rls", rls)
		b.Run("round"+strconv.Itoa(r)+"/http", http)
	}
}

// run calls call b.N times from 16 goroutines per core and reports
// calls/s and the p99 latency.
func run(b *testing.B, call func(i int) error) {
	b.ReportAllocs()
	b.SetParallelism(16)
	var (
		mu   sync.Mutex
		lat  []time.Duration
		next atomic.Int64
	)
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
}
