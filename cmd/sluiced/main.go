// Command sluiced is a Sluice node: it reads its settings from flags and
// SLUICE_* environment variables, loads the rule file, and serves the HTTP
// API until SIGTERM or SIGINT.
//
// The rule file is reloaded on SIGHUP and whenever its modification time,
// size or content hash changes (checked every -rules-poll). A file that
// fails to load is logged and shown in /readyz; the node keeps serving the
// last good rule set. Without -rules, the rules are those written through
// the admin API (/v1/rules), kept in Redis with -redis (every node polls
// their version every -rules-poll and hears of new ones by gossip), else
// in -data-dir, else in memory only (see rulesource.go).
//
// # Cluster
//
// The node joins a cluster when -join (SLUICE_JOIN) lists seeds or when
// -gossip (SLUICE_GOSSIP) is set explicitly (the first node of a cluster
// sets -gossip and no -join); otherwise it runs alone and binds no gossip
// port. A member gossips with memberlist on -gossip (UDP and TCP),
// advertising -gossip-advertise when set (behind NAT or in containers),
// carries its HTTP address (the listener's; an unspecified host is
// replaced by the advertised gossip IP) in its node meta, joins every seed
// (retrying in the background; /readyz answers 503 until one answered),
// and routes each check to the owner of its counter key on the ring of
// live members (node.EnableCluster). -cluster-key (SLUICE_CLUSTER_KEY)
// encrypts gossip and signs every internal request; a node asked to
// cluster without it refuses to start (exit 2) unless -insecure-cluster
// (SLUICE_INSECURE_CLUSTER=true) is given, which logs a warning.
// -node-name defaults to the hostname and the listen port.
//
// # TLS
//
// With -tls-cert and -tls-key the HTTP API (internal endpoint included)
// answers HTTPS only, and checks are forwarded to peers over TLS, verified
// against -tls-ca (a cluster CA) or the system roots. The rate limit
// service (-rls-listen) serves TLS with the same certificate, and with
// -rls-client-ca requires client certificates that CA signed (mTLS).
//
// # Shutdown
//
// On SIGTERM/SIGINT a member first leaves the cluster (waiting up to 3s
// for the news to spread, so that the others stop routing keys here; no
// wait once no other member is alive to hear it, as when the whole cluster
// stops at once) and
// returns every leased token to the Store; then every node stops accepting
// connections, finishes the requests in flight, returns the tokens leased
// meanwhile, and exits 0.
//
// sluiced -version prints the module version and VCS revision it was built
// from (on stderr, as -h and the log) and exits 0.
//
// Exit codes: 0 after a clean shutdown (or -h, -version), 1 when the node cannot
// start (rules, store, listen or gossip address), 2 for a bad flag or
// variable, or a cluster without a cluster key.
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

	"github.com/sluicehq/sluice/cmd/internal/buildinfo"
	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

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
	if o.version {
		fmt.Fprintln(stderr, buildinfo.Get("sluiced"))
		return 0
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))
	defer startGCPolicy(o.gcHeadroom, getenv)()

	// Signals first, so that a SIGTERM during start-up is not fatal.
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(stop)
	defer signal.Stop(hup)

	d, err := start(o, log, hooks{})
	if err != nil {
		log.Error("cannot start", "err", err)
		return 1
	}

	ctx, cancel := context.WithCancel(context.Background())
	reloaded := make(chan struct{})
	go func() {
		defer close(reloaded)
		d.rl.loop(ctx, o.rulesPoll, hup)
	}()
	rlsReloaded := make(chan struct{})
	go func() {
		defer close(rlsReloaded)
		d.rls.loop(ctx, o.rulesPoll)
	}()

	code := 0
	select {
	case sig := <-stop:
		log.Info("shutting down", "signal", sig.String())
	case err := <-d.served:
		log.Error("HTTP server failed", "err", err)
		code = 1
	}
	cancel()
	<-reloaded
	<-rlsReloaded
	if err := d.stop(true); err != nil {
		log.Error("shutdown", "err", err)
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
			return nil, nil, fmt.Errorf("cannot connect to Redis %s: %w", lua.RedactURL(o.redis), err)
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
