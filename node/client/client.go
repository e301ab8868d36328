package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/shard"
)

var (
	// ErrNoNodes means no node answered: every node tried failed at the
	// transport level or was marked down.
	ErrNoNodes = errors.New("no sluice node reachable")
	// ErrUnavailable means a node answered 503: it has no rules loaded yet,
	// or a rule that fails closed cannot reach its Store.
	ErrUnavailable = errors.New("sluice unavailable")
	// ErrClosed means the Client was closed.
	ErrClosed = errors.New("client closed")
	// ErrTokenRefused means a node answered 401 or 403: it is reachable,
	// and refused the token sent (or wanted one). No node of the cluster
	// takes it: check the token, not the network.
	ErrTokenRefused = errors.New("the node refused the token")
)

// StatusError is an HTTP answer that is neither a decision nor a 400 or
// 503: 404, 405, 413, 500...
type StatusError struct {
	Node   string // the node's HTTP address
	Status int
	Msg    string // the body's "error", if any
}

func (e *StatusError) Error() string {
	return "sluice node " + e.Node + " answered " + strconv.Itoa(e.Status) + ": " + e.Msg
}

// Is makes a 401 or 403 answer ErrTokenRefused.
func (e *StatusError) Is(target error) bool {
	return target == ErrTokenRefused && tokenStatus(e.Status)
}

// tokenStatus reports whether status says the token was refused.
func tokenStatus(status int) bool {
	return status == fasthttp.StatusUnauthorized || status == fasthttp.StatusForbidden
}

// Where to look when a node refuses the token: the Client's admin token,
// or the Limiter's client token (Config.tokenHint).
const (
	adminTokenHint  = "the admin token (Config.AdminToken: the nodes' -admin-token, SLUICE_ADMIN_TOKEN)"
	clientTokenHint = "the client token (LimiterConfig.Token: the nodes' -client-token, SLUICE_CLIENT_TOKEN)"
)

// refused returns, when one of errs is a node's 401 or 403, the error
// that says so (ErrTokenRefused, the status, the node, hint: which token
// to check), else nil: a node that refuses the token is reachable, and
// another node would refuse it too.
func refused(errs []error, hint string) error {
	for _, err := range errs {
		var se *StatusError
		if errors.As(err, &se) && tokenStatus(se.Status) {
			return fmt.Errorf("%w (%d from %s): check %s; the node says: %s", ErrTokenRefused, se.Status, se.Node, hint, se.Msg)
		}
	}
	return nil
}

// Client sends checks to a Sluice cluster, each to the owner of its key.
type Client struct {
	cfg Config

	view atomic.Pointer[view]
	rr   atomic.Uint32 // round-robin cursor for "any node"

	kick chan struct{} // asks the refresher for an early refresh
	stop chan struct{}
	done chan struct{}
	once sync.Once

	// mu serialises Refresh (the fetch and the swap of the view).
	mu sync.Mutex

	calls sync.Pool // of *call
	bat   batching
	// plain, when not nil, warns of the token sent over plain HTTP.
	plain *plainWarner
}

// node is one node the client talks to.
type node struct {
	name string
	addr string
	hc   *fasthttp.HostClient
	// downUntil is the UnixNano until which the node gets no requests;
	// 0 when up (so the healthy path reads no clock).
	downUntil atomic.Int64
	// batch queues this node's checks when Config.BatchWindow > 0.
	batch batcher
	// lease is the Limiter's lease requests to this node (leasestore.go).
	lease leaseQueue
}

func (n *node) up() bool {
	d := n.downUntil.Load()
	return d == 0 || time.Now().UnixNano() >= d
}

// view is an immutable snapshot of the cluster as the client sees it.
type view struct {
	members []Member
	ring    *shard.Ring      // nil: no member list, route anywhere
	byName  map[string]*node // ring members with an HTTP address
	nodes   []*node          // every routable node, sorted by name
}

// New returns a Client that has fetched the member list from the first of
// cfg.Nodes that answers (each asked within cfg.Timeout). A node that
// answers /v1/members with 404 is a node without clustering; the nodes
// given are then used as they are. It fails when none answers.
func New(cfg Config) (*Client, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:  cfg,
		kick: make(chan struct{}, 1),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	c.calls.New = func() any { return new(call) }
	if cfg.AdminToken != "" && cfg.TLS == nil {
		c.plain = &plainWarner{log: cfg.Logger, token: cfg.tokenHint}
	}
	c.view.Store(&view{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(cfg.Nodes)+1)*cfg.Timeout)
	defer cancel()
	if err := c.Refresh(ctx); err != nil {
		c.closeNodes(c.view.Load(), nil)
		return nil, err
	}
	go c.refresher()
	return c, nil
}

// Close stops the background refresh and closes idle connections. It is
// idempotent; checks after Close fail with ErrClosed.
func (c *Client) Close() error {
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		c.closeBatching()
		c.mu.Lock()
		c.closeNodes(c.view.Load(), nil)
		c.mu.Unlock()
	})
	return nil
}

func (c *Client) closed() bool {
	select {
	case <-c.stop:
		return true
	default:
		return false
	}
}

// Members returns the member list last fetched (a copy), or for a node
// without clustering one entry per seed named by its address.
func (c *Client) Members() []Member {
	return append([]Member(nil), c.view.Load().members...)
}

// refresher refreshes the member list every RefreshInterval and when
// kicked after a failure (at most once per 100ms).
func (c *Client) refresher() {
	defer close(c.done)
	t := time.NewTicker(c.cfg.RefreshInterval)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
		case <-c.kick:
			select { // coalesce bursts of failures
			case <-c.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.cfg.Timeout*time.Duration(c.cfg.MaxAttempts))
		_ = c.Refresh(ctx) // on failure the old view stays; the next tick tries again
		cancel()
	}
}

// kickRefresh asks for an early refresh without blocking.
func (c *Client) kickRefresh() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// Refresh fetches the member list now: from the live nodes of the current
// view first, then from the seeds, until one answers within ctx. On
// failure the current view is kept.
func (c *Client) Refresh(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed() {
		return ErrClosed
	}
	old := c.view.Load()
	var addrs []string
	for _, n := range old.nodes {
		if n.up() {
			addrs = append(addrs, n.addr)
		}
	}
	addrs = append(addrs, c.cfg.Nodes...)
	var errs []error
	tried := make(map[string]bool, len(addrs))
	for _, addr := range addrs {
		if tried[addr] {
			continue
		}
		tried[addr] = true
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		mr, standalone, err := c.fetchMembers(ctx, old, addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var nv *view
		if standalone {
			nv = c.seedView(old)
		} else {
			nv = c.memberView(old, mr)
		}
		c.view.Store(nv)
		c.closeNodes(old, nv)
		return nil
	}
	if err := refused(errs, c.cfg.tokenHint); err != nil {
		return fmt.Errorf("cannot fetch the member list: %w", err)
	}
	return fmt.Errorf("cannot fetch the member list: %w: %w", ErrNoNodes, errors.Join(errs...))
}

// fetchMembers asks addr for /v1/members; standalone reports a 404.
func (c *Client) fetchMembers(ctx context.Context, old *view, addr string) (mr MembersResponse, standalone bool, err error) {
	var hc *fasthttp.HostClient
	for _, n := range old.nodes {
		if n.addr == addr {
			hc = n.hc
			break
		}
	}
	if hc == nil { // a seed not in the view: a connection for this call only
		hc = c.hostClient(addr)
		defer hc.CloseIdleConnections()
	}
	req := fasthttp.AcquireRequest()
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(c.scheme() + "://" + addr + "/v1/members")
	req.Header.SetMethod(fasthttp.MethodGet)
	if c.cfg.AdminToken != "" {
		req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+c.cfg.AdminToken)
	}
	deadline := time.Now().Add(c.cfg.Timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := hc.DoDeadline(req, resp, deadline); err != nil {
		return mr, false, fmt.Errorf("%s: %w", addr, err)
	}
	switch resp.StatusCode() {
	case fasthttp.StatusOK:
	case fasthttp.StatusNotFound:
		return mr, true, nil
	default:
		return mr, false, &StatusError{Node: addr, Status: resp.StatusCode(), Msg: errorMsg(resp.Body())}
	}
	mr, err = ParseMembers(resp.Body())
	if err != nil {
		return mr, false, fmt.Errorf("%s: %w", addr, err)
	}
	return mr, false, nil
}

// memberView builds the view of a member list, reusing old's nodes (their
// connections and down marks) where name and address are unchanged.
func (c *Client) memberView(old *view, mr MembersResponse) *view {
	v := &view{members: mr.Members, byName: make(map[string]*node, len(mr.Members))}
	names := make([]string, 0, len(mr.Members))
	for i := range mr.Members {
		m := &mr.Members[i]
		if !m.live() {
			continue
		}
		names = append(names, m.Name)
		if m.HTTPAddr == "" {
			continue // owns keys but cannot be reached: they go anywhere
		}
		n := old.find(m.Name, m.HTTPAddr)
		if n == nil {
			n = &node{name: m.Name, addr: m.HTTPAddr, hc: c.hostClient(m.HTTPAddr)}
		}
		v.byName[m.Name] = n
		v.nodes = append(v.nodes, n)
	}
	v.ring = shard.NewRing(names, mr.Vnodes)
	if len(v.nodes) == 0 {
		// No member has an HTTP address (yet): keep talking to the seeds,
		// which forward.
		v.nodes = c.seedView(old).nodes
	}
	return v
}

// seedView is the view of nodes without clustering: the seeds, named by
// their addresses, with no ring.
func (c *Client) seedView(old *view) *view {
	v := &view{}
	for _, s := range c.cfg.Nodes {
		if v.find(s, s) != nil {
			continue
		}
		n := old.find(s, s)
		if n == nil {
			n = &node{name: s, addr: s, hc: c.hostClient(s)}
		}
		v.nodes = append(v.nodes, n)
		v.members = append(v.members, Member{Name: s, HTTPAddr: s, State: "alive"})
	}
	return v
}

func (v *view) find(name, addr string) *node {
	for _, n := range v.nodes {
		if n.name == name && n.addr == addr {
			return n
		}
	}
	return nil
}

// closeNodes closes the idle connections of old's nodes that nv (nil:
// none) no longer has.
func (c *Client) closeNodes(old, nv *view) {
	for _, n := range old.nodes {
		if nv == nil || nv.find(n.name, n.addr) != n {
			n.hc.CloseIdleConnections()
		}
	}
}

func (c *Client) hostClient(addr string) *fasthttp.HostClient {
	if c.plain != nil {
		c.plain.check(addr)
	}
	return &fasthttp.HostClient{
		Addr:                          addr,
		Name:                          "sluice-client",
		MaxConns:                      c.cfg.MaxConnsPerHost,
		ReadTimeout:                   c.cfg.Timeout,
		WriteTimeout:                  c.cfg.Timeout,
		MaxIdleConnDuration:           60 * time.Second,
		MaxResponseBodySize:           maxMembersBody,
		DisablePathNormalizing:        true,
		DisableHeaderNamesNormalizing: true,
		NoDefaultUserAgentHeader:      true,
		RetryIfErr:                    retryIfErr,
		IsTLS:                         c.cfg.TLS != nil,
		TLSConfig:                     c.cfg.TLS,
	}
}

// scheme is the nodes' URL scheme.
func (c *Client) scheme() string {
	if c.cfg.TLS != nil {
		return "https"
	}
	return "http"
}

// retryIfErr lets fasthttp resend a request, once, on a fresh connection
// when a kept-alive one turns out to have been closed by the node (idle
// timeout, restart): the node never read it. Other errors are left to
// the Client's own fallback to other nodes.
func retryIfErr(_ *fasthttp.Request, attempts int, err error) (resetTimeout, retry bool) {
	return false, attempts < 2 && (errors.Is(err, io.EOF) || errors.Is(err, fasthttp.ErrConnectionClosed))
}

// owner returns the node that owns ckey, or nil when it is unknown,
// unreachable or down.
func (v *view) owner(ckey string) *node {
	if v.ring == nil {
		return nil
	}
	n := v.byName[v.ring.Owner(ckey)]
	if n == nil || !n.up() {
		return nil
	}
	return n
}

// any returns a live node, round-robin, that is not in skip; when every
// node is down it returns one not in skip anyway (a dead guess beats no
// answer). nil when every node is in skip.
func (c *Client) any(v *view, skip []*node) *node {
	k := len(v.nodes)
	if k == 0 {
		return nil
	}
	start := int(c.rr.Add(1) % uint32(k))
	var fallback *node
	for i := range k {
		n := v.nodes[(start+i)%k]
		if contains(skip, n) {
			continue
		}
		if n.up() {
			return n
		}
		if fallback == nil {
			fallback = n
		}
	}
	return fallback
}

func contains(ns []*node, n *node) bool {
	for _, x := range ns {
		if x == n {
			return true
		}
	}
	return false
}

// markDown takes n out of routing for DownBackoff and asks for a refresh.
func (c *Client) markDown(n *node) {
	n.downUntil.Store(time.Now().Add(c.cfg.DownBackoff).UnixNano())
	c.kickRefresh()
}
