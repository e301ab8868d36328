package node

import "github.com/sluicehq/sluice/node/engine"

// mergeLeaseStats adds a peer's token and lease protocol figures (o) to
// body's.
func mergeLeaseStats(body, o *statsBody) {
	for rule, ts := range o.Tokens {
		if body.Tokens == nil {
			body.Tokens = map[string]engine.TokenStats{}
		}
		sum := body.Tokens[rule]
		sum.Add(ts)
		body.Tokens[rule] = sum
	}
	for rule, gs := range o.Gateway {
		if body.Gateway == nil {
			body.Gateway = map[string]engine.LeaseRuleStats{}
		}
		sum := body.Gateway[rule]
		sum.Gateways += gs.Gateways
		sum.Regions += gs.Regions
		sum.Store += gs.Store
		sum.Keys += gs.Keys
		sum.Granted += gs.Granted
		sum.Returned += gs.Returned
		sum.Reported += gs.Reported
		sum.Checked += gs.Checked
		sum.Crowded += gs.Crowded
		body.Gateway[rule] = sum
	}
}
