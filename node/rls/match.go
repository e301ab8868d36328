package rls

import (
	"bytes"
	"strings"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/sluicehq/sluice/node/rules"
)

// level is one list of descriptors: the children of a descriptor, or a
// domain's top level. Descriptors are found as envoyproxy/ratelimit finds
// them, by their composite key: the key, or the key, '_' and the value.
type level struct {
	byKey map[string]*entry // by composite key
	wild  []*entry          // composite keys holding a '*', in file order
}

// entry is one configured descriptor.
type entry struct {
	key, value string
	final      string   // the composite key: key, or key_value
	parts      []string // final split at each '*' (a wildcard); nil for none
	limit      *Limit
	children   *level
	parent     *entry
	depth      int // its level: 0 for a domain's top level
	// valueToMetric and share are the descriptor's value_to_metric and
	// share_threshold (share only on a wildcard).
	valueToMetric, share bool
	path                 string // for messages and stats: key_value.key...
}

// How a request entry matched its level's descriptor (2 bits per level in
// a match's how; see match).
const (
	byValue    = 1 // the composite key key_value
	byWildcard = 2 // a wildcard's pattern
	byKey      = 3 // the key alone
)

// matchedBy is how the entry at level i matched, from a match's how.
func matchedBy(how uint32, i int) uint32 { return how >> (2 * i) & 3 }

// lookup finds the descriptor for (key, value) in l, envoyproxy/ratelimit's
// way: the composite key key_value first, then the wildcards in file
// order (each '*' matching any run of bytes, over key_value), then the
// key alone. kv is scratch space.
func (l *level) lookup(key, value string, kv *[]byte) (*entry, uint32) {
	if l == nil {
		return nil, 0
	}
	b := append(append(append((*kv)[:0], key...), '_'), value...)
	*kv = b
	if e := l.byKey[string(b)]; e != nil { // no allocation: a map index
		return e, byValue
	}
	for _, e := range l.wild {
		if wildcardMatch(e.parts, b) {
			return e, byWildcard
		}
	}
	if e := l.byKey[key]; e != nil {
		return e, byKey
	}
	return nil, 0
}

// wildcardMatch reports whether v matches the pattern split at its '*'s
// into parts, each '*' matching any run of bytes (an empty one too):
// envoyproxy/ratelimit's wildcardMatch.
func wildcardMatch(parts []string, v []byte) bool {
	if len(parts) == 1 {
		return string(v) == parts[0]
	}
	first, last := parts[0], parts[len(parts)-1]
	fixed := 0
	for _, p := range parts {
		fixed += len(p)
	}
	if len(v) < fixed || !bytes.HasPrefix(v, []byte(first)) || !bytes.HasSuffix(v, []byte(last)) {
		return false
	}
	rest := v[len(first) : len(v)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := bytes.Index(rest, []byte(p))
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// match finds the configured descriptor for d, envoyproxy/ratelimit's way:
// entry by entry down the tree, with no backtracking; only the descriptor
// reached by the last entry can apply (its limit may be nil). how tells
// how each entry matched (matchedBy). kv is scratch space.
func match(top *level, d *ratelimitv3.RateLimitDescriptor, kv *[]byte) (e *entry, how uint32) {
	l := top
	entries := d.GetEntries()
	for i, en := range entries {
		var by uint32
		e, by = l.lookup(en.GetKey(), en.GetValue(), kv)
		if e == nil || i >= MaxDepth {
			return nil, 0
		}
		how |= by << (2 * i)
		if i == len(entries)-1 {
			return e, how
		}
		if e.children == nil || len(e.children.byKey) == 0 {
			return nil, 0
		}
		l = e.children
	}
	return nil, 0
}

// chain fills path with the descriptors from the top level down to e, e
// last, and returns them.
func chain(e *entry, path *[MaxDepth]*entry) []*entry {
	n := e.depth + 1
	for x := e; x != nil; x = x.parent {
		path[x.depth] = x
	}
	return path[:n]
}

// sharedValue is what a request entry of key stands for in a counter key
// or a metric's name when it matched the share_threshold wildcard e: the
// pattern (envoyproxy/ratelimit trims key_ off e's composite key).
func sharedValue(e *entry, key string) string {
	if f := e.final; len(f) > len(key) && strings.HasPrefix(f, key) && f[len(key)] == '_' {
		return f[len(key)+1:]
	}
	return e.final
}

// appendKey appends the counter key of d within its limit's rule (e is
// the descriptor d matched with how): the entries' values in the format of
// node/rules' counter keys (each value with '\' and '|' escaped by a '\',
// joined with '|', so that no two descriptors share a key), shortened past
// api.MaxKeyLen by rules.ShortenKey. An entry that matched a
// share_threshold wildcard counts as its pattern, so that every value it
// matches shares one counter (as envoyproxy/ratelimit's cache key).
func appendKey(dst []byte, d *ratelimitv3.RateLimitDescriptor, e *entry, how uint32) []byte {
	start := len(dst)
	var path [MaxDepth]*entry
	var ch []*entry
	if e != nil && e.limit != nil && e.limit.shared {
		ch = chain(e, &path)
	}
	for i, en := range d.GetEntries() {
		if i > 0 {
			dst = append(dst, '|')
		}
		v := en.GetValue()
		if ch != nil && i < len(ch) && ch[i].share && matchedBy(how, i) == byWildcard {
			v = sharedValue(ch[i], en.GetKey())
		}
		for i := 0; i < len(v); i++ {
			if v[i] == '|' || v[i] == '\\' {
				dst = append(dst, '\\')
			}
			dst = append(dst, v[i])
		}
	}
	return dst[:start+len(rules.ShortenKey(dst[start:]))] // shortened in place
}
