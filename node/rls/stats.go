package rls

import (
	"fmt"
	"strings"
	"sync"

	"github.com/VictoriaMetrics/metrics"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// descStats are the counters of one domain and descriptor, named like
// envoyproxy/ratelimit's statistics (ratelimit.service.rate_limit.DOMAIN.
// KEY_VALUE.STAT):
//
//	sluice_rls_total_hits{domain="messaging",descriptor="message_type_marketing.to_number"}
//	sluice_rls_over_limit{...}   hits denied (including shadow-mode ones)
//	sluice_rls_near_limit{...}   allowed hits past NearLimitRatio of the limit
//	sluice_rls_shadow_mode{...}  hits a shadow_mode limit let through
type descStats struct {
	totalHits, overLimit, nearLimit, shadowMode *metrics.Counter
}

// statsSet makes descStats in a metrics.Set. Counters live as long as the
// set: a descriptor removed by a reload keeps its last counts.
type statsSet struct {
	set               *metrics.Set
	loads, loadErrors *metrics.Counter
	calls             map[string]*metrics.Counter // by code (callCodes); read-only after newStatsSet
	mu                struct {
		sync.Mutex
		detailed map[string]*descStats // detailed_metric series, bounded
	}
}

// MetricsHelp returns the # HELP text of each metric family the RLS
// server registers, by family name: what it counts. sluiced passes them
// to the node, whose /metrics writes them (node.Config.MetricsHelp).
func MetricsHelp() map[string]string {
	return map[string]string{
		"sluice_rls_config_loads_total":  "Envoy rate limit configurations (-rls-config) loaded, at start and on reload.",
		"sluice_rls_config_errors_total": "Envoy rate limit configurations refused (the previous one kept).",
		"sluice_rls_calls_total":         "ShouldRateLimit calls, by code: the overall code of an answered call (OK, OVER_LIMIT) or the gRPC status of a refused one (INVALID_ARGUMENT, UNAVAILABLE, INTERNAL).",
		"sluice_rls_total_hits":          "Hits of a descriptor's limit, by domain and descriptor (envoyproxy/ratelimit's total_hits).",
		"sluice_rls_over_limit":          "Hits over a descriptor's limit, shadow-mode ones included, by domain and descriptor (over_limit).",
		"sluice_rls_near_limit":          "Allowed hits past the near-limit share (80% by default) of a descriptor's limit, by domain and descriptor (near_limit).",
		"sluice_rls_shadow_mode":         "Hits over a shadow_mode limit, let through, by domain and descriptor (shadow_mode).",
	}
}

func newStatsSet(set *metrics.Set) *statsSet {
	s := &statsSet{set: set}
	s.loads = set.GetOrCreateCounter("sluice_rls_config_loads_total")
	s.loadErrors = set.GetOrCreateCounter("sluice_rls_config_errors_total")
	s.calls = map[string]*metrics.Counter{}
	for _, c := range callCodes {
		s.calls[c] = set.GetOrCreateCounter(`sluice_rls_calls_total{code="` + c + `"}`)
	}
	s.mu.detailed = map[string]*descStats{}
	return s
}

// of returns the counters of limit l matched by entry e for descriptor d:
// the limit's own, or with detailed_metric on a key-only or wildcard
// descriptor, the series of the request's values (at most
// maxDetailedSeries of them; later ones share the limit's).
func (s *statsSet) of(l *Limit, e *entry, d *ratelimitv3.RateLimitDescriptor) *descStats {
	if e != nil && e.detailed && e.value != d.GetEntries()[len(d.GetEntries())-1].GetValue() {
		var b strings.Builder
		for i, en := range d.GetEntries() {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(en.GetKey())
			b.WriteByte('_')
			b.WriteString(en.GetValue())
		}
		name := b.String()
		s.mu.Lock()
		defer s.mu.Unlock()
		if ds := s.mu.detailed[l.Domain+"\x00"+name]; ds != nil {
			return ds
		}
		if len(s.mu.detailed) < maxDetailedSeries {
			ds := s.make(l.Domain, name)
			s.mu.detailed[l.Domain+"\x00"+name] = ds
			return ds
		}
	}
	if ds := l.stats.Load(); ds != nil {
		return ds
	}
	ds := s.make(l.Domain, l.StatKey)
	l.stats.Store(ds)
	return ds
}

func (s *statsSet) make(domain, key string) *descStats {
	labels := fmt.Sprintf(`{domain="%s",descriptor="%s"}`, labelValue(domain), labelValue(key))
	return &descStats{
		totalHits:  s.set.GetOrCreateCounter("sluice_rls_total_hits" + labels),
		overLimit:  s.set.GetOrCreateCounter("sluice_rls_over_limit" + labels),
		nearLimit:  s.set.GetOrCreateCounter("sluice_rls_near_limit" + labels),
		shadowMode: s.set.GetOrCreateCounter("sluice_rls_shadow_mode" + labels),
	}
}

// callCodes label sluice_rls_calls_total: the overall code of an answered
// call, or the gRPC status code of a refused one.
var callCodes = []string{"OK", "OVER_LIMIT", "INVALID_ARGUMENT", "UNAVAILABLE", "INTERNAL"}

// countCall counts a call by its outcome.
func (s *statsSet) countCall(code string) {
	if c := s.calls[code]; c != nil {
		c.Inc()
	}
}

// labelValue makes s safe inside a quoted label value: printable ASCII
// without '"' and '\', others replaced by '_' (and at most 512 bytes).
func labelValue(s string) string {
	b := []byte(s)
	if len(b) > 512 {
		b = b[:512]
	}
	for i, c := range b {
		if c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			b[i] = '_'
		}
	}
	return string(b)
}
