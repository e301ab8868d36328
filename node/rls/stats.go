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
		"sluice_rls_config_loads_total":     "Envoy rate limit configurations (-rls-config) loaded, at start and on reload.",
		"sluice_rls_config_errors_total":    "Envoy rate limit configurations refused (the previous one kept).",
		"sluice_rls_calls_total":            "ShouldRateLimit calls, by code: the overall code of an answered call (OK, OVER_LIMIT) or the gRPC status of a refused one (INVALID_ARGUMENT, UNAVAILABLE, INTERNAL).",
		"sluice_rls_total_hits":             "Hits of a descriptor's limit, by domain and descriptor (envoyproxy/ratelimit's total_hits).",
		"sluice_rls_over_limit":             "Hits over a descriptor's limit, shadow-mode ones included, by domain and descriptor (over_limit).",
		"sluice_rls_near_limit":             "Allowed hits past the near-limit share (80% by default) of a descriptor's limit, by domain and descriptor (near_limit).",
		"sluice_rls_shadow_mode":            "Hits over a shadow_mode limit, let through, by domain and descriptor (shadow_mode).",
		"sluice_rls_pending_bytes":          "Bytes of unfinished requests (streams whose body has not arrived whole) the rate limit service holds over all connections, against its budget (ServerConfig.MaxPendingBytes).",
		"sluice_rls_unfinished_reset_total": "Requests the rate limit service dropped before they arrived whole, by reason: timeout (not whole within RequestTimeout) or budget (the node's budget of unfinished request bytes spent).",
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

// of returns the counters of limit l matched by entry e (with how) for
// descriptor d: the limit's own, or when its name depends on the request
// (detailed_metric, value_to_metric), the series of that name (at most
// maxDetailedSeries of them; later ones share the limit's).
func (s *statsSet) of(l *Limit, e *entry, d *ratelimitv3.RateLimitDescriptor, how uint32) *descStats {
	if l.named && e != nil {
		name := statName(l, e, d, how)
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

// statName is the name envoyproxy/ratelimit gives the statistics of limit
// l (matched by e, with how) for descriptor d, less the domain. With
// detailed_metric: each entry's key_value ('_' even before an empty
// value), or where an entry matched a share_threshold wildcard, its
// pattern (and no '_' before an empty value). Otherwise each entry's key,
// then '_' and: the request's value where it matched a value; the
// pattern of a wildcard (the request's value with value_to_metric, the
// pattern still with share_threshold); nothing for a key-only descriptor
// (the request's value with value_to_metric).
func statName(l *Limit, e *entry, d *ratelimitv3.RateLimitDescriptor, how uint32) string {
	var path [MaxDepth]*entry
	ch := chain(e, &path)
	entries := d.GetEntries()
	// pattern is what entry i stands for when it matched a wildcard: its
	// pattern, and whether that is a share_threshold's.
	pattern := func(i int) (string, bool) {
		if i >= len(ch) || matchedBy(how, i) != byWildcard {
			return "", false
		}
		return sharedValue(ch[i], entries[i].GetKey()), ch[i].share
	}
	shared := false
	for i := range entries {
		_, sh := pattern(i)
		shared = shared || sh
	}
	var b strings.Builder
	for i, en := range entries {
		if i > 0 {
			b.WriteByte('.')
		}
		b.WriteString(en.GetKey())
		v := en.GetValue()
		p, sh := pattern(i)
		switch {
		case l.detailed && !shared:
			b.WriteByte('_') // even before an empty value
		case l.detailed:
			if sh {
				v = p
			}
		case p != "" && (sh || !ch[i].valueToMetric):
			v = p
		case i < len(ch) && matchedBy(how, i) == byKey && !ch[i].valueToMetric:
			v = ""
		}
		if v != "" {
			if !l.detailed || shared {
				b.WriteByte('_')
			}
			b.WriteString(v)
		}
	}
	return b.String()
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
