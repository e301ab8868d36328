package node

import (
	"crypto/tls"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/forward"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/node/member"
	"github.com/sluicehq/sluice/shard"
)

// Membership is what a Node needs from cluster membership: whether this
// node has joined (for /readyz and /v1/members) and the view shown by
// /v1/members (live members first, then those remembered as dead or left).
// *member.Cluster implements it. The ring itself is fed by
// [Node.MembersChanged], member.Start's onChange callback.
type Membership interface {
	Ready() bool
	View() []member.Member
}

// quorumer is what a Membership may tell too (*member.Cluster does): what
// this node sees of the members it last knew. Without it a node is never
// the minority.
type quorumer interface {
	Quorum() member.Quorum
}

// ErrClusterConfig means a ClusterConfig field is invalid; the wrapping
// error names the field.
var ErrClusterConfig = errors.New("invalid cluster config")

// ClusterConfig makes a Node one member of a cluster (see EnableCluster).
// The zero value of each field means the default in its comment.
type ClusterConfig struct {
	// Self is this node's member name, as membership reports it. Required.
	Self string
	// Vnodes is the ring's virtual nodes per member. Zero means
	// shard.DefaultVnodes; every node of a cluster (and node/client) must
	// use the same value, which /v1/members reports.
	Vnodes int
	// ClusterKey guards the internal endpoint (forward.Path): peers sign
	// each request with it (see node/forward). Required unless Insecure.
	ClusterKey []byte
	// Insecure allows an empty ClusterKey: the internal endpoint is then
	// open to anyone who can reach the node (EnableCluster logs a
	// warning). Default false: EnableCluster refuses a cluster without a
	// key.
	Insecure bool
	// AuthWindow is how far a signed internal request's timestamp may be
	// from this node's clock (forward.HandlerConfig.Window). Zero means
	// forward.DefaultWindow (30s).
	AuthWindow time.Duration
	// Forward configures the Forwarder that sends checks to their owners;
	// its ClusterKey is set from ClusterKey. Zero fields mean
	// forward.DefaultConfig's values (a 200µs flush, 256 items, a 50ms
	// timeout stretching up to 100ms on a slow owner, after which the
	// items are decided here: see SharedStore; sluiced sets 50ms, above
	// its 20ms check budget).
	Forward forward.Config
	// Hot configures hot-key detection and splitting (see node/hot); its
	// Self is set from Self, a nil Threshold reads the rules' hot
	// settings and a nil Logger is the node's. Nil means
	// hot.DefaultConfig().
	Hot *hot.Config
	// HotNoSplit makes the node detect and show hot keys (/v1/hotkeys)
	// but never split them nor route by other members' splits.
	HotNoSplit bool
	// DemoteAfter routes around an owner, alive to membership, after
	// this many forwarding requests to it in a row went unanswered (see
	// node/engine's demote.go): its keys are then decided here from the
	// Store while this node's Store is up, and it is probed every
	// DemoteProbe until it answers. Zero never demotes: only nodes sharing one Store
	// (Redis) may decide each other's keys. sluiced sets 2 with -redis.
	DemoteAfter int
	// DemoteProbe is how often a demoted owner is sent a check again.
	// Zero means engine.DefaultDemoteProbe (1s).
	DemoteProbe time.Duration
	// SharedStore says the nodes share one Store (Redis): a check whose
	// owner does not answer is then decided here by leasing from it.
	// False (each node on its own memory store): such a check follows its
	// rule's on_store_failure within this node's share of the limit, and
	// so does every check while this node is the minority (see
	// node/engine's unanswered.go).
	// A lease op (the lease protocol) whose owner does not answer is
	// applied here on a shared Store, and answered with an error on
	// memory stores.
	SharedStore bool
}

// cluster is a Node's cluster state. It exists only when EnableCluster was
// called: a single node has n.cl == nil and pays one nil check per
// decision.
type cluster struct {
	n       *Node
	keyed   bool        // a cluster key authenticates members (not Insecure)
	peerTLS *tls.Config // peers serve HTTPS (ClusterConfig.Forward.TLS); nil: HTTP
	self    string
	vnodes  int
	fwd     *forward.Forwarder
	handler fasthttp.RequestHandler

	// membership, once set by SetMembership, answers Ready and View.
	membership atomic.Pointer[membershipBox]

	// The handoff goroutine returns the leases of keys this node no longer
	// owns after every ring change (signals coalesced in kick) and removes
	// departed peers from the Forwarder.
	kick      chan struct{}
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	hot *hotState // never nil once EnableCluster returned

	// shares is the memory store of this node's shares of each limit
	// (ClusterConfig.SharedStore false); nil on a shared Store.
	shares   *lease.MemoryStore
	quorumAt atomic.Pointer[quorumCache]

	met clusterMetrics
}

type membershipBox struct{ m Membership }

// clusterMetrics count the cluster's work outside the engine (which
// counts where routed items were decided: sluice_routed_*).
type clusterMetrics struct {
	// handoffs: completed handoff passes (returns of moved keys).
	handoffs *metrics.Counter
	members  atomic.Int64
}

// EnableCluster makes n route each check to the owner of its counter key
// on a consistent-hash ring of the live members, and serve the internal
// endpoint at forward.Path. Call it once, before Serve; then start
// membership with [Node.MembersChanged] as its onChange callback and pass
// it to [Node.SetMembership]. Until the first MembersChanged, the ring
// holds this node alone (it decides everything itself). Call
// [Node.CloseCluster] after the HTTP server has stopped.
func (n *Node) EnableCluster(cfg ClusterConfig) error {
	if n.cl != nil {
		return fmt.Errorf("%w: the cluster is already enabled", ErrClusterConfig)
	}
	if cfg.Self == "" {
		return fmt.Errorf("%w: Self: required (this node's member name)", ErrClusterConfig)
	}
	if cfg.Vnodes < 0 || cfg.Vnodes > shard.MaxVnodes {
		return fmt.Errorf("%w: Vnodes: must be between 0 and %d, got %d", ErrClusterConfig, shard.MaxVnodes, cfg.Vnodes)
	}
	if len(cfg.ClusterKey) == 0 && !cfg.Insecure {
		return fmt.Errorf("%w: ClusterKey: required (without it anyone who reaches the node can forge checks and refunds); set Insecure to run without one", ErrClusterConfig)
	}
	if cfg.AuthWindow < 0 {
		return fmt.Errorf("%w: AuthWindow: must be ≥ 0, got %s", ErrClusterConfig, cfg.AuthWindow)
	}
	if err := cfg.Forward.Validate(); err != nil {
		return fmt.Errorf("%w: Forward: %v", ErrClusterConfig, err)
	}
	if cfg.Vnodes == 0 {
		cfg.Vnodes = shard.DefaultVnodes
	}
	fcfg := cfg.Forward
	fcfg.ClusterKey = cfg.ClusterKey
	fcfg.Self = cfg.Self // owners bound our refunds by what they lent this name
	timeout := fcfg.Timeout
	if timeout <= 0 {
		timeout = forward.DefaultConfig().Timeout
	}
	shedRetry := fcfg.Backoff
	if shedRetry <= 0 {
		shedRetry = forward.DefaultConfig().Backoff
	}
	c := &cluster{
		n:       n,
		keyed:   len(cfg.ClusterKey) > 0,
		peerTLS: cfg.Forward.TLS,
		self:    cfg.Self,
		vnodes:  cfg.Vnodes,
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	if err := c.newHot(cfg); err != nil {
		return fmt.Errorf("%w: Hot: %v", ErrClusterConfig, err)
	}
	if c.hot.split && fcfg.OnPlans == nil {
		fcfg.OnPlans = c.hot.h.ApplyPlans
	}
	if fcfg.Metrics == nil {
		fcfg.Metrics = n.met.set // /metrics writes it
	}
	c.fwd = forward.New(fcfg)
	c.handler = forward.NewHandler(forward.HandlerConfig{ClusterKey: cfg.ClusterKey, Window: cfg.AuthWindow, Logger: n.log, Metrics: fcfg.Metrics},
		newDecider(n.eng))
	n.eng.SetRoutes(&engine.Routes{Self: cfg.Self, Ring: shard.NewRing([]string{cfg.Self}, cfg.Vnodes)})
	if !cfg.SharedStore {
		c.shares = lease.NewMemoryStore(lease.DefaultMemoryStoreConfig())
	}
	n.eng.EnableCluster(engine.ClusterConfig{
		Forwarder:   newForwarder(c.fwd, time.Duration(timeout)),
		Hot:         c.hot.h,
		Split:       c.hot.split,
		ShedRetry:   shedRetry,
		DemoteAfter: max(cfg.DemoteAfter, 0),
		DemoteProbe: cfg.DemoteProbe,
		Now:         fcfg.Now,
		Shares:      c.shares,
		Quorum:      c.minority,
		Logger:      n.log,
	})
	c.met.members.Store(1)
	n.met.set.NewGauge(`sluice_members`, func() float64 { return float64(c.met.members.Load()) })
	c.met.handoffs = n.met.set.NewCounter(`sluice_handoffs_total`)
	if len(cfg.ClusterKey) == 0 {
		n.log.Warn("insecure cluster: no cluster key, the internal forwarding endpoint " + forward.Path + " is open to anyone who can reach this node; set SLUICE_CLUSTER_KEY")
	}
	n.cl = c
	go c.runHandoff()
	c.hot.h.Run()
	return nil
}

// SetMembership gives n the membership that answers /readyz and
// /v1/members. Until it is called, a clustered node is not ready.
func (n *Node) SetMembership(m Membership) {
	if c := n.cl; c != nil && m != nil {
		c.membership.Store(&membershipBox{m})
	}
}

// MembersChanged rebuilds the ring from the live members (this node
// included), as member.Start's onChange callback: the owners of keys change
// at once, and the leases of keys this node no longer owns are returned in
// the background. Members whose State is not member.StateAlive are left
// out. It is a no-op on a single node.
func (n *Node) MembersChanged(ms []member.Member) {
	c := n.cl
	if c == nil {
		return
	}
	names := make([]string, 0, len(ms)+1)
	addrs := make(map[string]string, len(ms))
	for _, m := range ms {
		if m.State != "" && m.State != member.StateAlive {
			continue
		}
		names = append(names, m.Name)
		if m.Name != c.self && m.HTTPAddr != "" {
			addrs[m.Name] = m.HTTPAddr
		}
	}
	if len(names) == 0 {
		names = append(names, c.self)
	}
	ring := shard.NewRing(names, c.vnodes)
	n.eng.SetRoutes(&engine.Routes{Self: c.self, Ring: ring, Addrs: addrs})
	c.met.members.Store(int64(len(names)))
	if c.hot.split {
		c.hot.h.SetRing(ring) // may queue ended keys: before the kick
	}
	select {
	case c.kick <- struct{}{}:
	default: // a handoff is already pending: it will see this ring
	}
}

// runHandoff is the handoff goroutine (owned by the cluster, stopped by
// CloseCluster).
func (c *cluster) runHandoff() {
	defer close(c.done)
	known := map[string]bool{} // the peer addresses of the last ring
	for {
		select {
		case <-c.stop:
			return
		case <-c.kick:
		}
		r := c.n.eng.Routes()
		// Keep the keys this node owns or holds as a split holder, except
		// those it has just stopped holding.
		ended := c.hot.takeEnded()
		keep := func(k string) bool {
			return !ended[k] && (r.Ring.Owner(k) == c.self || c.hot.holds(k, c.self))
		}
		if err := c.n.mgr.ReturnKeys(keep); err != nil {
			c.n.log.Warn("cannot return the leases of keys that moved", "err", err)
		}
		if u := c.n.cfg.Upstream; u != nil { // the global rules' keys, leased from the global tier
			if err := u.Manager().ReturnKeys(keep); err != nil {
				c.n.log.Warn("cannot return to the global tier the leases of keys that moved", "err", err)
			}
		}
		now := make(map[string]bool, len(r.Addrs))
		for _, a := range r.Addrs {
			now[a] = true
		}
		for a := range known {
			if !now[a] {
				c.fwd.RemovePeer(a) // fails its queued calls: they decide locally
			}
		}
		known = now
		c.met.handoffs.Inc()
	}
}

// CloseCluster stops the handoff goroutine and the Forwarder. Call it after
// Shutdown; checks made later are decided locally. It is idempotent and a
// no-op on a single node.
func (n *Node) CloseCluster() error {
	c := n.cl
	if c == nil {
		return nil
	}
	c.closeOnce.Do(func() {
		close(c.stop)
		<-c.done
		c.hot.h.Close()
		_ = c.fwd.Close()
		if c.shares != nil {
			_ = c.shares.Close()
		}
	})
	return nil
}

// Owner returns the member name that owns counterKey (rule + ":" + key) on
// this node's current ring; a single node returns "".
func (n *Node) Owner(counterKey string) string {
	if c := n.cl; c != nil {
		return n.eng.Routes().Ring.Owner(counterKey)
	}
	return ""
}

// Ring returns the current ring (rebuilt on every membership change); nil
// on a single node.
func (n *Node) Ring() *shard.Ring {
	if c := n.cl; c != nil {
		return n.eng.Routes().Ring
	}
	return nil
}

// Handoffs returns how many handoff passes (returns of moved keys after a
// ring change) have completed; 0 on a single node.
func (n *Node) Handoffs() uint64 {
	if c := n.cl; c != nil {
		return c.met.handoffs.Get()
	}
	return 0
}

// ForwardStats returns the Forwarder's counters; zero on a single node.
func (n *Node) ForwardStats() forward.Stats {
	if c := n.cl; c != nil {
		return c.fwd.Stats()
	}
	return forward.Stats{}
}

// clusterReady reports whether n may take traffic as far as the cluster
// goes: a single node at once, a member once it has joined.
func (n *Node) clusterReady() bool {
	c := n.cl
	if c == nil {
		return true
	}
	b := c.membership.Load()
	return b != nil && b.m.Ready()
}

// quorum is what n sees of the members it last knew; ok is false on a
// single node or without a membership that tells.
func (c *cluster) quorum() (q member.Quorum, ok bool) {
	if c == nil {
		return q, false
	}
	b := c.membership.Load()
	if b == nil {
		return q, false
	}
	qm, ok := b.m.(quorumer)
	if !ok {
		return q, false
	}
	return qm.Quorum(), true
}

// tellsReach reports whether c's membership tells which members answer
// (a quorumer); without, every alive member counts as answering.
func (c *cluster) tellsReach() bool {
	if c == nil {
		return false
	}
	b := c.membership.Load()
	if b == nil {
		return false
	}
	_, ok := b.m.(quorumer)
	return ok
}

// minority is the engine's ClusterConfig.Quorum: membership's answer,
// asked at most every quorumEvery (the engine asks per check).
func (c *cluster) minority() (bool, int) {
	now := time.Now().UnixNano()
	if v := c.quorumAt.Load(); v != nil && now-v.at < int64(quorumEvery) {
		return v.minority, v.known
	}
	v := &quorumCache{at: now, known: 1}
	if q, ok := c.quorum(); ok {
		v.minority, v.known = q.Minority, max(q.Known, 1)
	}
	c.quorumAt.Store(v)
	return v.minority, v.known
}

// quorumEvery is how long the engine's view of the quorum may be old (the
// pings that feed it run every 100ms).
const quorumEvery = 50 * time.Millisecond

type quorumCache struct {
	at       int64 // unix ns
	minority bool
	known    int
}
