package node

import (
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
)

// First touches on the node: a key no one has checked or leased before,
// as a check (POST /v1/check) and as a gateway's first lease of it (POST
// /v1/lease, want a batch, need 1), each on the node sluiced runs on the
// memory store (deciding in the store). What a Limiter's first touch
// costs the node, against what a plain check costs it.
func BenchmarkFirstTouchCheckHandler(b *testing.B) {
	benchFirstTouch(b, func(i int64) *fasthttp.RequestCtx {
		return newCtx("POST", "/v1/check", `{"rule":"per-key","key":"u`+strconv.FormatInt(i, 10)+`"}`, "127.0.0.1")
	})
}

func BenchmarkFirstTouchLeaseHandler(b *testing.B) {
	benchFirstTouch(b, func(i int64) *fasthttp.RequestCtx {
		ctx := newCtx("POST", LeasePath, `{"holder":"`+holderA+`","ops":[{"op":"lease","rule":"per-key","key":"u`+
			strconv.FormatInt(i, 10)+`","want":13,"need":1,"ttl_ms":30000,"call":7,"first":1}]}`, "127.0.0.1")
		ctx.Request.Header.Set("Authorization", "Bearer "+testClientToken)
		return ctx
	})
}

func benchFirstTouch(b *testing.B, mk func(i int64) *fasthttp.RequestCtx) {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	mcfg := lease.DefaultConfig()
	mcfg.Direct = true
	mgr := lease.NewManager(store, mcfg)
	b.Cleanup(func() { mgr.Close(); store.Close() })
	cfg := DefaultConfig()
	cfg.ClientToken = testClientToken
	cfg.ClientRate = 1 << 30
	n := New(cfg, mgr)
	n.SetRules(mustParse(b, benchRules))
	h := n.Handler()
	var next atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() { reportCPU(b, cpu0) }()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctx := mk(next.Add(1))
			h(ctx)
			if ctx.Response.StatusCode() != 200 {
				b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
			}
		}
	})
}
