package node_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/lua/redistest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rules"
)

// TestLiveHeapPerKey is bench's TestNodeMemoryPerKey in one process, where
// the heap that survives a collection can be read: with
// SLUICE_MEMORY_KEYS=N (unset, the test is skipped) it checks N distinct
// keys of one token_bucket rule once each through POST /v1/checks on
// loopback and logs the live heap per key beyond the key, on the in-memory
// store (deciding in the store, as sluiced does; SLUICE_MEMORY_STORE=leases
// leasing from it, as sluiced -memory-leases), or with
// SLUICE_MEMORY_STORE=redis on a redis-server of its own (the heap is then
// the node's alone). With -memprofile, the profile shows
// where the bytes are:
//
//	SLUICE_MEMORY_KEYS=200000 go test -count=1 -run LiveHeapPerKey -v -memprofile /tmp/heap.prof -memprofilerate 512 ./node/
func TestLiveHeapPerKey(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SLUICE_MEMORY_KEYS"))
	if n <= 0 {
		t.Skip("set SLUICE_MEMORY_KEYS=200000 to measure the live heap per key")
	}
	var store lease.Store
	if os.Getenv("SLUICE_MEMORY_STORE") == "redis" {
		cfg, err := lua.ParseURL("redis://" + redistest.Start(t))
		if err != nil {
			t.Fatal(err)
		}
		rs, err := lua.NewStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		store = rs
	} else {
		ms := lease.NewMemoryStore(lease.DefaultMemoryStoreConfig())
		defer ms.Close()
		store = ms
	}
	cfg := lease.DefaultConfig()
	cfg.Idle = time.Hour // every key stays active
	// On the memory store a node decides in the store, as sluiced does
	// (SLUICE_MEMORY_STORE=leases: it leases, as sluiced -memory-leases).
	cfg.Direct = os.Getenv("SLUICE_MEMORY_STORE") == ""
	mgr := lease.NewManager(store, cfg)
	defer mgr.Close()
	nd := node.New(node.DefaultConfig(), mgr)
	set, err := rules.Parse([]byte("rules:\n  - name: mem\n    algorithm: token_bucket\n    limit: 100\n    period: 24h\n"))
	if err != nil {
		t.Fatal(err)
	}
	nd.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go nd.Serve(ln)
	defer nd.Shutdown(context.Background())
	c := &fasthttp.HostClient{Addr: ln.Addr().String()}
	req, res := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	var body bytes.Buffer
	check := func(lo, hi int) {
		for i := lo; i < hi; i += 100 {
			body.Reset()
			body.WriteString(`{"checks":[`)
			for k := i; k < min(i+100, hi); k++ {
				if k > i {
					body.WriteByte(',')
				}
				fmt.Fprintf(&body, `{"rule":"mem","key":"key-%07d"}`, k)
			}
			body.WriteString(`]}`)
			req.Reset()
			req.SetRequestURI("http://" + ln.Addr().String() + "/v1/checks")
			req.Header.SetMethod("POST")
			req.SetBody(body.Bytes())
			if err := c.Do(req, res); err != nil || res.StatusCode() != fasthttp.StatusOK {
				t.Fatalf("POST /v1/checks: %v %d %.200s", err, res.StatusCode(), res.Body())
			}
		}
	}
	check(0, 100) // the pools and buffers of a running node
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	check(100, n)
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n-100)
	const keyLen = len("key-0000000")
	t.Logf("%d keys: live heap %.0f B per key, %.0f B beyond the key's %d bytes", n, perKey, perKey-float64(keyLen), keyLen)
	runtime.KeepAlive(mgr)
	runtime.KeepAlive(store)
}
