package rls

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/internal/yamlnode"
	"github.com/sluicehq/sluice/node/rules"
)

// parser reads one document.
type parser struct {
	file   string
	domain string
	c      *Config
	specs  []rules.Spec
	names  map[string]bool // rule names of this document
	count  int             // descriptors read (aliases can repeat a subtree)
	nodes  int             // nodes of metadata and ignored fields read
}

const (
	// maxDescriptors bounds the descriptors of one document, counting
	// those repeated through YAML aliases.
	maxDescriptors = 20000
	// maxNodes bounds the YAML nodes of one document's metadata and
	// ignored fields, counting those repeated through aliases.
	maxNodes = 100000
	// maxWarnings bounds the warnings a configuration keeps.
	maxWarnings = 100
	// maxMerges bounds the nesting of YAML merge keys (<<).
	maxMerges = 8
)

// envoyKeys are the field names envoyproxy/ratelimit accepts (its
// validKeys), anywhere in a file: a file with any other is refused, as
// envoy refuses it. One of these where it means nothing (shadow_mode
// inside rate_limit, unit on a descriptor) is ignored, as envoy ignores
// it, with a warning. Sluice adds rate_limit.algorithm.
var envoyKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true,
	"unit": true, "requests_per_unit": true, "unlimited": true, "shadow_mode": true,
	"quota_mode": true, "name": true, "replaces": true, "detailed_metric": true,
	"value_to_metric": true, "share_threshold": true, "metadata": true,
}

// Where the fields envoyproxy/ratelimit reads belong, for the warning of
// one found elsewhere.
var (
	descriptorFields = map[string]bool{"key": true, "value": true, "descriptors": true, "rate_limit": true,
		"shadow_mode": true, "quota_mode": true, "detailed_metric": true, "value_to_metric": true,
		"share_threshold": true, "metadata": true}
	rateLimitFields = map[string]bool{"unit": true, "requests_per_unit": true, "unlimited": true,
		"name": true, "replaces": true}
)

func (p *parser) fail(path, field string, line int, msg string) *ConfigError {
	return &ConfigError{File: p.file, Domain: p.domain, Path: path, Field: field, Line: line, Msg: msg}
}

// warn records a warning, worded as a ConfigError.
func (p *parser) warn(path, field string, line int, msg string) {
	switch w := &p.c.warnings; {
	case len(*w) < maxWarnings:
		*w = append(*w, p.fail(path, field, line, msg).Error())
	case len(*w) == maxWarnings:
		*w = append(*w, "more warnings left out")
	}
}

func (p *parser) document(data []byte) (string, *level, error) {
	n, more, perr := yamlnode.Parse(data)
	switch {
	case perr != nil:
		return "", nil, p.fail("", "", 0, "not YAML: "+perr.Error())
	case n == nil:
		return "", nil, p.fail("", "", 0, "empty file")
	case more:
		return "", nil, p.fail("", "", 0, "more than one YAML document")
	}
	if n.Kind != yaml.MappingNode {
		return "", nil, p.fail("", "", n.Line, "must be a mapping with domain and descriptors")
	}
	var descs *yaml.Node
	domainLine := n.Line
	err := p.fields(n, "", "", func(k string, v *yaml.Node) *ConfigError {
		switch k {
		case "domain":
			s, e := p.scalar(v, "", "domain")
			if e != nil {
				return e
			}
			p.domain, domainLine = s, v.Line
		case "descriptors":
			descs = v
		default:
			return p.ignored("", "", k, v)
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	if p.domain == "" {
		return "", nil, p.fail("", "domain", domainLine, "required (a non-empty string)")
	}
	top, err := p.level(descs, nil, 1)
	if err != nil {
		return "", nil, err
	}
	return p.domain, top, nil
}

// level reads a descriptors list: the children of parent (nil for the
// top level), at depth (1 for the top).
func (p *parser) level(n *yaml.Node, parent *entry, depth int) (*level, *ConfigError) {
	l := &level{byKey: map[string]*entry{}}
	path := ""
	if parent != nil {
		path = parent.path
	}
	if yamlnode.IsNull(n) {
		return l, nil
	}
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.SequenceNode {
		return nil, p.fail(path, "descriptors", n.Line, "must be a list")
	}
	if depth > MaxDepth {
		return nil, p.fail(path, "descriptors", n.Line, fmt.Sprintf("nested deeper than %d levels", MaxDepth))
	}
	for _, dn := range n.Content {
		if p.count++; p.count > maxDescriptors {
			return nil, p.fail(path, "descriptors", dn.Line, fmt.Sprintf("more than %d descriptors", maxDescriptors))
		}
		e, err := p.descriptor(dn, parent, depth)
		if err != nil {
			return nil, err
		}
		// envoyproxy/ratelimit keys a level's descriptors by key_value
		// (key alone without a value), and refuses two with one.
		if l.byKey[e.final] != nil {
			field := "key"
			if e.value != "" {
				field = "value"
			}
			return nil, p.fail(e.path, field, dn.Line, "duplicate descriptor (same key and value: "+strconv.Quote(e.final)+")")
		}
		l.byKey[e.final] = e
		if e.parts != nil {
			l.wild = append(l.wild, e)
		}
	}
	return l, nil
}

// descriptor reads one descriptor and its children.
func (p *parser) descriptor(n *yaml.Node, parent *entry, depth int) (*entry, *ConfigError) {
	n = yamlnode.Resolve(n)
	ppath := ""
	if parent != nil {
		ppath = parent.path
	}
	if n.Kind != yaml.MappingNode {
		return nil, p.fail(ppath, "descriptors", n.Line, "each descriptor must be a mapping with key, value, rate_limit...")
	}
	e := &entry{parent: parent, depth: depth - 1}
	var rl, children, meta *yaml.Node
	var shadow, quota, detailed bool
	var lines [4]int // shadow_mode, quota_mode, detailed_metric, metadata
	keyLine, shareLine := n.Line, 0
	// The path names the descriptor in messages: find its key first.
	here := ppath
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := yamlnode.Resolve(n.Content[i]), yamlnode.Resolve(n.Content[i+1]); k.Value == "key" && v.Kind == yaml.ScalarNode {
			here = v.Value
			if ppath != "" {
				here = ppath + "." + v.Value
			}
		}
	}
	err := p.fields(n, here, "", func(k string, v *yaml.Node) *ConfigError {
		var err *ConfigError
		switch k {
		case "key":
			e.key, err = p.scalar(v, here, "key")
			keyLine = v.Line
		case "value":
			e.value, err = p.scalar(v, here, "value")
		case "rate_limit":
			rl = v
		case "descriptors":
			children = v
		case "shadow_mode":
			shadow, err = p.boolean(v, here, k)
			lines[0] = v.Line
		case "quota_mode":
			quota, err = p.boolean(v, here, k)
			lines[1] = v.Line
		case "detailed_metric":
			detailed, err = p.boolean(v, here, k)
			lines[2] = v.Line
		case "value_to_metric":
			e.valueToMetric, err = p.boolean(v, here, k)
		case "share_threshold":
			e.share, err = p.boolean(v, here, k)
			shareLine = v.Line
		case "metadata":
			meta, lines[3] = v, v.Line
		default:
			err = p.ignored(here, "", k, v)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if e.key == "" {
		return nil, p.fail(ppath, "key", keyLine, "required (a non-empty string)")
	}
	e.final = e.key
	if e.value != "" {
		e.final += "_" + e.value
	}
	e.path = e.final
	if ppath != "" {
		e.path = ppath + "." + e.final
	}
	if strings.Contains(e.final, "*") {
		e.parts = strings.Split(e.final, "*")
	}
	if e.share && e.parts == nil {
		return nil, p.fail(e.path, "share_threshold", shareLine, "only for a wildcard value (one holding '*'), as envoyproxy/ratelimit requires")
	}
	metadata, err := p.metadata(meta, e.path)
	if err != nil {
		return nil, err
	}
	if rl != nil && !yamlnode.IsNull(rl) {
		if e.limit, err = p.rateLimit(rl, e, shadow); err != nil {
			return nil, err
		}
		e.limit.Quota, e.limit.Metadata, e.limit.detailed = quota, metadata, detailed
		for x := e; x != nil; x = x.parent {
			e.limit.named = e.limit.named || x.valueToMetric
			e.limit.shared = e.limit.shared || x.share
		}
		e.limit.named = e.limit.named || detailed
	} else {
		for i, f := range [...]string{"shadow_mode", "quota_mode", "detailed_metric", "metadata"} {
			if lines[i] > 0 {
				p.warn(e.path, f, lines[i], "no effect on a descriptor without rate_limit (as in envoyproxy/ratelimit)")
			}
		}
	}
	if children != nil {
		if e.children, err = p.level(children, e, depth+1); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// ignored handles field k (under prefix: "rate_limit." or "") that the
// mapping at path does not read: a field of envoyproxy/ratelimit's (which
// envoy ignores where it is) is ignored with a warning, once its value is
// of a shape envoy accepts; any other is refused, as envoy refuses it.
func (p *parser) ignored(path, prefix, k string, v *yaml.Node) *ConfigError {
	if !envoyKeys[k] {
		return p.fail(path, prefix+k, v.Line, "unknown field")
	}
	if k != "metadata" { // envoy does not look inside metadata
		if err := p.envoyShape(v, path, prefix+k, 0); err != nil {
			return err
		}
	}
	var msg string
	switch {
	case prefix != "" && descriptorFields[k]:
		msg = "ignored: it belongs to the descriptor, not its rate_limit (envoyproxy/ratelimit ignores it there too)"
	case prefix == "" && path != "" && rateLimitFields[k]:
		msg = "ignored: it belongs in rate_limit (envoyproxy/ratelimit ignores it here too)"
	default:
		msg = "ignored here, as envoyproxy/ratelimit ignores it"
	}
	p.warn(path, prefix+k, v.Line, msg)
	return nil
}

// envoyShape refuses what envoyproxy/ratelimit refuses anywhere in a file
// but inside metadata: a field name it does not know, a list of anything
// but mappings, a number with a fraction.
func (p *parser) envoyShape(n *yaml.Node, path, field string, depth int) *ConfigError {
	n = yamlnode.Resolve(n)
	if p.nodes++; p.nodes > maxNodes || depth > MaxDepth*4 {
		return p.fail(path, field, n.Line, "too large or too deep")
	}
	switch n.Kind {
	case yaml.MappingNode:
		return p.fields(n, path, field+".", func(k string, v *yaml.Node) *ConfigError {
			if !envoyKeys[k] {
				return p.fail(path, field+"."+k, v.Line, "unknown field")
			}
			if k == "metadata" {
				return nil
			}
			return p.envoyShape(v, path, field+"."+k, depth+1)
		})
	case yaml.SequenceNode:
		for _, c := range n.Content {
			if yamlnode.Resolve(c).Kind != yaml.MappingNode {
				return p.fail(path, field, c.Line, "a list of anything but mappings (envoyproxy/ratelimit refuses it)")
			}
			if err := p.envoyShape(c, path, field, depth+1); err != nil {
				return err
			}
		}
	case yaml.ScalarNode:
		if n.ShortTag() == "!!float" {
			return p.fail(path, field, n.Line, "a number with a fraction (envoyproxy/ratelimit refuses it; quote it for a string)")
		}
	}
	return nil
}

// rateLimit reads a rate_limit block and, for a limit that counts, adds
// its Sluice rule. Fields are read as envoyproxy/ratelimit reads them: a
// requests_per_unit left out is 0 (every request over the limit), an
// unlimited limit may not name a valid unit and ignores the rest.
func (p *parser) rateLimit(n *yaml.Node, e *entry, shadow bool) (*Limit, *ConfigError) {
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.fail(e.path, "rate_limit", n.Line, "must be a mapping with unit and requests_per_unit")
	}
	l := &Limit{Domain: p.domain, StatKey: e.path, Shadow: shadow, Algorithm: lease.FixedWindow}
	var unit string
	unitLine, rpuSet, rpuLine := n.Line, false, n.Line
	err := p.fields(n, e.path, "rate_limit.", func(k string, v *yaml.Node) *ConfigError {
		var err *ConfigError
		switch k {
		case "unit":
			unit, err = p.scalar(v, e.path, "rate_limit.unit")
			unitLine = v.Line
		case "requests_per_unit":
			l.RequestsPerUnit, err = p.uint32(v, e.path, "rate_limit.requests_per_unit")
			rpuSet, rpuLine = true, v.Line
		case "unlimited":
			l.Unlimited, err = p.boolean(v, e.path, "rate_limit.unlimited")
		case "name":
			l.Name, err = p.scalar(v, e.path, "rate_limit.name")
		case "replaces":
			err = p.replaces(v, e.path, l)
		case "algorithm": // Sluice extension
			var s string
			if s, err = p.scalar(v, e.path, "rate_limit.algorithm"); err == nil {
				a, perr := lease.ParseAlgorithm(s)
				if perr != nil || a.Acquired() {
					return p.fail(e.path, "rate_limit.algorithm", v.Line, "one of "+lease.JoinAlgorithms(checkAlgorithms(), "or"))
				}
				l.Algorithm = a
			}
		default:
			err = p.ignored(e.path, "rate_limit.", k, v)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	for _, r := range l.Replaces {
		if r == l.Name {
			return nil, p.fail(e.path, "rate_limit.replaces", n.Line, "names the limit itself ("+strconv.Quote(r)+")")
		}
	}
	u, known := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)]
	known = known && u != int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN)
	if l.Unlimited {
		if known {
			return nil, p.fail(e.path, "rate_limit.unlimited", n.Line, "an unlimited rate_limit has no unit")
		}
		if rpuSet || unit != "" {
			p.warn(e.path, "rate_limit.unlimited", n.Line, "the limit is unlimited: its unit and requests_per_unit are ignored")
		}
		p.c.limits = append(p.c.limits, l)
		return l, nil
	}
	switch {
	case unit == "":
		return nil, p.fail(e.path, "rate_limit.unit", unitLine, "required: second, minute, hour, day, week, month or year")
	case !known:
		return nil, p.fail(e.path, "rate_limit.unit", unitLine, strconv.Quote(unit)+" is not one of second, minute, hour, day, week, month, year")
	}
	l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
	l.Period = unitPeriods[l.Unit]
	if !rpuSet {
		p.warn(e.path, "rate_limit.requests_per_unit", rpuLine, "left out: 0, every request over the limit (as envoyproxy/ratelimit reads it)")
	}
	if int64(l.RequestsPerUnit) > lease.MaxLimit {
		return nil, p.fail(e.path, "rate_limit.requests_per_unit", rpuLine, "too large")
	}
	if l.Algorithm.StoresEveryHit() && l.RequestsPerUnit > rules.MaxLogLimit {
		return nil, p.fail(e.path, "rate_limit.requests_per_unit", rpuLine, fmt.Sprintf("%s allows at most %d", l.Algorithm, rules.MaxLogLimit))
	}
	p.c.limits = append(p.c.limits, l)
	if len(p.c.limits) > MaxLimits {
		return nil, p.fail(e.path, "rate_limit", n.Line, fmt.Sprintf("more than %d rate limits in the configuration", MaxLimits))
	}
	if l.RequestsPerUnit == 0 {
		return l, nil // always over limit: never reaches the engine
	}
	l.Rule = p.ruleName(e.path)
	p.specs = append(p.specs, rules.Spec{
		Name:      l.Rule,
		Algorithm: l.Algorithm.String(),
		Limit:     int64(l.RequestsPerUnit),
		Period:    l.Period.String(),
		Shadow:    shadow,
	})
	return l, nil
}

func (p *parser) replaces(n *yaml.Node, path string, l *Limit) *ConfigError {
	n = yamlnode.Resolve(n)
	if yamlnode.IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		return p.fail(path, "rate_limit.replaces", n.Line, "must be a list of {name: ...}")
	}
	for _, r := range n.Content {
		r = yamlnode.Resolve(r)
		if r.Kind != yaml.MappingNode {
			return p.fail(path, "rate_limit.replaces", r.Line, "must be a list of {name: ...}")
		}
		name := ""
		err := p.fields(r, path, "rate_limit.replaces.", func(k string, v *yaml.Node) *ConfigError {
			if k != "name" {
				return p.ignored(path, "rate_limit.replaces.", k, v)
			}
			var err *ConfigError
			name, err = p.scalar(v, path, "rate_limit.replaces.name")
			return err
		})
		if err != nil {
			return err
		}
		if name == "" {
			return p.fail(path, "rate_limit.replaces.name", r.Line, "required (a non-empty string)")
		}
		l.Replaces = append(l.Replaces, name)
	}
	return nil
}

// ruleName names the Sluice rule of the limit at path in p.domain:
// "rls." and a readable part of domain and path, then 8 hex digits of a
// hash of both, so that names are unique, stable across reloads, and valid
// rule names (≤ 64 bytes of A-Z a-z 0-9 _ . -).
func (p *parser) ruleName(path string) string {
	h := xxhash.Sum64String(p.domain + "\x00" + path)
	readable := make([]byte, 0, 64)
	for _, c := range []byte(p.domain + "." + path) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' {
			readable = append(readable, c)
		} else {
			readable = append(readable, '_')
		}
	}
	if len(readable) > 45 {
		readable = readable[:45]
	}
	name := fmt.Sprintf("rls.%s.%08x", readable, uint32(h^(h>>32)))
	if p.names == nil {
		p.names = map[string]bool{}
	}
	for i := 2; p.names[name]; i++ { // a hash collision within a document
		name = fmt.Sprintf("rls.%s.%08x.%d", readable[:min(len(readable), 40)], uint32(h^(h>>32)), i)
	}
	p.names[name] = true
	return name
}

// scalar reads a string field: any scalar but a number with a fraction
// (envoyproxy/ratelimit refuses those), a null as "".
func (p *parser) scalar(n *yaml.Node, path, field string) (string, *ConfigError) {
	n = yamlnode.Resolve(n)
	switch {
	case yamlnode.IsNull(n):
		return "", nil
	case n.Kind != yaml.ScalarNode:
		return "", p.fail(path, field, n.Line, "must be a string")
	case n.ShortTag() == "!!float":
		return "", p.fail(path, field, n.Line, "a number with a fraction (envoyproxy/ratelimit refuses it; quote it for a string)")
	}
	return n.Value, nil
}

// uint32 reads a count: a null is 0, as envoyproxy/ratelimit reads it.
func (p *parser) uint32(n *yaml.Node, path, field string) (uint32, *ConfigError) {
	s, err := p.scalar(n, path, field)
	if err != nil || s == "" {
		return 0, err
	}
	u, perr := strconv.ParseUint(s, 10, 32)
	if perr != nil {
		var v uint32 // YAML's other forms of an integer: 0x10, 1_000
		if n.ShortTag() != "!!int" || n.Decode(&v) != nil {
			return 0, p.fail(path, field, n.Line, fmt.Sprintf("must be an integer from 0 to %d", uint32(math.MaxUint32)))
		}
		u = uint64(v)
	}
	return uint32(u), nil
}

// boolean reads a flag as envoyproxy/ratelimit's YAML library (YAML 1.1)
// reads one: true or false in any case, y, yes, on, n, no, off unquoted;
// a null is false.
func (p *parser) boolean(n *yaml.Node, path, field string) (bool, *ConfigError) {
	n = yamlnode.Resolve(n)
	if yamlnode.IsNull(n) {
		return false, nil
	}
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
		if n.Style == 0 {
			switch n.Value {
			case "y", "Y", "yes", "Yes", "YES", "on", "On", "ON":
				return true, nil
			case "n", "N", "no", "No", "NO", "off", "Off", "OFF":
				return false, nil
			}
		}
	}
	return false, p.fail(path, field, n.Line, "must be true or false")
}
