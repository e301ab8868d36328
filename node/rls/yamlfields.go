package rls

import (
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/node/internal/yamlnode"
)

// field is one field of a mapping: its name's node and its value's.
type field struct {
	k, v   *yaml.Node
	merged bool // from a merge key (<<)
}

// fields calls f for each field of the mapping n (at path; prefix is put
// before field names in messages: "rate_limit." say) with the node its
// value stands for, in order, once per name, as envoyproxy/ratelimit's
// YAML library (gopkg.in/yaml.v2) reads a mapping: merge keys (<<) are
// expanded where they stand, and a name given twice counts by its last
// value (with a warning, when both were written out). Names must be
// strings.
func (p *parser) fields(n *yaml.Node, path, prefix string, f func(key string, v *yaml.Node) *ConfigError) *ConfigError {
	n = yamlnode.Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		line := 0
		if n != nil {
			line = n.Line
		}
		return p.fail(path, prefix, line, "must be a mapping")
	}
	var fs []field
	if err := p.collect(n, path, prefix, false, 0, &fs); err != nil {
		return err
	}
	last := make(map[string]int, len(fs))
	for i, x := range fs {
		last[x.k.Value] = i
	}
	for i, x := range fs {
		if j := last[x.k.Value]; j != i {
			if !x.merged && !fs[j].merged {
				p.warn(path, prefix+x.k.Value, x.k.Line, "given twice: the last one counts (as envoyproxy/ratelimit reads it)")
			}
			continue
		}
		if err := f(x.k.Value, x.v); err != nil {
			return err
		}
	}
	return nil
}

// collect appends the fields of mapping n to fs, expanding merge keys in
// place (of a list of mappings, the first counts: it comes last).
func (p *parser) collect(n *yaml.Node, path, prefix string, merged bool, depth int, fs *[]field) *ConfigError {
	if depth > maxMerges {
		return p.fail(path, prefix+"<<", n.Line, "merges nested too deep")
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamlnode.Resolve(n.Content[i]), yamlnode.Resolve(n.Content[i+1])
		if k == nil || v == nil || k.Kind != yaml.ScalarNode {
			return p.fail(path, prefix, n.Content[i].Line, "field names must be plain strings")
		}
		if k.ShortTag() == "!!merge" {
			ms := []*yaml.Node{v}
			if v.Kind == yaml.SequenceNode {
				ms = ms[:0]
				for j := len(v.Content) - 1; j >= 0; j-- {
					ms = append(ms, yamlnode.Resolve(v.Content[j]))
				}
			}
			for _, m := range ms {
				if m == nil || m.Kind != yaml.MappingNode {
					return p.fail(path, prefix+"<<", k.Line, "a merge takes a mapping or a list of mappings")
				}
				if err := p.collect(m, path, prefix, true, depth+1, fs); err != nil {
					return err
				}
			}
			continue
		}
		if k.ShortTag() != "!!str" {
			return p.fail(path, prefix+k.Value, k.Line, "field names must be strings")
		}
		if merged {
			if p.nodes++; p.nodes > maxNodes { // aliases can repeat a merge
				return p.fail(path, prefix+k.Value, k.Line, "too many merged fields")
			}
		}
		*fs = append(*fs, field{k: k, v: v, merged: merged})
	}
	return nil
}
