package node

import (
	"strconv"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/rules"
)

// ruleTable is an immutable rule set plus what the hot path needs per rule,
// computed once at SetRules.
type ruleTable struct {
	set    *rules.Set
	byName map[string]*ruleInfo
}

// ruleInfo is one rule's precomputed data.
type ruleInfo struct {
	rule *rules.Rule
	name string
	// prefix is the counter key prefix: name + ":".
	prefix string
	// base is the rule's policy without overrides.
	base lease.Policy
	// hdrPolicy is the RateLimit-Policy value of base,
	// `"name";q=limit;w=seconds`; hdrLimit is base's limit in decimal;
	// hdrRL is the start of the RateLimit value, `"name";r=`.
	hdrPolicy, hdrLimit, hdrRL []byte
	checks                     [numDecisions]*metrics.Counter
	// skipped counts forward-auth checks the rule skipped because the
	// request lacked its key (on_missing_key: skip); nil for a rule
	// without a key, which forward-auth never matches.
	skipped *metrics.Counter
	// missingKeyHint is the X-Sluice-Missing-Key value of a request denied
	// for lacking the key (on_missing_key: deny): the rule's key sources.
	missingKeyHint []byte
}

// newRuleTable builds the table of s, the rule set that requests are
// matched against, plus the rules of extra (the Envoy RLS configuration's,
// see SetRLSRules), reachable by name only. A name in both keeps s's rule.
func (m *nodeMetrics) newRuleTable(s, extra *rules.Set) *ruleTable {
	t := &ruleTable{set: s, byName: make(map[string]*ruleInfo, s.Len()+extra.Len())}
	m.addRules(t, s)
	m.addRules(t, extra)
	return t
}

func (m *nodeMetrics) addRules(t *ruleTable, s *rules.Set) {
	for _, r := range s.Rules() {
		if t.byName[r.Name] != nil {
			continue
		}
		ri := &ruleInfo{
			rule:   r,
			name:   r.Name,
			prefix: r.Name + ":",
			base:   r.Policy,
			checks: m.checkCounters(r.Name),
		}
		ri.hdrPolicy = appendPolicyHeader(nil, r.Name, r.Policy)
		ri.hdrLimit = strconv.AppendInt(nil, r.Policy.Limit, 10)
		ri.hdrRL = append(strconv.AppendQuote(nil, r.Name), ";r="...)
		if len(r.Sources) > 0 {
			ri.skipped = m.set.GetOrCreateCounter(`sluice_checks_skipped_total{rule=` + strconv.Quote(r.Name) + `,reason="missing_key"}`)
			ri.missingKeyHint = []byte(r.Spec.Key)
		}
		t.byName[r.Name] = ri
	}
}

// get returns the rule named name, or nil.
func (t *ruleTable) get(name string) *ruleInfo {
	return t.byName[name]
}

// Header names, written with SetCanonical so that their case is kept.
var (
	hdrRateLimitPolicy = []byte("RateLimit-Policy")
	hdrRateLimit       = []byte("RateLimit")
	hdrXLimit          = []byte("X-RateLimit-Limit")
	hdrXRemaining      = []byte("X-RateLimit-Remaining")
	hdrXReset          = []byte("X-RateLimit-Reset")
	hdrRetryAfter      = []byte("Retry-After")
	hdrMissingKey      = []byte("X-Sluice-Missing-Key")
)

// appendPolicyHeader appends `"name";q=limit;w=seconds`
// (draft-ietf-httpapi-ratelimit-headers).
func appendPolicyHeader(dst []byte, name string, p lease.Policy) []byte {
	dst = strconv.AppendQuote(dst, name)
	dst = append(dst, ";q="...)
	dst = strconv.AppendInt(dst, p.Limit, 10)
	dst = append(dst, ";w="...)
	return strconv.AppendInt(dst, ceilSeconds(p.Period), 10)
}

// ceilSeconds rounds d up to whole seconds (negative → 0).
func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// ceilMillis rounds d up to whole milliseconds (negative → 0).
func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// setRateHeaders writes the rate-limit headers of one answer: the policy,
// remaining and reset of the reported rule, and Retry-After (seconds,
// rounded up, at least 1) when denied. scratch is reused and returned.
func setRateHeaders(h *fasthttp.ResponseHeader, scratch []byte, ri *ruleInfo, p lease.Policy, d *lease.Decision, denied bool) []byte {
	remaining := max(d.Remaining, 0)
	reset := ceilSeconds(d.Reset)
	if p == ri.base {
		h.SetCanonical(hdrRateLimitPolicy, ri.hdrPolicy)
		h.SetCanonical(hdrXLimit, ri.hdrLimit)
	} else { // an override applies to this key
		scratch = appendPolicyHeader(scratch[:0], ri.name, p)
		h.SetCanonical(hdrRateLimitPolicy, scratch)
		scratch = strconv.AppendInt(scratch[:0], p.Limit, 10)
		h.SetCanonical(hdrXLimit, scratch)
	}
	// One buffer holds `"name";r=R;t=T`; X-RateLimit-Remaining and -Reset
	// are slices of it.
	scratch = append(scratch[:0], ri.hdrRL...)
	r0 := len(scratch)
	scratch = strconv.AppendInt(scratch, remaining, 10)
	r1 := len(scratch)
	scratch = append(scratch, ";t="...)
	t0 := len(scratch)
	scratch = strconv.AppendInt(scratch, reset, 10)
	h.SetCanonical(hdrRateLimit, scratch)
	h.SetCanonical(hdrXRemaining, scratch[r0:r1])
	h.SetCanonical(hdrXReset, scratch[t0:])
	if denied {
		scratch = strconv.AppendInt(scratch[:0], max(ceilSeconds(d.RetryAfter), 1), 10)
		h.SetCanonical(hdrRetryAfter, scratch)
	}
	return scratch
}
