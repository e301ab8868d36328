package client

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	sluiced "github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/rules"
)

const seamToken = "seam-client-token"

// seam is a real node behind a server of the test's (the seam we own):
// it records the lease requests and checks that reach the node, and can
// hold lease requests until the test lets them go.
type seam struct {
	addr string

	mu      sync.Mutex
	leases  []api.LeaseRequest // every lease request, in arrival order
	checks  []string           // the paths of the other requests
	gate    chan struct{}      // when not nil, lease requests wait for it to close
	arrived chan int           // receives the number of ops of each lease request as it arrives
	refuse  int                // lease requests still to answer 429, as the node's flood bound does
	refused int                // lease requests answered 429
}

// startSeam starts a node on the memory store with rules yml and the
// client token, behind a seam.
func startSeam(t *testing.T, yml string) *seam {
	t.Helper()
	mem := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	mcfg := lease.DefaultConfig()
	mcfg.StoreTimeout = time.Minute // a loaded machine must not make the Store look failed
	mgr := lease.NewManager(mem, mcfg)
	cfg := sluiced.DefaultConfig()
	cfg.ClientToken = seamToken
	cfg.ClientRate = 1 << 30
	n := sluiced.New(cfg, mgr)
	set, err := rules.Parse([]byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	n.SetRules(set)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &seam{addr: ln.Addr().String(), arrived: make(chan int, 1024)}
	h := n.Handler()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == leasePath && ctx.IsPost() {
			s.mu.Lock()
			refuse := s.refuse > 0
			if refuse {
				s.refuse--
				s.refused++
			}
			s.mu.Unlock()
			if refuse { // the node's answer to a flood, before it reads the request
				ctx.Response.Header.Set("Retry-After", "1")
				ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
				ctx.SetBodyString(`{"error":"too many lease requests for this client token"}`)
				return
			}
			var req api.LeaseRequest
			if err := api.DecodeLease(ctx.PostBody(), &req); err == nil {
				req.Ops = append([]api.LeaseOp(nil), req.Ops...)
				s.mu.Lock()
				s.leases = append(s.leases, req)
				gate := s.gate
				s.mu.Unlock()
				s.arrived <- len(req.Ops)
				if gate != nil {
					<-gate
				}
			}
		} else if p := string(ctx.Path()); p != leaseRulesPath && p != "/v1/members" {
			s.mu.Lock()
			s.checks = append(s.checks, p)
			s.mu.Unlock()
		}
		h(ctx)
	}}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() {
		s.open()
		_ = srv.Shutdown()
		<-served
		mgr.Close()
	})
	return s
}

// hold makes lease requests wait at the seam until open.
func (s *seam) hold() {
	s.mu.Lock()
	s.gate = make(chan struct{})
	s.mu.Unlock()
}

// open lets the held lease requests (and later ones) through.
func (s *seam) open() {
	s.mu.Lock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
	s.mu.Unlock()
}

// recorded returns the lease requests and the check paths seen so far.
func (s *seam) recorded() ([]api.LeaseRequest, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.LeaseRequest(nil), s.leases...), append([]string(nil), s.checks...)
}

// waitArrival waits for the next lease request to reach the seam and
// returns its number of ops.
func (s *seam) waitArrival(t *testing.T) int {
	t.Helper()
	select {
	case n := <-s.arrived:
		return n
	case <-time.After(time.Minute):
		t.Fatal("no lease request reached the node within a minute")
		return 0
	}
}

const seamRules = `
rules:
  - name: per-key
    algorithm: token_bucket
    limit: 100
    period: 1h
  - name: half
    algorithm: token_bucket
    limit: 100
    period: 1h
    gateway_share: 0.5
`

func seamLimiter(t *testing.T, s *seam, edit func(*LimiterConfig)) *Limiter {
	t.Helper()
	cfg := LimiterConfig{Nodes: []string{"http://" + s.addr}, Token: seamToken, Timeout: time.Minute, RulesPoll: time.Hour}
	cfg.Lease.SweepInterval = -1
	cfg.Lease.StoreTimeout = time.Minute
	if edit != nil {
		edit(&cfg)
	}
	l, err := NewLimiter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	return l
}

// A first touch's lease request goes out at once: no timer delays it. With
// Flush an hour (the former batching timer, now ignored), the check is
// decided by the node's answer to one request carrying it (need = hits),
// not by its failure mode when StoreTimeout passes.
func TestFirstTouchWaitsForNoTimer(t *testing.T) {
	s := startSeam(t, seamRules)
	l := seamLimiter(t, s, func(c *LimiterConfig) { c.Flush = time.Hour; c.Lease.StoreTimeout = 30 * time.Second })
	d, err := l.Allow(t.Context(), "per-key", "first", 3)
	if err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("first touch: %+v, %v; want allowed by the node's answer (a timer held its lease until the Store timeout)", d, err)
	}
	leases, _ := s.recorded()
	if len(leases) != 1 || len(leases[0].Ops) != 1 || leases[0].Ops[0].Need != 3 || leases[0].Ops[0].Key != "first" {
		t.Fatalf("lease requests %+v, want one carrying the check (need 3)", leases)
	}
}

// Concurrent first touches bound for one node share a request: while the
// node has LeaseRequests requests in flight, the calls made meanwhile
// wait, and go out together when one ends.
func TestConcurrentFirstTouchesShareARequest(t *testing.T) {
	s := startSeam(t, seamRules)
	l := seamLimiter(t, s, func(c *LimiterConfig) { c.LeaseRequests = 1 })
	queued := make(chan int, 64)
	l.store.queued = func(n int) { queued <- n }
	s.hold()
	const more = 10
	var wg sync.WaitGroup
	errs := make(chan error, more+1)
	decide := func(key string) {
		d, err := l.Allow(context.Background(), "per-key", key, 1)
		if err != nil || !d.Allowed || d.Degraded {
			errs <- fmt.Errorf("%s: %+v, %v", key, d, err)
		}
	}
	wg.Go(func() { decide("k-first") })
	if n := s.waitArrival(t); n != 1 {
		t.Fatalf("the first touch's request carried %d ops, want 1", n)
	}
	for i := range more {
		wg.Go(func() { decide(fmt.Sprintf("k-%d", i)) })
	}
	for n := 0; n < more; {
		select {
		case n = <-queued:
		case <-time.After(time.Minute):
			t.Fatalf("%d first touches queued within a minute, want %d", n, more)
		}
	}
	s.open()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	leases, _ := s.recorded()
	if len(leases) != 2 || len(leases[1].Ops) != more {
		n := make([]int, len(leases))
		for i := range leases {
			n[i] = len(leases[i].Ops)
		}
		t.Fatalf("lease requests of %v ops, want 2: the first touch alone, then the %d made while it was in flight, together", n, more)
	}
}

// Close returns what the Limiter holds of many keys in fewer requests than
// keys: a return, which no check waits for, goes alone only to a node
// with nothing in flight.
func TestReturnsShareRequests(t *testing.T) {
	s := startSeam(t, seamRules)
	l := seamLimiter(t, s, nil)
	const keys = 40
	for i := range keys {
		if d, err := l.Allow(t.Context(), "per-key", fmt.Sprintf("r-%d", i), 1); err != nil || !d.Allowed || d.Degraded {
			t.Fatalf("r-%d: %+v, %v", i, d, err)
		}
	}
	before, _ := s.recorded()
	queued := make(chan int, 1024)
	l.store.queued = func(n int) { queued <- n }
	s.hold()
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	s.waitArrival(t) // the first return, held
	select {         // another waits behind it
	case <-queued:
	case <-time.After(time.Minute):
		t.Fatal("no return queued behind the first within a minute")
	}
	s.open()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	after, _ := s.recorded()
	returns, reqs := 0, len(after)-len(before)
	for _, r := range after[len(before):] {
		for _, op := range r.Ops {
			if op.Op == api.OpReturn {
				returns++
			}
		}
	}
	if returns != keys || reqs >= keys {
		t.Fatalf("Close returned %d keys in %d requests, want all %d in fewer requests than keys", returns, reqs, keys)
	}
}

// The holder a Limiter sends is a secret it never shows: Holder is its
// public id, and no log line of the Limiter (nor of its Manager) carries
// the secret.
func TestLimiterHolderSecretNeverShown(t *testing.T) {
	s := startSeam(t, seamRules)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	l := seamLimiter(t, s, func(c *LimiterConfig) { c.Logger = log; c.Lease.Logger = log })
	if d, err := l.Allow(t.Context(), "per-key", "h", 1); err != nil || !d.Allowed {
		t.Fatalf("%+v, %v", d, err)
	}
	_ = l.Close()
	leases, _ := s.recorded()
	if len(leases) == 0 {
		t.Fatal("no lease request reached the node")
	}
	secret := leases[0].Holder
	if msg := api.HolderMsg([]byte(secret)); msg != "" {
		t.Fatalf("the holder sent %q: %s (the request's shape must not change)", secret, msg)
	}
	for _, r := range leases {
		if r.Holder != secret {
			t.Fatalf("holders %q and %q in one Limiter's requests", secret, r.Holder)
		}
	}
	if pub := l.Holder(); pub == secret || pub != api.HolderPublicID(secret) {
		t.Fatalf("Holder() = %q for the secret %q, want its public id %q", pub, secret, api.HolderPublicID(secret))
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatalf("the secret holder id %q is in the Limiter's logs:\n%s", secret, logs.String())
	}
}

// A check that needs more than the Limiter may hold of its key (the
// rule's gateway_share of the capacity) is sent to the node as a check,
// decided exactly there in one round trip, and leases nothing.
func TestLimiterSendsBigChecksAsChecks(t *testing.T) {
	s := startSeam(t, seamRules)
	l := seamLimiter(t, s, nil)
	ctx := t.Context()
	// per-key: a quarter of 100 by default; 30 is past it.
	d, err := l.Allow(ctx, "per-key", "big", 30)
	if err != nil || !d.Allowed || d.Degraded || d.Remaining != 70 {
		t.Fatalf("30 of per-key: %+v, %v; want allowed by the node, 70 left", d, err)
	}
	leases, checks := s.recorded()
	if len(leases) != 0 || len(checks) != 1 || checks[0] != "/v1/check" {
		t.Fatalf("30 of per-key: %d lease requests, checks %v; want one /v1/check and no lease", len(leases), checks)
	}
	// Past what is left: the node denies it, exactly.
	if d, err := l.Allow(ctx, "per-key", "big", 71); err != nil || d.Allowed {
		t.Fatalf("71 of the 70 left: %+v, %v; want denied", d, err)
	}
	// Within the share, leased (need 25: a lease op).
	if d, err := l.Allow(ctx, "per-key", "small", 25); err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("25 of per-key: %+v, %v", d, err)
	}
	// half: gateway_share 0.5, so 30 is within it.
	if d, err := l.Allow(ctx, "half", "k", 30); err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("30 of half: %+v, %v", d, err)
	}
	leases, checks = s.recorded()
	if len(checks) != 2 || len(leases) != 2 || leases[0].Ops[0].Need != 25 || leases[1].Ops[0].Need != 30 {
		t.Fatalf("checks %v, leases %+v; want the checks within the share leased (need 25, then 30), no further check", checks, leases)
	}
}

// A lease request the node refuses as too many (429: applied nothing) is
// sent again, with the calls queued meanwhile, instead of failing them:
// the first touches it carried are decided by the node's answer, not by
// their failure mode.
func TestThrottledLeaseRequestsAreSentAgain(t *testing.T) {
	s := startSeam(t, seamRules)
	l := seamLimiter(t, s, nil)
	s.mu.Lock()
	s.refuse = 3
	s.mu.Unlock()
	for _, key := range []string{"t1", "t2"} {
		d, err := l.Allow(t.Context(), "per-key", key, 1)
		if err != nil || !d.Allowed || d.Degraded {
			t.Fatalf("%s: %+v, %v; want allowed by the node once it takes the request", key, d, err)
		}
	}
	leases, _ := s.recorded()
	s.mu.Lock()
	refused := s.refused
	s.mu.Unlock()
	if refused != 3 || len(leases) != 2 {
		t.Fatalf("%d requests refused, %d taken; want 3 refused, then each first touch taken once", refused, len(leases))
	}
	if st := l.Manager().Stats(); st.DegradedDecisions != 0 {
		t.Fatalf("%d degraded decisions", st.DegradedDecisions)
	}
}
