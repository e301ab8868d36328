package engine

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/rules"
	"github.com/sluicehq/sluice/shard"
)

// ErrNotReady means no rule set has been installed yet (SetRules).
var ErrNotReady = errors.New("no rules loaded yet")

// ErrPeerBusy is wrapped by a Forwarder's error when the peer, still a
// member, did not answer in time or said it is overloaded: its items are
// decided as an unanswering owner's (unanswered.go).
var ErrPeerBusy = errors.New("peer busy")

// Config configures an Engine.
type Config struct {
	// Manager decides the items this node decides; required.
	Manager *lease.Manager
	// Global, when not nil, decides instead the items of global rules
	// (scope: global): a Manager whose Store is the global tier's lease
	// protocol (docs/regions.md). Nil: global rules are decided by
	// Manager, as region rules.
	Global *lease.Manager
	// Demand, when not nil, is told of every check of a global rule
	// decided here (its counter key, a view: copy it to keep it), so that
	// the global tier can split a saturated key by demand.
	Demand func(ckey string)
	// Metrics receives the engine's counters (sluice_checks_total and
	// the routing counters). Nil means a new set.
	Metrics *metrics.Set
	// Self is this node's name: until EnableCluster, the ring holds it
	// alone. Empty means "local".
	Self string
	// RuleData, when not nil, is called once per rule as a rule table is
	// built; Rule.Data returns what it made (a front end's precomputed
	// per-rule data, such as its response headers).
	RuleData func(*rules.Rule) any
	// Now is the clock of the lease protocol's book and regions' split
	// (lessor.go). Nil means time.Now.
	Now func() time.Time
}

// Engine decides batches of checks (see the package doc).
type Engine struct {
	mgr      *lease.Manager
	global   *lease.Manager // nil: global rules on mgr
	demand   func(ckey string)
	set      *metrics.Set
	ruleData func(*rules.Rule) any

	// rules is the current rule table; nil until the first SetRules.
	rules atomic.Pointer[Table]
	// routes is where checks are decided: a ring of this node alone
	// without peers until EnableCluster and SetRoutes.
	routes atomic.Pointer[Routes]

	// cl is the cluster's part; nil on a single node. Set by
	// EnableCluster before the first Decide and never changed after.
	cl *cluster

	// lessor applies the lease protocol's ops this node owns (lease.go).
	lessor *lessor
}

// New returns an Engine without rules (every request errs with
// ErrNotReady until SetRules).
func New(cfg Config) *Engine {
	if cfg.Metrics == nil {
		cfg.Metrics = metrics.NewSet()
	}
	if cfg.Self == "" {
		cfg.Self = "local"
	}
	e := &Engine{mgr: cfg.Manager, global: cfg.Global, demand: cfg.Demand, set: cfg.Metrics, ruleData: cfg.RuleData}
	e.lessor = newLessor(e, cfg.Now)
	e.routes.Store(&Routes{Self: cfg.Self, Ring: shard.NewRing([]string{cfg.Self}, 1)})
	return e
}

// SetRules builds the table of s (nil means an empty set), the rule set
// requests are matched against, plus the rules of extra (the Envoy RLS
// configuration's, say), reachable by name only (a name in both keeps s's
// rule), installs it atomically and returns it. Counter keys are the
// rule name, ":" and the key, so rules kept across a reload keep their
// counters; the Manager resets a key whose Policy changed. Requests in
// flight finish with the table they started with.
func (e *Engine) SetRules(s, extra *rules.Set) *Table {
	t := e.newTable(s, extra)
	e.rules.Store(t)
	return t
}

// Table returns the current rule table, nil before the first SetRules.
func (e *Engine) Table() *Table { return e.rules.Load() }

// Routes is an immutable routing snapshot, replaced as a whole on every
// membership change (SetRoutes). A single node's holds a ring of itself
// alone and no peers.
type Routes struct {
	Self string // this node's member name
	Ring *shard.Ring
	// Addrs maps each peer's member name to its HTTP address. A peer
	// without one cannot be forwarded to: its keys are decided here.
	Addrs map[string]string
}

// peerFor returns the address of the owner of ckey, or "" when this node
// decides it (it owns it, or the owner has no address).
func (r *Routes) peerFor(ckey string) string {
	o := r.Ring.Owner(ckey)
	if o == "" || o == r.Self {
		return ""
	}
	return r.Addrs[o]
}

// alive reports whether addr is the address of a member of the ring:
// membership still calls it alive.
func (r *Routes) alive(addr string) bool {
	for _, a := range r.Addrs {
		if a == addr {
			return true
		}
	}
	return false
}

// SetRoutes installs r (never nil, never changed after): the owners of
// keys change at once.
func (e *Engine) SetRoutes(r *Routes) { e.routes.Store(r) }

// Routes returns the routing snapshot in use.
func (e *Engine) Routes() *Routes { return e.routes.Load() }

// PeerItem is one item forwarded to (or by) a peer: a check of Hits (0
// peeks) or, when Refund is set, a refund of Hits charged to the key
// earlier.
type PeerItem struct {
	Refund bool
	Rule   string
	Key    string
	Hits   int64
}

// PeerResult is the answer to a PeerItem. Err, when not empty, means the
// owner could not decide the item (a rule it does not know yet): the
// sender then decides it itself.
type PeerResult struct {
	Decision lease.Decision
	Err      string
}

// Forwarder is what the engine needs to have items decided by their
// owners (node/forward's Forwarder, adapted by the node).
type Forwarder interface {
	// Forward has the peer at addr decide items and fills results (as
	// long as items, zero on entry). An error wrapping ErrPeerBusy has
	// the items decided as an unanswering owner's (unanswered.go); any
	// other error has them decided here.
	Forward(ctx context.Context, addr string, items []PeerItem, results []PeerResult) error
	// Budget bounds one phase's forwarding (the Forwarder's own timeouts
	// end every call sooner unless a peer's queue is backed up).
	Budget() time.Duration
	// Unanswered is how many requests in a row to addr got no answer in
	// time (0 once it answers).
	Unanswered(addr string) int
	// ForwardLeases has the peer at addr, the owner of the ops' keys,
	// apply lease ops and fills results (as long as ops, zero on entry).
	// An error means none was applied as far as the caller can tell.
	ForwardLeases(ctx context.Context, addr string, ops []LeaseOp, results []LeaseResult) error
}

// Hot is what the engine needs from hot-key detection and splitting
// (node/hot's Hot implements it).
type Hot interface {
	// Observe counts one check of counterKey served here.
	Observe(counterKey string)
	// Route says where a check of counterKey goes when it is split: one
	// of its holders (picked with pick), and whether that is this node.
	Route(counterKey string, pick uint64) (holder string, split, self bool)
	// PlansFor appends the split plans of counterKey the senders of
	// forwarded checks should route by.
	PlansFor(dst []shard.Plan, counterKey string) []shard.Plan
}

// ClusterConfig is the engine's part of a cluster (EnableCluster).
type ClusterConfig struct {
	// Forwarder sends items to their owners; required.
	Forwarder Forwarder
	// Hot observes the checks served here; required. Split routes by its
	// splits (false: detect only).
	Hot   Hot
	Split bool
	// ShedRetry is the retry-after of an item denied because its owner
	// does not answer (a closed rule on the memory store): the
	// Forwarder's back-off, after which the owner is tried again.
	ShedRetry time.Duration
	// DemoteAfter is how many requests in a row to an owner must go
	// unanswered (Forwarder.Unanswered) before this node routes around it
	// (see demote.go): its items are then decided as unanswered.go says,
	// without waiting for it. Zero never demotes.
	DemoteAfter int
	// DemoteProbe is how often a demoted owner is sent one phase's items
	// to see whether it answers again. Zero means DefaultDemoteProbe.
	DemoteProbe time.Duration
	// Now is the demotion's clock. Nil means time.Now.
	Now func() time.Time
	// Shares, when not nil, holds the checks this node decides for an
	// owner that does not answer, and all of them while it is the
	// minority, to their share of each limit (unanswered.go): right when
	// each node keeps its own memory store. Nil: the nodes share a Store
	// (Redis), which keeps the contract whoever decides. The caller owns
	// it (and closes it).
	Shares *lease.MemoryStore
	// Quorum reports whether this node sees fewer than a majority of the
	// members it last knew, and how many it last knew (≥ 1). Nil: never
	// the minority, one member.
	Quorum func() (minority bool, known int)
	// Logger receives the lines about owners that do not answer and are
	// routed around (at most one a LogEvery while it lasts). Nil discards
	// them.
	Logger *slog.Logger
	// LogEvery is the interval of those lines. Zero means 10s.
	LogEvery time.Duration
}

// cluster is the engine's cluster state.
type cluster struct {
	fwd       Forwarder
	hot       Hot
	split     bool
	shedRetry time.Duration
	demote    *demoter // nil: never
	shares    *shares  // nil: a shared Store
	flog      *fallbackLog
	met       clusterMetrics
}

// clusterMetrics count where routed items were decided.
type clusterMetrics struct {
	// forwarded: items answered by their owner; fallback: items this node
	// decided because their owner could not be reached (or did not know
	// the rule); shed: none since issue 35 (the series stays, at 0, for
	// dashboards that read it); local: items this node owns; refunds: refunds
	// sent to owners; served: checks peers forwarded that this node
	// decided.
	forwarded, fallback, shed, local, refunds, served *metrics.Counter
	// demoted: items decided here because their owner was demoted (it
	// stopped answering; see demote.go); unanswered: items decided here
	// (or by on_store_failure) because their owner did not answer, the
	// demoted included; capped: items denied because this node's share
	// of their limit was spent (unanswered.go).
	demoted, unanswered, capped *metrics.Counter
	// Lease ops (lease.go): sent to their owner and applied there;
	// applied here because their owner did not answer; failed for that
	// reason; applied here for peers.
	leasesForwarded, leasesFallback, leasesFailed, leasesServed *metrics.Counter
}

// EnableCluster makes e route each item to the node that decides its
// counter key (SetRoutes' ring, or a holder of its hot-key split) and
// counts routing in sluice_routed_*. Call it once, before the first
// Decide.
func (e *Engine) EnableCluster(cfg ClusterConfig) {
	e.cl = &cluster{
		fwd:       cfg.Forwarder,
		hot:       cfg.Hot,
		split:     cfg.Split,
		shedRetry: cfg.ShedRetry,
		met: clusterMetrics{
			forwarded:  e.set.NewCounter(`sluice_routed_items_total{decided_by="owner"}`),
			fallback:   e.set.NewCounter(`sluice_routed_items_total{decided_by="fallback"}`),
			shed:       e.set.NewCounter(`sluice_routed_items_total{decided_by="none_shed"}`),
			local:      e.set.NewCounter(`sluice_routed_items_total{decided_by="self"}`),
			refunds:    e.set.NewCounter(`sluice_routed_refunds_total`),
			served:     e.set.NewCounter(`sluice_routed_items_served_total`),
			demoted:    e.set.NewCounter(`sluice_routed_items_total{decided_by="demoted_owner"}`),
			unanswered: e.set.NewCounter(`sluice_routed_items_total{decided_by="owner_unanswered"}`),
			capped:     e.set.NewCounter(`sluice_share_denied_items_total`),

			leasesForwarded: e.set.NewCounter(`sluice_routed_lease_ops_total{applied_by="owner"}`),
			leasesFallback:  e.set.NewCounter(`sluice_routed_lease_ops_total{applied_by="fallback"}`),
			leasesFailed:    e.set.NewCounter(`sluice_routed_lease_ops_total{applied_by="none_failed"}`),
			leasesServed:    e.set.NewCounter(`sluice_routed_lease_ops_served_total`),
		},
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := cfg.LogEvery
	if every <= 0 {
		every = 10 * time.Second
	}
	e.cl.flog = &fallbackLog{log: log, every: every, now: cfg.Now, peers: map[string]int64{},
		after: func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }}
	if cfg.Shares != nil {
		e.cl.shares = &shares{store: cfg.Shares, quorum: cfg.Quorum}
	}
	if cfg.DemoteAfter > 0 {
		d := &demoter{after: cfg.DemoteAfter, probe: cfg.DemoteProbe, now: cfg.Now,
			unanswered: cfg.Forwarder.Unanswered, log: log}
		if d.probe <= 0 {
			d.probe = DefaultDemoteProbe
		}
		e.cl.demote = d
	}
}

// Charged reports whether a check of hits decided d took something from
// the leased bucket or the Store, which a refund must give back when its
// request is denied. The one place that says it: a degraded decision (the
// Store was down: open or local failure mode) took nothing from the
// leased bucket, so it must not be refunded there (a refund would create
// tokens no Store granted); a peek (hits 0) takes nothing.
func Charged(d *lease.Decision, hits int64) bool {
	return d.Allowed && hits > 0 && !d.Degraded
}
