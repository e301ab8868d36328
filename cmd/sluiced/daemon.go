package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua"
	"github.com/sluicehq/sluice/node"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/node/rls"
	"github.com/sluicehq/sluice/node/upstream"
)

// demoteAfter is how many forwarding requests in a row an owner may leave
// unanswered before a node routes around it: one could be a pause of a few
// tens of ms; two in a row, half a second apart (the forwarder's
// back-off), is a stopped owner, routed around in well under a second.
const demoteAfter = 2

// Shutdown budgets.
const (
	// shutdownTimeout bounds how long requests in flight may take to
	// finish.
	shutdownTimeout = 10 * time.Second
	// leaveTimeout bounds the graceful leave: time for the leave to reach
	// the other members, so that they stop routing keys here before the
	// HTTP server stops.
	leaveTimeout = 3 * time.Second
)

// hooks let in-process tests put simulated networks between nodes. The
// zero value is what sluiced runs with.
type hooks struct {
	// transport, when set, carries gossip instead of UDP+TCP on -gossip
	// (a netsim.FilterTransport).
	transport memberlist.Transport
	// httpAdvertise, when set, returns the HTTP address told to peers
	// given the listener's (a cuttable netsim.Proxy in front of it).
	httpAdvertise func(listen string) string
	// member adjusts the membership config (faster failure detection).
	member func(*member.Config)
	// forward adjusts the forwarding config (a longer timeout under the
	// race detector).
	forward func(*forward.Config)
	// hot adjusts the hot-key config (a short tick and cooling period).
	hot func(*hot.Config)
	// upstream adjusts the global tier's config (a short probe).
	upstream func(*upstream.Config)
}

// clustered reports whether o asks for a cluster: -join given, or -gossip
// (SLUICE_GOSSIP) set explicitly. A node with neither runs alone and binds
// no gossip port.
func (o options) clustered() bool { return len(o.join) > 0 || o.gossipSet }

// daemon is one running sluiced: the Store, the lease Manager, the Node
// serving HTTP, and in a cluster its membership.
type daemon struct {
	log        *slog.Logger
	name       string
	store      lease.Store
	closeStore func()
	mgr        *lease.Manager
	node       *node.Node
	rl         *reloader
	rls        *rlsDaemon // nil without -rls-listen
	ln         net.Listener
	served     chan error
	cluster    *member.Cluster    // nil on a single node
	upstream   *upstream.Upstream // nil without -upstream
}

// start builds and starts a node from o: Store, Manager, rules, HTTP
// listener, and when clustered the ring, the forwarder and memberlist
// (joining the seeds in the background; /readyz says 503 until joined).
func start(o options, log *slog.Logger, h hooks) (_ *daemon, err error) {
	d := &daemon{log: log, served: make(chan error, 1)}
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()

	d.store, d.closeStore, err = newStore(o)
	if err != nil {
		return nil, fmt.Errorf("cannot create the store: %w", err)
	}
	undo = append(undo, d.closeStore)

	mcfg := lease.DefaultConfig()
	mcfg.Horizon = o.leaseHorizon
	mcfg.Idle = o.leaseIdle
	mcfg.KeepIdle = o.leaseKeepIdle
	if o.leaseKeepIdle == 0 {
		mcfg.KeepIdle = -1 // none
	}
	mcfg.AheadHorizon = o.leaseAhead
	if o.leaseAhead == 0 {
		mcfg.AheadHorizon = -1 // none
	}
	// On the in-memory store every check is decided in it: a lease would
	// keep each key twice, to save a call into this process's memory.
	mcfg.Direct = o.redis == "" && !o.memoryLeases
	mcfg.StoreTimeout = o.storeTimeout
	mcfg.CheckBudget = o.checkBudget
	mcfg.Logger = log
	// A key this node never leased, decided here in local mode (its
	// forward failed and so did the Store), gets 1/N of its capacity: the
	// N nodes that may do so at once admit at most its limit.
	mcfg.UnknownLocalShare = func() float64 {
		if d.node == nil {
			return 1
		}
		if r := d.node.Ring(); r != nil && r.Len() > 1 {
			return 1 / float64(r.Len())
		}
		return 1
	}
	d.mgr = lease.NewManager(d.store, mcfg)
	undo = append(undo, func() { d.mgr.Close() })

	srvTLS, peerTLS, err := loadTLS(o, log)
	if err != nil {
		return nil, err
	}
	d.ln, err = net.Listen("tcp", o.listen)
	if err != nil {
		return nil, fmt.Errorf("cannot listen on %s: %w", o.listen, err)
	}
	if srvTLS != nil {
		d.ln = tls.NewListener(d.ln, srvTLS)
	}
	undo = append(undo, func() { d.ln.Close() })
	d.name = o.nodeName
	if d.name == "" {
		d.name = defaultNodeName(d.ln.Addr())
	}

	ncfg := node.DefaultConfig()
	ncfg.AdminToken = o.adminToken
	ncfg.AdminHosts = o.adminHosts
	if h, _, err := net.SplitHostPort(o.listen); err == nil && h != "" && net.ParseIP(h) == nil {
		ncfg.AdminHosts = append(ncfg.AdminHosts, h) // -listen by name: the node answers to it
	}
	ncfg.MetricsToken = o.metricsToken
	// The help texts of the metrics /metrics writes for packages the node
	// does not import.
	ncfg.MetricsHelp = []map[string]string{lua.MetricsHelp(), rls.MetricsHelp(), upstream.MetricsHelp()}
	ncfg.ClientToken = o.clientToken
	ncfg.Logger = log
	ncfg.Name = d.name
	if len(o.upstream) > 0 {
		region := o.region
		if region == "" {
			region = regionName(d.name)
		}
		ucfg := upstream.Config{URLs: o.upstream, Token: o.upstreamToken, Region: region,
			RTT: o.upstreamRTT, Horizon: o.leaseHorizon, Idle: o.leaseIdle, Logger: log}
		if ucfg.TLS, err = caTLS(o.tlsCA); err != nil { // -tls-ca verifies an https:// upstream too
			return nil, err
		}
		if h.upstream != nil {
			h.upstream(&ucfg)
		}
		d.upstream, err = upstream.Start(ucfg)
		if err != nil {
			return nil, fmt.Errorf("-upstream: %w", err)
		}
		undo = append(undo, func() { d.upstream.Close() })
		ncfg.Upstream = d.upstream
	}
	d.node = node.New(ncfg, d.mgr)

	d.rl = &reloader{path: o.rules, node: d.node, log: log}
	if err := d.startRules(o); err != nil {
		return nil, fmt.Errorf("cannot load rules: %w", err)
	}
	undo = append(undo, d.node.CloseRules)

	if err := d.startRLS(o); err != nil {
		return nil, err
	}
	undo = append(undo, func() { d.rls.stop() })

	if o.clustered() {
		if err := o.checkClusterKey(); err != nil {
			return nil, err
		}
		if len(o.clusterKey) == 0 {
			log.Warn("insecure cluster (-insecure-cluster): gossip is not encrypted and internal requests are not signed; " +
				"anyone who can reach this node's gossip or HTTP port can join the cluster, forge refunds and raise any limit")
		}
		hcfg := hot.DefaultConfig()
		hcfg.CapacityShare = o.hotCapacityShare
		ccfg := node.ClusterConfig{Self: d.name, ClusterKey: o.clusterKey, Insecure: o.insecureCluster, AuthWindow: o.internalWindow,
			Forward: forward.DefaultConfig(), Hot: &hcfg, HotNoSplit: !o.hotSplit}
		// One shared Store (Redis): a silent owner's keys are decided by
		// leasing from it; else by on_store_failure within this node's
		// share (node.ClusterConfig.SharedStore).
		ccfg.SharedStore = o.redis != ""
		ccfg.DemoteAfter = demoteAfter
		ccfg.Forward.TLS = peerTLS
		if o.forwardTimeout > 0 {
			ccfg.Forward.Timeout = o.forwardTimeout
		}
		if h.forward != nil {
			h.forward(&ccfg.Forward)
		}
		if h.hot != nil {
			h.hot(&hcfg)
		}
		if err := d.node.EnableCluster(ccfg); err != nil {
			return nil, err
		}
		undo = append(undo, func() { d.node.CloseCluster() })
		httpAddr := d.ln.Addr().String()
		if h.httpAdvertise != nil {
			httpAddr = h.httpAdvertise(httpAddr)
		}
		cfg := member.DefaultConfig()
		cfg.Name = d.name
		cfg.BindAddr = o.gossip
		cfg.AdvertiseAddr = o.gossipAdvertise
		cfg.HTTPAddr = httpAddr
		cfg.Join = o.join
		cfg.ClusterKey = o.clusterKey
		cfg.Insecure = o.insecureCluster
		cfg.Transport = h.transport
		cfg.Logger = log
		cfg.OnMessage = d.node.GossipMessage
		cfg.ClusterSize = o.clusterSize
		if h.member != nil {
			h.member(&cfg)
		}
		d.cluster, err = member.Start(cfg, d.node.MembersChanged)
		if err != nil {
			return nil, fmt.Errorf("cannot start gossip: %w", err)
		}
		d.node.SetMembership(d.cluster)
	}

	log.Info("listening", "addr", d.ln.Addr().String(), "tls", srvTLS != nil, "node", d.name, "rules", o.rules, "store", storeName(o),
		"cluster", o.clustered(), "join", o.join)
	go func() { d.served <- d.node.Serve(d.ln) }()
	return d, nil
}

// stop stops the node. Gracefully (SIGTERM): leave the cluster, return
// every lease, finish the requests in flight, stop. Otherwise (tests
// simulating a crash): stop gossip without leaving and drop the leases,
// as a killed process would.
func (d *daemon) stop(graceful bool) error {
	var errs []error
	if !graceful {
		if d.cluster != nil {
			d.cluster.Close()
		}
		d.closeStore() // leases are lost: the returns below fail
	}
	if graceful && d.cluster != nil {
		if err := d.cluster.Leave(leaveTimeout); err != nil {
			errs = append(errs, err)
		}
		if err := d.mgr.ReturnKeys(func(string) bool { return false }); err != nil {
			errs = append(errs, fmt.Errorf("cannot return leases: %w", err))
		}
	}
	d.rls.stop()
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := d.node.Shutdown(ctx); err != nil {
		errs = append(errs, err)
	}
	d.node.CloseCluster()
	d.node.CloseRules()
	if d.upstream != nil {
		if err := d.upstream.Close(); err != nil && graceful {
			errs = append(errs, fmt.Errorf("cannot return leases to the upstream: %w", err))
		}
	}
	if err := d.mgr.Close(); err != nil && graceful {
		errs = append(errs, fmt.Errorf("cannot return leases: %w", err))
	}
	if graceful {
		if d.cluster != nil {
			d.cluster.Close()
		}
		d.closeStore()
	}
	return errors.Join(errs...)
}

// regionName is a node name as a region name: the characters a region
// name may not hold become '-', cut to 64 bytes.
func regionName(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '-'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "region"
	}
	return string(b)
}

// loadTLS reads -tls-cert, -tls-key and -tls-ca: the server's config (nil
// without TLS), which follows the pair's rotation (certFiles), and the
// config to dial peers with.
func loadTLS(o options, log *slog.Logger) (srv, peer *tls.Config, err error) {
	if o.tlsCert == "" {
		return nil, nil, nil
	}
	certs, err := newCertFiles(o.tlsCert, o.tlsKey, log)
	if err != nil {
		return nil, nil, err
	}
	srv = &tls.Config{GetCertificate: certs.get, MinVersion: tls.VersionTLS12}
	if peer, err = caTLS(o.tlsCA); err != nil {
		return nil, nil, err
	}
	return srv, peer, nil
}

// caTLS is the config to dial nodes with: verified against the -tls-ca
// file's certificates, or the system's roots without one.
func caTLS(path string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if path == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read -tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("-tls-ca %s: no PEM certificate in it", path)
	}
	cfg.RootCAs = pool
	return cfg, nil
}
