package node

import (
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluicehq/sluice/lease"
)

// newCtx builds a RequestCtx for calling a handler directly.
func newCtx(method, uri, body, ip string) *fasthttp.RequestCtx {
	var req fasthttp.Request
	req.Header.SetMethod(method)
	req.SetRequestURI(uri)
	if body != "" {
		req.SetBodyString(body)
	}
	ctx := &fasthttp.RequestCtx{}
	ctx.Init(&req, &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000}, nil)
	return ctx
}

// benchRules never deny, so that benchmarks measure the allowed path.
const benchRules = `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 1000000000000
    period: 1s
    key: header:X-API-Key
`

func newBenchNode(tb testing.TB) *Node {
	tb.Helper()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	mgr := lease.NewManager(store, lease.DefaultConfig())
	tb.Cleanup(func() { mgr.Close(); store.Close() })
	n := New(DefaultConfig(), mgr)
	n.SetRules(mustParse(tb, benchRules))
	return n
}

// benchHandler runs h on per-goroutine contexts built by mk.
func benchHandler(b *testing.B, h fasthttp.RequestHandler, mk func(i int) *fasthttp.RequestCtx, perOp int) {
	b.Helper()
	var g atomic.Int64
	// Warm up (leases, pools) before timing.
	for i := range 8 {
		ctx := mk(i)
		h(ctx)
		if ctx.Response.StatusCode() != 200 {
			b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() { reportCPU(b, cpu0) }()
	b.RunParallel(func(pb *testing.PB) {
		ctx := mk(int(g.Add(1)))
		for pb.Next() {
			ctx.Response.Reset()
			h(ctx)
		}
	})
	if perOp > 1 {
		b.ReportMetric(float64(b.N)*float64(perOp)/b.Elapsed().Seconds(), "decisions/s")
	}
}

// cpuTime is the process's user+system CPU time. Benchmarks report CPU
// per operation (cpu-ns/op) besides wall time because the development
// machine is shared: wall time swings with other load, CPU time much less.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64(cpuTime()-start)/float64(b.N), "cpu-ns/op")
}

func checkBody(i int) string {
	return `{"rule":"per-key","key":"user-` + strconv.Itoa(i%8) + `"}`
}

// BenchmarkCheckHandler is the hot path: one POST /v1/check by rule and key.
func BenchmarkCheckHandler(b *testing.B) {
	n := newBenchNode(b)
	benchHandler(b, n.Handler(), func(i int) *fasthttp.RequestCtx {
		return newCtx("POST", "/v1/check", checkBody(i), "127.0.0.1")
	}, 1)
}

// BenchmarkCeilingHandler is a bare fasthttp handler answering a body of
// the same size as BenchmarkCheckHandler's: the ceiling to compare with.
func BenchmarkCeilingHandler(b *testing.B) {
	n := newBenchNode(b)
	ctx := newCtx("POST", "/v1/check", checkBody(0), "127.0.0.1")
	n.Handler()(ctx)
	body := append([]byte(nil), ctx.Response.Body()...)
	bare := func(ctx *fasthttp.RequestCtx) {
		_ = ctx.PostBody()
		ctx.SetContentTypeBytes(contentTypeJSON)
		ctx.SetBody(body)
	}
	benchHandler(b, bare, func(i int) *fasthttp.RequestCtx {
		return newCtx("POST", "/v1/check", checkBody(i), "127.0.0.1")
	}, 1)
}

// BenchmarkChecksBatch100 is POST /v1/checks with 100 checks over 100 keys.
func BenchmarkChecksBatch100(b *testing.B) {
	n := newBenchNode(b)
	body := batchBody(100)
	benchHandler(b, n.Handler(), func(int) *fasthttp.RequestCtx {
		return newCtx("POST", "/v1/checks", body, "127.0.0.1")
	}, 100)
}

func batchBody(n int) string {
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(`{"rule":"per-key","key":"user-` + strconv.Itoa(i) + `"}`)
	}
	sb.WriteString(`]}`)
	return sb.String()
}

// BenchmarkForwardAuth is /v1/auth with a header key.
func BenchmarkForwardAuth(b *testing.B) {
	n := newBenchNode(b)
	benchHandler(b, n.Handler(), func(i int) *fasthttp.RequestCtx {
		ctx := newCtx("GET", "/v1/auth", "", "127.0.0.1")
		ctx.Request.Header.Set("X-Forwarded-Uri", "/api/users")
		ctx.Request.Header.Set("X-API-Key", "k-"+strconv.Itoa(i%8))
		return ctx
	}, 1)
}

func TestCheckHandlerAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count (not under -race or -short)")
	}
	n := newBenchNode(t)
	h := n.Handler()
	ctx := newCtx("POST", "/v1/check", checkBody(0), "127.0.0.1")
	for range 10 {
		ctx.Response.Reset()
		h(ctx)
	}
	allocs := testing.AllocsPerRun(200, func() {
		ctx.Response.Reset()
		h(ctx)
	})
	if ctx.Response.StatusCode() != 200 {
		t.Fatalf("status %d", ctx.Response.StatusCode())
	}
	if allocs > 0 {
		t.Errorf("%v allocations per check, want 0", allocs)
	}
}

// FuzzHandler sends random bodies and queries to every endpoint: the node
// never panics, never answers 5xx, and every error is JSON naming a field.
func FuzzHandler(f *testing.F) {
	n := newBenchNode(f)
	n.SetRules(mustParse(f, testRules))
	h := n.Handler()
	paths := []string{"/v1/check", "/v1/checks", "/v1/acquire", "/v1/release", "/v1/auth", "/v1/check?"}
	seeds := []string{
		`{"rule":"per-key","key":"user-42"}`,
		`{"rule":"per-key","key":"user-42","hits":0}`,
		`{"descriptors":{"api_key":"k1","tenant":"t"},"hits":2}`,
		`{"checks":[{"rule":"per-key","key":"a"},{"rule":"x"},{"descriptors":{"user":"u"}}]}`,
		`{"rule":"uploads","key":"u1"}`,
		`{"lease_id":"uploads~dTE~0123abcd"}`,
		`rule=login&key=1.2.3.4&hits=1`,
		`{"rule":"per-key","key":"a","hits":1e99}`,
		`[]`, `null`, ``, `{"checks":null}`,
	}
	for i, s := range seeds {
		f.Add(uint8(i), s)
	}
	f.Fuzz(func(t *testing.T, which uint8, body string) {
		path := paths[int(which)%len(paths)]
		var ctx *fasthttp.RequestCtx
		switch {
		case path == "/v1/check?":
			ctx = newCtx("GET", "/v1/check", "", "127.0.0.1")
			ctx.Request.URI().SetQueryString(body)
		default:
			ctx = newCtx("POST", path, body, "127.0.0.1")
			if path == "/v1/auth" {
				ctx.Request.Header.Set("X-Forwarded-Uri", body)
				ctx.Request.Header.Set("X-API-Key", body)
				ctx.Request.Header.Set("Authorization", "Bearer "+body)
			}
		}
		h(ctx)
		status := ctx.Response.StatusCode()
		if status >= 500 {
			t.Fatalf("%s %q: status %d %s", path, body, status, ctx.Response.Body())
		}
		if status == 400 {
			var e struct {
				Error string `json:"error"`
			}
			if err := json.Unmarshal(ctx.Response.Body(), &e); err != nil || e.Error == "" {
				t.Fatalf("%s %q: 400 body %q", path, body, ctx.Response.Body())
			}
		}
	})
}

// benchServer drives h through a real fasthttp.Server on an in-memory
// listener, so that HTTP parsing and writing are included: the throughput
// that the "≥ 80% of a bare handler" budget is about.
func benchServer(b *testing.B, srv *fasthttp.Server, uri string, body func(i int) string, perOp int) {
	b.Helper()
	ln := fasthttputil.NewInmemoryListener()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	b.Cleanup(func() { _ = srv.Shutdown(); <-done })
	client := &fasthttp.Client{Dial: func(string) (net.Conn, error) { return ln.Dial() }, MaxConnsPerHost: 1024}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() { reportCPU(b, cpu0) }()
	var g atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(res)
		req.SetRequestURI("http://sluice" + uri)
		req.Header.SetMethod("POST")
		req.SetBodyString(body(int(g.Add(1))))
		for pb.Next() {
			if err := client.Do(req, res); err != nil || res.StatusCode() != 200 {
				b.Errorf("status %d err %v", res.StatusCode(), err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)*float64(perOp)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkServerCheck is POST /v1/check through HTTP.
func BenchmarkServerCheck(b *testing.B) {
	n := newBenchNode(b)
	benchServer(b, n.srv, "/v1/check", checkBody, 1)
}

// BenchmarkServerCeiling is a bare fasthttp server replaying the node's
// answer (the same headers and body, so the same response size): compare
// its decisions/s with BenchmarkServerCheck's. (node/testdata/ab.sh makes
// the same comparison with wrk over TCP against the built sluiced.)
func BenchmarkServerCeiling(b *testing.B) {
	n := newBenchNode(b)
	ctx := newCtx("POST", "/v1/check", checkBody(0), "127.0.0.1")
	n.Handler()(ctx)
	body := append([]byte(nil), ctx.Response.Body()...)
	var hdrs [][2][]byte
	for k, v := range ctx.Response.Header.All() {
		if string(k) != "Content-Type" && string(k) != "Content-Length" {
			hdrs = append(hdrs, [2][]byte{append([]byte(nil), k...), append([]byte(nil), v...)})
		}
	}
	// The same server settings as the node's (timeouts, limits), only the
	// handler differs.
	srv := &fasthttp.Server{
		Handler: func(ctx *fasthttp.RequestCtx) {
			_ = ctx.PostBody()
			for _, h := range hdrs {
				ctx.Response.Header.SetCanonical(h[0], h[1])
			}
			ctx.SetContentTypeBytes(contentTypeJSON)
			ctx.SetBody(body)
		},
		Name:                  n.srv.Name,
		MaxRequestBodySize:    n.srv.MaxRequestBodySize,
		ReadBufferSize:        n.srv.ReadBufferSize,
		ReadTimeout:           n.srv.ReadTimeout,
		WriteTimeout:          n.srv.WriteTimeout,
		IdleTimeout:           n.srv.IdleTimeout,
		CloseOnShutdown:       true,
		NoDefaultServerHeader: true,
	}
	benchServer(b, srv, "/v1/check", checkBody, 1)
}

// BenchmarkServerBatch100 is POST /v1/checks of 100 checks through HTTP.
func BenchmarkServerBatch100(b *testing.B) {
	n := newBenchNode(b)
	body := batchBody(100)
	benchServer(b, n.srv, "/v1/checks", func(int) string { return body }, 100)
}
