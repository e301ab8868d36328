package upstream_test

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/rules"
	"github.com/sluicehq/sluice/node/upstream"
)

const token = "global-client-token"

// A region's node names itself to the global tier by a secret holder id
// it never shows: its start-up log line and Holder give the public id,
// and none of its logs carries the secret its lease requests send.
func TestUpstreamShowsOnlyThePublicHolder(t *testing.T) {
	mem := lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1})
	t.Cleanup(func() { mem.Close() })
	mcfg := lease.DefaultConfig()
	mcfg.StoreTimeout = time.Minute
	mgr := lease.NewManager(mem, mcfg)
	cfg := node.DefaultConfig()
	cfg.ClientToken = token
	n := node.New(cfg, mgr)
	set, err := rules.Parse([]byte("rules:\n  - {name: g, algorithm: token_bucket, limit: 100, period: 1h, scope: global}\n"))
	if err != nil {
		t.Fatal(err)
	}
	n.SetRules(set)
	// The seam: the global tier's node, recording the holders of the
	// lease requests it is sent.
	var (
		mu      sync.Mutex
		holders []string
	)
	h := n.Handler()
	srv := &fasthttp.Server{Handler: func(ctx *fasthttp.RequestCtx) {
		if string(ctx.Path()) == "/v1/lease" {
			var req api.LeaseRequest
			if err := api.DecodeLease(ctx.PostBody(), &req); err == nil {
				mu.Lock()
				holders = append(holders, req.Holder)
				mu.Unlock()
			}
		}
		h(ctx)
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(); <-served; mgr.Close() })

	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	u, err := upstream.Start(upstream.Config{URLs: []string{"http://" + ln.Addr().String()}, Token: token, Region: "eu",
		RTT: time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	g := set.Get("g")
	if d, err := u.Manager().Take("g:k", g.Policy, 1); err != nil || !d.Allowed || d.Degraded {
		t.Fatalf("a global key's first check: %+v, %v", d, err)
	}
	if err := u.Close(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(holders) == 0 {
		t.Fatal("no lease request reached the global tier")
	}
	secret, pub := holders[0], u.Holder()
	if pub == secret || pub != api.HolderPublicID(secret) {
		t.Fatalf("Holder() = %q for the secret %q, want its public id %q", pub, secret, api.HolderPublicID(secret))
	}
	if !strings.Contains(logs.String(), "holder="+pub) {
		t.Errorf("the start-up line does not name the public holder %q:\n%s", pub, logs.String())
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatalf("the secret holder id %q is in the upstream's logs:\n%s", secret, logs.String())
	}
}
