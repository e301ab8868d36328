package rls_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rls"
)

// start is aligned on every unit's window (a multiple of 365 days since
// the epoch is also a multiple of a week and a day), plus 1ms.
var start = time.Unix(56*365*86400, 0).Add(time.Millisecond)

// transports are the gRPC transports that the transport-level tests run
// against, each in turn.
var transports = []rls.Transport{rls.TransportGRPC, rls.TransportLean}

// withTransport is a newRig option that serves on tr.
func withTransport(tr rls.Transport) func(*rls.ServerConfig) {
	return func(c *rls.ServerConfig) { c.Transport = tr }
}

// withEngine is a newRig option that serves e's decisions in place of the
// rig's node.
func withEngine(e rls.Engine) func(*rls.ServerConfig) {
	return func(c *rls.ServerConfig) { c.Engine = e }
}

// eachTransport runs f as a subtest per transport, named by it.
func eachTransport(t *testing.T, f func(t *testing.T, tr rls.Transport)) {
	t.Helper()
	for _, tr := range transports {
		t.Run(string(tr), func(t *testing.T) { f(t, tr) })
	}
}

// rig is a node (memory store, fake clock) behind an RLS server on a real
// loopback TCP port, and a go-control-plane client connected to it.
type rig struct {
	t      *testing.T
	clock  *clocktest.Clock
	node   *node.Node
	srv    *rls.Server
	client rlsv3.RateLimitServiceClient
	conn   *grpc.ClientConn
	addr   string
}

func newRig(t testing.TB, yml string, opts ...func(*rls.ServerConfig)) *rig {
	t.Helper()
	clk := clocktest.At(start)
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clk.Now})
	mcfg := lease.DefaultConfig()
	mcfg.Now = clk.Now
	mgr := lease.NewManager(store, mcfg)
	n := node.New(node.DefaultConfig(), mgr)
	n.SetRules(nil)
	cfg := rls.ServerConfig{Engine: n, Metrics: n.MetricsSet(), Now: clk.Now, AfterFunc: clk.AfterFunc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	srv := rls.NewServer(cfg)
	if yml != "" {
		c, err := rls.Parse(rls.Doc{Name: "test.yaml", Data: []byte(yml)})
		if err != nil {
			t.Fatalf("rls.Parse: %v", err)
		}
		srv.SetConfig(c)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Close(ctx)
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
		mgr.Close()
		store.Close()
	})
	r := &rig{clock: clk, node: n, srv: srv, client: rlsv3.NewRateLimitServiceClient(conn), conn: conn, addr: ln.Addr().String()}
	if tt, ok := t.(*testing.T); ok {
		r.t = tt
	}
	return r
}

// desc builds a descriptor from "k=v" entries ("k=" for an empty value);
// an entry "+N" sets the descriptor's hits_addend to N.
func desc(entries ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for _, e := range entries {
		if h, ok := strings.CutPrefix(e, "+"); ok {
			var n uint64
			for _, c := range h {
				n = n*10 + uint64(c-'0')
			}
			d.HitsAddend = wrapperspb.UInt64(n)
			continue
		}
		k, v, _ := strings.Cut(e, "=")
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: k, Value: v})
	}
	return d
}

// call sends one request and returns it as "OVERALL: code code ...".
func (r *rig) call(t testing.TB, domain string, hits uint32, ds ...*ratelimitv3.RateLimitDescriptor) (string, *rlsv3.RateLimitResponse) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := r.client.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return codesOf(resp), resp
}

func codesOf(resp *rlsv3.RateLimitResponse) string {
	var b strings.Builder
	b.WriteString(short(resp.GetOverallCode()))
	b.WriteString(":")
	for _, s := range resp.GetStatuses() {
		b.WriteString(" ")
		b.WriteString(short(s.GetCode()))
	}
	return b.String()
}

func short(c rlsv3.RateLimitResponse_Code) string {
	switch c {
	case rlsv3.RateLimitResponse_OK:
		return "OK"
	case rlsv3.RateLimitResponse_OVER_LIMIT:
		return "OVER"
	}
	return c.String()
}
