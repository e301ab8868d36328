package main

import (
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// benchRules never deny: the benchmark measures decisions, not denials.
const benchRules = `rules:
  - name: per-key
    algorithm: token_bucket
    limit: 1000000000
    period: 1h
`

// BenchmarkClusterThroughput compares one node with a three-node cluster
// (all in this process, one Redis) on uniformly random keys: each request
// goes to the next node round-robin, so with three nodes two checks in
// three are forwarded to their owner. single sends one check per request,
// batch100 a /v1/checks of 100 (split by owner, one ForwardMany per peer).
// The three-node cluster runs keyed (every internal request and reply
// signed) and, as "nodes=3-unsigned", with -insecure-cluster (no
// signatures): the difference is the cost of signing. The figure is
// decisions per second (decisions/s); on a 2-core machine the nodes,
// Redis and the load generator share the CPUs.
//
//	go test -run '^$' -bench ClusterThroughput -benchtime 3s -count=3 ./cmd/sluiced
func BenchmarkClusterThroughput(b *testing.B) {
	for _, c := range []struct {
		size int
		name string
		args []string
	}{{1, "nodes=1", nil}, {3, "nodes=3", nil}, {3, "nodes=3-unsigned", []string{"-cluster-key=", "-insecure-cluster"}}} {
		for _, batch := range []int{1, 100} {
			name := c.name + "/single"
			if batch > 1 {
				name = c.name + "/batch" + strconv.Itoa(batch)
			}
			b.Run(name, func(b *testing.B) { benchCluster(b, c.size, batch, c.args) })
		}
	}
}

func benchCluster(b *testing.B, size, batch int, args []string) {
	tc := newTestCluster(b, benchRules)
	tc.args = args
	nodes := []*testNode{tc.start("node-a")}
	for i := 1; i < size; i++ {
		nodes = append(nodes, tc.start("node-"+string(rune('a'+i)), nodes[0]))
	}
	want := "node-a"
	for i := 1; i < size; i++ {
		want += ",node-" + string(rune('a'+i))
	}
	tc.converge(want, nodes...)
	clients := make([]*fasthttp.HostClient, len(nodes))
	for i, n := range nodes {
		clients[i] = &fasthttp.HostClient{Addr: n.d.ln.Addr().String(), MaxConns: 512}
	}
	const keys = 10_000 // sluice-bench's default
	var next, errs atomic.Int64
	prefix := "b" + strconv.FormatInt(time.Now().UnixNano(), 36) + "-"
	b.ReportAllocs()
	// 64 single checks in flight (sluice-bench's workers), or 8 batches
	// (800 checks): more batches only queue up behind each other, and a
	// forward that waits longer than the Forwarder's 50ms timeout is
	// decided locally (counted as fallback/decision).
	b.SetParallelism(max(32/batch, 4))
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		req := fasthttp.AcquireRequest()
		res := fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(res)
		rng := rand.New(rand.NewPCG(uint64(next.Add(1)), 7))
		var body []byte
		for pb.Next() {
			c := clients[int(next.Add(1))%len(clients)]
			body = body[:0]
			if batch == 1 {
				req.SetRequestURI("http://" + c.Addr + "/v1/check")
				body = append(body, `{"rule":"per-key","key":"`...)
				body = append(body, prefix...)
				body = strconv.AppendInt(body, int64(rng.IntN(keys)), 10)
				body = append(body, `"}`...)
			} else {
				req.SetRequestURI("http://" + c.Addr + "/v1/checks")
				body = append(body, `{"checks":[`...)
				for i := range batch {
					if i > 0 {
						body = append(body, ',')
					}
					body = append(body, `{"rule":"per-key","key":"`...)
					body = append(body, prefix...)
					body = strconv.AppendInt(body, int64(rng.IntN(keys)), 10)
					body = append(body, `"}`...)
				}
				body = append(body, `]}`...)
			}
			req.Header.SetMethod("POST")
			req.SetBody(body)
			if err := c.DoTimeout(req, res, 5*time.Second); err != nil || res.StatusCode() != 200 {
				errs.Add(1)
			}
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	b.ReportMetric(float64(b.N*batch)/elapsed.Seconds(), "decisions/s")
	if e := errs.Load(); e > 0 {
		b.Errorf("%d requests failed or were not 200", e)
	}
	var fwd, failed uint64
	var storeCalls int64
	for _, n := range nodes {
		fs := n.d.node.ForwardStats()
		fwd += fs.Items
		failed += fs.Failed
		st := n.d.mgr.Stats()
		storeCalls += st.StoreDecisions + st.Prefetches + st.Returns
	}
	if b.N > 0 {
		b.ReportMetric(float64(fwd)/float64(b.N*batch), "forwarded/decision")
		b.ReportMetric(float64(failed)/float64(b.N*batch), "fallback/decision")
		b.ReportMetric(float64(storeCalls)/float64(b.N*batch), "store-calls/decision")
	}
}
