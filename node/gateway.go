package node

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
)

// The lease protocol: gateways (node/client's Limiter) lease tokens as
// holders of the same Store the nodes lease from (see docs/gateway.md).
const (
	// LeasePath is the lease protocol's endpoint (POST).
	LeasePath = "/v1/lease"
	// LeaseRulesPath serves the rules a gateway decides with (GET).
	LeaseRulesPath = "/v1/lease/rules"
	// LeaseHopHeader marks a lease request a node forwarded to the owner
	// of its keys: the owner serves it with its Store and forwards
	// nothing further (so that nodes whose rings disagree for a moment
	// cannot bounce a request between them).
	LeaseHopHeader = "X-Sluice-Lease-Hop"
	// DefaultClientRate is the lease requests per second one client token
	// may send to one node (and its burst), unless Config.ClientRate says
	// otherwise: a Limiter sends about one request per node per flush
	// (a few milliseconds) when busy, so this serves a few dozen gateway
	// processes.
	DefaultClientRate = 5000
)

// ErrLeaseOff answers the lease protocol on a node without a client token.
var ErrLeaseOff = errors.New("not found: the lease protocol is off (start sluiced with -client-token or SLUICE_CLIENT_TOKEN)")

// errClientToken answers a lease request with a wrong client token.
var errClientToken = errors.New("forbidden: not the client token")

// gateway is the lease protocol's state; nil without Config.ClientToken.
type gateway struct {
	token *[sha256.Size]byte
	// ns prefixes every holder id: "gw." and a short hash of the client
	// token, so that a gateway's holder can never name a node's (a node's
	// holder ids never start with "gw.").
	ns string

	flood       *lease.MemoryStore
	floodPolicy lease.Policy

	client *fasthttp.Client
	book   loanBook
	// split shares saturated keys among regional holders by demand
	// (regionsplit.go).
	split *regionSplit

	// rules caches the /v1/lease/rules body of the last table served.
	rules atomic.Pointer[leaseRules]

	set    *metrics.Set
	mu     sync.Mutex
	byRule map[string]*gatewayRuleMetrics
}

type leaseRules struct {
	table *engine.Table
	body  []byte
	etag  string
}

// gatewayRuleMetrics are one rule's gateway counters.
type gatewayRuleMetrics struct {
	name     string
	granted  *metrics.Counter // tokens granted to gateways
	returned *metrics.Counter // tokens gateways returned
	spent    *metrics.Counter // tokens gateways reported spent (SpentBefore)
	lent     atomic.Int64     // tokens lent to gateways, not yet reported (loanBook)
}

func newGateway(cfg Config, set *metrics.Set) *gateway {
	if cfg.ClientToken == "" {
		return nil
	}
	d := sha256.Sum256([]byte(cfg.ClientToken))
	rate := cfg.ClientRate
	if rate <= 0 {
		rate = DefaultClientRate
	}
	g := &gateway{
		token: &d,
		ns:    "gw." + hex.EncodeToString(d[:4]) + ".",
		// One key, never expired: no janitor goroutine to stop.
		flood:       lease.NewMemoryStore(lease.MemoryStoreConfig{SweepInterval: -1}),
		floodPolicy: lease.Policy{Algorithm: lease.TokenBucket, Limit: int64(rate), Period: time.Second},
		client: &fasthttp.Client{
			ReadTimeout: time.Second, WriteTimeout: time.Second,
			MaxIdleConnDuration: 30 * time.Second, NoDefaultUserAgentHeader: true,
		},
		set:    set,
		byRule: map[string]*gatewayRuleMetrics{},
		split:  newRegionSplit(cfg.Now),
	}
	g.book.m = map[string]loanEntry{}
	return g
}

// ruleMetrics returns (creating) rule's gateway counters.
func (g *gateway) ruleMetrics(rule string) *gatewayRuleMetrics {
	g.mu.Lock()
	defer g.mu.Unlock()
	m := g.byRule[rule]
	if m == nil {
		l := `{rule="` + rule + `"}` // rule names are [A-Za-z0-9_.-]
		m = &gatewayRuleMetrics{
			name:     rule,
			granted:  g.set.GetOrCreateCounter("sluice_gateway_tokens_granted_total" + l),
			returned: g.set.GetOrCreateCounter("sluice_gateway_tokens_returned_total" + l),
			spent:    g.set.GetOrCreateCounter("sluice_gateway_decisions_reported_total" + l),
		}
		g.set.GetOrCreateGauge("sluice_gateway_tokens_lent"+l, func() float64 {
			g.book.sweep(time.Now(), g)
			return float64(m.lent.Load())
		})
		g.byRule[rule] = m
	}
	return m
}

// GatewayRuleStats is one rule's gateway figures in /v1/stats.
type GatewayRuleStats struct {
	// Lent is the tokens lent to gateways and not yet reported spent or
	// returned (nor expired).
	Lent int64 `json:"lent"`
	// Granted, Returned and Reported are totals since the node started:
	// tokens granted to gateways, returned by them, and reported spent
	// (the decisions gateways made with them).
	Granted  uint64 `json:"granted"`
	Returned uint64 `json:"returned"`
	Reported uint64 `json:"reported"`
}

// stats returns the gateway figures by rule.
func (g *gateway) stats() map[string]GatewayRuleStats {
	g.book.sweep(time.Now(), g)
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make(map[string]GatewayRuleStats, len(g.byRule))
	for name, m := range g.byRule {
		out[name] = GatewayRuleStats{Lent: m.lent.Load(), Granted: m.granted.Get(), Returned: m.returned.Get(), Reported: m.spent.Get()}
	}
	return out
}

// GatewayHolderStats is one gateway holder's loans from a node, in
// /v1/stats.
type GatewayHolderStats struct {
	// Holder is the id the gateway sends (client.Limiter.Holder); Node
	// the node that lends to it.
	Holder string `json:"holder"`
	Node   string `json:"node"`
	// Lent is what the Store lends the holder as of its last lease call
	// of each key (not yet reported spent, returned, nor expired), in
	// total and by rule; Keys how many keys it holds.
	Lent  int64            `json:"lent"`
	Rules map[string]int64 `json:"rules"`
	Keys  int              `json:"keys"`
	// UntilMS is when its last loan ends unless renewed (Unix ms).
	UntilMS int64 `json:"until_ms"`
}

// MaxStatsHolders bounds the holders /v1/stats lists (the most lent
// first); the rest are counted in gateway_holders_more.
const MaxStatsHolders = 100

// holders lists the holders this node lends to, the most lent first,
// at most MaxStatsHolders, and how many more there are.
func (g *gateway) holders(node string) ([]GatewayHolderStats, int) {
	now := time.Now()
	g.book.sweep(now, g)
	by := map[string]*GatewayHolderStats{}
	g.book.mu.Lock()
	for k, e := range g.book.m {
		if now.After(e.until) {
			continue
		}
		holder, _, _ := strings.Cut(k, "\x00")
		h := by[holder]
		if h == nil {
			h = &GatewayHolderStats{Holder: strings.TrimPrefix(holder, g.ns), Node: node, Rules: map[string]int64{}}
			by[holder] = h
		}
		h.Lent += e.lent
		h.Rules[e.rule.name] += e.lent
		h.Keys++
		h.UntilMS = max(h.UntilMS, e.until.UnixMilli())
	}
	g.book.mu.Unlock()
	out := make([]GatewayHolderStats, 0, len(by))
	for _, h := range by {
		out = append(out, *h)
	}
	return topHolders(out)
}

// topHolders sorts hs, the most lent first, and keeps MaxStatsHolders.
func topHolders(hs []GatewayHolderStats) ([]GatewayHolderStats, int) {
	slices.SortFunc(hs, func(a, b GatewayHolderStats) int {
		return cmp.Or(cmp.Compare(b.Lent, a.Lent), cmp.Compare(a.Holder, b.Holder), cmp.Compare(a.Node, b.Node))
	})
	if len(hs) > MaxStatsHolders {
		return hs[:MaxStatsHolders], len(hs) - MaxStatsHolders
	}
	return hs, 0
}

// loanBook tracks, per holder and counter key, what the Store said it
// lends the holder (Grant.Lent) until the loan's TTL: the sum by rule is
// the tokens lent to gateways and not yet reported. It is bounded
// (maxLoanBook entries; loans beyond it go uncounted).
type loanBook struct {
	mu   sync.Mutex
	m    map[string]loanEntry // holder + "\x00" + counter key
	next time.Time            // next sweep
}

type loanEntry struct {
	rule  *gatewayRuleMetrics
	lent  int64
	until time.Time
}

const maxLoanBook = 1 << 20

func (b *loanBook) set(holder, ckey string, rm *gatewayRuleMetrics, lent int64, until time.Time) {
	k := holder + "\x00" + ckey
	b.mu.Lock()
	defer b.mu.Unlock()
	old, had := b.m[k]
	if had {
		old.rule.lent.Add(-old.lent)
	}
	if lent <= 0 {
		delete(b.m, k)
		return
	}
	if !had && len(b.m) >= maxLoanBook {
		return
	}
	b.m[k] = loanEntry{rule: rm, lent: lent, until: until}
	rm.lent.Add(lent)
}

// sweep drops the loans whose TTL ended (at most once a second).
func (b *loanBook) sweep(now time.Time, _ *gateway) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Before(b.next) {
		return
	}
	b.next = now.Add(time.Second)
	for k, e := range b.m {
		if now.After(e.until) {
			e.rule.lent.Add(-e.lent)
			delete(b.m, k)
		}
	}
}

// leaseAuth checks the client token; false means answered.
func (n *Node) leaseAuth(ctx *fasthttp.RequestCtx) bool {
	g := n.gw
	if g == nil {
		writeStatus(ctx, fasthttp.StatusNotFound, ErrLeaseOff)
		return false
	}
	switch err := bearerErr(ctx, g.token); {
	case err == nil:
		return true
	case errors.Is(err, ErrUnauthorized):
		ctx.Response.Header.Set(fasthttp.HeaderWWWAuthenticate, `Bearer realm="sluice-client"`)
		writeStatus(ctx, fasthttp.StatusUnauthorized, err)
	default:
		writeStatus(ctx, fasthttp.StatusForbidden, errClientToken)
	}
	return false
}

// writeStatus answers err's message as JSON with status.
func writeStatus(ctx *fasthttp.RequestCtx, status int, err error) {
	ctx.SetStatusCode(status)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(api.AppendError(nil, err.Error(), ""))
}

// clientAllowed reports whether ctx carries the client token.
func (n *Node) clientAllowed(ctx *fasthttp.RequestCtx) bool {
	return n.gw != nil && bearerMatches(ctx, n.gw.token)
}

// leaseFlood rate-limits the lease requests of the client token (Sluice
// limiting its own clients); false means answered 429.
func (n *Node) leaseFlood(ctx *fasthttp.RequestCtx) bool {
	g := n.gw
	gr, err := g.flood.Lease(context.Background(), "client", g.floodPolicy, 1, 1, lease.Lessee{})
	if err != nil || gr.Granted > 0 {
		return true
	}
	secs := int64((gr.Wait + time.Second - 1) / time.Second)
	ctx.Response.Header.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(api.AppendError(nil, "too many lease requests for this client token", ""))
	return false
}

// leaseOp is one resolved op of a lease request.
type leaseOp struct {
	op   *api.LeaseOp
	ckey string
	p    lease.Policy
	rm   *gatewayRuleMetrics
	peer string // the owner's address; "" decides here
	// region: the holder is a region's node (LeaseRequest.Region), split
	// by demand rather than bound by gateway_share (regionsplit.go).
	region bool
	share  float64 // the rule's gateway_share
}

// lease serves POST /v1/lease.
func (n *Node) lease(ctx *fasthttp.RequestCtx) {
	if !n.leaseAuth(ctx) || !n.leaseFlood(ctx) {
		return
	}
	g := n.gw
	var req api.LeaseRequest
	if err := api.DecodeLease(ctx.PostBody(), &req); err != nil {
		n.writeError(ctx, err)
		return
	}
	t := n.eng.Table()
	if t == nil {
		n.writeError(ctx, ErrNotReady)
		return
	}
	hop := len(ctx.Request.Header.Peek(LeaseHopHeader)) > 0
	routes := n.eng.Routes()
	ops := make([]leaseOp, len(req.Ops))
	// Validate every op before applying any.
	for i := range req.Ops {
		op := &req.Ops[i]
		r := t.Get(op.Rule)
		if r == nil {
			n.writeError(ctx, fieldError("ops["+strconv.Itoa(i)+"].rule", "unknown rule "+strconv.Quote(op.Rule)))
			return
		}
		if msg := engine.KeyProblem(op.Key); msg != "" {
			n.writeError(ctx, fieldError("ops["+strconv.Itoa(i)+"].key", msg))
			return
		}
		p := r.Rule().PolicyFor(op.Key)
		if r.Rule().Global && n.cfg.Upstream != nil {
			n.writeError(ctx, fieldError("ops["+strconv.Itoa(i)+"].rule",
				"rule "+strconv.Quote(op.Rule)+" is global: this node leases it from the global tier; gateways send its checks (/v1/check)"))
			return
		}
		if !p.Algorithm.Leased() {
			n.writeError(ctx, fieldError("ops["+strconv.Itoa(i)+"].rule",
				"rule "+strconv.Quote(op.Rule)+" is exact ("+p.Algorithm.String()+"): exact: send checks (/v1/checks), it cannot be leased"))
			return
		}
		ckey := op.Rule + ":" + op.Key
		lo := leaseOp{op: op, ckey: ckey, p: p, region: req.Region != "", share: r.Rule().GatewayShare}
		if !hop {
			lo.peer = routes.OwnerAddr(ckey)
		}
		if op.Op == api.OpLease && !lo.region {
			clampLease(op, p, lo.share)
		}
		ops[i] = lo
	}
	results := make([]api.LeaseResult, len(ops))
	holder := g.ns + req.Holder
	if req.Region != "" {
		holder = g.ns + "r." + req.Region + "." + req.Holder
	}
	var wg sync.WaitGroup
	byPeer := map[string][]int{}
	for i := range ops {
		if ops[i].peer != "" {
			byPeer[ops[i].peer] = append(byPeer[ops[i].peer], i)
		}
	}
	auth := string(ctx.Request.Header.Peek(fasthttp.HeaderAuthorization))
	for addr, idx := range byPeer {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g.forward(addr, auth, req.Holder, req.Region, ops, idx, results)
		}()
	}
	// The ops this node owns: its Store, a few at once.
	store := n.mgr.Store()
	sem := make(chan struct{}, 32)
	for i := range ops {
		if ops[i].peer != "" {
			continue
		}
		lo := &ops[i]
		lo.rm = g.ruleMetrics(lo.op.Rule)
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			results[i] = g.apply(store, holder, lo)
		}()
	}
	wg.Wait()
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(api.AppendLeaseResults(nil, results))
}

// clampLease bounds what one holder may hold of a key: want is at most
// the rule's gateway_share of the capacity less what the holder says it
// holds (at least 1: a holder asking more than the bound gets what it
// allows, never an error), but never below need. Need is what the check
// that asked must have at once, and the Store grants at least need or
// nothing: a grant below it would leave the holder with tokens no check
// of its asked for, which it could not account for.
func clampLease(op *api.LeaseOp, p lease.Policy, share float64) {
	most := shareOf(p, share)
	room := max(most-min(op.Held, most), 1)
	op.Want = max(min(op.Want, room), op.Need)
}

// apply runs one op on this node's Store.
func (g *gateway) apply(store lease.Store, holder string, lo *leaseOp) api.LeaseResult {
	op := lo.op
	ctx := context.Background()
	if op.Op == api.OpReturn {
		if err := store.Return(ctx, lo.ckey, lo.p, op.Tokens, holder); err != nil {
			return api.LeaseResult{Error: err.Error()}
		}
		lo.rm.returned.Add(int(op.Tokens))
		g.book.set(holder, lo.ckey, lo.rm, 0, time.Time{})
		if lo.region {
			g.split.drop(lo.ckey, holder)
		}
		return api.LeaseResult{}
	}
	if op.Op == api.OpPeek {
		// A peek lends nothing: no holder named, so that no loan of the
		// holder's is settled by it.
		gr, err := store.Lease(ctx, lo.ckey, lo.p, 0, 0, lease.Lessee{})
		if err != nil {
			return api.LeaseResult{Error: err.Error()}
		}
		return api.LeaseResult{Remaining: gr.Remaining, WaitMS: ceilMS(gr.Wait), ResetMS: ceilMS(gr.Reset)}
	}
	var share *api.LeaseResult // the split's wait: the Store only renews the loan
	if lo.region {
		res, deny, ok := g.split.clamp(lo.ckey, holder, lo.p, op)
		switch {
		case !ok:
			clampLease(op, lo.p, lo.share)
		case deny:
			// The holder takes any answer for its loan's renewal and
			// settlement (its TTL, Lent): the Store makes them, granting
			// nothing.
			share, op.Want, op.Need = &res, 0, 0
		}
	}
	ttl := time.Duration(op.TTLMS) * time.Millisecond
	to := lease.Lessee{
		ID: holder, Held: op.Held, TTL: ttl, SpentBefore: op.SpentBefore,
		Idle: time.Duration(op.IdleMS) * time.Millisecond, Call: op.Call, Unanswered: op.Unanswered,
		First: op.First,
	}
	if !lo.region && lo.p.Algorithm == lease.FixedWindow {
		to.AheadWindows, to.AheadTokens = aheadOf(op, lo.p, lo.share)
	}
	gr, err := store.Lease(ctx, lo.ckey, lo.p, op.Want, op.Need, to)
	if err != nil {
		return api.LeaseResult{Error: err.Error()}
	}
	if share != nil {
		gr = lease.Grant{Lent: gr.Lent, Remaining: min(gr.Remaining, share.Remaining), Wait: time.Duration(share.WaitMS) * time.Millisecond,
			Reset: time.Duration(share.ResetMS) * time.Millisecond}
	}
	if lo.region {
		g.split.granted(lo.ckey, holder, gr.Granted)
	}
	lo.rm.granted.Add(int(gr.Granted))
	lo.rm.spent.Add(int(op.SpentBefore))
	until := time.Now().Add(ttl)
	if gr.AheadWindows > 0 { // its shares run to the end of the last window they cover
		until = time.Now().Add(max(ttl, gr.Reset+time.Duration(gr.AheadWindows)*lo.p.Period))
	}
	g.book.set(holder, lo.ckey, lo.rm, gr.Lent, until)
	return api.LeaseResult{
		Granted: gr.Granted, Remaining: gr.Remaining, Lent: gr.Lent,
		WaitMS: ceilMS(gr.Wait), ResetMS: ceilMS(gr.Reset),
		AheadTokens: gr.AheadTokens, AheadWindows: gr.AheadWindows,
	}
}

// shareOf is the most a gateway may hold of p's capacity with
// gateway_share share (at least one token).
func shareOf(p lease.Policy, share float64) int64 {
	return max(int64(float64(p.Capacity())*share), 1)
}

// aheadOf is the shares ahead a gateway's fixed_window lease op may ask:
// each window's share within the gateway's share of the limit, as its
// grants are (clampLease), and no further ahead than the longest lease
// TTL a gateway may ask (api.MaxLeaseTTLMS), so that a gateway that
// crashes strands its shares no longer than its tokens.
func aheadOf(op *api.LeaseOp, p lease.Policy, share float64) (windows, tokens int64) {
	if op.AheadWindows <= 0 || op.AheadTokens <= 0 || p.Period <= 0 {
		return 0, 0
	}
	windows = min(op.AheadWindows, int64(time.Duration(api.MaxLeaseTTLMS)*time.Millisecond/p.Period))
	tokens = min(op.AheadTokens, shareOf(p, share))
	if windows <= 0 {
		return 0, 0
	}
	return windows, tokens
}

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// forward sends ops idx to their owner at addr as one lease request
// (marked as a hop, with the client's own credentials), filling results;
// an op the owner did not answer is answered with an error, which the
// gateway treats as a failed Store call.
func (g *gateway) forward(addr, auth, holder, region string, ops []leaseOp, idx []int, results []api.LeaseResult) {
	fail := func(msg string) {
		for _, i := range idx {
			results[i] = api.LeaseResult{Error: msg}
		}
	}
	sub := api.LeaseRequest{Holder: holder, Region: region, Ops: make([]api.LeaseOp, len(idx))}
	for j, i := range idx {
		sub.Ops[j] = *ops[i].op
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	req.SetRequestURI(addr + LeasePath)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.Header.Set(fasthttp.HeaderAuthorization, auth)
	req.Header.Set(LeaseHopHeader, "1")
	req.Header.SetContentType("application/json")
	req.SetBody(api.AppendLeaseRequest(nil, &sub))
	if err := g.client.DoTimeout(req, resp, time.Second); err != nil {
		fail("owner " + addr + " unreachable")
		return
	}
	if resp.StatusCode() != fasthttp.StatusOK {
		fail("owner " + addr + " answered " + strconv.Itoa(resp.StatusCode()) + ": " + string(resp.Body()[:min(len(resp.Body()), 200)]))
		return
	}
	got, err := api.DecodeLeaseResults(resp.Body(), nil, len(idx))
	if err != nil {
		fail("owner " + addr + ": bad reply: " + err.Error())
		return
	}
	for j, i := range idx {
		results[i] = got[j]
	}
}

// leaseRulesBody is the JSON of GET /v1/lease/rules.
type leaseRulesBody struct {
	Version string       `json:"version"`
	Rules   []rules.Spec `json:"rules"`
	// Checks names the rules this node does not lease to gateways, whose
	// checks a gateway sends to the nodes (/v1/check): on a region's node
	// (Config.Upstream), the global rules, which its owner decides from
	// what it leases from the global tier. Exact rules are not listed: a
	// gateway knows them by their algorithm.
	Checks []string `json:"checks,omitempty"`
}

// leaseRules serves GET /v1/lease/rules: the rules a gateway decides
// with, as written, and their version (also the ETag: a request with
// If-None-Match of the current version is answered 304).
func (n *Node) leaseRules(ctx *fasthttp.RequestCtx) {
	if !n.leaseAuth(ctx) {
		return
	}
	t := n.eng.Table()
	if t == nil {
		n.writeError(ctx, ErrNotReady)
		return
	}
	g := n.gw
	lr := g.rules.Load()
	if lr == nil || lr.table != t {
		var b leaseRulesBody
		for _, r := range t.All() {
			b.Rules = append(b.Rules, r.Rule().Spec)
			if r.Rule().Global && n.cfg.Upstream != nil {
				b.Checks = append(b.Checks, r.Rule().Name)
			}
		}
		sortSpecs(b.Rules)
		slices.Sort(b.Checks)
		specs, err := json.Marshal(b.Rules)
		if err != nil {
			n.writeError(ctx, err)
			return
		}
		if len(b.Checks) > 0 { // the version covers what a gateway may lease
			specs = append(append(specs, '\n'), strings.Join(b.Checks, ",")...)
		}
		sum := sha256.Sum256(specs)
		b.Version = hex.EncodeToString(sum[:8])
		body, err := json.Marshal(b)
		if err != nil {
			n.writeError(ctx, err)
			return
		}
		lr = &leaseRules{table: t, body: body, etag: `"` + b.Version + `"`}
		g.rules.Store(lr)
	}
	ctx.Response.Header.Set(fasthttp.HeaderETag, lr.etag)
	if string(ctx.Request.Header.Peek(fasthttp.HeaderIfNoneMatch)) == lr.etag {
		ctx.SetStatusCode(fasthttp.StatusNotModified)
		return
	}
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(lr.body)
}

func sortSpecs(s []rules.Spec) {
	slices.SortFunc(s, func(a, b rules.Spec) int { return strings.Compare(a.Name, b.Name) })
}
