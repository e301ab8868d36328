package engine

import (
	"fmt"
	"iter"
	"strconv"
	"sync/atomic"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/rules"
)

// Table is an immutable rule set plus what the engine needs per rule,
// computed once when the set is installed (Engine.SetRules).
type Table struct {
	set    *rules.Set
	byName map[string]*Rule
}

// Rule is one rule of a Table with its precomputed data and its counters
// (sluice_checks_total by decision, kept across reloads: they are created
// once per rule name in the Engine's metrics set).
type Rule struct {
	rule *rules.Rule
	name string
	// prefix is the counter key prefix: name + ":".
	prefix string
	// base is the rule's policy without overrides.
	base lease.Policy
	// mgr decides the rule's keys: the engine's Manager, or its Global
	// one for a global rule; demand is the Engine's Demand for a global
	// rule decided by Global, else nil; global says mgr is Global.
	mgr    *lease.Manager
	demand func(ckey string)
	global bool
	checks [NumDecisions]*metrics.Counter
	// skipped counts forward-auth checks the rule skipped because the
	// request lacked its key (on_missing_key: skip); nil for a rule
	// without a key, which forward-auth never matches.
	skipped *metrics.Counter
	data    any
	// lease is the rule's lease protocol counters (the lessor's book's,
	// by name), once an op of the rule came.
	lease atomic.Pointer[leaseRuleMetrics]
}

// Set returns the rule set requests are matched against (the rules of
// the extra set given to SetRules are reachable by name only).
func (t *Table) Set() *rules.Set { return t.set }

// Get returns the rule named name, or nil.
func (t *Table) Get(name string) *Rule { return t.byName[name] }

// Len returns the number of rules reachable by name.
func (t *Table) Len() int { return len(t.byName) }

// All yields every rule reachable by name, in no particular order.
func (t *Table) All() iter.Seq2[string, *Rule] {
	return func(yield func(string, *Rule) bool) {
		for name, r := range t.byName {
			if !yield(name, r) {
				return
			}
		}
	}
}

// Rule returns the rule as parsed.
func (r *Rule) Rule() *rules.Rule { return r.rule }

// Name returns the rule's name.
func (r *Rule) Name() string { return r.name }

// Base returns the rule's policy without overrides.
func (r *Rule) Base() lease.Policy { return r.base }

// Data returns what Config.RuleData made for the rule (nil without it).
func (r *Rule) Data() any { return r.data }

// Counts returns the rule's sluice_checks_total counters by decision.
func (r *Rule) Counts() (c [NumDecisions]uint64) {
	for d := range NumDecisions {
		c[d] = r.checks[d].Get()
	}
	return c
}

// CountMissingKey counts a forward-auth request that matched r but lacked
// its key and was not decided: a skip (on_missing_key: skip), else a
// denial (shadow_denied for a shadow rule).
func (r *Rule) CountMissingKey(skip bool) {
	switch {
	case skip:
		if r.skipped != nil {
			r.skipped.Inc()
		}
	case r.rule.Shadow:
		r.checks[DecShadowDenied].Inc()
	default:
		r.checks[DecDenied].Inc()
	}
}

// newTable builds the table of s, the rule set that requests are matched
// against, plus the rules of extra, reachable by name only. A name in
// both keeps s's rule.
func (e *Engine) newTable(s, extra *rules.Set) *Table {
	t := &Table{set: s, byName: make(map[string]*Rule, s.Len()+extra.Len())}
	e.addRules(t, s)
	e.addRules(t, extra)
	return t
}

func (e *Engine) addRules(t *Table, s *rules.Set) {
	for _, r := range s.Rules() {
		if t.byName[r.Name] != nil {
			continue
		}
		ri := &Rule{
			rule:   r,
			name:   r.Name,
			prefix: r.Name + ":",
			base:   r.Policy,
			mgr:    e.mgr,
			checks: e.checkCounters(r.Name),
		}
		if r.Global && e.global != nil {
			ri.mgr, ri.demand, ri.global = e.global, e.demand, true
		}
		if len(r.Sources) > 0 {
			ri.skipped = e.set.GetOrCreateCounter(`sluice_checks_skipped_total{rule=` + strconv.Quote(r.Name) + `,reason="missing_key"}`)
		}
		if e.ruleData != nil {
			ri.data = e.ruleData(r)
		}
		t.byName[r.Name] = ri
	}
}

// Decisions, the decision label of sluice_checks_total.
const (
	DecAllowed      = iota
	DecDenied       // a rule denied on its limit
	DecShadowDenied // a shadow rule denied; the request was allowed
	DecUnavailable  // the Store was down and the rule fails closed
	DecDegraded     // the Store was down; allowed by an open rule
	DecLocal        // the Store was down; allowed from node memory (a local rule)
	DecShed         // the owner, alive, did not answer in time: answered 503 (see route.go)
	NumDecisions
)

var decisionNames = [NumDecisions]string{
	DecAllowed:      "allowed",
	DecDenied:       "denied",
	DecShadowDenied: "shadow_denied",
	DecUnavailable:  "unavailable",
	DecDegraded:     "degraded",
	DecLocal:        "local_fallback",
	DecShed:         "shed",
}

// DecisionName returns the value of the decision label of decision d
// (DecAllowed...).
func DecisionName(d int) string { return decisionNames[d] }

// checkCounters returns the per-decision counters of a rule, created once
// per rule name (and kept across reloads).
func (e *Engine) checkCounters(rule string) (c [NumDecisions]*metrics.Counter) {
	for d := range NumDecisions {
		c[d] = e.set.GetOrCreateCounter(fmt.Sprintf(`sluice_checks_total{rule=%q,decision=%q}`, rule, decisionNames[d]))
	}
	return c
}
