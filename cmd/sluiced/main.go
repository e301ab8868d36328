// Command sluiced is a Sluice node: it reads its settings from flags and
// SLUICE_* environment variables, loads the rule file, and serves the HTTP
// API until SIGTERM or SIGINT.
//
// The rule file is reloaded on SIGHUP and whenever its modification time,
// size or content hash changes (checked every -rules-poll). A file that
// fails to load is logged and shown in /readyz; the node keeps serving the
// last good rule set. On SIGTERM/SIGINT the node stops accepting
// connections, finishes the requests in flight, returns its leased tokens
// to the Store, and exits 0.
//
// Exit codes: 0 after a clean shutdown (or -h), 1 when the node cannot
// start (rules, store, listen address), 2 for a bad flag or variable.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// shutdownTimeout bounds how long requests in flight may take to finish.
const shutdownTimeout = 10 * time.Second

// run is sluiced; it returns the exit code.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	o, err := parseOptions(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluiced: %v\n(sluiced -h lists the flags)\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))

	// Signals first, so that a SIGTERM during start-up is not fatal.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(stop)
	defer signal.Stop(hup)

	store, closeStore, err := newStore(o)
	if err != nil {
		log.Error("cannot create the store", "err", err)
		return 1
	}
	defer closeStore()
	if len(o.join) > 0 || o.clusterKey != nil {
		log.Warn("clustering is not wired yet: running as a single node", "join", o.join)
	}

	mcfg := lease.DefaultConfig()
	mcfg.Horizon = o.leaseHorizon
	mcfg.Idle = o.leaseIdle
	mcfg.StoreTimeout = o.storeTimeout
	mcfg.Logger = log
	mgr := lease.NewManager(store, mcfg)
	defer mgr.Close()

	ncfg := node.DefaultConfig()
	ncfg.AdminToken = o.adminToken
	ncfg.Logger = log
	n := node.New(ncfg, mgr)

	rl := &reloader{path: o.rules, node: n, log: log}
	if err := rl.initial(); err != nil {
		log.Error("cannot load rules", "err", err)
		return 1
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		log.Error("cannot listen", "addr", o.listen, "err", err)
		return 1
	}
	if o.nodeName == "" {
		o.nodeName = defaultNodeName(ln.Addr())
	}
	log.Info("listening", "addr", ln.Addr().String(), "node", o.nodeName, "rules", o.rules, "store", storeName(o))
	served := make(chan error, 1)
	go func() { served <- n.Serve(ln) }()

	ctx, cancel := context.WithCancel(context.Background())
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		rl.loop(ctx, o.rulesPoll, hup)
	}()

	code := 0
	select {
	case sig := <-stop:
		log.Info("shutting down", "signal", sig.String())
	case err := <-served:
		log.Error("HTTP server failed", "err", err)
		code = 1
	}
	cancel()
	<-reloaded
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	if err := n.Shutdown(sctx); err != nil {
		log.Error("shutdown", "err", err)
		code = 1
	}
	if err := mgr.Close(); err != nil {
		log.Error("cannot return leases", "err", err)
		code = 1
	}
	log.Info("stopped")
	return code
}

// newStore is the one place that chooses the Store: Redis when -redis is
// set, else the in-memory store. The returned func closes it.
func newStore(o options) (lease.Store, func(), error) {
	if o.redis != "" {
		cfg, err := lua.ParseURL(o.redis)
		if err != nil {
			return nil, nil, fmt.Errorf("-redis (SLUICE_REDIS): %w", err)
		}
		s, err := lua.NewStore(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("cannot connect to Redis %s: %w", o.redis, err)
		}
		return s, s.Close, nil
	}
	s := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	return s, func() { s.Close() }, nil
}

// defaultNodeName is the hostname and the listen port, e.g. "web1-8080".
func defaultNodeName(addr net.Addr) string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "sluice"
	}
	if _, port, err := net.SplitHostPort(addr.String()); err == nil {
		return host + "-" + port
	}
	return host
}

func storeName(o options) string {
	if o.redis != "" {
		return "redis"
	}
	return "memory"
}
