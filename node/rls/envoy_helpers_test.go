package rls_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/lua/redistest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/rls"
)

// envoyT0 is where the envoy tests' clocks start: 5h 7m 13.25s past an
// instant aligned on the year, the week and the day (56 × 365 days after
// the epoch), and 10 days into a 30-day month. So each unit's
// duration_until_reset, in envoyproxy/ratelimit's whole seconds
// (unit − now % unit, now in whole seconds), is there:
//
//	second 1, minute 60−13 = 47, hour 3600−433 = 3167, day 86400−18433 =
//	67967, week 604800−18433 = 586367, month 2592000−(864000+18433) =
//	1709567, year 31536000−18433 = 31517567
var envoyT0 = time.Unix(56*365*86400, 0).Add(5*time.Hour + 7*time.Minute + 13*time.Second + 250*time.Millisecond)

// envoyStores are the Stores the envoy tests run on: the in-memory store
// (decided in it, as sluiced without -redis) and Redis (leased, as sluiced
// with -redis) with its clock frozen at the nodes' clock.
var envoyStores = []string{"memory", "redis"}

// envoyEnv is a Store and a configuration directory (a copy of
// testdata/envoy/config) shared by the nodes a test starts one after the
// other, on one fake clock that Redis's clock follows.
type envoyEnv struct {
	t      *testing.T
	kind   string // "memory" or "redis"
	tr     rls.Transport
	clock  *clocktest.Clock
	rclock *redistest.Clock // nil on memory
	store  lease.Store
	dir    string
}

func newEnvoyEnv(t *testing.T, kind string, tr rls.Transport) *envoyEnv {
	t.Helper()
	e := &envoyEnv{t: t, kind: kind, tr: tr, clock: clocktest.At(envoyT0), dir: t.TempDir()}
	switch kind {
	case "memory":
		ms := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: e.clock.Now, SweepInterval: -1})
		t.Cleanup(func() { ms.Close() })
		e.store = ms
	case "redis":
		srv, rclock := redistest.StartWithClock(t, envoyT0)
		s, err := lua.NewStore(lua.Config{Addrs: []string{srv.Addr}, Clock: rclock.Now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		e.store, e.rclock = s, rclock
	}
	files, err := filepath.Glob(filepath.Join("testdata", "envoy", "config", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("testdata/envoy/config: %v", err)
	}
	for _, f := range files {
		copyFile(t, f, filepath.Join(e.dir, filepath.Base(f)))
	}
	return e
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// advance moves the nodes' clock and Redis's.
func (e *envoyEnv) advance(d time.Duration) {
	e.clock.Advance(d)
	if e.rclock != nil {
		e.rclock.Advance(d)
	}
}

// envoyNode is a node on an envoyEnv's Store, serving RLS on a real
// loopback port with the env's directory (loaded by a Reloader, as
// sluiced -rls-config DIR), and a go-control-plane client of it.
type envoyNode struct {
	mgr     *lease.Manager
	node    *node.Node
	srv     *rls.Server
	rl      *rls.Reloader
	client  rlsv3.RateLimitServiceClient
	conn    *grpc.ClientConn
	served  chan error
	stopped bool
}

// start starts a node as sluiced builds one: on the in-memory store it
// decides in the store, on Redis it leases (shares of windows ahead
// included); the sweeper is off (the clock is fake).
func (e *envoyEnv) start(opts ...func(*rls.ServerConfig)) *envoyNode {
	t := e.t
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	mcfg := lease.DefaultConfig()
	mcfg.Now = e.clock.Now
	mcfg.SweepInterval = -1
	mcfg.StoreTimeout = 10 * time.Second // a loaded machine
	mcfg.Direct = e.kind == "memory"
	mcfg.Logger = quiet
	mgr := lease.NewManager(e.store, mcfg)
	ncfg := node.DefaultConfig()
	ncfg.Logger = quiet
	n := node.New(ncfg, mgr)
	n.SetRules(nil)
	cfg := rls.ServerConfig{Engine: n, Metrics: n.MetricsSet(), Now: e.clock.Now, Logger: quiet, Transport: e.tr}
	for _, o := range opts {
		o(&cfg)
	}
	en := &envoyNode{mgr: mgr, node: n, srv: rls.NewServer(cfg), served: make(chan error, 1)}
	en.rl = rls.NewReloader(en.srv, e.dir)
	if err := en.rl.Load(); err != nil {
		t.Fatalf("loading testdata/envoy/config: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { en.served <- en.srv.Serve(ln) }()
	en.conn, err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	en.client = rlsv3.NewRateLimitServiceClient(en.conn)
	t.Cleanup(en.stop)
	return en
}

// stop stops the node as sluiced stops on SIGTERM: the RLS server, then
// the node, then the Manager, which returns every lease.
func (n *envoyNode) stop() {
	if n.stopped {
		return
	}
	n.stopped = true
	n.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n.srv.Close(ctx)
	<-n.served
	n.node.Shutdown(ctx)
	n.mgr.Close()
}

// call sends req and returns the response.
func (n *envoyNode) call(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := n.client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

// expect sends a request of descriptors ds (hits: the request's
// hits_addend) in domain and requires the response equal to want, as
// envoyproxy/ratelimit's tests compare them (proto.Equal).
func (n *envoyNode) expect(t *testing.T, what, domain string, hits uint32, ds []*ratelimitv3.RateLimitDescriptor, want *rlsv3.RateLimitResponse) {
	t.Helper()
	got := n.call(t, &rlsv3.RateLimitRequest{Domain: domain, Descriptors: ds, HitsAddend: hits})
	if !proto.Equal(got, want) {
		t.Fatalf("%s:\n got: %s\nwant: %s", what, prototext.Format(got), prototext.Format(want))
	}
}

// metric is the value of a series of the node's metrics (0 when absent).
func (n *envoyNode) metric(t *testing.T, series string) int {
	t.Helper()
	var b bytes.Buffer
	n.node.MetricsSet().WritePrometheus(&b)
	for line := range strings.Lines(b.String()) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("series %s: %q", series, line)
			}
			return int(f)
		}
	}
	return 0
}

// wantMetric requires the series' value.
func (n *envoyNode) wantMetric(t *testing.T, series string, want int) {
	t.Helper()
	if got := n.metric(t, series); got != want {
		t.Errorf("%s = %d, want %d", series, got, want)
	}
}

// descs builds descriptors, each from "k=v" entries (see desc).
func descs(ds ...[]string) []*ratelimitv3.RateLimitDescriptor {
	out := make([]*ratelimitv3.RateLimitDescriptor, len(ds))
	for i, d := range ds {
		out[i] = desc(d...)
	}
	return out
}

// one is a request's single descriptor of entries.
func one(entries ...string) []*ratelimitv3.RateLimitDescriptor { return descs(entries) }

// Units of current_limit.
const (
	second = rlsv3.RateLimitResponse_RateLimit_SECOND
	minute = rlsv3.RateLimitResponse_RateLimit_MINUTE
	hour   = rlsv3.RateLimitResponse_RateLimit_HOUR
	day    = rlsv3.RateLimitResponse_RateLimit_DAY
)

// Codes.
const (
	ok   = rlsv3.RateLimitResponse_OK
	over = rlsv3.RateLimitResponse_OVER_LIMIT
)

// limited is a status with a current_limit, as envoyproxy/ratelimit's
// integration test builds one (newDescriptorStatus): reset is
// duration_until_reset in whole seconds.
func limited(code rlsv3.RateLimitResponse_Code, rpu uint32, unit rlsv3.RateLimitResponse_RateLimit_Unit, remaining uint32, reset int64) *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{
		Code:               code,
		CurrentLimit:       &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: rpu, Unit: unit},
		LimitRemaining:     remaining,
		DurationUntilReset: &durationpb.Duration{Seconds: reset},
	}
}

// named is s with its current_limit's name.
func named(name string, s *rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse_DescriptorStatus {
	s.CurrentLimit.Name = name
	return s
}

// unmatched is the status of a descriptor without a limit.
func unmatched() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok}
}

// unlimitedStatus is the status of an unlimited descriptor.
func unlimitedStatus() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: ok, LimitRemaining: math.MaxUint32}
}

// response is a response of overall code and statuses.
func response(code rlsv3.RateLimitResponse_Code, ss ...*rlsv3.RateLimitResponse_DescriptorStatus) *rlsv3.RateLimitResponse {
	return &rlsv3.RateLimitResponse{OverallCode: code, Statuses: ss}
}
