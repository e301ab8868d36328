package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/rules"
)

// The lease protocol's paths (node.LeasePath, node.LeaseRulesPath).
const (
	leasePath      = "/v1/lease"
	leaseRulesPath = "/v1/lease/rules"
)

// LimiterConfig configures a Limiter. The zero value of each field but
// Nodes and Token means the default given in its comment.
type LimiterConfig struct {
	// Nodes are the nodes' addresses, "http://host:port" (or
	// "https://host:port", verified with TLS) or "host:port" (HTTPS when
	// TLS is set). At least one; the others are learned from them. Every
	// node speaks one scheme.
	Nodes []string
	// Token is the nodes' client token (sluiced -client-token): it lets
	// the Limiter lease, return and read the rules, never administer.
	// Sent over plain http:// to a node that is not on loopback, it is
	// logged as a warning (once per node address): give the nodes as
	// https://.
	Token string
	// TLS verifies the nodes over HTTPS (a cluster CA in RootCAs). Nil
	// means the system roots for nodes given as https://.
	TLS *tls.Config
	// Timeout bounds one request to a node. Zero means 500ms. A rules
	// fetch, which no decision waits for, may take at least 2s.
	Timeout time.Duration
	// LeaseRequests bounds the lease requests in flight to one node. A
	// lease call (a key's first touch, a prefetch, a return) goes out at
	// once, in a request of its own, while fewer are in flight; calls made
	// while that many are in flight wait and share the next request (at
	// most api.MaxLeaseOps calls), which goes out when one in flight
	// ends. Zero means 4: a few concurrent first touches each cost one
	// round trip and wait for nothing, and many share requests rather than
	// flood the node.
	LeaseRequests int
	// Flush is no longer used: lease calls wait for no timer (see
	// LeaseRequests).
	//
	// Deprecated: ignored. It was how long a lease call waited for others
	// to the same node (1ms), which every first touch paid.
	Flush time.Duration
	// RulesPoll is how often the rules are fetched again (a request
	// answered 304 when they did not change). Zero means 5s.
	RulesPoll time.Duration
	// Lease tunes the Limiter's lease.Manager (the same as a node's:
	// Horizon, Idle, LowWater...). Zero fields mean lease.DefaultConfig's,
	// except StoreTimeout (Timeout: a lease call is a request to a node),
	// LeaseTTL (30s: what a crashed gateway strands, at most the nodes'
	// bound of 60s) and Holder (the Limiter's public holder id, Holder;
	// the Manager never sees the secret).
	Lease lease.Config
	// Region, when set, makes the Limiter a region's node leasing from the
	// global tier (sluiced -upstream, docs/regions.md): its lease requests
	// name the region, and the nodes split a saturated key among regional
	// holders by their demand instead of bounding each by gateway_share.
	// A rule name's characters, at most 64 bytes.
	Region string
	// Demand, when not nil, returns the checks per second the caller sees
	// of a counter key ("rule:key"), denied ones included: sent with each
	// lease call of a Region Limiter.
	Demand func(ckey string) int64
	// OnLent, when not nil, is told what the nodes lend the Limiter of a
	// counter key after each lease call they answer (0 after a return):
	// the tokens it holds of the key at most.
	OnLent func(ckey string, lent int64)
	// Logger receives the Limiter's warnings (the token sent over plain
	// HTTP). Nil means slog.Default().
	Logger *slog.Logger
}

// Decision is the answer of Limiter.Allow.
type Decision struct {
	Allowed bool
	// Limit is the policy's limit for the key, Remaining what is left of
	// it as the Limiter knows (its own tokens and the Store's last word).
	Limit     int64
	Remaining int64
	// RetryAfter is, when denied, when to retry; Reset when the limit is
	// fully available again with no traffic.
	RetryAfter time.Duration
	Reset      time.Duration
	// Degraded: decided while no node answered, by the rule's
	// on_store_failure (local: from what the Limiter holds).
	Degraded bool
	// Shadow: the rule is in shadow mode: Allowed is true, and
	// ShadowDenied says whether it would have denied.
	Shadow       bool
	ShadowDenied bool
	// Rule names the rule that decided (AllowDescriptors: the first that
	// denied, or the last matched).
	Rule string
}

// ErrUnknownRule means Allow named a rule the nodes do not have.
var ErrUnknownRule = errors.New("unknown rule")

// Limiter decides checks in the caller's process: it holds leases of the
// nodes' Store through the lease protocol (a lease.Manager over a remote
// Store) and decides each check from the tokens it holds, with no
// network round trip. A key it holds nothing of costs one round trip: the
// lease call that starts its lease carries the check (need = its hits),
// and is sent at once (see LimiterConfig.LeaseRequests). Exact rules (sliding_log, concurrency) are sent as
// ordinary checks, and so are the rules the nodes say they do not lease
// (/v1/lease/rules' "checks": a global rule on a region's node, decided
// by its owner there from what it leases of the global tier). A Limiter
// is safe for concurrent use.
type Limiter struct {
	cfg  LimiterConfig
	c    *Client
	auth string // "Bearer <token>"
	// holder is the secret the lease requests name the holder by (32 hex
	// digits, drawn at start): whoever has it and the client token can
	// renew, return and report for the Limiter's loans. It is never shown;
	// public, its public id (api.HolderPublicID), is.
	holder, public string
	mgr            *lease.Manager
	store          *remoteStore
	// rulesHC fetches the rules: the nodes' clients read and write within
	// Timeout, a decision's budget; a rules fetch may take longer
	// (rulesTimeout).
	rulesHC *fasthttp.Client

	rules atomic.Pointer[ruleSnap]

	closed atomic.Bool
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

// ruleSnap is one version of the nodes' rules.
type ruleSnap struct {
	version string
	set     *rules.Set
	// byName is an open-addressing table of the rules by nameHash
	// (linear probing, at most a quarter full): Allow's lookup, cheaper
	// than a map's. Its names are the nodes' rules, not the callers': a
	// name no rule has costs a probe to the next empty slot, whatever it
	// is.
	byName []*limRule
	shift  uint8 // 64 - log2(len(byName))
}

// The multipliers of the names' hash.
const nameK0, nameK1 = 0x9e3779b97f4a7c15, 0xbf58476d1ce4e5b9

// rule returns the rule named name, or nil: find's probe, written out for
// a name of 1 to 16 bytes (Allow's case), read as one or two words
// without bounds checks and compared by them and its length alone, with
// no call.
func (s *ruleSnap) rule(name string) *limRule {
	n := len(name)
	if uint(n-1) >= 16 {
		r, _, _ := s.find(name)
		return r
	}
	// find's hash and words, written out: it is too big to be inlined.
	p := unsafe.Pointer(unsafe.StringData(name))
	h := uint64(n) * nameK0
	var w, head uint64
	switch {
	case n > 8:
		head, w = rd8(p), rd8(unsafe.Add(p, n-8))
		h = (h ^ head) * nameK1
		h ^= h >> 31
	case n == 8:
		w = rd8(p)
	case n >= 4:
		w = uint64(rd4(p)) | uint64(rd4(unsafe.Add(p, n-4)))<<32
	default:
		w = uint64(*(*byte)(p)) | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))<<16
	}
	mask := uint64(len(s.byName) - 1)
	for i := ((h ^ w) * nameK1) >> (s.shift & 63); ; i = (i + 1) & mask {
		if r := s.byName[i&mask]; r == nil || r.word == w && r.n == n && r.head == head {
			return r
		}
	}
}

// find returns the rule named name, or nil and the free slot where it
// would go, and the name's word. A rule name's word is its last 8 bytes,
// or all of them if it has 8 or fewer (shortWord): such names are
// compared by their words and lengths, not byte by byte. Its hash is of
// every byte and the length, not seeded: the table holds the operator's
// names only.
func (s *ruleSnap) find(name string) (r *limRule, slot, w uint64) {
	n := len(name)
	h := uint64(n) * nameK0
	if n > 8 {
		for i := 0; i+8 < n; i += 8 { // the bytes before the last 8
			h = (h ^ le64(name[i:])) * nameK1
			h ^= h >> 31
		}
		w = le64(name[n-8:])
	} else {
		w = shortWord(name)
	}
	mask := uint64(len(s.byName) - 1)
	for i := ((h ^ w) * nameK1) >> s.shift; ; i = (i + 1) & mask {
		r := s.byName[i]
		if r == nil {
			return nil, i, w
		}
		if r.word == w && r.n == n && (n <= 8 || r.r.Name == name) {
			return r, i, w
		}
	}
}

// shortWord is the word of a name of up to 8 bytes: its bytes (up to 3:
// the first, middle and last; 4 to 7: the first 4 and the last 4,
// overlapping).
func shortWord(name string) uint64 {
	switch n := len(name); {
	case n == 8:
		return le64(name)
	case n >= 4:
		return uint64(le32(name)) | uint64(le32(name[n-4:]))<<32
	case n > 0:
		return uint64(name[0]) | uint64(name[n/2])<<8 | uint64(name[n-1])<<16
	}
	return 0
}

// index builds byName of rs, whose names differ.
func (s *ruleSnap) index(rs []*limRule) {
	lg := bits.Len(uint(max(4*len(rs), 8) - 1))
	s.byName, s.shift = make([]*limRule, 1<<lg), uint8(64-lg)
	for _, r := range rs {
		_, i, w := s.find(r.r.Name)
		r.word, r.n = w, len(r.r.Name)
		if r.n > 8 {
			r.head = le64(r.r.Name)
		}
		s.byName[i] = r
	}
}

// rd8 and rd4 are le64 and le32 of the bytes at p (in the caller's
// string), without bounds checks.
func rd8(p unsafe.Pointer) uint64 { return binary.LittleEndian.Uint64((*[8]byte)(p)[:]) }

func rd4(p unsafe.Pointer) uint32 { return binary.LittleEndian.Uint32((*[4]byte)(p)[:]) }

func le64(s string) uint64 {
	_ = s[7]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

func le32(s string) uint32 {
	_ = s[3]
	return uint32(s[0]) | uint32(s[1])<<8 | uint32(s[2])<<16 | uint32(s[3])<<24
}

type limRule struct {
	r    *rules.Rule
	word uint64 // the name's word (see find)
	n    int    // the name's length
	// head is the first 8 bytes of a name of 9 to 16 (0 for a shorter
	// one): with word, all of its bytes (see rule).
	head uint64
	// px is the Manager's keys of the rule ("name:key"), checked by key.
	px *lease.Prefix
	// check: the nodes do not lease the rule; its checks are sent to them.
	check bool
	// local: a check of the rule may be decided by Allow's fast path (a
	// leased rule without overrides: every key's policy is pol).
	local bool
	pol   lease.Policy
	// hdrs are the rule's rate-limit headers' fixed parts (WriteHeaders).
	hdrs atomic.Pointer[ruleHeaders]
}

// NewLimiter returns a Limiter that has fetched the rules from the first
// node that answers; it fails when none does.
func NewLimiter(cfg LimiterConfig) (*Limiter, error) {
	if len(cfg.Nodes) == 0 {
		return nil, configError("Nodes", "at least one node address is required")
	}
	if cfg.Token == "" {
		return nil, configError("Token", "the nodes' client token is required")
	}
	if cfg.Region != "" && !api.ValidName(cfg.Region) {
		return nil, configError("Region", "1 to 64 bytes of A-Z a-z 0-9 _ . -")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 500 * time.Millisecond
	}
	if cfg.LeaseRequests <= 0 {
		cfg.LeaseRequests = 4
	}
	if cfg.RulesPoll <= 0 {
		cfg.RulesPoll = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	c, err := New(Config{Nodes: cfg.Nodes, Timeout: cfg.Timeout, TLS: cfg.TLS, AdminToken: cfg.Token, Logger: cfg.Logger,
		tokenHint: clientTokenHint})
	if err != nil {
		return nil, err
	}
	cfg.TLS = c.cfg.TLS
	var id [16]byte
	_, _ = rand.Read(id[:])
	secret := hex.EncodeToString(id[:])
	l := &Limiter{cfg: cfg, c: c, auth: "Bearer " + cfg.Token, holder: secret, public: api.HolderPublicID(secret),
		stop: make(chan struct{}), done: make(chan struct{})}
	l.rulesHC = &fasthttp.Client{Name: "sluice-client", NoDefaultUserAgentHeader: true, MaxIdleConnDuration: time.Minute,
		MaxResponseBodySize: maxMembersBody, TLSConfig: cfg.TLS, DisablePathNormalizing: true}
	l.store = &remoteStore{l: l}
	mcfg := cfg.Lease
	if mcfg.StoreTimeout <= 0 {
		mcfg.StoreTimeout = cfg.Timeout
	}
	if mcfg.LeaseTTL <= 0 {
		mcfg.LeaseTTL = 30 * time.Second
	}
	mcfg.LeaseTTL = min(mcfg.LeaseTTL, time.Duration(api.MaxLeaseTTLMS)*time.Millisecond)
	mcfg.Holder = l.public
	// The Manager first: the rules' Prefixes are its (it holds no key and
	// calls no node until a check).
	l.mgr = lease.NewManager(l.store, mcfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(c.cfg.Nodes)+1)*l.rulesTimeout())
	err = l.refreshRules(ctx)
	cancel()
	if err != nil {
		_ = l.mgr.Close()
		l.rulesHC.CloseIdleConnections()
		c.Close()
		return nil, err
	}
	go l.pollRules()
	return l, nil
}

// Manager returns the Limiter's lease.Manager (a region's node decides
// the checks of global rules with it: Config.Region).
func (l *Limiter) Manager() *lease.Manager { return l.mgr }

// Rules returns the rules the Limiter last fetched from the nodes.
func (l *Limiter) Rules() *rules.Set { return l.rules.Load().set }

// Holder returns the Limiter's public holder id (api.HolderPublicID of
// the secret its lease requests carry, 16 hex digits): what the nodes show
// its loans under (/v1/stats, the dashboard). It may be logged and shown;
// it lets no one act on the Limiter's loans. The secret is never shown.
func (l *Limiter) Holder() string { return l.public }

// Close returns every token the Limiter holds to the Store, stops it and
// closes its connections. Allow fails with ErrClosed after it.
func (l *Limiter) Close() error {
	var err error
	l.once.Do(func() {
		l.closed.Store(true)
		close(l.stop)
		<-l.done
		err = l.mgr.Close()
		l.store.posts.Wait()
		l.c.Close()
		l.rulesHC.CloseIdleConnections()
	})
	return err
}

// Allow decides hits of rule for key (hits 0 peeks). On a key whose
// tokens the Limiter holds, it decides in memory without allocating.
// The error is non-nil for a bad call (an unknown rule, an invalid key
// or hits) or, for a rule sent as a check (an exact rule, or one the
// nodes do not lease), when no node answered.
func (l *Limiter) Allow(ctx context.Context, rule, key string, hits int64) (Decision, error) {
	r := l.rules.Load().rule(rule)
	if r == nil {
		return Decision{}, fmt.Errorf("%w %q", ErrUnknownRule, rule)
	}
	// The fast path: a key whose tokens the Limiter holds, looked up by
	// key in the rule's Prefix (no counter key built). It does not
	// validate the key: the Prefix has a bucket of "rule:key" only if a
	// check of it went through allow, which did (keys are never leased
	// otherwise), and the validation is a function of the key.
	if r.local && !l.closed.Load() {
		if remaining, reset, ok := r.px.TakeLocal(key, &r.pol, hits); ok {
			// An allowed Decision, written out: Prefix.TakeLocal's answer.
			return Decision{Allowed: true, Limit: r.pol.Limit, Remaining: remaining, Reset: reset,
				Shadow: r.r.Shadow, Rule: r.r.Name}, nil
		}
	}
	return l.allow(ctx, r, key, hits)
}

// decision is the Limiter's Decision of the Manager's d for a check of r.
func (r *limRule) decision(d *lease.Decision) Decision {
	out := Decision{Allowed: d.Allowed, Limit: d.Limit, Remaining: d.Remaining, RetryAfter: d.RetryAfter,
		Reset: d.Reset, Degraded: d.Degraded || d.Unavailable, Rule: r.r.Name}
	if r.r.Shadow {
		out.Shadow, out.ShadowDenied, out.Allowed, out.RetryAfter = true, !d.Allowed, true, 0
	}
	return out
}

func (l *Limiter) allow(ctx context.Context, r *limRule, key string, hits int64) (Decision, error) {
	if l.closed.Load() {
		return Decision{}, ErrClosed
	}
	if msg := api.GivenKeyMsg(key); msg != "" {
		return Decision{}, &api.FieldError{Field: "key", Msg: msg}
	}
	p := r.r.PolicyFor(key)
	if r.check || !p.Algorithm.Leased() || l.overShare(r, &p, hits) {
		return l.send(ctx, r, key, hits)
	}
	d, err := r.px.Take(key, p, hits)
	if err != nil {
		return Decision{}, err
	}
	return r.decision(&d), nil
}

// overShare reports whether a check of hits needs more than the Limiter
// may hold of a key of p: its rule's gateway_share of the capacity (at
// least one token), as the nodes bound a gateway holder. Such a check is
// sent to the nodes as a check (one round trip, decided exactly by the
// key's owner), never leased. A check the capacity cannot cover is left
// to the Manager, which denies it without a call; a region's Limiter is
// not bound by gateway_share.
func (l *Limiter) overShare(r *limRule, p *lease.Policy, hits int64) bool {
	if l.cfg.Region != "" || hits <= 1 {
		return false
	}
	c := p.Capacity()
	return hits <= c && hits > max(int64(float64(c)*r.r.GatewayShare), 1)
}

// send sends a check to the nodes: an exact rule's, one of a rule the
// nodes do not lease, or one that needs more than the Limiter's share of
// its key.
func (l *Limiter) send(ctx context.Context, r *limRule, key string, hits int64) (Decision, error) {
	res, err := l.c.Check(ctx, r.r.Name, key, hits)
	if err != nil {
		return Decision{}, err
	}
	out := Decision{Allowed: res.Allowed, Limit: res.Limit, Remaining: res.Remaining,
		RetryAfter: time.Duration(res.RetryAfterMS) * time.Millisecond, Reset: time.Duration(res.ResetMS) * time.Millisecond,
		Degraded: res.Degraded, Rule: r.r.Name}
	if r.r.Shadow {
		out.Shadow, out.ShadowDenied, out.Allowed, out.RetryAfter = true, !res.Allowed, true, 0
	}
	return out, nil
}

// AllowDescriptors decides a descriptor check as the nodes would: every
// rule whose descriptors match (the nodes' rules, followed as they
// change) is charged hits; the check is allowed only if none denies.
// The hits of the rules that allowed are not given back when another
// denies (a node refunds them; the Limiter's cost of that is at most
// hits per denied check). ErrUnknownRule when no rule matches.
func (l *Limiter) AllowDescriptors(ctx context.Context, descriptors []api.Descriptor, hits int64) (Decision, error) {
	snap := l.rules.Load()
	var buf [4]rules.Match
	ms := snap.set.MatchDescriptors(descriptors, buf[:0])
	if len(ms) == 0 {
		return Decision{}, fmt.Errorf("%w: no rule matches the descriptors", ErrUnknownRule)
	}
	for i := range ms {
		if strings.Contains(ms[i].Key, api.LongKeyMark) {
			// The digest of a long key is no key a client may name: the
			// nodes decide the whole check.
			return l.exactDescriptors(ctx, descriptors, hits)
		}
	}
	var out Decision
	for i := range ms {
		r := snap.rule(ms[i].Rule.Name)
		if r == nil {
			continue
		}
		d, err := l.allow(ctx, r, ms[i].Key, hits)
		if err != nil {
			return Decision{}, err
		}
		if i == 0 || !d.Allowed && out.Allowed {
			out = d
		}
		if !d.Allowed {
			break
		}
	}
	return out, nil
}

// exactDescriptors sends a descriptor check to the nodes.
func (l *Limiter) exactDescriptors(ctx context.Context, descriptors []api.Descriptor, hits int64) (Decision, error) {
	res, err := l.c.CheckDescriptors(ctx, descriptors, hits)
	if err != nil {
		return Decision{}, err
	}
	return Decision{Allowed: res.Allowed, Limit: res.Limit, Remaining: res.Remaining,
		RetryAfter: time.Duration(res.RetryAfterMS) * time.Millisecond, Reset: time.Duration(res.ResetMS) * time.Millisecond,
		Degraded: res.Degraded, Rule: res.Rule}, nil
}

// minRulesTimeout is the least time a rules fetch may take. Timeout
// bounds what the Limiter adds to a decision; a rules fetch is no
// decision (NewLimiter's first one, then the background poll), and one
// cut short by a decision's budget on a busy host would fail NewLimiter.
const minRulesTimeout = 2 * time.Second

// rulesTimeout is one rules fetch's timeout: Timeout, at least
// minRulesTimeout.
func (l *Limiter) rulesTimeout() time.Duration { return max(l.cfg.Timeout, minRulesTimeout) }

// refreshRules fetches the rules from a node (304: unchanged).
func (l *Limiter) refreshRules(ctx context.Context) error {
	old := l.rules.Load()
	v := l.c.view.Load()
	var errs []error
	for _, n := range v.nodes {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err)
			break
		}
		snap, err := l.fetchRules(n, old)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if snap != nil {
			l.rules.Store(snap)
		}
		return nil
	}
	if err := refused(errs, clientTokenHint); err != nil {
		return fmt.Errorf("cannot fetch the rules: %w", err)
	}
	return fmt.Errorf("cannot fetch the rules: %w: %w", ErrNoNodes, errors.Join(errs...))
}

func (l *Limiter) fetchRules(n *node, old *ruleSnap) (*ruleSnap, error) {
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(l.c.scheme() + "://" + n.addr + leaseRulesPath)
	req.Header.SetMethod(fasthttp.MethodGet)
	req.Header.Set(fasthttp.HeaderAuthorization, l.auth)
	if old != nil {
		req.Header.Set(fasthttp.HeaderIfNoneMatch, `"`+old.version+`"`)
	}
	if err := l.rulesHC.DoTimeout(req, resp, l.rulesTimeout()); err != nil {
		return nil, fmt.Errorf("%s: %w", n.addr, err)
	}
	switch resp.StatusCode() {
	case fasthttp.StatusNotModified:
		return nil, nil
	case fasthttp.StatusOK:
	default:
		return nil, &StatusError{Node: n.addr, Status: resp.StatusCode(), Msg: errorMsg(resp.Body())}
	}
	var body struct {
		Version string       `json:"version"`
		Rules   []rules.Spec `json:"rules"`
		Checks  []string     `json:"checks"` // rules the nodes do not lease
	}
	if err := json.Unmarshal(resp.Body(), &body); err != nil {
		return nil, fmt.Errorf("%s: rules: %w", n.addr, err)
	}
	set, err := rules.NewSet(body.Rules)
	if err != nil {
		return nil, fmt.Errorf("%s: rules: %w", n.addr, err)
	}
	snap := &ruleSnap{version: body.Version, set: set}
	checks := make(map[string]bool, len(body.Checks))
	for _, name := range body.Checks {
		checks[name] = true
	}
	lrs := make([]*limRule, 0, len(set.Rules()))
	for _, r := range set.Rules() {
		lr := &limRule{r: r, px: l.mgr.Prefix(r.Name + ":"), check: checks[r.Name], pol: r.Policy}
		lr.local = !lr.check && len(r.Overrides) == 0 && r.Policy.Algorithm.Leased()
		lrs = append(lrs, lr)
	}
	snap.index(lrs)
	return snap, nil
}

// pollRules follows the nodes' rules until Close.
func (l *Limiter) pollRules() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.RulesPoll)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), l.rulesTimeout())
			_ = l.refreshRules(ctx) // keep the rules we have; the next poll retries
			cancel()
		}
	}
}
