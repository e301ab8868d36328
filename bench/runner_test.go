package bench

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// serve starts h on a loopback port and returns its address.
func serve(t testing.TB, h fasthttp.RequestHandler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &fasthttp.Server{Handler: h}
	go s.Serve(ln) //nolint:errcheck // ends when Shutdown closes ln
	t.Cleanup(func() { _ = s.Shutdown() })
	return ln.Addr().String()
}

// limiterHandler is a tiny exact limiter at a seam the bench owns: each key
// may be allowed `limit` times in total. It records the requests it saw.
type limiterHandler struct {
	limit int
	seen  map[string]int
	reqs  atomic.Int64
	last  atomic.Value // string: last request body or header
}

func (l *limiterHandler) handle(ctx *fasthttp.RequestCtx) {
	l.reqs.Add(1)
	switch string(ctx.Path()) {
	case "/v1/check", "/rl":
		key := string(ctx.QueryArgs().Peek("k"))
		if key == "" {
			body := string(ctx.PostBody())
			l.last.Store(body)
			_, rest, _ := strings.Cut(body, `"key":"`)
			key, _, _ = strings.Cut(rest, `"`)
		}
		if l.take(key) {
			ctx.SetStatusCode(200)
			ctx.SetBodyString(`{"allowed":true}`)
		} else {
			ctx.SetStatusCode(429)
			ctx.SetBodyString(`{"allowed":false}`)
		}
	case "/v1/checks":
		body := string(ctx.PostBody())
		l.last.Store(body)
		var out []byte
		out = append(out, `{"results":[`...)
		for i, part := range strings.Split(body, `"key":"`)[1:] {
			key, _, _ := strings.Cut(part, `"`)
			if i > 0 {
				out = append(out, ',')
			}
			if l.take(key) {
				out = append(out, `{"allowed":true}`...)
			} else {
				out = append(out, `{"allowed":false}`...)
			}
		}
		out = append(out, "]}"...)
		ctx.SetBody(out)
	case "/v1/auth":
		l.last.Store(string(ctx.Request.Header.Peek("X-Bench-Key")))
		if l.take(string(ctx.Request.Header.Peek("X-Bench-Key"))) {
			ctx.SetStatusCode(200)
		} else {
			ctx.SetStatusCode(429)
		}
	default:
		ctx.SetStatusCode(404)
	}
}

var limMu sync.Mutex // guards every limiterHandler.seen

// take is called from fasthttp's goroutines.
func (l *limiterHandler) take(key string) bool {
	limMu.Lock()
	defer limMu.Unlock()
	l.seen[key]++
	return l.seen[key] <= l.limit
}

func TestDriversAgainstLimiter(t *testing.T) {
	tests := []struct {
		kind  HTTPKind
		batch int
		cfg   func(*HTTPConfig)
	}{
		{Single, 1, nil},
		{Pipelined, 1, nil},
		{Batch, 10, nil},
		{ForwardAuth, 1, nil},
		{Raw, 1, func(c *HTTPConfig) { c.Method = "GET"; c.URL = "/rl?k={{key}}"; c.Success = 200; c.Deny = 429 }},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			lim := &limiterHandler{limit: 3, seen: map[string]int{}}
			addr := serve(t, lim.handle)
			kc := KeyConfig{Keys: 5, Dist: Uniform, Seed: 3}
			hc := HTTPConfig{Kind: tt.kind, Addr: addr, Conns: 2, Keys: kc.KeyNames()}
			if tt.cfg != nil {
				tt.cfg(&hc)
			}
			d, err := NewHTTPDriver(hc)
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			r, err := Run(context.Background(), d, RunConfig{
				Mode: Closed, Duration: 300 * time.Millisecond, Workers: 2, Batch: tt.batch,
				Keys: kc, Limit: &Limit{Limit: 3, Period: time.Hour, Burst: 3},
			})
			if err != nil {
				t.Fatal(err)
			}
			if r.Errors != 0 || r.FirstErr != "" {
				t.Fatalf("errors %d: %s", r.Errors, r.FirstErr)
			}
			if r.Decisions == 0 || r.Decisions != r.Requests*int64(tt.batch) {
				t.Fatalf("decisions %d for %d requests of %d", r.Decisions, r.Requests, tt.batch)
			}
			// The fake admits exactly 3 per key: the bench must count what
			// it admitted and see no over- or under-admission against a
			// 3-per-hour rule.
			limMu.Lock()
			want := int64(0)
			for _, n := range lim.seen {
				want += int64(min(n, 3))
			}
			limMu.Unlock()
			if r.Allowed != want || r.Accuracy.OverAdmitted != 0 || r.Accuracy.UnderAdmitted != 0 {
				t.Fatalf("allowed %d, server admitted %d, accuracy %+v", r.Allowed, want, *r.Accuracy)
			}
			if int64(lim.reqs.Load()) != r.Requests {
				t.Fatalf("server saw %d requests, bench counted %d", lim.reqs.Load(), r.Requests)
			}
		})
	}
}

func TestRawTemplateBody(t *testing.T) {
	lim := &limiterHandler{limit: 100, seen: map[string]int{}}
	addr := serve(t, lim.handle)
	d, err := NewHTTPDriver(HTTPConfig{Kind: Raw, Addr: addr, URL: "/v1/check", Body: `{"key":"{{key}}","n":"{{key}}"}`, Keys: [][]byte{[]byte("abc")}})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := d.NewSession()
	out := make([]Outcome, 1)
	if err := s.Do([]int32{0}, out); err != nil || out[0] != Allowed {
		t.Fatalf("Do: %v %v", err, out[0])
	}
	if got := lim.last.Load().(string); got != `{"key":"abc","n":"abc"}` {
		t.Fatalf("body %q", got)
	}
}

func TestHTTPConfigErrorsNameField(t *testing.T) {
	keys := [][]byte{[]byte("k")}
	tests := []struct {
		cfg   HTTPConfig
		field string
	}{
		{HTTPConfig{Kind: Single, Keys: keys}, "addr"},
		{HTTPConfig{Kind: Single, Addr: "x:1"}, "keys"},
		{HTTPConfig{Kind: Single, Addr: "x:1", Keys: keys, Conns: -1}, "conns"},
		{HTTPConfig{Kind: Single, Addr: "x:1", Keys: keys, Hits: -1}, "hits"},
		{HTTPConfig{Kind: Single, Addr: "x:1", Keys: keys, Rule: `a"b`}, "rule"},
		{HTTPConfig{Kind: Raw, Addr: "x:1", Keys: keys, URL: "nope"}, "url"},
		{HTTPConfig{Kind: Raw, Addr: "x:1", Keys: keys, URL: "/", Success: 200, Deny: 200}, "deny"},
		{HTTPConfig{Kind: Raw, Addr: "x:1", Keys: keys, URL: "/", Headers: []string{"nocolon"}}, "header"},
		{HTTPConfig{Kind: 99, Addr: "x:1", Keys: keys}, "driver"},
	}
	for _, tt := range tests {
		_, err := NewHTTPDriver(tt.cfg)
		if err == nil || !strings.HasPrefix(err.Error(), tt.field+":") {
			t.Errorf("%+v: err %v, want one naming %q", tt.cfg, err, tt.field)
		}
	}
}

// TestOpenLoopRun: an open-loop run sends exactly the scheduled requests
// against a fast server and measures from the intended times.
func TestOpenLoopRun(t *testing.T) {
	addr := serve(t, CeilingHandler(SyntheticCanned(1)))
	kc := KeyConfig{Keys: 100}
	d, err := NewHTTPDriver(HTTPConfig{Kind: Single, Addr: addr, Conns: 8, Keys: kc.KeyNames()})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	r, err := Run(context.Background(), d, RunConfig{Mode: Open, Rate: 2000, Duration: 250 * time.Millisecond, Workers: 8, Keys: kc})
	if err != nil {
		t.Fatal(err)
	}
	if r.Scheduled != 500 || r.Requests+r.Missed != 500 || r.Errors != 0 {
		t.Fatalf("scheduled %d requests %d missed %d errors %d (%s)", r.Scheduled, r.Requests, r.Missed, r.Errors, r.FirstErr)
	}
	if r.Allowed != r.Requests || r.Latency.P50 <= 0 {
		t.Fatalf("allowed %d of %d, p50 %v", r.Allowed, r.Requests, r.Latency.P50)
	}
	if r.SendLag == nil || r.SendLag.Max > r.Latency.Max {
		t.Fatalf("send lag %+v must be part of the latency (max %v)", r.SendLag, r.Latency.Max)
	}
}

// TestOpenLoopCountsStalls: a server that stalls makes every request
// scheduled during the stall late; latency measured from the intended time
// shows it (a closed-loop generator would record one slow request).
func TestOpenLoopCountsStalls(t *testing.T) {
	var stalled atomic.Bool
	addr := serve(t, func(ctx *fasthttp.RequestCtx) {
		if stalled.CompareAndSwap(false, true) {
			time.Sleep(100 * time.Millisecond) // the stall: real time, which the generator measures
		}
		ctx.SetStatusCode(200)
	})
	kc := KeyConfig{Keys: 1}
	d, _ := NewHTTPDriver(HTTPConfig{Kind: Single, Addr: addr, Conns: 1, Keys: kc.KeyNames()})
	defer d.Close()
	// One worker, 1000/s for 200ms: the first request stalls 100ms, so
	// about 100 requests scheduled in that time are late by up to 100ms.
	r, err := Run(context.Background(), d, RunConfig{Mode: Open, Rate: 1000, Duration: 200 * time.Millisecond, Workers: 1, Keys: kc})
	if err != nil {
		t.Fatal(err)
	}
	// About half the requests were due during the stall, late by 100ms
	// down to 0: the 75th percentile is about 50ms. Measured from the
	// actual send time it would be tens of microseconds.
	if p75 := r.Histogram().Quantile(0.75); p75 < 25*time.Millisecond || r.Latency.P99 < 80*time.Millisecond {
		t.Fatalf("p75 %v p99 %v: the stall is not in the latencies (coordinated omission)", p75, r.Latency.P99)
	}
}

func TestRunConfigErrors(t *testing.T) {
	d := &inprocDriver{}
	for _, c := range []RunConfig{
		{},
		{Duration: time.Second, Mode: Open},
		{Duration: time.Second, Batch: 1001},
		{Duration: time.Second, Workers: -1},
		{Duration: MaxDuration + 1},
		{Duration: time.Second, Keys: KeyConfig{Keys: -3}},
	} {
		if _, err := Run(context.Background(), d, c); err == nil {
			t.Errorf("%+v: want error", c)
		}
	}
}

func TestDegradedCounted(t *testing.T) {
	addr := serve(t, func(ctx *fasthttp.RequestCtx) {
		ctx.SetStatusCode(200)
		ctx.SetBodyString(`{"allowed":true,"rule":"bench","key":"k","degraded":true}`)
	})
	kc := KeyConfig{Keys: 3}
	d, _ := NewHTTPDriver(HTTPConfig{Kind: Single, Addr: addr, Conns: 1, Keys: kc.KeyNames()})
	defer d.Close()
	s, _ := d.NewSession()
	out := make([]Outcome, 1)
	if err := s.Do([]int32{1}, out); err != nil || out[0] != AllowedDegraded || !out[0].IsAllowed() {
		t.Fatalf("Do: %v, %v", err, out[0])
	}
	r, err := Run(context.Background(), d, RunConfig{Duration: 50 * time.Millisecond, Workers: 1, Keys: kc})
	if err != nil || r.Degraded == 0 || r.Degraded != r.Allowed {
		t.Fatalf("%v: degraded %d of %d allowed", err, r.Degraded, r.Allowed)
	}
}

func TestRunCountsTransportErrors(t *testing.T) {
	addr, err := FreePort() // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	kc := KeyConfig{Keys: 2}
	d, _ := NewHTTPDriver(HTTPConfig{Kind: Batch, Addr: addr, Conns: 1, Timeout: 200 * time.Millisecond, Keys: kc.KeyNames()})
	defer d.Close()
	r, err := Run(context.Background(), d, RunConfig{Duration: 50 * time.Millisecond, Workers: 2, Batch: 3, Keys: kc})
	if err != nil {
		t.Fatal(err)
	}
	if r.Errors == 0 || r.Errors%3 != 0 || r.Decisions != 0 || r.FirstErr == "" {
		t.Fatalf("errors %d decisions %d first %q", r.Errors, r.Decisions, r.FirstErr)
	}
}

// TestGoClientDriver drives the limiter seam through node/client: without
// /v1/members (404) the client sends to its seed, one /v1/check per single
// check and one /v1/checks per batch.
func TestGoClientDriver(t *testing.T) {
	for _, batch := range []int{1, 10} {
		lim := &limiterHandler{limit: 3, seen: map[string]int{}}
		addr := serve(t, lim.handle)
		kc := KeyConfig{Keys: 5, Dist: Uniform, Seed: 3}
		d, err := NewGoClientDriver(GoClientConfig{Nodes: []string{addr}, Keys: kc.KeyNames()})
		if err != nil {
			t.Fatal(err)
		}
		r, err := Run(context.Background(), d, RunConfig{
			Mode: Closed, Duration: 300 * time.Millisecond, Workers: 2, Batch: batch,
			Keys: kc, Limit: &Limit{Limit: 3, Period: time.Hour, Burst: 3},
		})
		d.Close()
		if err != nil {
			t.Fatal(err)
		}
		if r.Errors != 0 || r.Decisions == 0 || r.Decisions != r.Requests*int64(batch) {
			t.Fatalf("batch %d: errors %d (%s), %d decisions for %d requests", batch, r.Errors, r.FirstErr, r.Decisions, r.Requests)
		}
		limMu.Lock()
		want := int64(0)
		for _, n := range lim.seen {
			want += int64(min(n, 3))
		}
		limMu.Unlock()
		if r.Allowed != want || r.Accuracy.OverAdmitted != 0 {
			t.Fatalf("batch %d: allowed %d, server admitted %d, accuracy %+v", batch, r.Allowed, want, *r.Accuracy)
		}
	}
	if _, err := NewGoClientDriver(GoClientConfig{Nodes: []string{"127.0.0.1:1"}}); err == nil || !strings.Contains(err.Error(), "keys") {
		t.Fatalf("empty key table: %v", err)
	}
}
