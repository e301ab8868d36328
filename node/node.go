package node

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/logkey"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
	"github.com/sluicehq/sluice/node/ui"
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
	// ClientToken is the bearer token of the lease protocol (POST
	// /v1/lease, GET /v1/lease/rules), which gateways use to decide in
	// their own process (docs/gateway.md). It can lease, return and read
	// the rules, never administer. Empty means the protocol is off (404).
	ClientToken string
	// ClientRate bounds the lease ops per second (and their burst) the
	// client token may have this node apply; a request past it is
	// answered 429, nothing applied. Zero means DefaultClientRate.
	ClientRate int
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
	// Upstream, when not nil, is the global tier this node leases the
	// keys of global rules from (scope: global; docs/regions.md): its
	// Manager decides them, /readyz and /metrics show its state.
	Upstream Upstream
	// Now is the clock by which the lease protocol splits a saturated
	// key among regional holders (their credit earns by it). Nil means
	// time.Now; a test whose Store runs on a fake clock passes that.
	Now func() time.Time
	// MetricsHelp are the # HELP texts, by family name, of metrics that
	// /metrics writes and packages the node does not import register
	// (each such package's MetricsHelp: lua's, node/rls', node/upstream's;
	// see metrics.go). Nil means none: those families keep bare # HELP
	// lines.
	MetricsHelp []map[string]string
}

// Upstream is what a Node needs of the global tier (node/upstream's
// Upstream implements it).
type Upstream interface {
	// Manager decides the keys of global rules.
	Manager() *lease.Manager
	// Demand is told of every check of a global rule decided here.
	Demand(ckey string)
	// State says whether the global tier answers (reachable) and, when
	// err is not nil, what is wrong: why it does not answer, or, while it
	// does, a global rule of the installed set that it has otherwise (it
	// changed since the set was checked).
	State() (reachable bool, err error)
	// CheckRules says why s cannot be installed: a global rule of s that
	// the global tier does not have, or has otherwise (a *rules.Error
	// naming the rule). Every source of rules is checked before its set
	// is installed.
	CheckRules(s *rules.Set) error
	// WriteMetrics writes its metrics (sluice_upstream_*) to /metrics.
	WriteMetrics(w io.Writer)
	// URLs are the global tier's nodes, RTT the last measured round trip
	// to it, and Lent what it lends this node of each global rule's keys
	// (the tokens held, at most), by rule: /v1/stats shows them.
	URLs() []string
	RTT() time.Duration
	Lent() map[string]int64
}

// CheckRules says why s cannot be installed on this node (see
// Upstream.CheckRules); nil without an upstream. A rule file reload
// calls it before SetRules.
func (n *Node) CheckRules(s *rules.Set) error {
	if n.cfg.Upstream == nil {
		return nil
	}
	return n.cfg.Upstream.CheckRules(s)
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

	// eng decides every check (node/engine): it holds the rule table
	// (with the HTTP headers of each rule, ruleHeaders) and the routes.
	eng *engine.Engine

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
	// gw is the lease protocol's state (gateway.go); nil without
	// Config.ClientToken.
	gw *gateway
	// tlsFail counts and logs failed TLS handshakes (tlslog.go).
	tlsFail *tlsFailLog
}

// New returns a Node that decides with mgr. It serves nothing until Serve,
// and answers /readyz with 503 until the first SetRules.
func New(cfg Config, mgr *lease.Manager) *Node {
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, mgr: mgr, log: cfg.Logger,
		adminToken: tokenDigest(cfg.AdminToken), metricsToken: tokenDigest(cfg.MetricsToken),
		adminHosts: hostSet(cfg.AdminHosts)}
	n.met = newNodeMetrics(n)
	name := cfg.Name
	if name == "" {
		name = singleName
	}
	ecfg := engine.Config{Manager: mgr, Metrics: n.met.set, Self: name, RuleData: newRuleHeaders}
	if cfg.Upstream != nil {
		ecfg.Global, ecfg.Demand = cfg.Upstream.Manager(), cfg.Upstream.Demand
	}
	n.eng = engine.New(ecfg)
	n.stat = newStatsState(n)
	n.tlsFail = newTLSFailLog(n, n.met.set)
	n.gw = newGateway(cfg)
	n.ui = ui.New()
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
	n.eng.SetRules(s, n.reload.rls)
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

// Engine returns the engine that decides the node's checks (for front
// ends other than HTTP, such as node/rls, and tests).
func (n *Node) Engine() *engine.Engine { return n.eng }

// Decide decides the requests of b with the node's engine
// (engine.Engine.Decide); with SetRLSRules it makes a Node the engine of
// node/rls.
func (n *Node) Decide(ctx context.Context, b *engine.Batch) { n.eng.Decide(ctx, b) }

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
