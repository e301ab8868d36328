package yamlnode

import (
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in         string
		kind       yaml.Kind // 0: no root
		more, fail bool
	}{
		{"", 0, false, false},
		{"# only a comment\n", 0, false, false},
		{"---\n", yaml.ScalarNode, false, false}, // an empty document is a null
		{"a: 1\n", yaml.MappingNode, false, false},
		{"- a\n", yaml.SequenceNode, false, false},
		{"a: 1\n---\nb: 2\n", yaml.MappingNode, true, false},
		{"a: &x 1\nb: *x\n", yaml.MappingNode, false, false},
		{"a: [\n", 0, false, true},
	} {
		root, more, err := Parse([]byte(c.in))
		kind := yaml.Kind(0)
		if root != nil {
			kind = root.Kind
		}
		if kind != c.kind || more != c.more || (err != nil) != c.fail {
			t.Errorf("Parse(%q) = kind %d, more %v, err %v; want kind %d, more %v, fail %v", c.in, kind, more, err, c.kind, c.more, c.fail)
		}
	}
}

func TestResolveAndIsNull(t *testing.T) {
	root, _, err := Parse([]byte("a: &x {k: v}\nb: *x\nc: ~\nd:\ne: null\nf: 'null'\n"))
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]*yaml.Node{}
	for i := 0; i < len(root.Content); i += 2 {
		v[root.Content[i].Value] = root.Content[i+1]
	}
	if v["b"].Kind != yaml.AliasNode || Resolve(v["b"]) != v["a"] {
		t.Errorf("Resolve of the alias b is not a's mapping")
	}
	for k, want := range map[string]bool{"a": false, "b": false, "c": true, "d": true, "e": true, "f": false} {
		if got := IsNull(v[k]); got != want {
			t.Errorf("IsNull(%s) = %v, want %v", k, got, want)
		}
	}
	if !IsNull(nil) || Resolve(nil) != nil {
		t.Errorf("nil is not null, or does not resolve to nil")
	}
}

// problem is a failure for Fields' tests.
type problem struct {
	field, msg string
	line       int
}

func fields(t *testing.T, in string, stopAt string) (keys []string, p *problem) {
	t.Helper()
	root, _, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	p = Fields(root, func(k string, v *yaml.Node) *problem {
		if v.Kind == yaml.AliasNode {
			t.Errorf("%s: the value is not resolved", k)
		}
		keys = append(keys, k)
		if k == stopAt {
			return &problem{k, "stop", v.Line}
		}
		return nil
	}, func(field, msg string, line int) *problem { return &problem{field, msg, line} })
	return keys, p
}

func TestFields(t *testing.T) {
	keys, p := fields(t, "a: 1\nb: &x 2\nc: *x\n", "")
	if p != nil || strings.Join(keys, ",") != "a,b,c" {
		t.Errorf("keys %v, problem %v; want a,b,c and none", keys, p)
	}
	if keys, p = fields(t, "a: 1\nb: 2\nc: 3\n", "b"); p == nil || p.msg != "stop" || p.line != 2 || strings.Join(keys, ",") != "a,b" {
		t.Errorf("f's failure: keys %v, problem %v; want it at b, line 2, after a,b", keys, p)
	}
	if _, p = fields(t, "a: 1\nb: 2\na: 3\n", ""); p == nil || *p != (problem{"a", "given twice", 3}) {
		t.Errorf("duplicate: %v", p)
	}
	if _, p = fields(t, "a: 1\n[x]: 2\n", ""); p == nil || *p != (problem{"", "field names must be plain strings", 2}) {
		t.Errorf("non-scalar key: %v", p)
	}
	if _, p = fields(t, "- a\n", ""); p == nil || *p != (problem{"", "must be a mapping", 1}) {
		t.Errorf("a list: %v", p)
	}
	// Past linearKeys the keys are kept in a map: a duplicate of an
	// early key and of a late key are both found.
	var b strings.Builder
	for i := range 3 * linearKeys {
		fmt.Fprintf(&b, "k%d: %d\n", i, i)
	}
	for _, dup := range []int{0, linearKeys + 3, 3*linearKeys - 1} {
		in := b.String() + fmt.Sprintf("k%d: again\n", dup)
		if keys, p = fields(t, in, ""); p == nil || *p != (problem{fmt.Sprintf("k%d", dup), "given twice", 3*linearKeys + 1}) || len(keys) != 3*linearKeys {
			t.Errorf("duplicate of k%d after %d keys: %v (%d keys seen)", dup, 3*linearKeys, p, len(keys))
		}
	}
}
