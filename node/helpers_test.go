package node

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
	"github.com/valyala/fasthttp/fasthttputil"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/rules"
)

// testNode is a Node serving on an in-memory listener, with a client.
type testNode struct {
	t      *testing.T
	n      *Node
	mgr    *lease.Manager
	clock  *clocktest.Clock
	client *fasthttp.Client
	ln     *fasthttputil.InmemoryListener
}

// newTestNode starts a Node over a real Manager and MemoryStore with the
// rules in yml ("" = no SetRules call).
func newTestNode(t *testing.T, yml string) *testNode {
	t.Helper()
	clock := testClock()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	return newTestNodeStore(t, yml, store, clock)
}

func newTestNodeStore(t *testing.T, yml string, store lease.Store, clock *clocktest.Clock) *testNode {
	t.Helper()
	cfg := DefaultConfig()
	cfg.MaxBodyBytes = 64 << 10
	return newTestNodeConfig(t, yml, store, clock, cfg)
}

// newTestNodeConfig is newTestNodeStore with the node's Config.
func newTestNodeConfig(t *testing.T, yml string, store lease.Store, clock *clocktest.Clock, cfg Config) *testNode {
	t.Helper()
	return newTestNodeManager(t, yml, store, clock, cfg, lease.DefaultConfig())
}

// newTestNodeManager is newTestNodeConfig with the Manager's Config (its
// clock is set to clock).
func newTestNodeManager(t *testing.T, yml string, store lease.Store, clock *clocktest.Clock, cfg Config, mcfg lease.Config) *testNode {
	t.Helper()
	mcfg.Now = clock.Now
	mgr := lease.NewManager(store, mcfg)
	n := New(cfg, mgr)
	if yml != "" {
		n.SetRules(mustParse(t, yml))
	}
	ln := fasthttputil.NewInmemoryListener()
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		mgr.Close()
	})
	tn := &testNode{t: t, n: n, mgr: mgr, clock: clock, ln: ln}
	tn.client = &fasthttp.Client{
		Dial:                func(string) (net.Conn, error) { return ln.Dial() },
		MaxResponseBodySize: 4 << 20,
	}
	return tn
}

// raw writes a raw HTTP request on a new connection and reads the answer,
// even when the server answers and closes before reading all of it.
func (tn *testNode) raw(request string) resp {
	tn.t.Helper()
	c, err := tn.ln.Dial()
	if err != nil {
		tn.t.Fatal(err)
	}
	defer c.Close()
	go func() { _, _ = c.Write([]byte(request)) }()
	var res fasthttp.Response
	if err := res.Read(bufio.NewReader(c)); err != nil {
		tn.t.Fatalf("reading the answer: %v", err)
	}
	return resp{status: res.StatusCode(), body: string(res.Body())}
}

func mustParse(t testing.TB, yml string) *rules.Set {
	t.Helper()
	s, err := rules.Parse([]byte(yml))
	if err != nil {
		t.Fatalf("rules.Parse: %v", err)
	}
	return s
}

// resp is an answer as the tests see it.
type resp struct {
	status int
	hdr    map[string]string // canonical MIME header names
	body   string
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("body %q is not JSON: %v", r.body, err)
	}
	return m
}

// do sends one request; hdrs are "Name: value" strings.
func (tn *testNode) do(method, uri, body string, hdrs ...string) resp {
	tn.t.Helper()
	req := fasthttp.AcquireRequest()
	res := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(res)
	req.SetRequestURI("http://sluice" + uri)
	req.Header.SetMethod(method)
	if body != "" {
		req.SetBodyString(body)
		req.Header.SetContentType("application/json")
	}
	for _, h := range hdrs {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	if err := tn.client.DoTimeout(req, res, 10*time.Second); err != nil {
		tn.t.Fatalf("%s %s: %v", method, uri, err)
	}
	r := resp{status: res.StatusCode(), hdr: map[string]string{}, body: string(res.Body())}
	for k, v := range res.Header.All() {
		r.hdr[textproto.CanonicalMIMEHeaderKey(string(k))] = string(v)
	}
	return r
}

// testClock is the tests' fake clock, shared by a node's Store and
// Manager, so that refills happen only when a test advances it.
func testClock() *clocktest.Clock {
	return clocktest.At(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
}
