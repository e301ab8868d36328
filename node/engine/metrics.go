package engine

// MetricsHelp returns the # HELP text of each metric family the engine
// registers (table.go, engine.go), by family name: what it counts. A
// node's /metrics writes them (node combines every package's).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_checks_total":              "Checks answered by this node, whoever decided them, by rule and decision: allowed, denied, shadow_denied, unavailable (503: a closed rule, the Store down), degraded (allowed by an open rule, the Store down), local_fallback (allowed from memory by a local rule, the Store down), shed (503: the key's owner alive but overloaded).",
		"sluice_checks_skipped_total":      "Forward-auth requests a rule did not limit, by rule and reason (missing_key: the request lacked the rule's key, and on_missing_key is skip).",
		"sluice_routed_items_total":        "Checks routed in a cluster, by who decided them: self (this node owns the key), owner (forwarded to it), fallback (here: the owner could not be deciding), demoted_owner (here: the owner stopped answering), none_shed (answered 503: the owner alive but overloaded).",
		"sluice_routed_refunds_total":      "Refunds sent to owners, for checks another rule of the same request denied.",
		"sluice_routed_items_served_total": "Checks forwarded by peers that this node decided as their owner.",
	}
}
