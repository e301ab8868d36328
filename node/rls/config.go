package rls

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/lease"
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
	domains  map[string]*level
	limits   []*Limit
	rules    *rules.Set // one rule per limit that counts (not unlimited, not 0)
	warnings []string
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
	// Quota is its descriptor's quota_mode: over its limit, it makes a
	// request OVER_LIMIT only when every quota_mode descriptor of the
	// request is over (and no other one is), as envoyproxy/ratelimit
	// decides.
	Quota bool
	// Metadata is its descriptor's metadata (nil for none), merged into
	// the response's dynamic_metadata when the descriptor is not over its
	// limit (ServerConfig.DynamicMetadata).
	Metadata *structpb.Struct

	detailed bool // its descriptor's detailed_metric
	// named: its metrics' name depends on the request (detailed_metric,
	// or a value_to_metric on its path); shared: a share_threshold
	// wildcard on its path pools the values it matches into one counter.
	named, shared bool

	stats atomic.Pointer[descStats] // its metrics, once used (not named)
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

// Warnings are what the configuration holds that has no effect (a field
// envoyproxy/ratelimit accepts but ignores where it is, a key given twice,
// a requests_per_unit left out), one line each, naming file, line,
// descriptor and field as a ConfigError does.
func (c *Config) Warnings() []string { return c.warnings }

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
