package engine

import (
	"strings"

	"github.com/sluicehq/sluice/lease"
)

// TokenStats is where one rule's tokens are right now, as this node
// knows them: the keys it holds (its Managers' leased buckets) and the
// keys it lends to holders outside the cluster (its lessor's book).
// Summed over a cluster's nodes, it tells how far admissions could fall
// short of the limits if every holder vanished now: the tokens lent stay
// counted by the Store until their loans end (ShortBound).
type TokenStats struct {
	// Keys is how many of the rule's keys this node holds or lends.
	Keys int64 `json:"keys"`
	// Store is the Store's remaining of those keys, as of each key's
	// last Store call (this node's, or a holder's through it).
	Store int64 `json:"store"`
	// Nodes is what the Store lends this node of them (its tokens on
	// hand at most): of a global rule on a region's node, what the
	// global tier lends it. Gateways and Regions are what it lends
	// holders outside the cluster (the lease protocol): gateways, and
	// regions' nodes leasing the rule from this cluster as their global
	// tier.
	Nodes    int64 `json:"nodes"`
	Gateways int64 `json:"gateways"`
	Regions  int64 `json:"regions"`
	// ShortBound is Nodes + Gateways + Regions: the most the rule's
	// admissions could fall short of its limits, were every holder to
	// vanish now, until their loans end (at most their TTLs).
	ShortBound int64 `json:"short_bound"`
}

// Add adds o to s.
func (s *TokenStats) Add(o TokenStats) {
	s.Keys += o.Keys
	s.Store += o.Store
	s.Nodes += o.Nodes
	s.Gateways += o.Gateways
	s.Regions += o.Regions
	s.ShortBound += o.ShortBound
}

// ruleOf is the rule of a counter key (before its first ':').
func ruleOf(ckey string) string {
	rule, _, _ := strings.Cut(ckey, ":")
	return rule
}

// TokenStats returns where each rule's tokens are on this node (see
// TokenStats): every rule it holds or lends keys of. It walks every key
// held and lent: for a stats page, not a hot path.
func (e *Engine) TokenStats() map[string]TokenStats {
	out := map[string]TokenStats{}
	for _, m := range [...]*lease.Manager{e.mgr, e.global} {
		if m == nil {
			continue
		}
		for rule, h := range m.Holdings(ruleOf) {
			s := out[rule]
			s.Keys += h.Keys
			s.Nodes += h.Lent
			s.Store += h.Store
			out[rule] = s
		}
	}
	b := e.lessor.book
	b.mu.Lock()
	b.sweep(b.now())
	for ckey, k := range b.mu.keys {
		if e.mgr.Holds(ckey) {
			continue // its Store remaining is the Manager's, counted above
		}
		s := out[k.rule.name]
		s.Keys++
		s.Store += k.remaining
		out[k.rule.name] = s
	}
	for name, m := range b.mu.byRule {
		if m.gateways == 0 && m.regions == 0 {
			continue
		}
		s := out[name]
		s.Gateways += m.gateways
		s.Regions += m.regions
		out[name] = s
	}
	b.mu.Unlock()
	for rule, s := range out {
		s.ShortBound = s.Nodes + s.Gateways + s.Regions
		out[rule] = s
	}
	return out
}
