package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

// TestCounterKeysReachManagerIntact: the Manager ends up with exactly the
// counter keys of the requests (a view of a reused buffer that it kept
// would show up here as a wrong or repeated key), through single checks,
// multi-rule descriptor checks and batches.
func TestCounterKeysReachManagerIntact(t *testing.T) {
	tn := newTestNode(t, testRules)
	want := map[string]bool{}
	for i := range 20 {
		k := fmt.Sprintf("user-%d", i)
		tn.do("POST", "/v1/check", `{"rule":"per-key","key":"`+k+`"}`)
		want["per-key:"+k] = true
	}
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range 50 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"rule":"per-key","key":"b-%d-%s"}`, i, strings.Repeat("x", i*5))
		want[fmt.Sprintf("per-key:b-%d-%s", i, strings.Repeat("x", i*5))] = true
	}
	sb.WriteString(`]}`)
	if r := tn.do("POST", "/v1/checks", sb.String()); r.status != 200 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	got := map[string]bool{}
	_ = tn.mgr.ReturnKeys(func(key string) bool {
		got[key] = true
		return true
	})
	for k := range want {
		if !got[k] {
			t.Errorf("the Manager has no bucket %q", k)
		}
	}
	for k := range got {
		if !want[k] && !strings.HasPrefix(k, "per-key:") {
			continue // other rules matched by nothing here
		}
		if !want[k] {
			t.Errorf("the Manager has a bucket for %q, which no request named", k)
		}
	}
}

// TestCheckHandlerColdKeyAllocs: a check of a key never seen before
// allocates only what the Manager allocates for a new key (its bucket, its
// copy of the key, the Store's state); the node adds nothing once its
// pools are warm.
func TestCheckHandlerColdKeyAllocs(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count (not under -race or -short)")
	}
	const runs = 2000
	n := newBenchNode(t)
	h := n.Handler()
	ctx := newCtx("POST", "/v1/check", checkBody(0), "127.0.0.1")
	bodies := make([][]byte, runs+10)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"rule":"per-key","key":"cold-%06d"}`, i)
	}
	i := 0
	check := func() {
		ctx.Response.Reset()
		ctx.Request.SetBodyRaw(bodies[i])
		i++
		h(ctx)
	}
	for range 10 {
		check()
	}
	handler := testing.AllocsPerRun(runs-1, check)
	if ctx.Response.StatusCode() != fasthttp.StatusOK {
		t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
	// The Manager alone, on fresh keys of the same shape and policy.
	ri := n.eng.Table().Get("per-key")
	j := 0
	keys := make([]string, runs+10)
	for k := range keys {
		keys[k] = fmt.Sprintf("per-key:fresh-%06d", k)
	}
	mgr := testing.AllocsPerRun(runs-1, func() {
		_, _ = n.mgr.Take(keys[j], ri.Base(), 1)
		j++
	})
	t.Logf("cold key: handler %v allocs/check, Manager alone %v", handler, mgr)
	if handler > mgr {
		t.Errorf("a cold-key check makes %v allocations, the Manager's share is %v: the node adds %v", handler, mgr, handler-mgr)
	}
}

// TestHandlerWarmKeysZeroAlloc: checks that name a different (already
// leased) key in every request allocate nothing, single and in batches:
// the node neither copies the key out of the body nor builds the counter
// key on the heap.
func TestHandlerWarmKeysZeroAlloc(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocation count (not under -race or -short)")
	}
	n := newBenchNode(t)
	h := n.Handler()
	for _, tt := range []struct {
		path string
		body func(i int) []byte
	}{
		{"/v1/check", func(i int) []byte { return fmt.Appendf(nil, `{"rule":"per-key","key":"warm-%d"}`, i) }},
		{"/v1/check", func(i int) []byte { return fmt.Appendf(nil, `{"rule":"per-key","key":"w\u00e9-%d"}`, i) }},
		{"/v1/checks", func(i int) []byte {
			return fmt.Appendf(nil, `{"checks":[{"rule":"per-key","key":"b-%d"},{"rule":"per-key","key":"c-%d"}]}`, i, i)
		}},
	} {
		bodies := make([][]byte, 64)
		for i := range bodies {
			bodies[i] = tt.body(i)
		}
		ctx := newCtx("POST", tt.path, string(bodies[0]), "127.0.0.1")
		i := 0
		check := func() {
			ctx.Response.Reset()
			ctx.Request.SetBodyRaw(bodies[i%len(bodies)])
			i++
			h(ctx)
		}
		for range 2 * len(bodies) { // every key leased once
			check()
		}
		if allocs := testing.AllocsPerRun(500, check); allocs != 0 {
			t.Errorf("%s %s: %v allocations per request, want 0", tt.path, bodies[0], allocs)
		}
		if ctx.Response.StatusCode() != fasthttp.StatusOK {
			t.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
		}
	}
	// GET /v1/check?rule=&key=
	ctx := newCtx("GET", "/v1/check", "", "127.0.0.1")
	qs := make([]string, 64)
	for i := range qs {
		qs[i] = fmt.Sprintf("rule=per-key&key=g%%C3%%A9-%d", i)
	}
	i := 0
	check := func() {
		ctx.Response.Reset()
		ctx.Request.URI().SetQueryString(qs[i%len(qs)])
		i++
		h(ctx)
	}
	for range 2 * len(qs) {
		check()
	}
	if allocs := testing.AllocsPerRun(500, check); allocs != 0 {
		t.Errorf("GET /v1/check: %v allocations per request, want 0", allocs)
	}
	if ctx.Response.StatusCode() != fasthttp.StatusOK || !strings.Contains(string(ctx.Response.Body()), `"key":"gé-`) {
		t.Fatalf("GET: status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
	}
}
