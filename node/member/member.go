// Package member owns Sluice's cluster membership: it runs
// hashicorp/memberlist, carries each node's HTTP address in its node meta,
// joins the seeds, encrypts gossip with the cluster key (required: Start
// refuses a Config without one unless Config.Insecure), rejoins members
// after a partition heals, and reports the sorted list of live members on
// every change so that the node can rebuild its hash ring.
//
// The node package declares the small interface it needs (in the style of
// groupcache's PeerPicker), for example
//
//	type membership interface {
//		Members() []member.Member
//		Ready() bool
//	}
//
// and *Cluster implements it; the onChange callback given to [Start] is
// where the node rebuilds its ring. Hot-key split plans ride on
// [Cluster.Broadcast] and Config.OnMessage.
//
// "Live" members are those memberlist has not declared dead or left,
// suspect ones included (a suspect member stays in the ring until it is
// declared dead, so that one slow ack does not move keys around).
//
// Dead or left: memberlist tells only that a member went. A node that
// calls Leave first sets a "leaving" flag in its node meta, so the others
// can report it as left rather than dead; one that missed the flag update
// reports dead.
//
// Partitions: memberlist never contacts a dead member again once
// GossipToTheDeadTime has passed, so two sides of a healed partition would
// stay apart. The Cluster therefore retries members that failed (died
// without leaving) every Config.ReconnectInterval for up to
// Config.ReconnectTimeout, as Serf does, and retries the seeds when it is
// alone.
//
// # Concurrency
//
// A Cluster is safe for concurrent use. It owns four goroutines (events,
// messages, reconnect, reach), one per ping in flight and, while a join
// is being retried, one more; all
// stop on Close. onChange and Config.OnMessage are each called serially,
// never concurrently with themselves, from a goroutine the Cluster owns;
// they must not call Close. memberlist's own callbacks never block on
// them: events only mark the view dirty (so bursts are coalesced) and
// messages go through a bounded queue.
package member

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// Member states as reported in [Member.State]. memberlist v0.7 does not
// expose suspicion (its Node.State is never filled in), so a suspect member
// is reported alive until it is declared dead.
const (
	StateAlive = "alive"
	StateDead  = "dead" // failed: stopped answering without leaving
	StateLeft  = "left" // left gracefully (Leave)
)

// maxDeparted bounds the remembered dead and left members.
const maxDeparted = 1024

// ErrClosed means the Cluster was closed (or left) and cannot do that any
// more.
var ErrClosed = errors.New("cluster closed")

// Member is one node of the cluster as this node sees it.
type Member struct {
	Name       string // unique member name
	GossipAddr string // memberlist address "ip:port"
	HTTPAddr   string // HTTP API address from the node meta ("" if none or unreadable)
	State      string // StateAlive, StateDead or StateLeft
	// Answering (View only): a live member answers this node's pings
	// (see Config.ReachMisses; always true of this node; false of dead
	// and left members). An alive member that does not answer is cut
	// off from this node, at least one way.
	Answering bool
}

// Cluster is this node's membership in a Sluice cluster.
type Cluster struct {
	cfg        Config
	ml         *memberlist.Memberlist
	queue      *memberlist.TransmitLimitedQueue
	meta       atomic.Pointer[[]byte] // the encoded node meta
	httpAddr   string                 // the HTTP address in the meta
	localAddr  string                 // advertised gossip address "ip:port"
	onChange   func([]Member)
	log        *slog.Logger
	changed    chan struct{} // capacity 1: "the view may have changed"
	leaveWake  chan struct{} // capacity 1: the same, for a Leave waiting
	msgs       chan []byte   // received broadcasts waiting for OnMessage
	stop       chan struct{} // closed by Close
	wg         sync.WaitGroup
	closeOnce  sync.Once
	ready      atomic.Bool
	leaving    atomic.Bool // Leave was called: never rejoin
	selfLeave  selfLeave   // how far memberlist got with this node's leave
	dropped    atomic.Uint64
	joinActive atomic.Bool // a background join loop runs
	reach      reach       // the pings' view (reach.go)

	mu struct {
		sync.Mutex
		live     map[string]Member    // live members by name, copied in event callbacks
		departed map[string]departure // dead or left members, by name
		seeds    []string             // the seeds last given to Join
	}
}

type departure struct {
	m  Member
	at time.Time
}

// Start creates the memberlist node described by cfg and, when cfg.Join is
// not empty, starts joining the seeds in the background (Ready turns true
// once one answers). onChange, which may be nil, is first called with the
// current view (this node, and whoever it joined already), then with the
// sorted list of live members after every join, leave or update (bursts
// coalesced, unchanged lists skipped). It is never called after Close
// returns.
func Start(cfg Config, onChange func(members []Member)) (*Cluster, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "member")
	rej := newRejectLog(logger, cfg.Now, cfg.Metrics)

	transport := cfg.Transport
	if transport == nil {
		host, port, _ := splitHostPort(cfg.BindAddr)
		if host == "" {
			host = "0.0.0.0"
		}
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{host},
			BindPort:  port,
			Logger:    memberlistLogger(logger, rej),
		})
		if err != nil {
			return nil, fmt.Errorf("cannot listen for gossip on %s: %w", cfg.BindAddr, err)
		}
		transport = nt
	}
	fail := func(err error) (*Cluster, error) {
		transport.Shutdown()
		return nil, err
	}

	advIP, advPort, err := advertise(cfg.AdvertiseAddr, transport)
	if err != nil {
		return fail(err)
	}
	localAddr := net.JoinHostPort(advIP.String(), strconv.Itoa(advPort))

	httpAddr := cfg.HTTPAddr
	if httpAddr != "" {
		h, p, _ := net.SplitHostPort(httpAddr)
		if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
			httpAddr = net.JoinHostPort(advIP.String(), p)
		}
		if len(httpAddr) > maxHTTPAddr {
			return fail(fmt.Errorf("%w: HTTPAddr: %q is longer than %d bytes", ErrConfig, httpAddr, maxHTTPAddr))
		}
	}

	c := &Cluster{
		cfg:       cfg,
		httpAddr:  httpAddr,
		localAddr: localAddr,
		onChange:  onChange,
		log:       logger,
		changed:   make(chan struct{}, 1),
		leaveWake: make(chan struct{}, 1),
		msgs:      make(chan []byte, cfg.MessageQueue),
		stop:      make(chan struct{}),
	}
	c.reach.book = newReachBook(cfg.Name, cfg.ReachMisses, cfg.KnownWindow, cfg.ClusterSize)
	c.reach.inflight, c.reach.joined, c.reach.silent = map[string]bool{}, map[string]time.Time{}, map[string]time.Time{}
	if cfg.ReachInterval < 0 {
		c.reach.book.misses = -1 // every live member answers
	}
	c.mu.departed = make(map[string]departure)
	c.mu.live = make(map[string]Member)
	c.setMeta(meta{httpAddr: httpAddr})

	mc := memberlist.DefaultLANConfig()
	mc.Name = cfg.Name
	mc.Transport = transport
	mc.AdvertiseAddr = advIP.String()
	mc.AdvertisePort = advPort
	mc.BindPort = advPort // used only as the default port of join addresses
	mc.ProbeInterval = cfg.ProbeInterval
	mc.ProbeTimeout = cfg.ProbeTimeout
	mc.GossipInterval = cfg.GossipInterval
	mc.PushPullInterval = cfg.PushPullInterval
	mc.SuspicionMult = cfg.SuspicionMult
	mc.TCPTimeout = cfg.TCPTimeout
	mc.DeadNodeReclaimTime = cfg.DeadNodeReclaimTime
	mc.SecretKey = cfg.ClusterKey
	mc.Delegate = (*delegate)(c)
	mc.Events = (*events)(c)
	mc.Logger = memberlistLogger(logger, rej)

	// memberlist may gossip (and so call GetBroadcasts) before Create
	// returns: the queue exists first and finds the memberlist through an
	// atomic pointer.
	var mlReady atomic.Pointer[memberlist.Memberlist]
	c.queue = &memberlist.TransmitLimitedQueue{
		NumNodes: func() int {
			if m := mlReady.Load(); m != nil {
				return m.NumMembers()
			}
			return 1
		},
		RetransmitMult: mc.RetransmitMult,
	}

	ml, err := memberlist.Create(mc)
	if err != nil {
		// Create shuts the transport down on most failures; shutting it
		// down again is harmless for memberlist's transports.
		return fail(fmt.Errorf("cannot start memberlist: %w", err))
	}
	c.ml = ml
	mlReady.Store(ml)

	c.wg.Add(4)
	go c.runEvents()
	go c.runMessages()
	go c.runReconnect()
	go c.runReach()

	c.signal() // the first view: this node alone
	if seeds := c.notSelf(cfg.Join); len(seeds) > 0 {
		c.setSeeds(seeds)
		c.startJoinLoop(0)
	} else {
		c.ready.Store(true)
	}
	logger.Info("gossip started", "name", cfg.Name, "gossip", localAddr, "http", httpAddr,
		"encrypted", cfg.ClusterKey != nil, "seeds", len(cfg.Join))
	return c, nil
}

// advertise works out the gossip address to advertise: cfg's when given in
// full, else the transport's choice (the bound address, or a private IP when
// bound to all interfaces).
func advertise(addr string, t memberlist.Transport) (net.IP, int, error) {
	host, port := "", 0
	if addr != "" {
		host, port, _ = splitHostPort(addr)
		if host != "" && net.ParseIP(host) == nil {
			ips, err := net.LookupIP(host)
			if err != nil || len(ips) == 0 {
				return nil, 0, fmt.Errorf("%w: AdvertiseAddr: cannot resolve %q: %v", ErrConfig, host, err)
			}
			host = ips[0].String()
		}
	}
	autoIP, autoPort, err := t.FinalAdvertiseAddr("", 0)
	if host == "" || port == 0 {
		if err != nil {
			return nil, 0, fmt.Errorf("cannot choose an address to advertise (set AdvertiseAddr): %w", err)
		}
	}
	ip := autoIP
	if host != "" {
		ip = net.ParseIP(host)
	}
	if port == 0 {
		port = autoPort
	}
	if ip4 := ip.To4(); ip4 != nil {
		ip = ip4
	}
	return ip, port, nil
}

// Ready reports whether this node has joined a cluster: one seed answered,
// or there were no seeds to join.
func (c *Cluster) Ready() bool { return c.ready.Load() }

// LocalName returns this node's member name.
func (c *Cluster) LocalName() string { return c.cfg.Name }

// LocalAddr returns this node's advertised gossip address "ip:port", the
// address peers give to Join.
func (c *Cluster) LocalAddr() string { return c.localAddr }

// Close stops gossip without leaving (the others will see this node fail
// unless Leave was called first), stops the Cluster's goroutines and waits
// for them; it may wait up to Config.TCPTimeout for a join in flight. It is
// idempotent.
func (c *Cluster) Close() error {
	var err error
	c.closeOnce.Do(func() {
		close(c.stop)
		if e := c.ml.Shutdown(); e != nil {
			err = fmt.Errorf("cannot shut memberlist down: %w", e)
		}
		c.wg.Wait()
	})
	return err
}

func (c *Cluster) closed() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
