package node

import (
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/node/engine"
)

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

// writeTokenMetrics writes where each rule's tokens are (engine.TokenStats,
// computed once per scrape: it walks the keys held and lent) as
// sluice_tokens{rule,where} and sluice_tokens_short_bound{rule}.
func writeTokenMetrics(w io.Writer, ts map[string]engine.TokenStats) {
	if len(ts) == 0 {
		return
	}
	rules := make([]string, 0, len(ts))
	for r := range ts {
		rules = append(rules, r)
	}
	slices.Sort(rules)
	var b []byte
	// Bare # HELP lines: writeMetrics gives them their text.
	b = append(b, "# HELP sluice_tokens\n# TYPE sluice_tokens gauge\n"...)
	for _, r := range rules {
		s := ts[r]
		for _, kv := range [...]struct {
			where string
			v     int64
		}{{"store", s.Store}, {"nodes", s.Nodes}, {"gateways", s.Gateways}, {"regions", s.Regions}} {
			b = append(b, `sluice_tokens{rule=`...)
			b = strconv.AppendQuote(b, r)
			b = append(b, `,where="`...)
			b = append(b, kv.where...)
			b = append(b, `"} `...)
			b = strconv.AppendInt(b, kv.v, 10)
			b = append(b, '\n')
		}
	}
	b = append(b, "# HELP sluice_tokens_short_bound\n# TYPE sluice_tokens_short_bound gauge\n"...)
	for _, r := range rules {
		b = append(b, `sluice_tokens_short_bound{rule=`...)
		b = strconv.AppendQuote(b, r)
		b = append(b, `} `...)
		b = strconv.AppendInt(b, ts[r].ShortBound, 10)
		b = append(b, '\n')
	}
	_, _ = w.Write(b)
}

// ruleOfKey is the rule of a counter key ("rule:key").
func ruleOfKey(ckey string) string {
	rule, _, _ := strings.Cut(ckey, ":")
	return rule
}
