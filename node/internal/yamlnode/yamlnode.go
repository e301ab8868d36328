// Package yamlnode walks the node trees of gopkg.in/yaml.v3 for the strict
// parsers of rule files (node/rules) and Envoy rate limit configurations
// (node/rls): aliases followed, nulls recognised, and mappings whose keys
// are plain and unique, each problem reported at its line by the caller's
// own error type.
package yamlnode

import (
	"bytes"
	"errors"
	"io"

	"gopkg.in/yaml.v3"
)

// Parse decodes the first YAML document of data and returns its root node
// with aliases followed: nil when data holds no document (empty, or
// comments only). more reports whether anything follows the first
// document (another document, or text that is not YAML). err is the
// decoder's error for the first document.
func Parse(data []byte) (root *yaml.Node, more bool, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, false, nil
		}
		return nil, false, err
	}
	var next yaml.Node
	more = !errors.Is(dec.Decode(&next), io.EOF)
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 0 {
		return nil, more, nil
	}
	return Resolve(&doc), more, nil
}

// maxAliasChain bounds the aliases Resolve follows (yaml.v3 does not make
// an alias of an alias; the bound keeps a hand-built tree from looping).
const maxAliasChain = 100

// Resolve returns the node n stands for: the target of an alias, and the
// content of a document node. nil stays nil.
func Resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && i < maxAliasChain; i++ {
		switch {
		case n.Kind == yaml.AliasNode:
			n = n.Alias
		case n.Kind == yaml.DocumentNode && len(n.Content) == 1:
			n = n.Content[0]
		default:
			return n
		}
	}
	return n
}

// IsNull reports whether n is absent or stands for a null (~, null, or an
// empty value).
func IsNull(n *yaml.Node) bool {
	n = Resolve(n)
	return n == nil || n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

// linearKeys is how many keys Fields compares pairwise before it keeps
// them in a map.
const linearKeys = 16

// Fields calls f for each key of the mapping n, in order, with the node
// its value stands for, and returns f's first failure (a non-zero E). A
// node that is not a mapping, a key that is not a plain scalar and a key
// given twice are failures too, made by fail(field, msg, line): field is
// the key, or "" for the mapping itself.
func Fields[E comparable](n *yaml.Node, f func(key string, v *yaml.Node) E, fail func(field, msg string, line int) E) E {
	var ok E
	n = Resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		line := 0
		if n != nil {
			line = n.Line
		}
		return fail("", "must be a mapping", line)
	}
	var seen map[string]bool
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := Resolve(n.Content[i]), Resolve(n.Content[i+1])
		if k == nil || v == nil || k.Kind != yaml.ScalarNode {
			return fail("", "field names must be plain strings", n.Content[i].Line)
		}
		dup := false
		if i < 2*linearKeys {
			for j := 0; j < i && !dup; j += 2 {
				dup = Resolve(n.Content[j]).Value == k.Value
			}
		} else {
			if seen == nil {
				seen = make(map[string]bool, len(n.Content)/2)
				for j := 0; j < i; j += 2 {
					seen[Resolve(n.Content[j]).Value] = true
				}
			}
			dup = seen[k.Value]
			seen[k.Value] = true
		}
		if dup {
			return fail(k.Value, "given twice", k.Line)
		}
		if e := f(k.Value, v); e != ok {
			return e
		}
	}
	return ok
}
