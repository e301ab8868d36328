package node

import (
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
	"github.com/sluicehq/sluice/node/rules"
)

// ruleHeaders is what the HTTP answers need per rule, computed once when
// a rule table is built (engine.Config.RuleData; engine.Rule.Data).
type ruleHeaders struct {
	// policy is the RateLimit-Policy value of the rule's base policy,
	// `"name";q=limit;w=seconds`; limit is its limit in decimal; rl is
	// the start of the RateLimit value, `"name";r=`.
	policy, limit, rl []byte
	// missingKeyHint is the X-Sluice-Missing-Key value of a request denied
	// for lacking the key (on_missing_key: deny): the rule's key sources.
	missingKeyHint []byte
}

func newRuleHeaders(r *rules.Rule) any {
	h := &ruleHeaders{
		policy: appendPolicyHeader(nil, r.Name, r.Policy),
		limit:  strconv.AppendInt(nil, r.Policy.Limit, 10),
		rl:     append(strconv.AppendQuote(nil, r.Name), ";r="...),
	}
	if len(r.Sources) > 0 {
		h.missingKeyHint = []byte(r.Spec.Key)
	}
	return h
}

// headersOf returns the headers of ri.
func headersOf(ri *engine.Rule) *ruleHeaders { return ri.Data().(*ruleHeaders) }

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
func setRateHeaders(h *fasthttp.ResponseHeader, scratch []byte, ri *engine.Rule, p lease.Policy, d *lease.Decision, denied bool) []byte {
	remaining := max(d.Remaining, 0)
	reset := ceilSeconds(d.Reset)
	rh := headersOf(ri)
	if p == ri.Base() {
		h.SetCanonical(hdrRateLimitPolicy, rh.policy)
		h.SetCanonical(hdrXLimit, rh.limit)
	} else { // an override applies to this key
		scratch = appendPolicyHeader(scratch[:0], ri.Name(), p)
		h.SetCanonical(hdrRateLimitPolicy, scratch)
		scratch = strconv.AppendInt(scratch[:0], p.Limit, 10)
		h.SetCanonical(hdrXLimit, scratch)
	}
	// One buffer holds `"name";r=R;t=T`; X-RateLimit-Remaining and -Reset
	// are slices of it.
	scratch = append(scratch[:0], rh.rl...)
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
