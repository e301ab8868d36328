package rules

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/api"
)

// Compile validates one rule spec and builds its Rule. Errors are [*Error]
// with Index -1; use [NewSet] to also check names across rules.
func Compile(spec Spec) (*Rule, error) {
	r, err := compile(spec, -1, 0, nil)
	if err != nil {
		return nil, err
	}
	return r, nil
}

// compile validates spec (rule idx of a file, whose mapping starts at
// line, its fields' values at lines; -1, 0 and nil outside a file).
func compile(spec Spec, idx, line int, lines fieldLines) (*Rule, *Error) {
	fail := func(field, msg string) *Error {
		return &Error{Rule: spec.Name, Index: idx, Field: field, Line: lines.of(field, line), Msg: msg}
	}
	if !api.ValidName(spec.Name) {
		e := fail("name", "")
		e.Rule = ""
		switch {
		case spec.Name == "":
			e.Msg = "required"
		case len(spec.Name) > api.MaxRuleNameLen:
			e.Msg = "longer than 64 bytes"
		default:
			e.Msg = strconv.Quote(spec.Name) + " may hold only A-Z a-z 0-9 _ . -"
		}
		return nil, e
	}
	r := &Rule{Name: spec.Name, Shadow: spec.Shadow}
	p := &r.Policy
	if spec.Algorithm == "" {
		return nil, fail("algorithm", "required")
	}
	alg, err := lease.ParseAlgorithm(spec.Algorithm)
	if err != nil {
		return nil, fail("algorithm", err.Error())
	}
	p.Algorithm = alg
	p.Limit = spec.Limit
	if spec.Period == "" {
		return nil, fail("period", "required")
	}
	var msg string
	if p.Period, msg = parseDuration(spec.Period); msg != "" {
		return nil, fail("period", msg)
	}
	if spec.Burst != 0 && !alg.HasBurst() {
		return nil, fail("burst", only(lease.Algorithm.HasBurst, "a burst")+"; "+alg.String()+" would ignore it")
	}
	p.Burst = spec.Burst
	if spec.MinInterval != "" {
		if !alg.HasMinInterval() {
			return nil, fail("min_interval", only(lease.Algorithm.HasMinInterval, "a min_interval"))
		}
		if p.MinInterval, msg = parseDuration(spec.MinInterval); msg != "" {
			return nil, fail("min_interval", msg)
		}
	}
	if p.OnFailure, err = lease.ParseFailureMode(spec.OnStoreFailure); err != nil {
		return nil, fail("on_store_failure", err.Error())
	}
	if err := p.Validate(); err != nil {
		return nil, policyError(err, "", fail)
	}
	if msg := logLimitMsg(*p); msg != "" {
		return nil, fail("limit", msg)
	}

	switch {
	case spec.GatewayShare == 0:
		r.GatewayShare = DefaultGatewayShare
	case spec.GatewayShare > 0 && spec.GatewayShare <= 1:
		r.GatewayShare = spec.GatewayShare
	default:
		return nil, fail("gateway_share", "must be in (0, 1]: the share of a key's capacity one gateway may hold")
	}

	switch n := spec.MaxHolders; {
	case n != 0 && !alg.Leased():
		return nil, fail("max_holders", "only for a leased algorithm ("+leasedNames()+"): "+alg.String()+" leases nothing, every check is a Store call")
	case n == 0:
		r.MaxHolders = lease.DefaultMaxHolders
	case n > 0 && n <= lease.MaxKeyHolders:
		r.MaxHolders = n
	default:
		return nil, fail("max_holders", "must be between 1 and "+strconv.Itoa(lease.MaxKeyHolders)+" (0 or absent: "+strconv.Itoa(lease.DefaultMaxHolders)+"): the most gateways and regions holding loans of one key at once")
	}

	switch strings.TrimSpace(spec.Scope) {
	case "", "region":
		spec.Scope = ""
	case "global":
		if !alg.Leased() {
			return nil, fail("scope", "global needs a leased algorithm ("+leasedNames()+"): "+alg.String()+" is exact and decided by one Store")
		}
		r.Global = true
		spec.Scope = "global"
	default:
		return nil, fail("scope", "must be region (the default: this cluster's Store) or global (leased from the -upstream cluster)")
	}
	switch f := spec.RegionalFloor; {
	case f == 0:
	case !r.Global:
		return nil, fail("regional_floor", "only for scope: global (what a region cut off from the global tier may still admit)")
	case f > 0 && f <= 1:
		r.RegionalFloor = f
	default:
		return nil, fail("regional_floor", "must be in [0, 1]: the share of the limit a cut-off region may still admit per period")
	}

	if spec.Key != "" {
		for part := range strings.SplitSeq(spec.Key, ",") {
			src, msg := parseSource(strings.TrimSpace(part))
			if msg != "" {
				return nil, fail("key", msg)
			}
			if len(r.Sources) == MaxSources {
				return nil, fail("key", "more than 16 sources")
			}
			r.Sources = append(r.Sources, src)
		}
		parts := make([]string, len(r.Sources))
		for i, s := range r.Sources {
			parts[i] = s.String()
		}
		spec.Key = strings.Join(parts, ",")
	}
	if spec.Descriptor != "" {
		for part := range strings.SplitSeq(spec.Descriptor, ",") {
			name := strings.TrimSpace(part)
			if !api.ValidName(name) {
				return nil, fail("descriptor", strconv.Quote(name)+": a descriptor name is 1 to 64 bytes of A-Z a-z 0-9 _ . -")
			}
			for _, have := range r.Descriptors {
				if have == name {
					return nil, fail("descriptor", strconv.Quote(name)+" listed twice")
				}
			}
			if len(r.Descriptors) == MaxSources {
				return nil, fail("descriptor", "more than 16 names")
			}
			r.Descriptors = append(r.Descriptors, name)
		}
		spec.Descriptor = strings.Join(r.Descriptors, ",")
	} else if len(r.Sources) > 0 {
		r.Descriptors = derivedDescriptors(r.Sources)
	}

	switch mk := strings.TrimSpace(spec.OnMissingKey); mk {
	case "", "skip":
		spec.OnMissingKey = ""
	case "deny":
		r.OnMissingKey.Action = MissingDeny
		spec.OnMissingKey = mk
	default:
		var fb []Source
		for part := range strings.SplitSeq(mk, ",") {
			src, msg := parseSource(strings.TrimSpace(part))
			if msg != "" {
				return nil, fail("on_missing_key", "want skip, deny or key sources to fall back to: "+msg)
			}
			if len(fb) == MaxSources {
				return nil, fail("on_missing_key", "more than 16 sources")
			}
			fb = append(fb, src)
		}
		parts := make([]string, len(fb))
		for i, s := range fb {
			parts[i] = s.String()
		}
		r.OnMissingKey = MissingKey{Action: MissingFallback, Fallback: fb}
		spec.OnMissingKey = strings.Join(parts, ",")
	}
	if r.OnMissingKey.Action != MissingSkip && len(r.Sources) == 0 {
		return nil, fail("on_missing_key", "needs a key (it says what a forward-auth request without the key's values gets)")
	}

	if m := spec.Match; m != nil {
		nm := &MatchSpec{PathPrefix: m.PathPrefix, Host: strings.ToLower(m.Host)}
		if len(nm.Host) > 1 {
			nm.Host = strings.TrimSuffix(nm.Host, ".") // as request hosts are
		}
		if m.PathPrefix != "" && m.PathPrefix[0] != '/' {
			return nil, fail("match.path_prefix", "must begin with /")
		}
		// Requests' paths are normalized before matching (see the package
		// doc): so is the prefix, or one holding %XX, // or dot segments
		// would never match.
		nm.PathPrefix = normalizePath(nm.PathPrefix)
		for i, meth := range m.Methods {
			meth = strings.ToUpper(strings.TrimSpace(meth))
			if !validToken(meth) {
				return nil, fail("match.methods["+strconv.Itoa(i)+"]", strconv.Quote(m.Methods[i])+" is not an HTTP method")
			}
			nm.Methods = append(nm.Methods, meth)
		}
		if nm.Host != "" {
			if msg := globMsg(nm.Host); msg != "" {
				return nil, fail("match.host", msg)
			}
		}
		r.Match = Route{PathPrefix: nm.PathPrefix, Methods: nm.Methods, Host: nm.Host}
		if nm.PathPrefix == "" && nm.Host == "" && len(nm.Methods) == 0 {
			nm = nil
		}
		spec.Match = nm
	}

	if h := spec.Hot; h != nil {
		if h.Threshold < 0 || math.IsNaN(h.Threshold) || math.IsInf(h.Threshold, 0) {
			return nil, fail("hot.threshold", "must be ≥ 0 (checks per second; 0 = node default)")
		}
		if h.Split < 0 || h.Split > MaxSplit {
			return nil, fail("hot.split", "must be between 0 (all nodes) and 1024")
		}
		r.Hot = Hot{Threshold: h.Threshold, Split: h.Split}
		if *h == (HotSpec{}) {
			spec.Hot = nil
		}
	}

	if len(spec.Overrides) > MaxOverrides {
		return nil, fail("overrides", "more than 1000 overrides")
	}
	for i, o := range spec.Overrides {
		f := "overrides[" + strconv.Itoa(i) + "]"
		if msg := globMsg(o.Key); msg != "" {
			return nil, fail(f+".key", msg)
		}
		op := r.Policy
		op.Limit = o.Limit
		op.Burst = o.Burst
		if o.Burst != 0 && !alg.HasBurst() {
			return nil, fail(f+".burst", only(lease.Algorithm.HasBurst, "a burst"))
		}
		if o.Period != "" {
			if op.Period, msg = parseDuration(o.Period); msg != "" {
				return nil, fail(f+".period", msg)
			}
		}
		if err := op.Validate(); err != nil {
			return nil, policyError(err, f+".", fail)
		}
		if msg := logLimitMsg(op); msg != "" {
			return nil, fail(f+".limit", msg)
		}
		r.Overrides = append(r.Overrides, Override{Key: o.Key, Policy: op})
	}
	if len(spec.Overrides) == 0 {
		spec.Overrides = nil
	} else {
		spec.Overrides = append([]OverrideSpec(nil), spec.Overrides...)
	}
	r.Spec = spec
	return r, nil
}

// logLimitMsg says what is wrong with the limit of a policy whose
// algorithm stores every hit (sliding_log), or "".
func logLimitMsg(p lease.Policy) string {
	if p.Algorithm.StoresEveryHit() && p.Limit > MaxLogLimit {
		return "must be ≤ " + strconv.Itoa(MaxLogLimit) + " for " + p.Algorithm.String() + " (it stores every hit); use " + lease.SlidingWindow.String() + " for bigger limits"
	}
	return ""
}

// only says which algorithms have a field ("only token_bucket and gcra
// have a burst"), by their trait has.
func only(has func(lease.Algorithm) bool, field string) string {
	as := algorithmsWith(has)
	verb := " has "
	if len(as) > 1 {
		verb = " have "
	}
	return "only " + lease.JoinAlgorithms(as, "and") + verb + field
}

// policyError maps lease.Policy.Validate's error onto the rule's field.
func policyError(err error, prefix string, fail func(field, msg string) *Error) *Error {
	var fe *lease.FieldError
	if errors.As(err, &fe) {
		return fail(prefix+fe.Field, fe.Msg)
	}
	return fail(strings.TrimSuffix(prefix, "."), err.Error())
}

// parseSource parses one key source; msg is "" on success.
func parseSource(s string) (Source, string) {
	kind, name, hasName := strings.Cut(s, ":")
	for k, n := range sourceNames {
		if n == "" || n != kind {
			continue
		}
		src := Source{Kind: SourceKind(k), Name: name}
		switch src.Kind {
		case SourceHeader:
			if !validToken(name) {
				return src, strconv.Quote(s) + ": header:NAME needs a valid header name"
			}
		case SourceQuery, SourceJWT:
			if name == "" || len(name) > api.MaxRuleNameLen*4 {
				return src, strconv.Quote(s) + ": " + kind + ":NAME needs a name of 1 to 256 bytes"
			}
		default:
			if hasName {
				return src, strconv.Quote(s) + ": " + kind + " takes no name"
			}
		}
		return src, ""
	}
	return Source{}, strconv.Quote(s) + " is not a key source (want header:NAME, ip, query:NAME, jwt:CLAIM, path, method or host)"
}

// derivedDescriptors gives the default descriptor names of sources, or nil
// when one of them has no valid name.
func derivedDescriptors(srcs []Source) []string {
	names := make([]string, 0, len(srcs))
	for _, s := range srcs {
		var n string
		switch s.Kind {
		case SourceHeader:
			n = strings.ToLower(s.Name)
		case SourceQuery, SourceJWT:
			n = s.Name
		default:
			n = sourceNames[s.Kind]
		}
		if !api.ValidName(n) {
			return nil
		}
		for _, have := range names {
			if have == n {
				return nil
			}
		}
		names = append(names, n)
	}
	return names
}

// normalizePath normalizes p as request paths are (%XX decoded, repeated
// slashes merged, dot segments resolved) when it needs it.
func normalizePath(p string) string {
	if !needsNormalizing(p) {
		return p
	}
	return string(appendNormalPath(nil, []byte(p)))
}

// needsNormalizing reports whether normalizing path p could change it
// (authRequest.uri makes the same test on bytes).
func needsNormalizing(p string) bool {
	return strings.IndexByte(p, '%') >= 0 || strings.Contains(p, "//") || strings.Contains(p, "/.")
}

// validToken reports whether s is a non-empty HTTP token (RFC 9110), as
// header names and methods are.
func validToken(s string) bool {
	if s == "" || len(s) > 256 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}
