// Package node is Sluice's HTTP server: it decodes checks, matches them to
// rules, asks the lease Manager for decisions, and answers with JSON bodies
// and rate-limit headers. It also serves /metrics, /healthz and /readyz,
// and, in a cluster, routes each check to the owner of its key (see
// "Cluster"). (Rule files and their matching live in the sub-package
// node/rules, the wire codec in node/api, membership in node/member, the
// forwarding protocol in node/forward; the admin API of rules is in
// admin.go and rulesource.go.)
//
// # Endpoints
//
//   - POST /v1/check, GET /v1/check?rule=&key=&hits=: one check. 200
//     allowed, 429 denied, 503 (with Retry-After) when a rule whose
//     on_store_failure is closed cannot reach the Store, or when the key's
//     owner, alive, is overloaded (shed: see "Cluster").
//   - POST /v1/checks: up to api.MaxBatch checks, answered in order with 200;
//     a bad item is answered inline as {"error","field":"checks[i].x"}.
//   - /v1/auth and /v1/auth/* (any method): forward-auth for nginx
//     auth_request, Traefik forwardAuth, Envoy ext_authz (HTTP) and Caddy
//     forward_auth. The answer is headers only: 200, 429 or 503. A request
//     that matches no rule is allowed. A rule whose key the request lacks
//     follows its on_missing_key (node/rules): skip (counted in
//     sluice_checks_skipped_total{rule,reason="missing_key"}), deny (429
//     with RateLimit-Policy and X-Sluice-Missing-Key, no Retry-After; no
//     rule is decided), or a fallback key decided as any other.
//   - POST /v1/acquire, POST /v1/release: concurrency slots (see below).
//   - GET /v1/members: the cluster view, {"self","ready","vnodes","members":
//     [{"name","http_addr","gossip_addr","state"}]}, live members first, by
//     name (node/client reads it). A single node lists itself alone.
//   - GET /v1/hotkeys: the hot keys (node/hot): this node's top keys with
//     their rates and split state, and the cluster's splits,
//     {"self","node_rate","top":[{"key","count","err","rate","split",
//     "holders"}],"splits":[{"key","holders","epoch","owner"}]}. A single
//     node tracks no keys (its hot path is left as it is) and answers empty
//     lists.
//   - GET /v1/stats (admin): each rule's decisions per 10 s over the last
//     five minutes, cluster-wide, and the Store's breaker (stats.go).
//   - GET /ui/: the dashboard's static files (node/ui); /ui redirects there.
//   - Admin endpoints (/v1/members, /v1/hotkeys, /v1/stats, the rules
//     API) start with [Node.RequireAdmin]: a bearer Config.AdminToken, or
//     without one loopback peers only (401 or 403 otherwise). Checks, /healthz and /readyz are never guarded;
//     /metrics needs Config.MetricsToken when one is set.
//   - GET /metrics (Prometheus text), /healthz (liveness), /readyz
//     (readiness: a rule set is loaded and, in a cluster, the node has
//     joined; the last reload error is shown).
//   - POST /internal/v1/batch (cluster only): checks forwarded by peers
//     (node/forward), guarded by the cluster key.
//   - /v1/rules, /v1/rules/{name}, /v1/rules:validate, /v1/rules:test: the
//     admin API of rules, with versions, persistence and propagation (see
//     admin.go and rulesource.go).
//
// Unknown paths answer 404 with a JSON error, as does the internal
// endpoint on a single node; a known path with the wrong method answers
// 405. Every error body is {"error","field"} (the internal endpoint
// answers plain text: see node/forward).
//
// # The decision engine
//
// Every front end decides through one method, [Node.Decide]:
//
//	func (n *Node) Decide(ctx context.Context, b *Batch)
//
// A [Batch] holds one or more requests, each a set of (rule, key, hits)
// [Item]s added with Batch.Add and closed with Batch.End. Decide decides
// each request as one (below, "Several rules, one answer": every rule must
// allow, and a denied request's charged hits are refunded), in the order
// of the batch, and sets each request's verdict ([Request]: Status 200,
// 429 or 503, the reported item Rep, Degraded, or Err for a request not
// decided: an unknown rule, hits on a concurrency rule, no rules yet) and
// each item's Decision and Policy. POST/GET /v1/check and /v1/auth are one
// request, /v1/checks one request per check; the Envoy RLS server and the
// dashboard use it the same way. A Batch is reused (Reset) so that
// deciding allocates nothing once warm.
//
// A single node is a cluster of one: its ring holds itself alone and it
// has no peers, so the same engine runs with routing as a step that sends
// nothing. Decide resolves each item (rule, policy, counter key), then
// decides the leased items of every request, then the exact items of the
// requests nothing denied, each phase split by where an item is decided
// (this node's Manager, with one TakeMany for the batch's single-item
// requests; in a cluster, each peer's items in one forwarding call), then
// refunds, then combines each request's verdict; see decide.go and
// route.go.
//
// # Several rules, one answer
//
// A check by descriptors, or a forward-auth request, may match several rules.
// It is allowed only if every rule allows. Leased rules are decided first,
// then exact ones (sliding_log), so that a request denied by a leased rule
// never touches an exact rule. When one rule denies, the hits charged to the
// rules that allowed are refunded: a denied request burns no quota (a
// sliding_log stamp already recorded when a later exact rule denies cannot
// be taken back; put at most one exact rule on a request path). A denial is
// answered with the denying rule that has the longest retry-after (429 if
// any rule denied on its limit, else 503 for rules that fail closed); an
// allowed request is answered with the rule that has the least remaining.
// Shadow rules are decided and counted (decision="shadow_denied") but never
// deny. Concurrency rules are not matched by descriptors or forward-auth:
// they need /v1/acquire and /v1/release; /v1/check may only peek at them
// (hits=0).
//
// # Lease ids
//
// /v1/acquire answers a lease_id of the form rule~base64url(key)~id, where id
// is the Manager's random slot id, so that /v1/release needs only
// {"lease_id"}: the rule and key are read back from it (when the request
// also names them, they must agree). Rule names cannot contain '~' and
// base64url never does. api.MaxLeaseIDLen (512 bytes) fits the longest rule
// name and key, so every lease_id carries both.
//
// # The hot path allocates nothing
//
// A check by rule and key (POST or GET /v1/check, and each item of
// /v1/checks) allocates nothing once a key has a bucket: the body is
// decoded with api.DecodeCheckView (strings are views of the request body),
// and the counter key rule + ":" + key is built in the pooled request
// state's Batch buffer (Batch.counterKey) and passed to the lease Manager
// as a view, which is safe because the Manager copies a key only when it keeps
// it. A cold key allocates only what the Manager allocates for it. So: a
// string taken from a decoded request or an item's ckey must be cloned
// (strings.Clone) by any code that keeps it past the request (a forwarding
// queue, a hot-key sketch, a log record kept by an async handler).
//
// # Cluster
//
// EnableCluster makes a Node one member of a cluster. Membership
// (node/member, memberlist) calls MembersChanged on every join, leave or
// failure, which rebuilds the consistent-hash ring (shard.Ring, the live
// members' names) and swaps it in atomically. Each item's owner is
// ring.Owner(counter key), the key node/client routes by too. Items this
// node owns go to its Manager; the others go to their owner through a
// per-peer forward.Forwarder queue (flushed every 200µs or at 256 items),
// and the owner decides them with its own rules and Manager.
//
// When a forward fails, what happens depends on whether the owner may
// still be deciding the key (route.go, collect):
//   - the owner is alive (membership lists it) but overloaded: the request
//     timed out, the owner answered 503 or 429, the peer's queue is full,
//     or the Forwarder is backing off after one of those
//     (forward.ErrPeerBusy). The item is shed: answered 503 with
//     Retry-After (the Forwarder's back-off, 500ms; a batch item is
//     allowed:false with retry_after_ms, an RLS request is UNAVAILABLE),
//     counted in sluice_checks_total{decision="shed"},
//     sluice_routed_items_total{decided_by="none_shed"} and /v1/stats'
//     "shed". This node does not decide it: the owner keeps deciding the
//     key's other checks from its lease and local state, and a second
//     decider (this node leasing from the Store, or in local mode from
//     1/N of the limit while the Store fails too) is how overload turned
//     into over-admission (finding 4 of issue 11: 104–155% of the limit
//     with three nodes past saturation);
//   - the owner cannot be deciding it: it refused the connection (its
//     process is gone and membership has not noticed yet), membership
//     marked it dead or left while the forward was failing, it answered
//     something other than a valid reply (another cluster key), or it
//     answered the item with an error (a rule it does not know yet). The
//     item is decided here by leasing from the shared Store, so a dead
//     peer never becomes an error (with Redis this stays within the
//     accuracy contract; with per-node memory stores it admits up to one
//     limit per node while the owner is unreachable), and the ring
//     changes once membership sees the failure.
//
// DESIGN says "a peer that times out is skipped: the sender decides"; a
// timeout is now shed instead (above), because a peer that times out
// under load is still deciding. A batch, or a request matching
// several rules, sends each peer its items in one call, all peers at
// once, while this node decides its own; refunds of a denied request go
// back to where the hits were charged. /v1/acquire and /v1/release are
// not forwarded: concurrency runs its script on the shared Store at every
// call. After every ring change a goroutine owned by the cluster returns
// the leases of the keys this node no longer owns (changes coalesced) and
// drops the Forwarder's queues of departed peers. A single node (no
// EnableCluster) is a cluster of one without peers: routing costs it one
// length check per item.
//
// A clustered node also splits hot keys (node/hot, issue 5): routing asks
// the split table before the ring, and a key split over several holders
// is served by each holder itself, leasing from the same Store bucket;
// see hot.go for the hooks.
//
// # Metrics
//
// /metrics writes the Node's own metrics, then the process-wide set (the
// lease package's): sluice_checks_total{rule,decision} (decision: allowed,
// denied, shadow_denied, unavailable, degraded), created for every rule when
// a rule set is installed (in a cluster, a check is counted by the node
// that answered it, whoever decided it); sluice_check_duration_seconds, the
// time to decide a check (one check in 16 is timed, because reading the clock costs a
// tenth of a check on some virtual machines; a batch is one observation of
// its mean time per check); sluice_http_requests_total{path,code} (path is
// one of the endpoints or "other"); sluice_checks_skipped_total{rule,
// reason="missing_key"} (forward-auth checks a rule skipped because the
// request lacked its key; created for every rule with a key);
// sluice_rules; and
// sluice_rules_reload_errors_total. In a cluster also
// sluice_routed_items_total{decided_by="self|owner|fallback"},
// sluice_routed_refunds_total, sluice_routed_items_served_total (checks
// peers forwarded that this node decided), sluice_members and
// sluice_handoffs_total
// (node/forward adds sluice_forward_*, node/hot sluice_hot_*: splits
// started, ended and active, keys tracked, checks of split keys routed to
// self or to a holder, gossip messages).
//
// # Concurrency
//
// A Node is safe for concurrent use (Decide too, each call with its own
// Batch). SetRules and SetRulesError may be
// called at any time (rules are swapped atomically); requests in flight
// finish with the set they started with. EnableCluster must be called
// before Serve; MembersChanged and SetMembership at any time after it.
package node

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/logkey"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/rules"
	"github.com/sluicehq/sluice/node/ui"
	"github.com/sluicehq/sluice/shard"
)

// Config configures a Node. The zero value of each field means the default
// given in its comment.
type Config struct {
	// AdminToken is the bearer token of the admin endpoints (see
	// [Node.RequireAdmin]). Empty means admin requests are accepted from
	// loopback addresses only.
	AdminToken string
	// AdminHosts are the names, besides localhost, loopback addresses and
	// the address a connection reached, that admin requests may carry in
	// Host (and in a cross-origin Origin): see [Node.RequireAdmin]. Host
	// names without a port, compared without case.
	AdminHosts []string
	// MetricsToken, when not empty, is the bearer token /metrics requires.
	// Empty means /metrics is open (Prometheus scrapes it unauthenticated).
	MetricsToken string
	// MaxBodyBytes bounds a request body; larger bodies are answered 413.
	// Zero means api.MaxBodyBytes (1 MiB: a full batch of 1000 checks with
	// 256-byte keys fits with room to spare).
	MaxBodyBytes int
	// MaxHeaderBytes bounds the request line plus headers (fasthttp's read
	// buffer); larger ones are answered 431. Zero means 8 KiB, enough for
	// the forwarded headers and JWTs gateways send to forward-auth.
	MaxHeaderBytes int
	// ReadTimeout bounds reading one request. Zero means 5s.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing one response. Zero means 5s.
	WriteTimeout time.Duration
	// IdleTimeout is how long a keep-alive connection may wait for its next
	// request. Zero means 90s, longer than the idle timeouts of the common
	// gateways' upstream pools, so that gateways close first.
	IdleTimeout time.Duration
	// Logger receives errors and reload messages. Nil means slog.Default().
	Logger *slog.Logger
	// Name is this node's name in /v1/members when it runs alone (a
	// clustered node reports ClusterConfig.Self). Empty means "local".
	Name string
}

// DefaultConfig returns the defaults described on each Config field.
func DefaultConfig() Config {
	return Config{
		MaxBodyBytes:   api.MaxBodyBytes,
		MaxHeaderBytes: 8 << 10,
		ReadTimeout:    5 * time.Second,
		WriteTimeout:   5 * time.Second,
		IdleTimeout:    90 * time.Second,
		Logger:         slog.Default(),
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	if c.MaxHeaderBytes <= 0 {
		c.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if c.ReadTimeout <= 0 {
		c.ReadTimeout = d.ReadTimeout
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = d.WriteTimeout
	}
	if c.IdleTimeout <= 0 {
		c.IdleTimeout = d.IdleTimeout
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// Node serves the HTTP API for one lease Manager.
type Node struct {
	cfg Config
	mgr *lease.Manager

	// adminToken and metricsToken are the SHA-256 of the configured
	// tokens, nil when not set (see guard.go).
	adminToken, metricsToken *[sha256.Size]byte
	// adminHosts is Config.AdminHosts, lower-cased (see guard.go).
	adminHosts map[string]struct{}

	log *slog.Logger
	srv *fasthttp.Server
	met *nodeMetrics

	// rules is the current rule set with its precomputed per-rule data;
	// nil until the first SetRules.
	rules atomic.Pointer[ruleTable]

	// routes is where checks are decided: on a single node a ring of this
	// node alone, without peers (so every item is decided here); in a
	// cluster, replaced by MembersChanged.
	routes atomic.Pointer[routes]

	// reload holds the outcome of the last reload, for /readyz, and the
	// rules of the Envoy RLS configuration (SetRLSRules); its lock also
	// serializes the rebuilds of the rule table.
	reload struct {
		sync.Mutex
		err  error
		when time.Time
		rls  *rules.Set
	}

	states sync.Pool // of *reqState

	// serving tracks the listeners given to Serve, so that a Shutdown that
	// races a Serve still stops it (fasthttp's Shutdown only closes the
	// listeners its Serve has already registered).
	serving struct {
		sync.Mutex
		lns  []net.Listener
		shut bool
	}

	// ra is where the rules come from and their version, for the admin
	// API (rulesource.go, admin.go).
	ra ruleAdmin

	// cl is the cluster state; nil on a single node. Set by EnableCluster
	// before Serve and never changed after.
	cl *cluster

	// stat keeps the per-rule figures of /v1/stats (stats.go); its
	// sampler runs from the first Serve to Shutdown.
	stat *statsState
	// ui is the dashboard's files (node/ui).
	ui *ui.Assets
}

// New returns a Node that decides with mgr. It serves nothing until Serve,
// and answers /readyz with 503 until the first SetRules.
func New(cfg Config, mgr *lease.Manager) *Node {
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, mgr: mgr, log: cfg.Logger,
		adminToken: tokenDigest(cfg.AdminToken), metricsToken: tokenDigest(cfg.MetricsToken),
		adminHosts: hostSet(cfg.AdminHosts)}
	n.met = newNodeMetrics(n)
	n.stat = newStatsState(n)
	n.ui = ui.New()
	name := cfg.Name
	if name == "" {
		name = singleName
	}
	n.routes.Store(&routes{self: name, ring: shard.NewRing([]string{name}, 1)})
	n.states.New = func() any { return &reqState{n: n} }
	n.srv = &fasthttp.Server{
		Handler:               n.handle,
		ErrorHandler:          n.handleTransportError,
		Name:                  "sluice",
		MaxRequestBodySize:    cfg.MaxBodyBytes,
		ReadBufferSize:        cfg.MaxHeaderBytes,
		ReadTimeout:           cfg.ReadTimeout,
		WriteTimeout:          cfg.WriteTimeout,
		IdleTimeout:           cfg.IdleTimeout,
		CloseOnShutdown:       true,
		NoDefaultServerHeader: true,
		Logger:                fasthttpLogger{cfg.Logger},
		// A bad request's error would quote its bytes: headers' values
		// (Authorization, X-API-Key) would reach the log.
		SecureErrorLogMessage: true,
	}
	return n
}

// SetRules installs s (nil means an empty set) atomically. Counter keys are
// the rule name, ":" and the key, so rules kept across a reload keep their
// counters; the Manager resets a key whose Policy changed. SetRules clears
// the last reload error.
func (n *Node) SetRules(s *rules.Set) {
	n.reload.Lock()
	t := n.met.newRuleTable(s, n.reload.rls)
	n.rules.Store(t)
	n.met.rules.Store(int64(s.Len()))
	n.reload.err = nil
	n.reload.when = time.Now()
	n.reload.Unlock()
}

// SetRulesError records that the last reload failed: the Node keeps serving
// the last good set, logs err, counts it and shows it in /readyz until the
// next SetRules.
func (n *Node) SetRulesError(err error) {
	if err == nil {
		return
	}
	n.met.reloadErrors.Inc()
	n.log.Error("rules reload failed; keeping the last good rule set", "err", err)
	n.reload.Lock()
	n.reload.err = err
	n.reload.when = time.Now()
	n.reload.Unlock()
}

// Handler returns the request handler, for tests and embedding.
func (n *Node) Handler() fasthttp.RequestHandler { return n.handle }

// Serve serves HTTP on ln until Shutdown. It returns nil after Shutdown.
func (n *Node) Serve(ln net.Listener) error {
	n.serving.Lock()
	if n.serving.shut {
		n.serving.Unlock()
		ln.Close()
		return nil
	}
	n.serving.lns = append(n.serving.lns, ln)
	n.serving.Unlock()
	n.stat.run()
	err := n.srv.Serve(ln)
	n.serving.Lock()
	shut := n.serving.shut
	n.serving.Unlock()
	if shut && errors.Is(err, net.ErrClosed) {
		return nil // closed by Shutdown
	}
	return err
}

// Shutdown stops accepting connections and waits for the requests in
// flight to finish, or for ctx to end.
func (n *Node) Shutdown(ctx context.Context) error {
	n.serving.Lock()
	n.serving.shut = true
	lns := n.serving.lns
	n.serving.Unlock()
	n.stat.close()
	err := n.srv.ShutdownWithContext(ctx)
	// A Serve that had not yet registered its listener with the server
	// when Shutdown ran would accept forever: close every listener here too
	// (closing one twice is harmless).
	for _, ln := range lns {
		ln.Close()
	}
	if err != nil {
		return fmt.Errorf("cannot shut down the HTTP server: %w", err)
	}
	return nil
}

// fasthttpLogger adapts slog to fasthttp's Logger.
type fasthttpLogger struct{ l *slog.Logger }

func (f fasthttpLogger) Printf(format string, args ...any) {
	// fasthttp logs each connection error (bad requests, oversize bodies)
	// that ErrorHandler already answered: debug, so that bad clients
	// cannot flood the log.
	f.l.Debug("fasthttp", "msg", logkey.Quoted(fmt.Sprintf(format, args...)))
}
