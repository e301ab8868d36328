// Package upstream makes a region's node a holder of the global tier: a
// Sluice cluster that counts the keys of global rules (scope: global) for
// every region (docs/regions.md).
//
// The node decides the checks of global rules with a second lease.Manager
// whose Store is the global tier's lease protocol (node/client's remote
// Store, through a client.Limiter naming the region), sized for the
// measured round trip to the global tier: a key's lease covers
// max(-lease-horizon, 8 round trips) of its traffic and is renewed in the
// background when a quarter is left, so a check that finds tokens never
// waits on the ocean. The node tells the global tier its demand for each
// key (checks per second, denied ones included), by which the global tier
// splits a saturated key among the regions. Cut off from the global tier,
// the node decides from the tokens it holds, then by the rule's
// on_store_failure: local admits up to regional_floor of the limit per
// period from this node's memory, charged to the global tier when the
// link returns.
package upstream

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/client"
	"github.com/sluicehq/sluice/node/rules"
)

// Config configures an Upstream. The zero value of each field but URLs,
// Token and Region means the default given in its comment.
type Config struct {
	// URLs are the global tier's nodes ("http://host:port"); at least one.
	URLs []string
	// Token is the global tier's client token (its -client-token).
	Token string
	// Region names this node to the global tier (its holder there is
	// gw.<token hash>.r.<Region>.<random>): a rule name's characters.
	Region string
	// RTT is the round trip to the global tier that leases are sized
	// for. Zero means measured at Start (the least of a few requests).
	RTT time.Duration
	// Horizon is the least traffic a lease covers (the node's
	// -lease-horizon); leases cover at least 8 round trips. Zero means
	// lease.Config's default (100ms).
	Horizon time.Duration
	// Idle is how long a key goes unchecked before its tokens go back.
	// Zero means lease.Config's default (10s).
	Idle time.Duration
	// Probe is how often the global tier is asked for its rules' version
	// (reachability and round trip, sluice_upstream_*). Zero means 5s.
	Probe time.Duration
	// RulesPoll is how often the global tier's rules are fetched again
	// (node/client's LimiterConfig.RulesPoll). Zero means 5s.
	RulesPoll time.Duration
	// TLS verifies the global tier's https:// nodes (sluiced -tls-ca: a
	// CA in RootCAs). Nil means the system roots. Unused for http://
	// URLs, whose token travels in the clear (the Limiter warns of it,
	// once per address, unless the address is loopback).
	TLS *tls.Config
	// Logger receives the Upstream's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Upstream is a region's link to the global tier.
type Upstream struct {
	cfg    Config
	lim    *client.Limiter
	set    *metrics.Set // sluice_upstream_*
	demand demandTable
	lent   lentTable
	local  *floorStore // the Manager's Local Store
	hc     *fasthttp.Client

	rtt     atomic.Int64 // last measured round trip, ns
	lastErr atomic.Pointer[string]
	// checked is the last set CheckRules passed (the node's rules), and
	// rulesErr, when the global tier's rules changed since, why that set
	// no longer agrees with them.
	checked  atomic.Pointer[rules.Set]
	upRules  *rules.Set // the global tier's rules rulesErr was computed for (run's goroutine)
	rulesErr atomic.Pointer[string]

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Errors of Start, each naming what is wrong with -upstream or its token.
var (
	ErrUnreachable = errors.New("the upstream cannot be reached")
	ErrToken       = errors.New("the upstream refused the token")
	ErrNotSluice   = errors.New("the upstream is not a Sluice cluster with the lease protocol on")
)

// Start checks the global tier (every URL answers the lease protocol's
// rules with Token), measures its round trip and returns an Upstream
// whose Manager leases from it. Any error names the URL and the fault.
func Start(cfg Config) (*Upstream, error) {
	if len(cfg.URLs) == 0 {
		return nil, errors.New("upstream: no URL")
	}
	if cfg.Token == "" {
		return nil, errors.New("upstream: the global tier's client token is required (SLUICE_UPSTREAM_TOKEN)")
	}
	if cfg.Horizon <= 0 {
		cfg.Horizon = lease.DefaultConfig().Horizon
	}
	if cfg.Idle <= 0 {
		cfg.Idle = lease.DefaultConfig().Idle
	}
	if cfg.Probe <= 0 {
		cfg.Probe = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.URLs = slices.Clone(cfg.URLs)
	for i, url := range cfg.URLs {
		cfg.URLs[i] = strings.TrimSuffix(url, "/")
	}
	u := &Upstream{cfg: cfg, stop: make(chan struct{}), done: make(chan struct{}),
		hc: &fasthttp.Client{NoDefaultUserAgentHeader: true, MaxIdleConnDuration: time.Minute, TLSConfig: cfg.TLS}}
	u.demand.m = map[string]*demandCounter{}
	u.lent.m = map[string]int64{}
	rtt := time.Duration(1<<63 - 1)
	for _, url := range cfg.URLs {
		// The first request opens the connection; the next ones are one
		// round trip each.
		for range 4 {
			d, err := u.probe(url, 3*time.Second)
			if err != nil {
				u.hc.CloseIdleConnections()
				return nil, err
			}
			rtt = min(rtt, d)
		}
	}
	if cfg.RTT > 0 {
		rtt = cfg.RTT
	}
	u.rtt.Store(int64(rtt))
	horizon := max(cfg.Horizon, 8*rtt)
	timeout := max(4*rtt, 100*time.Millisecond) // a Store call's: the Limiter's request timeout
	u.local = &floorStore{inner: lease.NewMemoryStore(lease.DefaultMemoryStoreConfig()), floor: u.floor}
	var tlsCfg *tls.Config
	if strings.HasPrefix(cfg.URLs[0], "https://") {
		tlsCfg = cfg.TLS // (a mix of http:// and https:// fails NewLimiter)
	}
	lim, err := client.NewLimiter(client.LimiterConfig{
		Nodes: cfg.URLs, Token: cfg.Token, TLS: tlsCfg, Timeout: timeout, Region: cfg.Region, Demand: u.demand.rate, RulesPoll: cfg.RulesPoll,
		OnLent: u.lent.set, Logger: cfg.Logger,
		Lease: lease.Config{Horizon: horizon, Idle: cfg.Idle, Local: u.local,
			Metrics: metrics.NewSet(), Logger: cfg.Logger},
	})
	if err != nil {
		u.local.inner.Close()
		u.hc.CloseIdleConnections()
		return nil, fmt.Errorf("upstream %s: %w", strings.Join(cfg.URLs, ","), err)
	}
	u.lim = lim
	u.register()
	cfg.Logger.Info("upstream: leasing global rules from the global tier", "upstream", cfg.URLs, "region", cfg.Region,
		"rtt", rtt, "horizon", horizon, "timeout", timeout, "holder", lim.Holder())
	go u.run()
	return u, nil
}

// Holder is this node's public holder id on the global tier
// (client.Limiter.Holder): what the global tier shows its loans under.
// The secret its lease requests carry is never shown.
func (u *Upstream) Holder() string { return u.lim.Holder() }

// Manager is the lease.Manager of global rules' keys.
func (u *Upstream) Manager() *lease.Manager { return u.lim.Manager() }

// Demand counts one check of counter key ckey.
func (u *Upstream) Demand(ckey string) { u.demand.add(ckey) }

// URLs are the global tier's nodes this Upstream leases from.
func (u *Upstream) URLs() []string { return slices.Clone(u.cfg.URLs) }

// Lent is what the global tier lends this node of each global rule's
// keys, by rule (the tokens it holds, at most).
func (u *Upstream) Lent() map[string]int64 { return u.lent.byRule() }

// RTT is the last measured round trip to the global tier.
func (u *Upstream) RTT() time.Duration { return time.Duration(u.rtt.Load()) }

// State reports whether the global tier answers (its last probe, and
// the Manager's breaker closed) and what is wrong: why it does not
// answer, or a global rule of the node's set that the global tier has
// otherwise since it changed it (nil: nothing).
func (u *Upstream) State() (reachable bool, err error) {
	if p := u.lastErr.Load(); p != nil {
		return false, errors.New(*p)
	}
	if !u.Manager().StoreHealthy() {
		return false, fmt.Errorf("%w: lease calls are failing (breaker %s)", ErrUnreachable, u.Manager().Stats().Breaker)
	}
	if p := u.rulesErr.Load(); p != nil {
		return true, errors.New(*p)
	}
	return true, nil
}

// CheckRules says why s cannot be installed: each global rule of s must
// be the global tier's rule of that name, as written.
func (u *Upstream) CheckRules(s *rules.Set) error {
	if err := checkAgainst(s, u.lim.Rules()); err != nil {
		return err
	}
	u.checked.Store(s)
	return nil
}

// checkAgainst is CheckRules against the global tier's rules up.
func checkAgainst(s, up *rules.Set) error {
	for _, r := range s.Rules() {
		if !r.Global {
			continue
		}
		ur := up.Get(r.Name)
		switch {
		case ur == nil:
			return &rules.Error{Rule: r.Name, Index: -1, Field: "scope",
				Msg: "global, but the global tier (-upstream) has no rule of that name: add it there first"}
		case !reflect.DeepEqual(ur.Spec, r.Spec):
			want, _ := json.Marshal(ur.Spec)
			return &rules.Error{Rule: r.Name, Index: -1, Field: "scope",
				Msg: "global, but the global tier's rule differs; a global rule must be the same in every region: the global tier has " + string(want)}
		}
	}
	return nil
}

// Close returns every token held to the global tier and stops.
func (u *Upstream) Close() error {
	var err error
	u.once.Do(func() {
		close(u.stop)
		<-u.done
		err = u.lim.Close()
		u.local.inner.Close()
		u.hc.CloseIdleConnections()
	})
	return err
}

// floor is rule's regional_floor (as the global tier has it).
func (u *Upstream) floor(rule string) float64 {
	if r := u.lim.Rules().Get(rule); r != nil {
		return r.RegionalFloor
	}
	return 0
}

// run probes the global tier every Probe and drops idle demand counters.
func (u *Upstream) run() {
	defer close(u.done)
	t := time.NewTicker(u.cfg.Probe)
	defer t.Stop()
	for {
		select {
		case <-u.stop:
			return
		case <-t.C:
		}
		url := u.cfg.URLs[0]
		var err error
		for _, url = range u.cfg.URLs {
			var d time.Duration
			if d, err = u.probe(url, max(4*u.RTT(), time.Second)); err == nil {
				u.rtt.Store(int64(d))
				break
			}
		}
		if err != nil {
			if p := u.lastErr.Load(); p == nil || *p != err.Error() {
				u.cfg.Logger.Warn("upstream: the global tier does not answer; global rules decide from what this node holds, then by on_store_failure", "err", err)
			}
			msg := err.Error()
			u.lastErr.Store(&msg)
		} else if u.lastErr.Swap(nil) != nil {
			u.cfg.Logger.Info("upstream: the global tier answers again", "url", url)
		}
		u.demand.sweep()
		u.recheck()
	}
}

// recheck checks the node's set again when the global tier's rules
// changed (the Limiter polls them), and says so in the log, State and
// sluice_upstream_rules_differ until they agree again.
func (u *Upstream) recheck() {
	up, s := u.lim.Rules(), u.checked.Load()
	if s == nil || up == u.upRules {
		return
	}
	u.upRules = up
	err := checkAgainst(s, up)
	if err == nil {
		if u.rulesErr.Swap(nil) != nil {
			u.cfg.Logger.Info("upstream: the global rules agree with the global tier's again")
		}
		return
	}
	msg := err.Error() + " (the global tier changed it: change this region's rules to match)"
	u.rulesErr.Store(&msg)
	u.cfg.Logger.Warn("upstream: a global rule differs from the global tier's", "err", msg)
}

// probe asks url for the lease protocol's rules and returns the round
// trip, or an error naming what is wrong.
func (u *Upstream) probe(url string, timeout time.Duration) (time.Duration, error) {
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
	defer fasthttp.ReleaseRequest(req)
	defer fasthttp.ReleaseResponse(resp)
	req.SetRequestURI(url + "/v1/lease/rules")
	req.Header.Set(fasthttp.HeaderAuthorization, "Bearer "+u.cfg.Token)
	start := time.Now()
	if err := u.hc.DoTimeout(req, resp, timeout); err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrUnreachable, url, err)
	}
	d := time.Since(start)
	body := resp.Body()
	switch st := resp.StatusCode(); {
	case st == fasthttp.StatusUnauthorized || st == fasthttp.StatusForbidden:
		return 0, fmt.Errorf("%w: %s answered %d: SLUICE_UPSTREAM_TOKEN must be the global tier's -client-token", ErrToken, url, st)
	case st == fasthttp.StatusNotFound && strings.Contains(string(body), "lease protocol is off"):
		return 0, fmt.Errorf("%w: %s: its lease protocol is off (start it with -client-token)", ErrNotSluice, url)
	case st != fasthttp.StatusOK:
		return 0, fmt.Errorf("%w: %s answered %d to GET /v1/lease/rules", ErrNotSluice, url, st)
	}
	var b struct {
		Version *string           `json:"version"`
		Rules   []json.RawMessage `json:"rules"`
	}
	if err := json.Unmarshal(body, &b); err != nil || b.Version == nil {
		return 0, fmt.Errorf("%w: %s: GET /v1/lease/rules did not answer a rule set", ErrNotSluice, url)
	}
	return d, nil
}

// WriteMetrics writes sluice_upstream_* in Prometheus text format,
// with sluice_upstream_tokens_lent{rule}: what the global tier lends this
// node of each global rule's keys (the tokens it holds, at most).
func (u *Upstream) WriteMetrics(w io.Writer) {
	u.set.WritePrometheus(w)
	byRule := u.Lent()
	names := make([]string, 0, len(byRule))
	for r := range byRule {
		names = append(names, r)
	}
	slices.Sort(names)
	if len(names) > 0 { // one # HELP and # TYPE for the family
		metrics.WriteMetadataIfNeeded(w, "sluice_upstream_tokens_lent", "gauge")
	}
	for _, r := range names { // rule names are [A-Za-z0-9_.-]
		fmt.Fprintf(w, "sluice_upstream_tokens_lent{rule=%q} %d\n", r, byRule[r])
	}
}

// lentTable is what the global tier lends this node of each key, as its
// last answer said. Bounded like demandTable.
type lentTable struct {
	mu sync.Mutex
	m  map[string]int64
}

func (t *lentTable) set(ckey string, lent int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, had := t.m[ckey]
	switch {
	case lent <= 0 || (!had && len(t.m) >= maxDemandKeys):
		delete(t.m, ckey)
	case had:
		t.m[ckey] = lent
	default:
		t.m[strings.Clone(ckey)] = lent
	}
}

// byRule sums the table by rule.
func (t *lentTable) byRule() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int64{}
	for k, v := range t.m {
		rule, _, _ := strings.Cut(k, ":")
		out[rule] += v
	}
	return out
}

// MetricsHelp returns the # HELP text of each metric family an Upstream
// writes, by family name: what it counts, in which unit. sluiced passes
// them to the node, whose /metrics writes them (node.Config.MetricsHelp).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_upstream_reachable":             "1 while the global tier answers, else 0.",
		"sluice_upstream_rules_differ":          "1 while the global tier has a global rule otherwise than this node, else 0.",
		"sluice_upstream_rtt_seconds":           "The last measured round trip to the global tier, in seconds (probed every 5 s).",
		"sluice_upstream_keys":                  "Keys of global rules whose leases this node holds.",
		"sluice_upstream_tokens_leased_total":   "Tokens the global tier granted this node in leases.",
		"sluice_upstream_tokens_returned_total": "Unspent tokens this node gave back to the global tier.",
		"sluice_upstream_local_decisions_total": "Checks of global rules decided by on_store_failure, the global tier out of reach.",
		"sluice_upstream_tokens_lent":           "Tokens the global tier lends this node of a global rule's keys (what the node holds, at most), by rule.",
	}
}

// register adds sluice_upstream_* to the metrics set.
func (u *Upstream) register() {
	u.set = metrics.NewSet()
	set := u.set
	set.GetOrCreateGauge(`sluice_upstream_reachable`, func() float64 {
		if ok, _ := u.State(); !ok {
			return 0
		}
		return 1
	})
	set.GetOrCreateGauge(`sluice_upstream_rules_differ`, func() float64 {
		if u.rulesErr.Load() != nil {
			return 1
		}
		return 0
	})
	set.GetOrCreateGauge(`sluice_upstream_rtt_seconds`, func() float64 { return u.RTT().Seconds() })
	set.GetOrCreateGauge(`sluice_upstream_keys`, func() float64 { return float64(u.Manager().Stats().ActiveKeys) })
	set.GetOrCreateGauge(`sluice_upstream_tokens_leased_total`, func() float64 { return float64(u.Manager().Stats().TokensLeased) })
	set.GetOrCreateGauge(`sluice_upstream_tokens_returned_total`, func() float64 { return float64(u.Manager().Stats().TokensReturned) })
	set.GetOrCreateGauge(`sluice_upstream_local_decisions_total`, func() float64 { return float64(u.Manager().Stats().DegradedDecisions) })
}

// demandTable counts the checks of each global key decided here, for the
// demand sent with its lease calls. Bounded: keys beyond maxDemandKeys
// report no demand (the global tier then goes by their lease size).
type demandTable struct {
	now func() time.Time // nil: time.Now
	mu  sync.RWMutex
	m   map[string]*demandCounter
}

func (t *demandTable) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

const maxDemandKeys = 1 << 20

type demandCounter struct {
	n    atomic.Int64 // checks counted
	used atomic.Bool  // counted since the last sweep

	mu       sync.Mutex // rate's state
	lastN    int64
	last     time.Time
	rate     float64
	measured bool // rate holds a measurement (a whole rateWindow)
}

func (t *demandTable) add(ckey string) {
	t.mu.RLock()
	c := t.m[ckey]
	t.mu.RUnlock()
	if c == nil {
		t.mu.Lock()
		if c = t.m[ckey]; c == nil {
			if len(t.m) >= maxDemandKeys {
				t.mu.Unlock()
				return
			}
			c = &demandCounter{last: t.clock()}
			t.m[strings.Clone(ckey)] = c
		}
		t.mu.Unlock()
	}
	c.n.Add(1)
	if !c.used.Load() {
		c.used.Store(true)
	}
}

// rateWindow is the least time a demand measurement spans: a saturated
// key leases every few milliseconds, too short to count checks over.
const rateWindow = 250 * time.Millisecond

// rate is ckey's checks per second, rounded up (0: unknown).
func (t *demandTable) rate(ckey string) int64 {
	t.mu.RLock()
	c := t.m[ckey]
	t.mu.RUnlock()
	if c == nil {
		return 0
	}
	now := t.clock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if el := now.Sub(c.last); el >= rateWindow {
		n := c.n.Load()
		inst := float64(n-c.lastN) / el.Seconds()
		if !c.measured {
			c.rate, c.measured = inst, true
		} else {
			a := el.Seconds() / (el.Seconds() + 1) // a time constant of 1s
			c.rate += a * (inst - c.rate)
		}
		c.lastN, c.last = n, now
	}
	if !c.measured {
		return 0 // the key's first rateWindow: unknown
	}
	return int64(c.rate + 0.999)
}

// sweep drops the counters of keys not checked since the last sweep.
func (t *demandTable) sweep() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, c := range t.m {
		if !c.used.Swap(false) {
			delete(t.m, k)
		}
	}
}

// floorStore is the Manager's local Store while the global tier is
// unreachable (on_store_failure: local): this node's memory, with each
// policy scaled down to the rule's regional_floor, so that a cut-off
// region admits at most that share of the limit per period beyond the
// tokens it holds. A rule without a floor admits nothing beyond them.
type floorStore struct {
	inner *lease.MemoryStore
	floor func(rule string) float64
}

var _ lease.Store = (*floorStore)(nil)

// scaled is p at floor f; false when it admits nothing.
func scaled(p lease.Policy, f float64) (lease.Policy, bool) {
	q := p
	q.Limit = int64(float64(p.Limit) * f)
	if p.Burst > 0 {
		q.Burst = max(int64(float64(p.Burst)*f), q.Limit)
	}
	return q, q.Limit >= 1 && q.Validate() == nil
}

func (s *floorStore) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	rule, _, _ := strings.Cut(key, ":")
	q, ok := scaled(p, s.floor(rule))
	if !ok || need > q.Capacity() {
		return lease.Grant{Wait: p.Period, Reset: p.Period}, nil
	}
	return s.inner.Lease(ctx, key, q, max(min(want, q.Capacity()), need), need, to)
}

func (s *floorStore) Return(ctx context.Context, key string, p lease.Policy, tokens int64, holder string) error {
	rule, _, _ := strings.Cut(key, ":")
	q, ok := scaled(p, s.floor(rule))
	if !ok {
		return nil
	}
	return s.inner.Return(ctx, key, q, tokens, holder)
}

func (s *floorStore) Log(ctx context.Context, key string, p lease.Policy, hits int64) (lease.Result, error) {
	return s.inner.Log(ctx, key, p, hits)
}

func (s *floorStore) Acquire(ctx context.Context, key string, p lease.Policy, id string, hits int64) (lease.Result, error) {
	return s.inner.Acquire(ctx, key, p, id, hits)
}

func (s *floorStore) Release(ctx context.Context, key string, p lease.Policy, id string) error {
	return s.inner.Release(ctx, key, p, id)
}
