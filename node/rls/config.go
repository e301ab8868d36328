package rls

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/internal/yamlnode"
	"github.com/sluicehq/sluice/node/rules"
)

// Bounds on configurations.
const (
	// MaxFileBytes bounds one configuration file.
	MaxFileBytes = 4 << 20
	// MaxFiles bounds the files of a configuration directory.
	MaxFiles = 1000
	// MaxLimits bounds the rate limits of a whole configuration (each is a
	// Sluice rule).
	MaxLimits = rules.MaxRules
	// MaxDepth bounds the nesting of descriptors.
	MaxDepth = 16
)

// ErrInvalidConfig means a configuration was refused; the error is a
// [*ConfigError] naming the file, the descriptor path and the field.
var ErrInvalidConfig = errors.New("invalid rate limit configuration")

// ConfigError is a configuration error: File is the file (empty for a
// single document given as bytes), Path the descriptor path within the
// domain ("message_type=marketing.to_number"), Field the field at fault,
// Line its line.
type ConfigError struct {
	File, Domain, Path, Field string
	Line                      int
	Msg                       string
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	} else if e.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Domain != "" {
		fmt.Fprintf(&b, "domain %q: ", e.Domain)
	}
	if e.Path != "" {
		fmt.Fprintf(&b, "descriptor %s: ", e.Path)
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Is makes errors.Is(err, ErrInvalidConfig) true.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Config is a loaded, validated configuration: its domains and their
// descriptor trees. It is immutable and safe for concurrent use.
type Config struct {
	domains map[string]*level
	limits  []*Limit
	rules   *rules.Set // one rule per limit that counts (not unlimited, not 0)
}

// Limit is one configured rate_limit.
type Limit struct {
	// Rule is the Sluice rule that counts it ("" for unlimited and
	// requests_per_unit 0, which never reach the engine).
	Rule string
	// Domain and StatKey name it in metrics: StatKey is envoy's
	// "key_value.key" path of the descriptor.
	Domain, StatKey string
	Unit            rlsv3.RateLimitResponse_RateLimit_Unit
	RequestsPerUnit uint32
	Unlimited       bool
	Shadow          bool
	// Name is rate_limit.name; Replaces the names it replaces.
	Name     string
	Replaces []string
	// Algorithm is the Sluice algorithm counting it (fixed_window, as
	// envoyproxy/ratelimit counts, unless the Sluice extension field
	// rate_limit.algorithm says otherwise).
	Algorithm lease.Algorithm
	// Period is the unit as a duration.
	Period time.Duration

	stats atomic.Pointer[descStats] // its metrics, once used
}

// level is one list of descriptors: the children of a descriptor, or a
// domain's top level.
type level struct {
	exact   map[string]*entry // key + "\x00" + value
	keyOnly map[string]*entry // key
	wild    []*entry          // values ending in '*', in file order
}

// entry is one configured descriptor.
type entry struct {
	key, value string
	prefix     string // for a wildcard value: the value without its '*'
	limit      *Limit
	children   *level
	detailed   bool
	path       string // for messages and stats: key_value.key...
}

// lookup finds the entry for (key, value): exact value first, then a
// wildcard prefix, then key only (envoyproxy/ratelimit's order).
func (l *level) lookup(key, value string) *entry {
	if l == nil {
		return nil
	}
	if e := l.exact[key+"\x00"+value]; e != nil {
		return e
	}
	for _, e := range l.wild {
		if e.key == key && strings.HasPrefix(value, e.prefix) {
			return e
		}
	}
	return l.keyOnly[key]
}

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string {
	ds := make([]string, 0, len(c.domains))
	for d := range c.domains {
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds
}

// Limits returns every configured limit, in file order.
func (c *Config) Limits() []*Limit { return c.limits }

// Rules returns the Sluice rules counting the limits.
func (c *Config) Rules() *rules.Set { return c.rules }

// unitPeriods are the envoy units as durations (envoyproxy/ratelimit's
// dividers: a month is 30 days, a year 365).
var unitPeriods = map[rlsv3.RateLimitResponse_RateLimit_Unit]time.Duration{
	rlsv3.RateLimitResponse_RateLimit_SECOND: time.Second,
	rlsv3.RateLimitResponse_RateLimit_MINUTE: time.Minute,
	rlsv3.RateLimitResponse_RateLimit_HOUR:   time.Hour,
	rlsv3.RateLimitResponse_RateLimit_DAY:    24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_WEEK:   7 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_MONTH:  30 * 24 * time.Hour,
	rlsv3.RateLimitResponse_RateLimit_YEAR:   365 * 24 * time.Hour,
}

// checkAlgorithms are the Sluice algorithms an RLS limit may use (the
// extension field rate_limit.algorithm): those checked with Take.
// Concurrency, whose slots are acquired and released, has no place in a
// one-shot check.
func checkAlgorithms() []lease.Algorithm {
	var as []lease.Algorithm
	for _, a := range lease.Algorithms() {
		if !a.Acquired() {
			as = append(as, a)
		}
	}
	return as
}

// Load reads a configuration file, or every *.yaml and *.yml file of a
// directory (not its dot files or sub-directories), one domain per file.
func Load(path string) (*Config, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read the rate limit configuration: %w", err)
	}
	files := []string{path}
	if fi.IsDir() {
		files, err = configFiles(path)
		if err != nil {
			return nil, err
		}
	}
	docs := make([]Doc, 0, len(files))
	for _, f := range files {
		data, err := readFile(f)
		if err != nil {
			return nil, err
		}
		docs = append(docs, Doc{Name: f, Data: data})
	}
	return Parse(docs...)
}

// configFiles lists the configuration files of dir, sorted.
func configFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("cannot read the rate limit configuration: %w", err)
	}
	var files []string
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || strings.HasPrefix(n, ".") || !(strings.HasSuffix(n, ".yaml") || strings.HasSuffix(n, ".yml")) {
			continue
		}
		files = append(files, filepath.Join(dir, n))
	}
	if len(files) > MaxFiles {
		return nil, &ConfigError{File: dir, Msg: fmt.Sprintf("more than %d configuration files", MaxFiles)}
	}
	return files, nil
}

func readFile(name string) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("cannot read the rate limit configuration: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read the rate limit configuration: %w", err)
	}
	if len(data) > MaxFileBytes {
		return nil, &ConfigError{File: name, Msg: fmt.Sprintf("larger than %d bytes", MaxFileBytes)}
	}
	return data, nil
}

// Doc is one configuration document: its file name (for messages) and
// content.
type Doc struct {
	Name string
	Data []byte
}

// Parse builds a Config from documents, one domain each. Any error refuses
// the whole configuration.
func Parse(docs ...Doc) (*Config, error) {
	c := &Config{domains: map[string]*level{}}
	files := map[string]string{} // domain → file
	var specs []rules.Spec
	for _, d := range docs {
		p := &parser{file: d.Name, c: c}
		domain, top, err := p.document(d.Data)
		if err != nil {
			return nil, err
		}
		if prev, dup := files[domain]; dup {
			return nil, &ConfigError{File: d.Name, Domain: domain, Field: "domain",
				Msg: "already configured in " + strconv.Quote(prev) + " (one domain per file)"}
		}
		files[domain] = d.Name
		c.domains[domain] = top
		specs = append(specs, p.specs...)
	}
	set, err := rules.NewSet(specs)
	if err != nil { // names are unique and specs valid by construction
		return nil, fmt.Errorf("cannot build the rules of the rate limit configuration: %w", err)
	}
	c.rules = set
	return c, nil
}

// parser reads one document.
type parser struct {
	file   string
	domain string
	c      *Config
	specs  []rules.Spec
	names  map[string]bool // rule names of this document
	count  int             // descriptors read (aliases can repeat a subtree)
}

// maxDescriptors bounds the descriptors of one document, counting those
// repeated through YAML aliases.
const maxDescriptors = 20000

func (p *parser) fail(path, field string, line int, msg string) *ConfigError {
	return &ConfigError{File: p.file, Domain: p.domain, Path: path, Field: field, Line: line, Msg: msg}
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
	err := p.fields(n, "", func(k string, v *yaml.Node) *ConfigError {
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
			return p.fail("", k, v.Line, "unknown field")
		}
		return nil
	})
	if err != nil {
		return "", nil, err
	}
	if p.domain == "" {
		return "", nil, p.fail("", "domain", domainLine, "required (a non-empty string)")
	}
	top, err := p.level(descs, "", 1)
	if err != nil {
		return "", nil, err
	}
	return p.domain, top, nil
}

// level reads a descriptors list.
func (p *parser) level(n *yaml.Node, parent string, depth int) (*level, *ConfigError) {
	l := &level{exact: map[string]*entry{}, keyOnly: map[string]*entry{}}
	if yamlnode.IsNull(n) {
		return l, nil
	}
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.SequenceNode {
		return nil, p.fail(parent, "descriptors", n.Line, "must be a list")
	}
	if depth > MaxDepth {
		return nil, p.fail(parent, "descriptors", n.Line, fmt.Sprintf("nested deeper than %d levels", MaxDepth))
	}
	for _, dn := range n.Content {
		if p.count++; p.count > maxDescriptors {
			return nil, p.fail(parent, "descriptors", dn.Line, fmt.Sprintf("more than %d descriptors", maxDescriptors))
		}
		e, err := p.descriptor(dn, parent, depth)
		if err != nil {
			return nil, err
		}
		switch {
		case e.value == "":
			if l.keyOnly[e.key] != nil {
				return nil, p.fail(e.path, "key", dn.Line, "duplicate descriptor (same key, no value)")
			}
			l.keyOnly[e.key] = e
		case strings.HasSuffix(e.value, "*"):
			for _, w := range l.wild {
				if w.key == e.key && w.value == e.value {
					return nil, p.fail(e.path, "value", dn.Line, "duplicate descriptor (same key and value)")
				}
			}
			e.prefix = strings.TrimSuffix(e.value, "*")
			l.wild = append(l.wild, e)
		default:
			k := e.key + "\x00" + e.value
			if l.exact[k] != nil {
				return nil, p.fail(e.path, "value", dn.Line, "duplicate descriptor (same key and value)")
			}
			l.exact[k] = e
		}
	}
	return l, nil
}

// descriptor reads one descriptor and its children.
func (p *parser) descriptor(n *yaml.Node, parent string, depth int) (*entry, *ConfigError) {
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.fail(parent, "descriptors", n.Line, "each descriptor must be a mapping with key, value, rate_limit...")
	}
	e := &entry{}
	var rl, children *yaml.Node
	var shadow bool
	keyLine := n.Line
	// The path names the descriptor in messages: find its key first.
	here := parent
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k, v := yamlnode.Resolve(n.Content[i]), yamlnode.Resolve(n.Content[i+1]); k.Value == "key" && v.Kind == yaml.ScalarNode {
			here = v.Value
			if parent != "" {
				here = parent + "." + v.Value
			}
		}
	}
	err := p.fields(n, here, func(k string, v *yaml.Node) *ConfigError {
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
			shadow, err = p.boolean(v, here, "shadow_mode")
		case "detailed_metric":
			e.detailed, err = p.boolean(v, here, "detailed_metric")
		default:
			err = p.fail(here, k, v.Line, "unknown field")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if e.key == "" {
		return nil, p.fail(parent, "key", keyLine, "required (a non-empty string)")
	}
	seg := e.key
	if e.value != "" {
		seg += "_" + e.value
	}
	e.path = seg
	if parent != "" {
		e.path = parent + "." + seg
	}
	if rl != nil && !yamlnode.IsNull(rl) {
		if e.limit, err = p.rateLimit(rl, e, shadow); err != nil {
			return nil, err
		}
	}
	if children != nil {
		if e.children, err = p.level(children, e.path, depth+1); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// rateLimit reads a rate_limit block and, for a limit that counts, adds
// its Sluice rule.
func (p *parser) rateLimit(n *yaml.Node, e *entry, shadow bool) (*Limit, *ConfigError) {
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.fail(e.path, "rate_limit", n.Line, "must be a mapping with unit and requests_per_unit")
	}
	l := &Limit{Domain: p.domain, StatKey: e.path, Shadow: shadow, Algorithm: lease.FixedWindow}
	var unit string
	unitLine, rpuSet, rpuLine := n.Line, false, n.Line
	err := p.fields(n, e.path, func(k string, v *yaml.Node) *ConfigError {
		var err *ConfigError
		switch k {
		case "unit":
			unit, err = p.scalar(v, e.path, "rate_limit.unit")
			unitLine = v.Line
		case "requests_per_unit":
			var s string
			if s, err = p.scalar(v, e.path, "rate_limit.requests_per_unit"); err == nil {
				u, perr := strconv.ParseUint(s, 10, 32)
				if perr != nil {
					return p.fail(e.path, "rate_limit.requests_per_unit", v.Line, fmt.Sprintf("must be an integer from 0 to %d", uint32(math.MaxUint32)))
				}
				l.RequestsPerUnit, rpuSet, rpuLine = uint32(u), true, v.Line
			}
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
			err = p.fail(e.path, "rate_limit."+k, v.Line, "unknown field")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	if l.Unlimited {
		if unit != "" || rpuSet {
			return nil, p.fail(e.path, "rate_limit.unlimited", n.Line, "an unlimited rate_limit has no unit or requests_per_unit")
		}
		p.c.limits = append(p.c.limits, l)
		return l, nil
	}
	if unit == "" {
		return nil, p.fail(e.path, "rate_limit.unit", unitLine, "required: second, minute, hour, day, week, month or year")
	}
	u, ok := rlsv3.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(unit)]
	if !ok || u == int32(rlsv3.RateLimitResponse_RateLimit_UNKNOWN) {
		return nil, p.fail(e.path, "rate_limit.unit", unitLine, strconv.Quote(unit)+" is not one of second, minute, hour, day, week, month, year")
	}
	l.Unit = rlsv3.RateLimitResponse_RateLimit_Unit(u)
	l.Period = unitPeriods[l.Unit]
	if !rpuSet {
		return nil, p.fail(e.path, "rate_limit.requests_per_unit", rpuLine, "required")
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
		err := p.fields(r, path, func(k string, v *yaml.Node) *ConfigError {
			if k != "name" {
				return p.fail(path, "rate_limit.replaces."+k, v.Line, "unknown field")
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

func (p *parser) scalar(n *yaml.Node, path, field string) (string, *ConfigError) {
	n = yamlnode.Resolve(n)
	if n.Kind != yaml.ScalarNode || yamlnode.IsNull(n) {
		return "", p.fail(path, field, n.Line, "must be a string")
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, path, field string) (bool, *ConfigError) {
	n = yamlnode.Resolve(n)
	if n.Kind == yaml.ScalarNode {
		switch strings.ToLower(n.Value) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, p.fail(path, field, n.Line, "must be true or false")
}

// fields calls f for each key of the mapping n (at path) and its value,
// refusing duplicate keys and keys that are not plain strings.
func (p *parser) fields(n *yaml.Node, path string, f func(key string, v *yaml.Node) *ConfigError) *ConfigError {
	return yamlnode.Fields(n, f, func(field, msg string, line int) *ConfigError {
		return p.fail(path, field, line, msg)
	})
}
