package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"
	"golang.org/x/time/rate"

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
	// DefaultClientRate is the lease ops per second (and their burst) one
	// client token may have one node apply, unless Config.ClientRate says
	// otherwise: each op is a Store call, so this is about what one node
	// can apply, and what one token's holders (a fleet of gateways, a
	// region's nodes) may take of it before the node answers 429. A
	// Limiter sends a key's first touch at once (one op, in a request of
	// its own when none is in flight to the node), and batches the ops
	// that come while requests are in flight: counting requests would
	// throttle a busy gateway's first touches, counting ops does not.
	DefaultClientRate = 100_000
)

// ErrLeaseOff answers the lease protocol on a node without a client token.
var ErrLeaseOff = errors.New("not found: the lease protocol is off (start sluiced with -client-token or SLUICE_CLIENT_TOKEN)")

// errClientToken answers a lease request with a wrong client token.
var errClientToken = errors.New("forbidden: not the client token")

// gateway is the lease protocol's front end state; nil without
// Config.ClientToken.
type gateway struct {
	token *[sha256.Size]byte
	// ns prefixes every holder's Store id: "gw." and a short hash of the
	// client token, so that a gateway's holder can never name a node's (a
	// node's holder ids never start with "gw."). The id is the namespace
	// and the public id of the holder's secret (api.HolderPublicID).
	ns string

	// flood bounds the lease ops the client token may have this node
	// apply (Config.ClientRate), on now's clock.
	flood *rate.Limiter
	now   func() time.Time

	// rules caches the /v1/lease/rules body of the last table served.
	rules atomic.Pointer[leaseRules]

	// ids caches holderID's answers (holderKey → string), nids counts
	// them.
	ids  sync.Map
	nids atomic.Int64
}

type leaseRules struct {
	table *engine.Table
	body  []byte
	etag  string
}

func newGateway(cfg Config) *gateway {
	if cfg.ClientToken == "" {
		return nil
	}
	d := sha256.Sum256([]byte(cfg.ClientToken))
	limit := cfg.ClientRate
	if limit <= 0 {
		limit = DefaultClientRate
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	return &gateway{
		token: &d,
		ns:    "gw." + hex.EncodeToString(d[:4]) + ".",
		// One key, never expired: no janitor goroutine to stop.
		flood: rate.NewLimiter(rate.Limit(limit), limit),
		now:   now,
	}
}

// holderID is the Store id of the holder whose secret is secret (of a
// region's node when region is set). A holder sends the same secret for
// its life: the ids of the last maxHolderIDs secrets are kept (and all
// forgotten when that many more come), so that a request costs no hash.
func (g *gateway) holderID(secret, region string) string {
	k := holderKey{secret, region}
	if id, ok := g.ids.Load(k); ok {
		return id.(string)
	}
	id := api.HolderPublicID(secret)
	if region != "" {
		id = g.ns + "r." + region + "." + id
	} else {
		id = g.ns + id
	}
	if g.nids.Add(1) > maxHolderIDs {
		g.ids.Clear()
		g.nids.Store(1)
	}
	g.ids.Store(holderKey{strings.Clone(secret), strings.Clone(region)}, id)
	return id
}

// maxHolderIDs bounds the holder ids a gateway front end keeps.
const maxHolderIDs = 1 << 14

type holderKey struct{ secret, region string }

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

// leaseFlood rate-limits the lease ops of the client token (Sluice
// limiting its own clients): a request of ops ops (at least one) is
// applied whole or not at all; false means answered 429, nothing applied.
func (n *Node) leaseFlood(ctx *fasthttp.RequestCtx, ops int) bool {
	g := n.gw
	cost, now := max(ops, 1), g.now()
	if g.flood.AllowN(now, cost) {
		return true
	}
	// Refused whole (nothing taken): retry when cost tokens are back.
	secs := int64(math.Ceil((float64(cost) - g.flood.TokensAt(now)) / float64(g.flood.Limit())))
	ctx.Response.Header.Set("Retry-After", strconv.FormatInt(max(secs, 1), 10))
	ctx.SetStatusCode(fasthttp.StatusTooManyRequests)
	ctx.SetContentTypeBytes(contentTypeJSON)
	ctx.SetBody(api.AppendError(nil, "too many lease ops for this client token", ""))
	return false
}

// leaseKinds maps the wire's op kinds to the engine's.
var leaseKinds = [...]engine.LeaseKind{api.OpLease: engine.LeaseLend, api.OpReturn: engine.LeaseReturn, api.OpPeek: engine.LeasePeek}

// lease serves POST /v1/lease: it decodes the request, names the holder
// by the public id of its secret, and has the engine apply the ops where
// their keys are decided (engine.Engine.Lease).
func (n *Node) lease(ctx *fasthttp.RequestCtx) {
	if !n.leaseAuth(ctx) {
		return
	}
	// The request's state is pooled, as a check's: its slices are
	// reused, and a holder's id (its secret, decoded) is allocated once
	// per state, not per request.
	st := n.getState()
	defer n.putState(st)
	req := &st.lease
	if err := api.DecodeLease(ctx.PostBody(), req); err != nil {
		n.writeError(ctx, err)
		return
	}
	if !n.leaseFlood(ctx, len(req.Ops)) {
		return
	}
	holder := n.gw.holderID(req.Holder, req.Region)
	ops := slices.Grow(st.lops[:0], len(req.Ops))[:len(req.Ops)]
	st.lops = ops
	for i := range req.Ops {
		op := &req.Ops[i]
		ops[i] = engine.LeaseOp{
			Kind: leaseKinds[op.Op], Rule: op.Rule, Key: op.Key, Holder: holder, Region: req.Region,
			Want: op.Want, Need: op.Need, Tokens: op.Tokens, Demand: op.Demand,
			To: lease.Lessee{
				Held: op.Held, TTL: time.Duration(op.TTLMS) * time.Millisecond, SpentBefore: op.SpentBefore,
				Idle: time.Duration(op.IdleMS) * time.Millisecond, Call: op.Call, Unanswered: op.Unanswered,
				AheadWindows: op.AheadWindows, AheadTokens: op.AheadTokens, First: op.First,
			},
		}
	}
	results := slices.Grow(st.lres[:0], len(ops))[:len(ops)]
	st.lres = results
	// context.Background: a fasthttp RequestCtx as a context races with the
	// server's Shutdown (its Done), as the check paths know.
	if err := n.eng.Lease(context.Background(), n.eng.Table(), ops, results); err != nil {
		var lp *engine.LeaseProblem
		if errors.As(err, &lp) {
			err = fieldError("ops["+strconv.Itoa(lp.Index)+"]."+lp.Field, lp.Msg)
		}
		n.writeError(ctx, err)
		return
	}
	out := slices.Grow(st.lout[:0], len(results))[:len(results)]
	st.lout = out
	for i := range results {
		r := &results[i]
		if r.Err != "" {
			out[i] = api.LeaseResult{Error: r.Err}
			continue
		}
		g := &r.Grant
		out[i] = api.LeaseResult{
			Granted: g.Granted, Remaining: g.Remaining, Lent: g.Lent,
			WaitMS: ceilMS(g.Wait), ResetMS: ceilMS(g.Reset),
			AheadTokens: g.AheadTokens, AheadWindows: g.AheadWindows,
			Checked: r.Checked, Crowded: r.Crowded,
		}
	}
	ctx.SetContentTypeBytes(contentTypeJSON)
	st.buf = api.AppendLeaseResults(st.buf[:0], out)
	ctx.SetBody(st.buf)
}

func ceilMS(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
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
