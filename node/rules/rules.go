// Package rules owns Sluice's rules: the YAML rule file, its validation, and
// the matching of a request to the rules that apply to it and their counter
// keys. It is a sub-package of node so that it can be built, tested and
// fuzzed on its own; the node imports it.
//
// # Rule file
//
//	rules:
//	  - name: per-key
//	    algorithm: token_bucket    # lease's table: Algorithms (sluice rules lint -h)
//	    limit: 100                 # per period; for concurrency: max in flight
//	    period: 1m                 # Go duration; for concurrency: the slot TTL
//	    burst: 100                 # token_bucket and gcra only; default = limit
//	    min_interval: 1s           # sliding_log only
//	    key: header:X-API-Key      # forward-auth identity (see below)
//	    descriptor: api_key        # descriptor names forming the key; default derived from key
//	    match: {path_prefix: /api, methods: [GET, POST], host: "*.example.com"}
//	    on_store_failure: local    # local | open | closed
//	    on_missing_key: skip       # skip | deny | key sources to fall back to (forward-auth)
//	    shadow: false              # decide and count, but always allow
//	    max_holders: 16            # leased: gateways/regions holding a key at once (1-1024; 0: 16)
//	    hot: {threshold: 20000, split: 0}
//	    overrides:                 # first matching glob wins
//	      - {key: "ent-*", limit: 10000, burst: 20000, period: 1m}
//
// Parsing is strict: unknown fields, wrong types and invalid values are
// errors of type [*Error] naming the rule and the field
// and the line of the offending value (rule "per-key": period: must be
// ≥ 1ms (line 5)), and a file with any invalid rule yields no [Set] at
// all, so a node never runs a half-loaded rule set. A file that holds no
// rules (empty, comments only, "rules:" without a list) is refused too,
// so that an emptied or truncated file cannot switch limiting off; an
// empty set is written "rules: []".
//
// Overrides: key is a glob on the counter key where '*' matches any run of
// bytes (including '/') and '?' any one character; '\' escapes the next
// character. '[' must be escaped (character classes are reserved). An
// override replaces limit, and period when given; its burst defaults to its
// own limit, not the rule's burst.
//
// # Keys and descriptors
//
// key is a comma list of sources: header:NAME, ip, query:NAME, jwt:CLAIM,
// path, method, host. A request's key for the rule is built from the
// sources' values as described in "Counter keys".
//
// Descriptor checks (POST /v1/check {"descriptors":{...}}) reach the rules
// whose descriptor names are all present; the key is built from those
// values, in the rule's order, the same way. A rule's descriptor names
// default to its key sources: header:X-API-Key → x-api-key, query:N → N,
// jwt:C → C, and ip, path, method, host themselves (a source whose derived
// name is not a valid name, like jwt:https://x/tenant, makes the rule
// unreachable by descriptors unless descriptor is set). When the
// descriptors include path, method or host, the rule's match must hold for
// them; when they do not, it is not checked. A rule with neither key nor
// descriptor is reachable only by an explicit {"rule","key"} check.
//
// # Counter keys
//
// The node counts a rule's key under the counter key rule name + ":" +
// key. The key of a forward-auth request or a descriptor check is its
// values, each escaped, joined with "|":
//
//	escape(v) = v with every '\' written "\\" and every '|' written "\|"
//	key       = escape(v1) + "|" + escape(v2) + ... (in the rule's order)
//
// so no two different lists of values give one key (headers "X-Tenant:
// a|b, X-User: c" give a\|b|c, and "X-Tenant: a, X-User: b|c" give
// a|b\|c). A value without '|' or '\' is written as is. A fallback key
// (on_missing_key: sources) is "\?" followed by the fallback values built
// the same way: no regular key starts with it, since in those a '\' is
// only ever followed by '\' or '|'. A key longer than api.MaxKeyLen bytes
// (after escaping) is shortened to its digest form (ShortenKey): its
// first bytes (at most 211), the escape pair "\#" (api.LongKeyMark), and
// the SHA-256 of the whole key in unpadded base64url, so long values
// still count separately. A check naming {"rule","key"} gives the key as
// is: it is the counter key's tail, not a value to escape (a client that
// wants to share a forward-auth counter must send the key in this
// format), except that it may not hold the escape pair "\#", so that no
// key a client names is a long key's digest form: no two value lists,
// and no value list and key given as is, give one key (but for a SHA-256
// collision).
//
// # Forward-auth identity
//
// Gateways (nginx auth_request, Traefik forwardAuth, Envoy ext_authz HTTP,
// Caddy forward_auth) call /v1/auth with the original request described by
// headers. [Set.MatchAuth] reads:
//
//   - path and query: from X-Forwarded-Uri (Traefik, Caddy) or
//     X-Original-URI (nginx); when neither is present, from the auth
//     request's own URI with a leading /v1/auth removed, which is what Envoy
//     ext_authz sends (it appends the original path to the auth path).
//     The path is normalized as gateways route on it (%XX decoded,
//     repeated slashes merged, "." and ".." segments resolved) before
//     path_prefix and the path source see it.
//   - method: X-Forwarded-Method (Traefik, Caddy), X-Original-Method
//     (nginx), else the auth request's method (Envoy keeps it).
//   - host: X-Forwarded-Host, X-Original-Host, else Host. Matched without
//     its port and a trailing dot, case-insensitively, as a glob.
//   - ip: the first X-Forwarded-For entry, else X-Real-IP, else the
//     connection's remote address. These headers are trusted as sent: only
//     trusted gateways must be able to reach Sluice.
//   - header:NAME: that header of the auth request (gateways copy the
//     original request's headers; nginx needs proxy_set_header or
//     proxy_pass_request_headers).
//   - jwt:CLAIM: the claim (string, number or boolean) in the payload of
//     "Authorization: Bearer <jwt>". Sluice does NOT verify the signature:
//     the gateway must have verified the token before asking Sluice, or the
//     claim is whatever the client says.
//
// A rule applies to a forward-auth request when its match holds and every
// one of its key sources is present and non-empty. When its match holds but
// a key value is missing or empty, on_missing_key says what happens:
//
//   - skip (the default): the rule does not apply, so the request is NOT
//     limited by it. Node counts these checks in
//     sluice_checks_skipped_total{rule,reason="missing_key"}.
//   - deny: the request is denied (forward-auth answers 429).
//   - a key source list, such as ip or "header:X-Real-User,ip": the
//     request is counted under a fallback key made of those values (see
//     "Counter keys"); if one of them is missing too, the rule is skipped.
//
// on_missing_key needs a key, and applies to forward-auth only: a
// descriptor check reaches a rule only when it carries all of the rule's
// descriptors.
//
// # Concurrency
//
// A [Set] and its [Rule]s are immutable once built and safe for concurrent
// use; reload builds a new Set and swaps it in. The only package-level state
// is a pool of JSON parsers for JWT payloads.
package rules

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/lease"
)

// Bounds on rule files.
const (
	// MaxFileBytes bounds a rule file.
	MaxFileBytes = 4 << 20
	// MaxRules bounds the rules of one set.
	MaxRules = 10000
	// MaxSources bounds the key sources (and descriptor names) of a rule.
	MaxSources = 16
	// DefaultGatewayShare is a rule's gateway_share when not given: a
	// quarter lets four gateways decide a hot key locally at once, each
	// with enough for a while, and leaves three quarters to the nodes
	// and the other gateways.
	DefaultGatewayShare = 0.25
	// MaxOverrides bounds the overrides of one rule.
	MaxOverrides = 1000
	// MaxSplit bounds hot.split.
	MaxSplit = 1024
	// MaxLogLimit bounds the limit of a sliding_log rule (and its
	// overrides). The Store keeps one entry per admitted hit (a sorted-set
	// member in Redis, all of a check's hits written by one script), so a
	// bigger limit lets one key, or one check, take Redis's memory and
	// time; sliding_log is for low-rate, precise limits (logins, payments).
	MaxLogLimit = 10000
)

// ErrInvalid means a rule or rule file is invalid; the error is an [*Error]
// naming the rule and the field.
var ErrInvalid = errors.New("invalid rules")

// Error is a validation error naming the rule and field at fault.
type Error struct {
	// Rule is the rule's name; empty when the rule has no valid name yet
	// (Index says which one) or when the file as a whole is at fault.
	Rule string
	// Index is the rule's position in the file (0-based), or -1.
	Index int
	// Field is the field at fault ("period", "overrides[0].key"); empty
	// when the whole rule or file is at fault.
	Field string
	// Line is the line in the file, when known (0 otherwise).
	Line int
	Msg  string
}

func (e *Error) Error() string {
	var s string
	switch {
	case e.Rule != "":
		s = "rule " + strconv.Quote(e.Rule) + ": "
	case e.Index >= 0:
		s = "rules[" + strconv.Itoa(e.Index) + "]: "
	default:
		s = "rules: "
	}
	if e.Field != "" {
		s += e.Field + ": "
	}
	s += e.Msg
	if e.Line > 0 {
		s += " (line " + strconv.Itoa(e.Line) + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrInvalid) true for every *Error.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// SourceKind is where a key source takes its value from.
type SourceKind uint8

// The key sources.
const (
	SourceHeader SourceKind = iota + 1 // header:NAME
	SourceIP                           // ip
	SourceQuery                        // query:NAME
	SourceJWT                          // jwt:CLAIM
	SourcePath                         // path
	SourceMethod                       // method
	SourceHost                         // host
)

var sourceNames = [...]string{
	SourceHeader: "header", SourceIP: "ip", SourceQuery: "query", SourceJWT: "jwt",
	SourcePath: "path", SourceMethod: "method", SourceHost: "host",
}

// Source is one element of a rule's key.
type Source struct {
	Kind SourceKind
	// Name is the header, query parameter or claim name (empty for the
	// other kinds), as written in the rule.
	Name string
}

// String returns the source as written in a rule: "header:X-API-Key", "ip".
func (s Source) String() string {
	if int(s.Kind) >= len(sourceNames) || s.Kind == 0 {
		return fmt.Sprintf("source(%d)", s.Kind)
	}
	if s.Name == "" {
		return sourceNames[s.Kind]
	}
	return sourceNames[s.Kind] + ":" + s.Name
}

// MissingAction is what MatchAuth does with a rule whose match holds but
// one of whose key sources the request lacks (on_missing_key).
type MissingAction uint8

// The on_missing_key actions.
const (
	// MissingSkip: the rule does not apply to the request (the default,
	// and the behaviour before on_missing_key existed). Such requests are
	// not limited by the rule at all.
	MissingSkip MissingAction = iota
	// MissingDeny: the request is denied (forward-auth answers 429).
	MissingDeny
	// MissingFallback: the request is counted under the key made of the
	// fallback sources instead (see "Counter keys").
	MissingFallback
)

// MissingKey is a rule's on_missing_key.
type MissingKey struct {
	Action MissingAction
	// Fallback are the sources of the fallback key (MissingFallback only).
	Fallback []Source
}

// Route is a rule's match: conditions on the original request of a
// forward-auth check (and on the path, method and host descriptors). Empty
// fields match everything.
type Route struct {
	// PathPrefix is a plain byte prefix of the path ("/api" also matches
	// "/apiary"; write "/api/" to mean the directory).
	PathPrefix string
	// Methods holds upper-case methods; empty means any.
	Methods []string
	// Host is a lower-case glob on the host without port.
	Host string
}

// Hot configures hot-key splitting for a rule.
type Hot struct {
	// Threshold is the checks per second that make a key hot; 0 means the
	// node's default.
	Threshold float64
	// Split is the number of holders of a hot key; 0 means all nodes.
	Split int
}

// Override gives the keys matching a glob their own policy.
type Override struct {
	// Key is the glob on the counter key.
	Key string
	// Policy is the rule's policy with the override's limit, burst and
	// period applied.
	Policy lease.Policy
}

// Rule is one validated rule. Rules are immutable: do not modify a Rule
// reachable from a Set.
type Rule struct {
	Name string
	// Policy is the default policy of the rule's keys.
	Policy lease.Policy
	// Sources form the forward-auth key; empty when the rule has no key.
	Sources []Source
	// Descriptors are the descriptor names forming the key of a descriptor
	// check; empty when the rule is not reachable by descriptors.
	Descriptors []string
	Match       Route
	// OnMissingKey is what a forward-auth request without one of the
	// key's values gets (on_missing_key).
	OnMissingKey MissingKey
	Shadow       bool
	// GatewayShare is the most one gateway holder may hold of a key, as
	// a fraction of its capacity (gateway_share; DefaultGatewayShare
	// when not given).
	GatewayShare float64
	// MaxHolders is the most holders of the lease protocol (gateways,
	// regions) that may hold loans of one of the rule's keys at a time
	// (max_holders; lease.DefaultMaxHolders when not given): the node
	// passes it as lease.Lessee.MaxHolders, so that a holder past it is
	// crowded out and its checks are decided by the Store, and a key's
	// Store calls stay cheap (they cost time linear in its holders).
	MaxHolders int
	// Global: the rule's keys are counted by the global tier, a Sluice
	// cluster this node leases from as a holder (scope: global; sluiced
	// -upstream, docs/regions.md). False (scope: region, the default):
	// by this node's own Store.
	Global bool
	// RegionalFloor is the share of the limit a region cut off from the
	// global tier may still admit per period beyond the tokens it holds,
	// under on_store_failure: local (regional_floor; global rules only; 0
	// when not given: nothing beyond what it holds).
	RegionalFloor float64
	Hot           Hot
	// Overrides in file order; the first whose glob matches wins.
	Overrides []Override
	// Spec is the rule as written (normalized), for the admin API and
	// for writing the set back out.
	Spec Spec

	pos int // position in its Set
}

// PolicyFor returns the policy of counter key key: that of the first
// override whose glob matches, else the rule's. It does not allocate.
func (r *Rule) PolicyFor(key string) lease.Policy {
	if len(r.Overrides) == 0 { // inlined: no call per check of most rules
		return r.Policy
	}
	return r.overrideFor(key)
}

func (r *Rule) overrideFor(key string) lease.Policy {
	for i := range r.Overrides {
		if globMatch(r.Overrides[i].Key, key) {
			return r.Overrides[i].Policy
		}
	}
	return r.Policy
}

// Spec is a rule as written in a rule file (and in the admin API's JSON).
// Durations are Go duration strings.
type Spec struct {
	Name           string         `yaml:"name" json:"name"`
	Algorithm      string         `yaml:"algorithm" json:"algorithm"`
	Limit          int64          `yaml:"limit" json:"limit"`
	Period         string         `yaml:"period" json:"period"`
	Burst          int64          `yaml:"burst,omitempty" json:"burst,omitempty"`
	MinInterval    string         `yaml:"min_interval,omitempty" json:"min_interval,omitempty"`
	Key            string         `yaml:"key,omitempty" json:"key,omitempty"`
	Descriptor     string         `yaml:"descriptor,omitempty" json:"descriptor,omitempty"`
	Match          *MatchSpec     `yaml:"match,omitempty" json:"match,omitempty"`
	OnStoreFailure string         `yaml:"on_store_failure,omitempty" json:"on_store_failure,omitempty"`
	OnMissingKey   string         `yaml:"on_missing_key,omitempty" json:"on_missing_key,omitempty"`
	Shadow         bool           `yaml:"shadow,omitempty" json:"shadow,omitempty"`
	GatewayShare   float64        `yaml:"gateway_share,omitempty" json:"gateway_share,omitempty"`
	MaxHolders     int            `yaml:"max_holders,omitempty" json:"max_holders,omitempty"`
	Scope          string         `yaml:"scope,omitempty" json:"scope,omitempty"`
	RegionalFloor  float64        `yaml:"regional_floor,omitempty" json:"regional_floor,omitempty"`
	Hot            *HotSpec       `yaml:"hot,omitempty" json:"hot,omitempty"`
	Overrides      []OverrideSpec `yaml:"overrides,omitempty" json:"overrides,omitempty"`
}

// MatchSpec is a rule's match as written.
type MatchSpec struct {
	PathPrefix string   `yaml:"path_prefix,omitempty" json:"path_prefix,omitempty"`
	Methods    []string `yaml:"methods,omitempty" json:"methods,omitempty"`
	Host       string   `yaml:"host,omitempty" json:"host,omitempty"`
}

// HotSpec is a rule's hot-key settings as written.
type HotSpec struct {
	Threshold float64 `yaml:"threshold,omitempty" json:"threshold,omitempty"`
	Split     int     `yaml:"split,omitempty" json:"split,omitempty"`
}

// OverrideSpec is one override as written.
type OverrideSpec struct {
	Key    string `yaml:"key" json:"key"`
	Limit  int64  `yaml:"limit" json:"limit"`
	Burst  int64  `yaml:"burst,omitempty" json:"burst,omitempty"`
	Period string `yaml:"period,omitempty" json:"period,omitempty"`
}

// durationMsg parses a duration field; msg is "" on success.
func parseDuration(s string) (time.Duration, string) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, "must be a duration such as 500ms, 10s or 1m"
	}
	return d, ""
}
