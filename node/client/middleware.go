package client

import (
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// MiddlewareConfig configures Limiter.Middleware.
type MiddlewareConfig struct {
	// Rule is the rule every request is checked against; required.
	Rule string
	// Key gives a request's key (KeyFromHeader, KeyFromClientIP, or a
	// function of your own). A request whose key is empty is passed
	// through unchecked. Nil means KeyFromClientIP.
	Key func(*http.Request) string
	// Hits charged per request. Zero means 1.
	Hits int64
	// OnError is what a request gets when the Limiter cannot decide (an
	// unknown rule, a bad key, no node answering an exact rule). Nil
	// passes the request through (fail open) after nothing is charged.
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

// KeyFromHeader keys requests by the value of header name.
func KeyFromHeader(name string) func(*http.Request) string {
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) string { return r.Header.Get(name) }
}

// KeyFromClientIP keys requests by the TCP peer's address (not
// X-Forwarded-For: behind a proxy, key by a header the proxy sets).
func KeyFromClientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Middleware limits the requests next serves: each is checked against
// cfg.Rule with its key, in this process; a denied request is answered
// 429 with Retry-After and the RateLimit headers the nodes send
// (RateLimit, RateLimit-Policy, X-RateLimit-*), an allowed one carries
// the RateLimit headers too.
func (l *Limiter) Middleware(cfg MiddlewareConfig, next http.Handler) http.Handler {
	if cfg.Key == nil {
		cfg.Key = KeyFromClientIP
	}
	if cfg.Hits <= 0 {
		cfg.Hits = 1
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := cfg.Key(r)
		if key == "" {
			next.ServeHTTP(w, r)
			return
		}
		d, err := l.Allow(r.Context(), cfg.Rule, key, cfg.Hits)
		if err != nil {
			if cfg.OnError != nil {
				cfg.OnError(w, r, err)
				return
			}
			next.ServeHTTP(w, r)
			return
		}
		l.WriteHeaders(w.Header(), cfg.Rule, key, &d)
		if !d.Allowed {
			http.Error(w, "rate limited", http.StatusTooManyRequests)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// WriteHeaders writes the rate-limit headers a node writes on a check's
// answer, for the decision d of rule and key: RateLimit-Policy
// ("rule";q=limit;w=seconds), RateLimit ("rule";r=remaining;t=reset), the
// legacy X-RateLimit-Limit, -Remaining and -Reset, and, when denied,
// Retry-After (whole seconds, rounded up, at least 1). Gateways built on
// a Limiter (the middleware, the Caddy module) answer with it.
func (l *Limiter) WriteHeaders(h http.Header, rule, key string, d *Decision) {
	// The header names in their canonical form (http.Header.Set's keys,
	// without canonicalising them anew), the parts a rule's headers share
	// made once per rule (limRule.headers).
	remaining := strconv.FormatInt(max(d.Remaining, 0), 10)
	reset := strconv.FormatInt(ceilSeconds(d.Reset), 10)
	r := l.rules.Load().rule(rule)
	var hs *ruleHeaders
	if r != nil {
		hs = r.headers()
	}
	quoted, limit := "", ""
	if hs != nil {
		quoted = hs.quoted
		if d.Limit == r.pol.Limit {
			limit = hs.limit
		}
		policy := hs.policy
		if len(r.r.Overrides) > 0 {
			policy = policyHeader(quoted, r.r.PolicyFor(key))
		}
		h["Ratelimit-Policy"] = []string{policy}
	} else {
		quoted = strconv.Quote(rule)
	}
	if limit == "" {
		limit = strconv.FormatInt(d.Limit, 10)
	}
	h["Ratelimit"] = []string{quoted + ";r=" + remaining + ";t=" + reset}
	h["X-Ratelimit-Limit"] = []string{limit}
	h["X-Ratelimit-Remaining"] = []string{remaining}
	h["X-Ratelimit-Reset"] = []string{reset}
	if !d.Allowed {
		h["Retry-After"] = []string{strconv.FormatInt(max(ceilSeconds(d.RetryAfter), 1), 10)}
	}
}

// ruleHeaders are the parts of a rule's rate-limit headers that do not
// change from one decision to the next.
type ruleHeaders struct {
	quoted string // the rule's name, quoted
	policy string // RateLimit-Policy of the rule's own policy
	limit  string // its limit
}

// headers returns r's ruleHeaders, made on first use.
func (r *limRule) headers() *ruleHeaders {
	if hs := r.hdrs.Load(); hs != nil {
		return hs
	}
	q := strconv.Quote(r.r.Name)
	hs := &ruleHeaders{quoted: q, policy: policyHeader(q, r.r.Policy), limit: strconv.FormatInt(r.pol.Limit, 10)}
	r.hdrs.Store(hs)
	return hs
}

// policyHeader is RateLimit-Policy of p for the rule named quoted.
func policyHeader(quoted string, p lease.Policy) string {
	return quoted + ";q=" + strconv.FormatInt(p.Limit, 10) + ";w=" + strconv.FormatInt(ceilSeconds(p.Period), 10)
}

func ceilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
