package client_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/client"
)

// TestWrongTokenIsNotUnreachable: a node that answers 401 or 403 is
// reachable: it refused the token. A Limiter with a wrong client token
// and a Client with a wrong admin token fail with ErrTokenRefused, naming
// the status, the node and the token to check, not with ErrNoNodes ("no
// sluice node reachable"), which sent their users to look at the network.
func TestWrongTokenIsNotUnreachable(t *testing.T) {
	clock := clocktest.New()
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now})
	t.Cleanup(func() { store.Close() })
	ln := startLimiterNode(t, store, clock, limiterRules)

	_, err := client.NewLimiter(client.LimiterConfig{Nodes: []string{"http://" + ln.addr}, Token: "not-the-token", Timeout: 10 * time.Second})
	if !errors.Is(err, client.ErrTokenRefused) || errors.Is(err, client.ErrNoNodes) ||
		!strings.Contains(err.Error(), "the node refused the token (40") || !strings.Contains(err.Error(), ln.addr) ||
		!strings.Contains(err.Error(), "SLUICE_CLIENT_TOKEN") {
		t.Errorf("NewLimiter with a wrong token: %v; want ErrTokenRefused naming the status, the node and SLUICE_CLIENT_TOKEN", err)
	}

	// A node with an admin token: /v1/members refuses another one.
	mgr := lease.NewManager(store, lease.DefaultConfig())
	t.Cleanup(func() { mgr.Close() })
	cfg := node.DefaultConfig()
	cfg.AdminToken = "admin-secret"
	addr := serveNode(t, node.New(cfg, mgr))
	for _, tok := range []string{"not-the-admin-token", ""} {
		_, err = client.New(client.Config{Seeds: []string{addr}, AdminToken: tok, Timeout: 10 * time.Second})
		if !errors.Is(err, client.ErrTokenRefused) || errors.Is(err, client.ErrNoNodes) ||
			!strings.Contains(err.Error(), "SLUICE_ADMIN_TOKEN") || (tok != "" && strings.Contains(err.Error(), tok)) {
			t.Errorf("New with admin token %q: %v; want ErrTokenRefused naming SLUICE_ADMIN_TOKEN (and not the token)", tok, err)
		}
	}
	if c, err := client.New(client.Config{Seeds: []string{addr}, AdminToken: "admin-secret", Timeout: 10 * time.Second}); err != nil {
		t.Errorf("New with the admin token: %v", err)
	} else {
		c.Close()
	}
}

// serveNode serves n on a loopback port until the test ends and returns
// its address.
func serveNode(t *testing.T, n *node.Node) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- n.Serve(l) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
		<-served
	})
	return l.Addr().String()
}
