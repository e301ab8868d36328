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
// A Cluster is safe for concurrent use. It owns three goroutines (events,
// messages, reconnect) and, while a join is being retried, a fourth; all
// stop on Close. onChange and Config.OnMessage are each called serially,
// never concurrently with themselves, from a goroutine the Cluster owns;
// they must not call Close. memberlist's own callbacks never block on
// them: events only mark the view dirty (so bursts are coalesced) and
// messages go through a bounded queue.
package member

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/netip"
	"slices"
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

// MaxMessageSize is the largest message Broadcast accepts: a user message
// must fit, with memberlist's framing and encryption, in one gossip packet
// (memberlist's 1400-byte UDP buffer).
const MaxMessageSize = 1200

// maxQueuedBroadcasts bounds the broadcasts waiting to be gossiped; the
// oldest are dropped beyond it.
const maxQueuedBroadcasts = 1024

// maxDeparted bounds the remembered dead and left members.
const maxDeparted = 1024

// ErrMessageTooLarge means a Broadcast message exceeds MaxMessageSize.
var ErrMessageTooLarge = errors.New("broadcast message too large")

// ErrClosed means the Cluster was closed (or left) and cannot do that any
// more.
var ErrClosed = errors.New("cluster closed")

// Member is one node of the cluster as this node sees it.
type Member struct {
	Name       string // unique member name
	GossipAddr string // memberlist address "ip:port"
	HTTPAddr   string // HTTP API address from the node meta ("" if none or unreadable)
	State      string // StateAlive, StateDead or StateLeft
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
	msgs       chan []byte   // received broadcasts waiting for OnMessage
	stop       chan struct{} // closed by Close
	wg         sync.WaitGroup
	closeOnce  sync.Once
	ready      atomic.Bool
	leaving    atomic.Bool // Leave was called: never rejoin
	dropped    atomic.Uint64
	joinActive atomic.Bool // a background join loop runs

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

	transport := cfg.Transport
	if transport == nil {
		host, port, _ := splitHostPort(cfg.BindAddr)
		if host == "" {
			host = "0.0.0.0"
		}
		nt, err := memberlist.NewNetTransport(&memberlist.NetTransportConfig{
			BindAddrs: []string{host},
			BindPort:  port,
			Logger:    memberlistLogger(logger),
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
		msgs:      make(chan []byte, cfg.MessageQueue),
		stop:      make(chan struct{}),
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
	mc.Logger = memberlistLogger(logger)

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

	c.wg.Add(3)
	go c.runEvents()
	go c.runMessages()
	go c.runReconnect()

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

// Join contacts every seed and returns how many answered. When none did, it
// returns an error and keeps retrying in the background, with a pause
// doubling from Config.JoinRetryMin to Config.JoinRetryMax, until one
// answers or the Cluster is closed. Seeds equal to this node's own gossip
// address are skipped; with no other seed, Join returns 0, nil and the
// Cluster is ready.
func (c *Cluster) Join(seeds []string) (int, error) {
	if c.closed() || c.leaving.Load() {
		return 0, ErrClosed
	}
	for i, s := range seeds {
		if _, _, err := splitHostPort(s); err != nil {
			return 0, fmt.Errorf("%w: seeds[%d]: %v", ErrConfig, i, err)
		}
	}
	seeds = c.notSelf(seeds)
	if len(seeds) == 0 {
		c.ready.Store(true)
		return 0, nil
	}
	c.setSeeds(seeds)
	n, err := c.ml.Join(seeds)
	if n > 0 {
		c.markJoined(n, len(seeds))
		return n, nil
	}
	c.startJoinLoop(c.cfg.JoinRetryMin)
	return 0, fmt.Errorf("cannot join any of %d seeds (retrying in the background): %w", len(seeds), err)
}

func (c *Cluster) markJoined(n, of int) {
	if !c.ready.Swap(true) {
		c.log.Info("joined the cluster", "seeds_answered", n, "seeds", of)
	}
}

// startJoinLoop retries the latest seeds given to Join (or Config.Join) in
// the background after a first pause of first, until one answers, unless a
// join loop already runs (it picks the new seeds up).
func (c *Cluster) startJoinLoop(first time.Duration) {
	if !c.joinActive.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.joinActive.Store(false)
		pause := first
		for attempt := 1; ; attempt++ {
			if pause > 0 {
				t := time.NewTimer(pause)
				select {
				case <-c.stop:
					t.Stop()
					return
				case <-t.C:
				}
			}
			if c.closed() || c.leaving.Load() {
				return
			}
			c.mu.Lock()
			seeds := c.mu.seeds
			c.mu.Unlock()
			n, err := c.ml.Join(seeds)
			if n > 0 {
				c.markJoined(n, len(seeds))
				return
			}
			c.log.Warn("cannot join the cluster yet", "attempt", attempt, "err", err)
			pause = min(max(2*pause, c.cfg.JoinRetryMin), c.cfg.JoinRetryMax)
		}
	}()
}

// Ready reports whether this node has joined a cluster: one seed answered,
// or there were no seeds to join.
func (c *Cluster) Ready() bool { return c.ready.Load() }

// LocalName returns this node's member name.
func (c *Cluster) LocalName() string { return c.cfg.Name }

// LocalAddr returns this node's advertised gossip address "ip:port", the
// address peers give to Join.
func (c *Cluster) LocalAddr() string { return c.localAddr }

// Members returns the live members (alive or suspect), this node included
// unless it has left, sorted by name.
func (c *Cluster) Members() []Member {
	c.mu.Lock()
	out := make([]Member, 0, len(c.mu.live))
	for _, m := range c.mu.live {
		out = append(out, m)
	}
	c.mu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return cmpString(a.Name, b.Name) })
	return out
}

// View returns Members followed by the members remembered as dead or left
// (up to ReconnectTimeout after they went), each part sorted by name: what
// /v1/members shows.
func (c *Cluster) View() []Member {
	live := c.Members()
	c.mu.Lock()
	gone := make([]Member, 0, len(c.mu.departed))
	for _, d := range c.mu.departed {
		gone = append(gone, d.m)
	}
	c.mu.Unlock()
	gone = slices.DeleteFunc(gone, func(g Member) bool {
		return slices.ContainsFunc(live, func(m Member) bool { return m.Name == g.Name })
	})
	slices.SortFunc(gone, func(a, b Member) int { return cmpString(a.Name, b.Name) })
	return append(live, gone...)
}

// Broadcast gossips msg to every other member (not to this node), piggy
// backed on memberlist's gossip with retransmits that scale with the
// cluster size. Delivery is best effort: a member that joins later or is
// partitioned away for long may miss it. Receivers get it through
// Config.OnMessage. msg is copied.
func (c *Cluster) Broadcast(msg []byte) error {
	if len(msg) > MaxMessageSize {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrMessageTooLarge, len(msg), MaxMessageSize)
	}
	if c.closed() {
		return ErrClosed
	}
	c.queue.QueueBroadcast(broadcast(slices.Clone(msg)))
	if c.queue.NumQueued() > maxQueuedBroadcasts {
		c.queue.Prune(maxQueuedBroadcasts)
	}
	return nil
}

// DroppedMessages returns how many received broadcasts were dropped because
// OnMessage fell more than Config.MessageQueue behind.
func (c *Cluster) DroppedMessages() uint64 { return c.dropped.Load() }

// Leave tells the cluster this node is leaving, waiting up to timeout for
// the news to spread; the others then see it as left (not failed) and it
// never rejoins. Call Close afterwards.
func (c *Cluster) Leave(timeout time.Duration) error {
	if c.closed() {
		return ErrClosed
	}
	c.leaving.Store(true)
	// Flag the meta first so that the others can tell a leave from a
	// failure; half the time budget goes to spreading the flag.
	start := time.Now()
	c.setMeta(meta{httpAddr: c.httpAddr, leaving: true})
	if err := c.ml.UpdateNode(timeout / 2); err != nil {
		c.log.Warn("cannot spread the leaving flag", "err", err)
	}
	if err := c.ml.Leave(max(timeout-time.Since(start), 0)); err != nil {
		return fmt.Errorf("cannot leave the cluster: %w", err)
	}
	c.log.Info("left the cluster")
	return nil
}

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

// signal marks the view dirty without blocking.
func (c *Cluster) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// runEvents delivers views to onChange, serially, skipping unchanged ones.
func (c *Cluster) runEvents() {
	defer c.wg.Done()
	var last []Member
	first := true
	for {
		select {
		case <-c.stop:
			return
		case <-c.changed:
		}
		view := c.Members()
		if !first && sameView(view, last) {
			continue
		}
		first = false
		last = view
		c.log.Debug("membership changed", "members", len(view))
		if c.onChange != nil {
			c.onChange(slices.Clone(view))
		}
	}
}

// sameView compares the fields the ring depends on (not State: a member
// turning suspect changes no owner).
func sameView(a, b []Member) bool {
	return slices.EqualFunc(a, b, func(x, y Member) bool {
		return x.Name == y.Name && x.GossipAddr == y.GossipAddr && x.HTTPAddr == y.HTTPAddr
	})
}

// runMessages delivers received broadcasts to OnMessage, serially.
func (c *Cluster) runMessages() {
	defer c.wg.Done()
	for {
		select {
		case <-c.stop:
			return
		case m := <-c.msgs:
			if c.cfg.OnMessage != nil {
				c.cfg.OnMessage(m)
			}
		}
	}
}

// runReconnect periodically rejoins failed members, and the seeds when this
// node is alone, so that healed partitions merge.
func (c *Cluster) runReconnect() {
	defer c.wg.Done()
	if c.cfg.ReconnectInterval < 0 {
		return
	}
	t := time.NewTicker(c.cfg.ReconnectInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		}
		if c.leaving.Load() || !c.ready.Load() {
			continue
		}
		targets := c.reconnectTargets(time.Now())
		if len(targets) == 0 {
			continue
		}
		n, err := c.ml.Join(targets)
		if n > 0 {
			c.log.Info("reconnected", "answered", n, "tried", len(targets))
		} else {
			c.log.Debug("cannot reconnect", "tried", len(targets), "err", err)
		}
	}
}

// reconnectTargets returns the gossip addresses of failed members still
// worth retrying, plus the seeds when this node is alone, and forgets
// departures older than ReconnectTimeout.
func (c *Cluster) reconnectTargets(now time.Time) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	alone := len(c.mu.live) <= 1
	var targets []string
	for name, d := range c.mu.departed {
		if now.Sub(d.at) > c.cfg.ReconnectTimeout {
			delete(c.mu.departed, name)
			continue
		}
		if d.m.State == StateDead && d.m.GossipAddr != "" {
			targets = append(targets, d.m.GossipAddr)
		}
	}
	if alone {
		for _, s := range c.mu.seeds {
			if !slices.Contains(targets, s) {
				targets = append(targets, s)
			}
		}
	}
	slices.Sort(targets)
	return slices.Compact(targets)
}

func (c *Cluster) setSeeds(seeds []string) {
	c.mu.Lock()
	c.mu.seeds = slices.Clone(seeds)
	c.mu.Unlock()
}

// notSelf drops the seeds that are this node's own gossip address.
func (c *Cluster) notSelf(seeds []string) []string {
	self := normAddr(c.localAddr)
	var out []string
	for _, s := range seeds {
		if normAddr(s) != self {
			out = append(out, s)
		}
	}
	return out
}

func normAddr(a string) string {
	if ap, err := netip.ParseAddrPort(a); err == nil {
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()).String()
	}
	return a
}

// toMemberMeta converts n (State alive) and returns its meta too. It must
// only be called from an event callback: memberlist mutates a Node under
// its own lock, which it holds during callbacks, so reading a *Node
// anywhere else (for example the result of Memberlist.Members) is a data
// race.
func (c *Cluster) toMemberMeta(n *memberlist.Node) (Member, meta) {
	m := Member{Name: n.Name, GossipAddr: n.Address(), State: StateAlive}
	md, err := decodeMeta(n.Meta)
	if err != nil {
		c.log.Debug("unreadable node meta", "member", n.Name, "err", err)
	}
	m.HTTPAddr = md.httpAddr
	return m, md
}

func (c *Cluster) setMeta(m meta) {
	b := encodeMeta(m)
	c.meta.Store(&b)
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

// events is the Cluster seen as a memberlist.EventDelegate. Its methods
// only record departures and mark the view dirty: they never block.
type events Cluster

func (e *events) NotifyJoin(n *memberlist.Node) {
	c := (*Cluster)(e)
	m, _ := c.toMemberMeta(n)
	c.mu.Lock()
	delete(c.mu.departed, n.Name)
	c.mu.live[n.Name] = m
	c.mu.Unlock()
	c.signal()
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	c := (*Cluster)(e)
	m, md := c.toMemberMeta(n)
	m.State = StateDead
	if md.leaving {
		m.State = StateLeft
	}
	c.mu.Lock()
	if len(c.mu.departed) >= maxDeparted {
		var oldest string
		var at time.Time
		for name, d := range c.mu.departed {
			if oldest == "" || d.at.Before(at) {
				oldest, at = name, d.at
			}
		}
		delete(c.mu.departed, oldest)
	}
	c.mu.departed[n.Name] = departure{m: m, at: time.Now()}
	delete(c.mu.live, n.Name)
	c.mu.Unlock()
	c.signal()
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	c := (*Cluster)(e)
	m, _ := c.toMemberMeta(n)
	c.mu.Lock()
	if _, ok := c.mu.live[n.Name]; ok {
		c.mu.live[n.Name] = m
	}
	c.mu.Unlock()
	c.signal()
}

// delegate is the Cluster seen as a memberlist.Delegate.
type delegate Cluster

func (d *delegate) NodeMeta(limit int) []byte {
	b := *d.meta.Load()
	if len(b) > limit {
		return nil // cannot happen: meta ≤ metaMaxBytes < memberlist.MetaMaxSize
	}
	return b
}

func (d *delegate) NotifyMsg(b []byte) {
	if d.cfg.OnMessage == nil || len(b) == 0 {
		return
	}
	select {
	case d.msgs <- slices.Clone(b):
	default:
		d.dropped.Add(1)
	}
}

func (d *delegate) GetBroadcasts(overhead, limit int) [][]byte {
	return d.queue.GetBroadcasts(overhead, limit)
}

func (d *delegate) LocalState(bool) []byte                 { return nil }
func (d *delegate) MergeRemoteState(buf []byte, join bool) {}

// broadcast is one user message in the TransmitLimitedQueue; messages never
// invalidate one another.
type broadcast []byte

func (b broadcast) Invalidates(memberlist.Broadcast) bool { return false }
func (b broadcast) Message() []byte                       { return b }
func (b broadcast) Finished()                             {}

// memberlistLogger adapts memberlist's "[LEVEL] memberlist: msg" lines to
// slog.
func memberlistLogger(l *slog.Logger) *log.Logger {
	return log.New(logWriter{l}, "", 0)
}

type logWriter struct{ l *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	s := string(p)
	for len(s) > 0 && (s[len(s)-1] == '\n' || s[len(s)-1] == '\r') {
		s = s[:len(s)-1]
	}
	level := slog.LevelInfo
	for _, lv := range []struct {
		tag string
		l   slog.Level
	}{{"[DEBUG] ", slog.LevelDebug}, {"[INFO] ", slog.LevelInfo}, {"[WARN] ", slog.LevelWarn}, {"[ERR] ", slog.LevelError}, {"[ERROR] ", slog.LevelError}} {
		if len(s) >= len(lv.tag) && s[:len(lv.tag)] == lv.tag {
			level, s = lv.l, s[len(lv.tag):]
			break
		}
	}
	w.l.Log(context.Background(), level, s)
	return len(p), nil
}
