package node

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/node/api"
	"github.com/sluicehq/sluice/node/rules"
)

// What front ends other than HTTP (the Envoy RLS server, node/rls) use.

// SetRLSRules installs s, the rules that count the limits of the Envoy RLS
// configuration, next to the rule set of SetRules (nil removes them). They
// are reachable by name (DecideChecks, {"rule","key"} checks, and items
// forwarded by peers, so that cluster routing works for them) but are
// matched by no descriptor check or forward-auth request. A name used by
// both keeps SetRules' rule. Before the first SetRules the node stays not
// ready and s waits for it.
func (n *Node) SetRLSRules(s *rules.Set) {
	n.reload.Lock()
	defer n.reload.Unlock()
	n.reload.rls = s
	if t := n.rules.Load(); t != nil {
		n.rules.Store(n.met.newRuleTable(t.set, s))
	}
}

// DecideChecks decides checks as POST /v1/checks does: each check on its
// own (a denied check refunds only its own rules), in order, through this
// node's rules, leases and cluster routing; results[i] answers checks[i]
// (a check the node refuses has Error and Field set). results must be as
// long as checks. It returns ErrNotReady before the first SetRules.
func (n *Node) DecideChecks(checks []api.CheckRequest, results []api.CheckResult) error {
	t := n.rules.Load()
	if t == nil {
		return ErrNotReady
	}
	st := n.getState()
	defer n.putState(st)
	if n.cl == nil {
		st.results = grow(st.results, len(checks))
		n.decideBatch(st, t, checks)
		copy(results, st.results)
		return nil
	}
	// A clustered node decides check by check (each routed to its owner);
	// engine's unified decision method will batch them per peer.
	for i := range checks {
		c := &checks[i]
		res := &results[i]
		st.items = st.items[:0]
		st.keys = st.keys[:0]
		if err := st.addCheck(t, c); err != nil {
			_, msg, field := errorStatus(err)
			*res = api.CheckResult{Error: msg, Field: batchField(i, field)}
			continue
		}
		v, err := n.decide(st.items, hitsOf(c))
		if err != nil {
			_, msg, field := errorStatus(err)
			*res = api.CheckResult{Error: msg, Field: batchField(i, field)}
			continue
		}
		result(res, st.items, v)
	}
	return nil
}

// MetricsSet returns the set of the Node's own metrics, written on
// /metrics, for front ends that add theirs (node/rls).
func (n *Node) MetricsSet() *metrics.Set { return n.met.set }
