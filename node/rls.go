package node

import (
	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/node/rules"
)

// What front ends other than HTTP (the Envoy RLS server, node/rls) use.

// SetRLSRules installs s, the rules that count the limits of the Envoy RLS
// configuration, next to the rule set of SetRules (nil removes them). They
// are reachable by name (Decide, {"rule","key"} checks, and items
// forwarded by peers, so that cluster routing works for them) but are
// matched by no descriptor check or forward-auth request. A name used by
// both keeps SetRules' rule. Before the first SetRules the node stays not
// ready and s waits for it.
func (n *Node) SetRLSRules(s *rules.Set) {
	n.reload.Lock()
	defer n.reload.Unlock()
	n.reload.rls = s
	if t := n.eng.Table(); t != nil {
		n.eng.SetRules(t.Set(), s)
	}
}

// MetricsSet returns the set of the Node's own metrics, written on
// /metrics, for front ends that add theirs (node/rls).
func (n *Node) MetricsSet() *metrics.Set { return n.met.set }
