package engine

// MetricsHelp returns the # HELP text of each metric family the engine
// registers (table.go, engine.go), by family name: what it counts. A
// node's /metrics writes them (node combines every package's).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_checks_total":                     "Checks answered by this node, whoever decided them, by rule and decision: allowed, denied, shadow_denied, unavailable (503: a closed rule, the Store down), degraded (allowed by an open rule, the Store down), local_fallback (allowed from memory by a local rule, the Store down), shed (503: the key's owner alive but overloaded).",
		"sluice_checks_skipped_total":             "Forward-auth requests a rule did not limit, by rule and reason (missing_key: the request lacked the rule's key, and on_missing_key is skip).",
		"sluice_routed_items_total":               "Checks routed in a cluster, by who decided them: self (this node owns the key), owner (forwarded to it), fallback (here: the owner could not be deciding), demoted_owner (here: the owner stopped answering), none_shed (answered 503: the owner alive but overloaded).",
		"sluice_routed_refunds_total":             "Refunds sent to owners, for checks another rule of the same request denied.",
		"sluice_routed_items_served_total":        "Checks forwarded by peers that this node decided as their owner.",
		"sluice_share_denied_items_total":         "Checks denied because this node's share of their limit was spent: decided for an owner that does not answer, or by this node while it is the minority, on per-node memory stores.",
		"sluice_routed_lease_ops_total":           "Lease protocol ops (a gateway's or a region's lease, return or peek) routed in a cluster, by who applied them: owner (sent to it), fallback (here, on the shared Store: the owner did not answer), none_failed (answered with an error: the owner did not answer and the members keep their own memory stores).",
		"sluice_routed_lease_ops_served_total":    "Lease protocol ops forwarded by peers that this node applied as their keys' owner.",
		"sluice_gateway_tokens_lent":              "Tokens lent to gateways (the lease protocol) and not yet reported spent, returned or expired, by rule.",
		"sluice_region_tokens_lent":               "Tokens of global rules lent to regions' nodes (this cluster being their global tier) and not yet reported spent, returned or expired, by rule.",
		"sluice_gateway_tokens_granted_total":     "Tokens granted to gateways and regions' nodes (the lease protocol), by rule.",
		"sluice_gateway_tokens_returned_total":    "Tokens gateways and regions' nodes gave back, by rule.",
		"sluice_gateway_decisions_reported_total": "Tokens gateways and regions' nodes reported spent (what they were lent and no longer hold: the hits of the decisions they made), by rule.",
		"sluice_gateway_checks_total":             "Lease ops whose need was over the holder's gateway_share, decided by the owner as a check (nothing lent), by rule.",
		"sluice_gateway_crowded_total":            "Lease ops of new holders of a key that had max_holders holders, decided by the Store as a check (nothing lent), by rule.",
	}
}
