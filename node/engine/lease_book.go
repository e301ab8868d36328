package engine

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease"
)

// The lessor's book: per holder and counter key, what the Store said it
// lends the holder (Grant.Lent) as of the holder's last call, until the
// loan ends; per key, the Store's remaining as of the last call of any
// holder. It is what /v1/stats and the metrics show of the tokens lent
// outside the cluster (LeaseStats), and what a return or a renewal
// compares with to count the tokens a holder reports spent. It is bounded
// (maxBook entries; loans beyond it go uncounted) and swept of ended
// loans at most once a second.

// maxBook bounds the book's entries.
const maxBook = 1 << 20

// leaseBook is safe for concurrent use.
type leaseBook struct {
	set *metrics.Set
	now func() time.Time

	mu struct {
		sync.Mutex
		keys   map[string]*bookKey // counter key → its loans
		loans  int                 // Σ len(keys[k].loans)
		byRule map[string]*leaseRuleMetrics
		next   time.Time // the next sweep
	}
}

// bookKey is a counter key lent to holders outside the cluster: its
// loans (one per holder; a handful, bounded by the rule's max_holders)
// and the Store's remaining as of its last call.
type bookKey struct {
	rule      *leaseRuleMetrics
	remaining int64
	loans     []bookLoan
}

type bookLoan struct {
	holder string
	region bool
	lent   int64
	until  time.Time
}

// leaseRuleMetrics are one rule's lease counters.
type leaseRuleMetrics struct {
	name     string
	granted  *metrics.Counter // tokens granted to gateways and regions
	returned *metrics.Counter // tokens they gave back
	reported *metrics.Counter // tokens they reported spent
	checked  *metrics.Counter // lease ops decided as checks (over the share)
	crowded  *metrics.Counter // lease ops of new holders past max_holders
	// Tokens lent now, as the book has it (book.mu).
	gateways, regions int64
	store             int64 // Σ over the rule's keys in the book of the Store's remaining
	keys              int64
}

func newLeaseBook(set *metrics.Set, now func() time.Time) *leaseBook {
	b := &leaseBook{set: set, now: now}
	b.mu.keys = map[string]*bookKey{}
	b.mu.byRule = map[string]*leaseRuleMetrics{}
	return b
}

// ruleMetrics returns (creating) rule's counters.
func (b *leaseBook) ruleMetrics(rule string) *leaseRuleMetrics {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := b.mu.byRule[rule]
	if m != nil {
		return m
	}
	l := `{rule=` + strconv.Quote(rule) + `}`
	m = &leaseRuleMetrics{
		name:     rule,
		granted:  b.set.GetOrCreateCounter("sluice_gateway_tokens_granted_total" + l),
		returned: b.set.GetOrCreateCounter("sluice_gateway_tokens_returned_total" + l),
		reported: b.set.GetOrCreateCounter("sluice_gateway_decisions_reported_total" + l),
		checked:  b.set.GetOrCreateCounter("sluice_gateway_checks_total" + l),
		crowded:  b.set.GetOrCreateCounter("sluice_gateway_crowded_total" + l),
	}
	b.set.GetOrCreateGauge("sluice_gateway_tokens_lent"+l, func() float64 { return float64(b.read(m, func(m *leaseRuleMetrics) int64 { return m.gateways })) })
	b.set.GetOrCreateGauge("sluice_region_tokens_lent"+l, func() float64 { return float64(b.read(m, func(m *leaseRuleMetrics) int64 { return m.regions })) })
	b.mu.byRule[rule] = m
	return m
}

// read sweeps the book and reads one of m's figures.
func (b *leaseBook) read(m *leaseRuleMetrics, f func(*leaseRuleMetrics) int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(b.now())
	return f(m)
}

// lent records the Store's answer gr to a lease call of holder (a
// region's when region) of ckey: the loan it holds now (gr.Lent) until
// its TTL (or, with shares ahead, the end of the last window they
// cover), what was granted, and what the call reports spent (what the
// holder was lent and no longer holds).
func (b *leaseBook) lent(holder string, region bool, ckey string, rm *leaseRuleMetrics, to lease.Lessee, gr lease.Grant, p lease.Policy) {
	now := b.now()
	until := now.Add(to.TTL)
	if gr.AheadWindows > 0 {
		until = now.Add(max(to.TTL, gr.Reset+time.Duration(gr.AheadWindows)*p.Period))
	}
	rm.granted.AddInt64(gr.Granted)
	if gr.Crowded {
		rm.crowded.Inc()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k, i := b.find(ckey, holder)
	if i >= 0 && now.Before(k.loans[i].until) {
		rm.reported.AddInt64(max(k.loans[i].lent-to.Held, 0))
	}
	b.put(ckey, k, i, rm, bookLoan{holder: holder, region: region, lent: gr.Lent, until: until}, gr.Remaining)
}

// returned records a return of tokens by holder of ckey: its loan ends,
// and what it was lent and did not give back was spent.
func (b *leaseBook) returned(holder, ckey string, rm *leaseRuleMetrics, tokens int64) {
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	k, i := b.find(ckey, holder)
	back := tokens
	if i >= 0 && now.Before(k.loans[i].until) {
		back = min(tokens, k.loans[i].lent)
		rm.reported.AddInt64(k.loans[i].lent - back)
	}
	rm.returned.AddInt64(back)
	if k != nil {
		b.put(ckey, k, i, rm, bookLoan{holder: holder}, k.remaining+back)
	}
}

// find returns ckey's entry (nil without one) and the index of holder's
// loan in it (-1 without one). b.mu held.
func (b *leaseBook) find(ckey, holder string) (*bookKey, int) {
	k := b.mu.keys[ckey]
	if k == nil {
		return nil, -1
	}
	for i := range k.loans {
		if k.loans[i].holder == holder {
			return k, i
		}
	}
	return k, -1
}

// put sets holder's loan of ckey (k, nil without an entry; i its index,
// -1 without one) to nl (none when its lent is 0) and the key's Store
// remaining, keeping the per-rule sums. b.mu held.
func (b *leaseBook) put(ckey string, k *bookKey, i int, rm *leaseRuleMetrics, nl bookLoan, remaining int64) {
	if i >= 0 {
		k.rule.unlend(k.loans[i])
	}
	switch {
	case nl.lent > 0 && (i >= 0 || b.mu.loans < maxBook):
		if k == nil {
			k = &bookKey{rule: rm}
			b.mu.keys[ckey] = k
			rm.keys++
		}
		if i >= 0 {
			k.loans[i] = nl
		} else {
			k.loans = append(k.loans, nl)
			b.mu.loans++
		}
		k.rule.lend(nl)
	case i >= 0:
		k.loans[i] = k.loans[len(k.loans)-1]
		k.loans = k.loans[:len(k.loans)-1]
		b.mu.loans--
	}
	if k == nil {
		return
	}
	k.rule.store += remaining - k.remaining
	k.remaining = remaining
	if len(k.loans) == 0 {
		k.rule.store -= k.remaining
		k.rule.keys--
		delete(b.mu.keys, ckey)
	}
}

// lend and unlend add l to, and take it off, m's sums (book.mu held).
func (m *leaseRuleMetrics) lend(l bookLoan) {
	if l.region {
		m.regions += l.lent
	} else {
		m.gateways += l.lent
	}
}

func (m *leaseRuleMetrics) unlend(l bookLoan) {
	if l.region {
		m.regions -= l.lent
	} else {
		m.gateways -= l.lent
	}
}

// sweep drops the loans that ended by now (at most once a second; b.mu
// held).
func (b *leaseBook) sweep(now time.Time) {
	if now.Before(b.mu.next) {
		return
	}
	b.mu.next = now.Add(time.Second)
	for ckey, k := range b.mu.keys {
		for i := len(k.loans) - 1; i >= 0; i-- {
			if !now.Before(k.loans[i].until) {
				b.put(ckey, k, i, k.rule, bookLoan{}, k.remaining)
			}
		}
	}
}

// LeaseRuleStats is one rule's figures of the lease protocol on this
// node: what it lends holders outside the cluster of the keys it owns.
type LeaseRuleStats struct {
	// Gateways and Regions are the tokens lent now to gateways and to
	// regions' nodes, as the Store reported them lent at each holder's
	// last call, until the loan ends.
	Gateways int64 `json:"gateways"`
	Regions  int64 `json:"regions"`
	// Store is the Store's remaining of the keys lent, as of each key's
	// last call; Keys how many keys are lent.
	Store int64 `json:"store"`
	Keys  int64 `json:"keys"`
	// Granted, Returned and Reported are totals since the node started:
	// tokens granted, given back, and reported spent (the hits of the
	// decisions holders made with them); Checked the ops decided as
	// checks (a need over the holder's share), Crowded those of new
	// holders past max_holders.
	Granted  uint64 `json:"granted"`
	Returned uint64 `json:"returned"`
	Reported uint64 `json:"reported"`
	Checked  uint64 `json:"checked"`
	Crowded  uint64 `json:"crowded"`
}

// LeaseStats returns the lease protocol's figures by rule (the rules
// leased since the node started).
func (e *Engine) LeaseStats() map[string]LeaseRuleStats {
	b := e.lessor.book
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sweep(b.now())
	out := make(map[string]LeaseRuleStats, len(b.mu.byRule))
	for name, m := range b.mu.byRule {
		out[name] = LeaseRuleStats{
			Gateways: m.gateways, Regions: m.regions, Store: m.store, Keys: m.keys,
			Granted: m.granted.Get(), Returned: m.returned.Get(), Reported: m.reported.Get(),
			Checked: m.checked.Get(), Crowded: m.crowded.Get(),
		}
	}
	return out
}

// LeaseHolder is one holder's loans from this node.
type LeaseHolder struct {
	// Holder is the holder's public id (with "r.<region>." before it
	// for a region's node): never its secret.
	Holder string `json:"holder"`
	Node   string `json:"node"`
	// Lent is what the Store lends it, in total and by rule; Keys how
	// many keys it holds; UntilMS when its last loan ends unless renewed
	// (Unix ms).
	Lent    int64            `json:"lent"`
	Rules   map[string]int64 `json:"rules"`
	Keys    int              `json:"keys"`
	UntilMS int64            `json:"until_ms"`
}

// MaxStatsHolders bounds the holders LeaseHolders lists.
const MaxStatsHolders = 100

// LeaseHolders lists the holders this node lends to, the most lent
// first, at most MaxStatsHolders, and how many more there are. node
// names this node in each.
func (e *Engine) LeaseHolders(node string) ([]LeaseHolder, int) {
	b := e.lessor.book
	by := map[string]*LeaseHolder{}
	b.mu.Lock()
	b.sweep(b.now())
	for _, k := range b.mu.keys {
		for _, l := range k.loans {
			h := by[l.holder]
			if h == nil {
				h = &LeaseHolder{Holder: PublicHolder(l.holder), Node: node, Rules: map[string]int64{}}
				by[l.holder] = h
			}
			h.Lent += l.lent
			h.Rules[k.rule.name] += l.lent
			h.Keys++
			h.UntilMS = max(h.UntilMS, l.until.UnixMilli())
		}
	}
	b.mu.Unlock()
	out := make([]LeaseHolder, 0, len(by))
	for _, h := range by {
		out = append(out, *h)
	}
	return TopHolders(out)
}

// TopHolders sorts hs, the most lent first, and keeps MaxStatsHolders;
// it returns how many it left out.
func TopHolders(hs []LeaseHolder) ([]LeaseHolder, int) {
	slices.SortFunc(hs, func(a, b LeaseHolder) int {
		return cmp.Or(cmp.Compare(b.Lent, a.Lent), cmp.Compare(a.Holder, b.Holder), cmp.Compare(a.Node, b.Node))
	})
	if len(hs) > MaxStatsHolders {
		return hs[:MaxStatsHolders], len(hs) - MaxStatsHolders
	}
	return hs, 0
}

// PublicHolder is how a holder's Store id is shown: without the
// namespace of its client token ("gw.<hash>."), so its public id, after
// "r.<region>." for a region's node.
func PublicHolder(id string) string {
	if rest, ok := strings.CutPrefix(id, "gw."); ok {
		if _, after, ok := strings.Cut(rest, "."); ok {
			return after
		}
	}
	return id
}
