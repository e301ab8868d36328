package node

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/member"
)

// Live per-rule figures for the dashboard: GET /v1/stats (admin).
//
// A statsRing keeps, for every rule, the checks of each decision
// (allowed, denied, shadow_denied, unavailable, degraded, local_fallback)
// in StatsBuckets buckets of StatsBucket (30 × 10 s: the last five
// minutes). It is fed by
// sampling the per-rule counters the check path already keeps
// (sluice_checks_total): the node's sampler goroutine reads them every
// statsSampleEvery, and every /v1/stats request reads them once more so
// that the current bucket is up to date. The check path does no work for
// it. The counts between two samples go to the bucket of the later
// sample, so a bucket may hold up to statsSampleEvery of its neighbour's
// checks. Buckets are aligned to multiples of StatsBucket since the Unix
// epoch, so that nodes' buckets line up when /v1/stats sums a cluster.
//
// Answer (a single node, or ?scope=node):
//
//	{"self":"node-a","bucket_ms":10000,"start_ms":1764000000000,"now_ms":1764000295123,
//	 "rules":[{"rule":"per-key","allowed":[30 counts],"denied":[...],"shadow_denied":[...],
//	           "unavailable":[...],"degraded":[...],"local_fallback":[...]}],
//	 "store":{"breaker":"closed","active_keys":12,...},
//	 "nodes":[{"name":"node-a","ok":true,"store":{...}}]}
//
// start_ms is the start of the oldest bucket; bucket i covers
// [start_ms + i×bucket_ms, start_ms + (i+1)×bucket_ms), the last one is
// the current, partial bucket. Rules are sorted by name and include every
// rule of the current set plus any rule with counts in the window (a rule
// deleted a minute ago still shows its history). In a cluster (the
// default scope) the node also asks every live peer for its ?scope=node
// answer, at once, waiting at most StatsFanout (a member that is dead or
// does not answer this node's pings is not asked but listed with its
// error, and makes the answer partial), passing on the caller's
// Authorization header (only in a cluster with a cluster key: without one
// anyone may join and would be sent the admin token, so peers are asked
// without it and answer only if they let this node in without a token);
// "rules" is then the sum over the nodes that
// answered, "nodes" lists each member with its Store state or its error,
// and "partial" is true when one did not answer. Peers are asked over
// HTTPS when the cluster's forwarding does (ClusterConfig.Forward.TLS:
// sluiced -tls-cert), with the same TLS configuration.

const (
	// StatsBucket is the width of one /v1/stats bucket.
	StatsBucket = 10 * time.Second
	// StatsBuckets is how many buckets /v1/stats keeps (5 minutes).
	StatsBuckets = 30
	// StatsFanout bounds how long a cluster-wide /v1/stats waits for the
	// peers' answers; a peer that is slower is reported as failed.
	StatsFanout = 500 * time.Millisecond
	// statsSampleEvery is how often the sampler reads the counters.
	statsSampleEvery = time.Second
)

// statsStore is the Store part of /v1/stats: the breaker and the lease
// Manager's counters (lease.Stats).
type statsStore struct {
	Breaker           string `json:"breaker"`
	Healthy           bool   `json:"healthy"`
	ActiveKeys        int64  `json:"active_keys"`
	StoreDecisions    int64  `json:"store_decisions"`
	DegradedDecisions int64  `json:"degraded_decisions"`
	LocalDenials      int64  `json:"local_denials"`
	Leases            int64  `json:"leases"`
	Prefetches        int64  `json:"prefetches"`
	AheadRolls        int64  `json:"ahead_rolls"`
	Returns           int64  `json:"returns"`
	TokensLeased      int64  `json:"tokens_leased"`
	TokensReturned    int64  `json:"tokens_returned"`
	// InStore: every check is decided in the Store (the in-memory store,
	// lease.Config.Direct); nothing is leased.
	InStore bool `json:"in_store,omitempty"`
}

func storeOf(s lease.Stats) *statsStore {
	return &statsStore{
		Breaker: s.Breaker.String(), Healthy: s.Breaker == lease.BreakerClosed,
		ActiveKeys: s.ActiveKeys, StoreDecisions: s.StoreDecisions,
		DegradedDecisions: s.DegradedDecisions, LocalDenials: s.LocalDenials,
		Leases: s.Leases, Prefetches: s.Prefetches, AheadRolls: s.AheadRolls, Returns: s.Returns,
		TokensLeased: s.TokensLeased, TokensReturned: s.TokensReturned, InStore: s.Direct,
	}
}

// statsNode is one member's line in "nodes".
type statsNode struct {
	Name     string         `json:"name"`
	OK       bool           `json:"ok"`
	Error    string         `json:"error,omitempty"`
	Store    *statsStore    `json:"store,omitempty"`
	Upstream *StatsUpstream `json:"upstream,omitempty"`
}

// StatsUpstream is the global tier's state in /v1/stats (a region's node
// with an upstream, docs/regions.md): one node's in "nodes", and in the
// body the cluster's, merged over the nodes that answered.
type StatsUpstream struct {
	// URLs are the global tier's nodes this node leases from.
	URLs []string `json:"urls"`
	// Reachable is whether the global tier answers (merged: every node
	// that answered reaches it); Error what is wrong when it does not, or
	// a global rule that differs from the global tier's (merged: the
	// first node's, prefixed with its name).
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// RTTMS is the last measured round trip to the global tier, in
	// milliseconds (merged: the longest).
	RTTMS float64 `json:"rtt_ms"`
	// Keys is the keys of global rules held; Lent the tokens the global
	// tier lends of each global rule's keys (what the nodes hold of them,
	// at most) by rule (merged: summed).
	Keys int64            `json:"keys"`
	Lent map[string]int64 `json:"lent"`
}

// upstreamStats is u's state as /v1/stats shows it.
func upstreamStats(u Upstream) *StatsUpstream {
	ok, err := u.State()
	out := &StatsUpstream{URLs: u.URLs(), Reachable: ok, RTTMS: float64(u.RTT().Microseconds()) / 1000,
		Lent: map[string]int64{}}
	if err != nil {
		out.Error = err.Error()
	}
	// What the node holds of each global rule, read from its Manager's
	// keys: the keys and the loans agree, and a key dropped without a
	// return call (nothing left to give back) is gone from both.
	for rule, h := range u.Manager().Holdings(ruleOfKey) {
		out.Keys += h.Keys
		out.Lent[rule] = h.Lent
	}
	return out
}

// add merges a peer's upstream state (the peer named name) into s.
func (s *StatsUpstream) add(name string, o *StatsUpstream) {
	if !o.Reachable {
		s.Reachable = false
	}
	if s.Error == "" && o.Error != "" {
		s.Error = name + ": " + o.Error
	}
	s.RTTMS = max(s.RTTMS, o.RTTMS)
	s.Keys += o.Keys
	for r, n := range o.Lent {
		s.Lent[r] += n
	}
	for _, url := range o.URLs {
		if !slices.Contains(s.URLs, url) {
			s.URLs = append(s.URLs, url)
		}
	}
}

// statsBody is the body of GET /v1/stats.
type statsBody struct {
	Self     string      `json:"self"`
	BucketMS int64       `json:"bucket_ms"`
	StartMS  int64       `json:"start_ms"`
	NowMS    int64       `json:"now_ms"`
	Partial  bool        `json:"partial"`
	Rules    []statsRule `json:"rules"`
	Store    *statsStore `json:"store"`
	Nodes    []statsNode `json:"nodes"`
	// Tokens is where each rule's tokens are right now (the Store, the
	// nodes, gateways, regions) and the bound that puts on how far
	// admissions could fall short of the limit (engine.TokenStats),
	// summed over the nodes that answered.
	Tokens map[string]engine.TokenStats `json:"tokens,omitempty"`
	// Gateway is the lease protocol's figures by rule, summed over the
	// nodes that answered; absent when the protocol is off.
	Gateway map[string]engine.LeaseRuleStats `json:"gateway,omitempty"`
	// GatewayHolders lists the holders (gateways and regions' nodes) the
	// nodes lend to by their public ids, the most lent first (at most
	// engine.MaxStatsHolders; GatewayHoldersMore counts the rest).
	GatewayHolders     []engine.LeaseHolder `json:"gateway_holders,omitempty"`
	GatewayHoldersMore int                  `json:"gateway_holders_more,omitempty"`
	// Upstream is the global tier's state (sluiced -upstream), merged
	// over the nodes that answered; absent without an upstream.
	Upstream *StatsUpstream `json:"upstream,omitempty"`
}

// statsState is a Node's stats ring and its sampler goroutine.
type statsState struct {
	n     *Node
	clock atomic.Pointer[func() time.Time] // time.Now; tests set a fake

	// mu protects ring.
	mu   sync.Mutex
	ring *statsRing

	// The sampler runs from the first Serve to Shutdown.
	start, stop sync.Once
	done        chan struct{}
	wg          sync.WaitGroup

	// client asks the peers for their /v1/stats, over HTTPS when the
	// cluster's peers serve it (made at the first fan-out, after
	// EnableCluster).
	clientOnce sync.Once
	client     *fasthttp.Client
	scheme     string // "http://" or "https://"
}

func newStatsState(n *Node) *statsState {
	s := &statsState{
		n: n, ring: newStatsRing(StatsBucket, StatsBuckets),
		done: make(chan struct{}),
	}
	s.setClock(time.Now)
	return s
}

// peerClient returns the client of the fan-out and the peers' scheme.
func (s *statsState) peerClient() (*fasthttp.Client, string) {
	s.clientOnce.Do(func() {
		s.client = &fasthttp.Client{
			Name: "sluice-stats", NoDefaultUserAgentHeader: true,
			MaxConnsPerHost: 4, ReadTimeout: StatsFanout, WriteTimeout: StatsFanout,
		}
		s.scheme = "http://"
		if c := s.n.cl; c != nil && c.peerTLS != nil {
			s.client.TLSConfig = c.peerTLS
			s.scheme = "https://"
		}
	})
	return s.client, s.scheme
}

// setClock makes the ring read the time from now (tests: a fake clock).
func (s *statsState) setClock(now func() time.Time) { s.clock.Store(&now) }

func (s *statsState) now() time.Time { return (*s.clock.Load())() }

// sample reads every current rule's counters into the ring at now and
// returns the current rules' names.
func (s *statsState) sample(now time.Time) []string {
	t := s.n.eng.Table()
	if t == nil {
		return nil
	}
	names := make([]string, 0, t.Len())
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, ri := range t.All() {
		s.ring.observe(now, name, counts(ri.Counts()))
		names = append(names, name)
	}
	return names
}

// run starts the sampler goroutine once; Shutdown stops it.
func (s *statsState) run() {
	s.start.Do(func() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			tk := time.NewTicker(statsSampleEvery)
			defer tk.Stop()
			for {
				select {
				case <-s.done:
					return
				case <-tk.C:
					s.sample(s.now())
				}
			}
		}()
	})
}

// close stops the sampler and waits for it; idempotent.
func (s *statsState) close() {
	s.start.Do(func() {}) // a sampler not yet started never will be
	s.stop.Do(func() { close(s.done) })
	s.wg.Wait()
	s.clientOnce.Do(func() {}) // no fan-out after this makes a client
	if s.client != nil {
		s.client.CloseIdleConnections()
	}
}

// local is this node's own answer.
func (s *statsState) local() statsBody {
	now := s.now()
	names := s.sample(now)
	s.mu.Lock()
	start, rows := s.ring.snapshot(now, names)
	s.mu.Unlock()
	st := storeOf(s.n.mgr.Stats())
	self := s.n.selfName()
	body := statsBody{
		Self: self, BucketMS: StatsBucket.Milliseconds(),
		StartMS: start.UnixMilli(), NowMS: now.UnixMilli(),
		Rules: rows, Store: st,
		Nodes: []statsNode{{Name: self, OK: true, Store: st}},
	}
	if u := s.n.cfg.Upstream; u != nil {
		body.Nodes[0].Upstream = upstreamStats(u)
		merged := *body.Nodes[0].Upstream
		merged.URLs = slices.Clone(merged.URLs)
		merged.Lent = maps.Clone(merged.Lent)
		body.Upstream = &merged
	}
	return body
}

// selfName is the node's name as /v1/members shows it.
func (n *Node) selfName() string {
	if n.cl != nil {
		return n.cl.self
	}
	if n.cfg.Name != "" {
		return n.cfg.Name
	}
	return singleName
}

// statsPeers returns the live members other than self that answer, with
// their HTTP addresses, and a line for each member of the cluster that is
// dead (failed without leaving) or alive but not answering this node's
// pings, which are not asked; nil on a single node.
func (n *Node) statsPeers() (ask []member.Member, missing []statsNode) {
	if n.cl == nil {
		return nil, nil
	}
	b := n.cl.membership.Load()
	if b == nil {
		return nil, nil
	}
	reach := n.cl.tellsReach()
	for _, m := range b.m.View() {
		switch {
		case m.Name == n.cl.self || m.State == member.StateLeft:
		case m.State == member.StateDead:
			missing = append(missing, statsNode{Name: m.Name, Error: "dead: failed without leaving (or cut off from this node)"})
		case reach && !m.Answering:
			missing = append(missing, statsNode{Name: m.Name, Error: "not answering this node's pings: cut off from it, at least one way"})
		default:
			ask = append(ask, m)
		}
	}
	return ask, missing
}

// stats answers GET /v1/stats[?scope=node|cluster].
func (n *Node) stats(ctx *fasthttp.RequestCtx) {
	scope := string(ctx.QueryArgs().Peek("scope"))
	switch scope {
	case "", "cluster", "node":
	default:
		n.writeError(ctx, fieldError("scope", "must be node or cluster"))
		return
	}
	body := n.stat.local()
	body.Tokens = n.eng.TokenStats()
	if n.gw != nil {
		body.Gateway = n.eng.LeaseStats()
		body.GatewayHolders, body.GatewayHoldersMore = n.eng.LeaseHolders(body.Self)
	}
	if scope != "node" {
		peers, missing := n.statsPeers()
		if len(missing) > 0 {
			body.Partial = true
			body.Nodes = append(body.Nodes, missing...)
		}
		if len(peers) > 0 {
			// The caller's token goes only to members the cluster key
			// authenticated: in an insecure cluster anyone may join.
			var auth []byte
			if n.cl.keyed {
				auth = slices.Clone(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
			}
			c, cancel := context.WithTimeout(ctx, StatsFanout) // ends too at Shutdown
			n.stat.merge(c, &body, peers, auth)
			cancel()
		}
	}
	b, _ := json.Marshal(body)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.Response.Header.Set(fasthttp.HeaderCacheControl, "no-store")
	ctx.SetBody(b)
}

// merge asks every peer for its ?scope=node answer at once, within ctx's
// deadline, and adds the answers to body.
func (s *statsState) merge(ctx context.Context, body *statsBody, peers []member.Member, auth []byte) {
	type answer struct {
		b   statsBody
		err error
	}
	answers := make([]answer, len(peers))
	var wg sync.WaitGroup
	for i, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i].b, answers[i].err = s.fetch(ctx, p.HTTPAddr, auth)
		}()
	}
	wg.Wait()
	if u := body.Upstream; u != nil && u.Error != "" {
		u.Error = body.Self + ": " + u.Error // merged: each error names its node
	}
	rows := make(map[string]*statsRule, len(body.Rules))
	for i := range body.Rules {
		r := body.Rules[i]
		rows[r.Rule] = &r
	}
	for i, p := range peers {
		a := &answers[i]
		if a.err != nil {
			body.Partial = true
			body.Nodes = append(body.Nodes, statsNode{Name: p.Name, Error: a.err.Error()})
			continue
		}
		body.Nodes = append(body.Nodes, statsNode{Name: p.Name, OK: true, Store: a.b.Store, Upstream: a.b.Upstream})
		if u := a.b.Upstream; u != nil {
			if u.Lent == nil {
				u.Lent = map[string]int64{}
			}
			if body.Upstream == nil {
				body.Upstream = &StatsUpstream{Reachable: true, Lent: map[string]int64{}}
			}
			body.Upstream.add(p.Name, u)
		}
		mergeLeaseStats(body, &a.b)
		if len(a.b.GatewayHolders) > 0 {
			for _, h := range a.b.GatewayHolders {
				if h.Node == "" {
					h.Node = p.Name
				}
				body.GatewayHolders = append(body.GatewayHolders, h)
			}
			var more int
			body.GatewayHolders, more = engine.TopHolders(body.GatewayHolders)
			body.GatewayHoldersMore += a.b.GatewayHoldersMore + more
		}
		if a.b.BucketMS != body.BucketMS {
			continue // another version's buckets: shown as a member, not summed
		}
		shift := int((a.b.StartMS - body.StartMS) / body.BucketMS)
		for j := range a.b.Rules {
			o := &a.b.Rules[j]
			row := rows[o.Rule]
			if row == nil {
				nr := newStatsRule(o.Rule, StatsBuckets)
				row = &nr
				rows[o.Rule] = row
			}
			row.add(o, shift)
		}
	}
	body.Rules = body.Rules[:0]
	for _, r := range rows {
		body.Rules = append(body.Rules, *r)
	}
	sort.Slice(body.Rules, func(i, j int) bool { return body.Rules[i].Rule < body.Rules[j].Rule })
}

// errStatsClosed means the node is shutting down.
var errStatsClosed = errors.New("node shutting down")

// errNoHTTPAddr means a member did not announce its HTTP address.
var errNoHTTPAddr = errors.New("no HTTP address announced")

// errStatsPeer means a peer answered /v1/stats with an error status.
type errStatsPeer struct{ status int }

func (e errStatsPeer) Error() string {
	return "answered " + fasthttp.StatusMessage(e.status)
}

// fetch gets addr's ?scope=node answer.
func (s *statsState) fetch(ctx context.Context, addr string, auth []byte) (statsBody, error) {
	var out statsBody
	if addr == "" {
		return out, errNoHTTPAddr
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	client, scheme := s.peerClient()
	if client == nil {
		return out, errStatsClosed
	}
	req.SetRequestURI(scheme + addr + "/v1/stats?scope=node")
	req.Header.SetMethod(fasthttp.MethodGet)
	if len(auth) > 0 {
		req.Header.SetBytesV(fasthttp.HeaderAuthorization, auth)
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(StatsFanout)
	}
	if err := client.DoDeadline(req, resp, dl); err != nil {
		return out, err
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		return out, errStatsPeer{resp.StatusCode()}
	}
	if err := json.Unmarshal(resp.Body(), &out); err != nil {
		return out, err
	}
	return out, nil
}
