package rules

import (
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/internal/yamlnode"
)

// Parse parses and validates a rule file. It is strict: unknown fields,
// duplicate fields and values of the wrong type are errors, each an [*Error]
// naming the rule, the field and the line of the offending value. A file
// that holds no rules (empty, comments only, "rules:" without a list, or
// cut short there) is an error too: an empty set is only what a file says
// explicitly with "rules: []".
func Parse(data []byte) (*Set, error) {
	if len(data) > MaxFileBytes {
		return nil, &Error{Index: -1, Msg: "rule file larger than 4 MiB"}
	}
	root, e := parseYAML(data)
	if e != nil {
		return nil, e
	}
	s := &Set{byName: map[string]*Rule{}, byDesc: map[string][]int{}}
	if root == nil {
		return nil, &Error{Index: -1, Field: "rules", Line: lastLine(data), Msg: noRulesMsg}
	}
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Index: -1, Line: root.Line, Msg: "a rule file is a mapping with a rules: list"}
	}
	var list *yaml.Node
	e = yamlnode.Fields(root, func(key string, v *yaml.Node) *Error {
		if key != "rules" {
			return &Error{Index: -1, Field: key, Line: v.Line, Msg: "unknown field (want rules)"}
		}
		list = v
		return nil
	}, func(field, msg string, line int) *Error {
		return &Error{Index: -1, Field: field, Line: line, Msg: msg}
	})
	if e != nil {
		return nil, e
	}
	if list == nil {
		return nil, &Error{Index: -1, Field: "rules", Line: root.Line, Msg: noRulesMsg}
	}
	if yamlnode.IsNull(list) {
		return nil, &Error{Index: -1, Field: "rules", Line: list.Line, Msg: noRulesMsg}
	}
	if list.Kind != yaml.SequenceNode {
		return nil, &Error{Index: -1, Field: "rules", Line: list.Line, Msg: "must be a list of rules"}
	}
	if len(list.Content) > MaxRules {
		return nil, &Error{Index: -1, Field: "rules", Line: list.Line, Msg: "more than 10000 rules"}
	}
	for i, item := range list.Content {
		item = yamlnode.Resolve(item)
		spec, lines, e := decodeSpec(item, i)
		if e != nil {
			return nil, e
		}
		r, e := compile(spec, i, item.Line, lines)
		if e != nil {
			return nil, e
		}
		if e := s.add(r, i, lines.of("name", item.Line)); e != nil {
			return nil, e
		}
	}
	return s, nil
}

// noRulesMsg is the error of a rule file that holds no rules without
// saying so: an emptied or truncated file must not switch limiting off.
const noRulesMsg = "the file holds no rules (empty, comments only, or cut short); write \"rules: []\" to run with none on purpose"

// lastLine is the number of the last line of data (1 for an empty file).
func lastLine(data []byte) int {
	n := 1
	for i, c := range data {
		if c == '\n' && i < len(data)-1 {
			n++
		}
	}
	return n
}

// fieldLines maps a rule's field paths ("limit", "overrides[0].key") to
// the lines of their values, so that an error names the line of the value
// at fault rather than the rule's first line.
type fieldLines map[string]int

// of returns the line of field's value: of the field itself, else of the
// nearest enclosing field ("overrides[0]" for "overrides[0].limit" when
// limit was not written), else def.
func (l fieldLines) of(field string, def int) int {
	for f := field; f != ""; {
		if n, ok := l[f]; ok && n > 0 {
			return n
		}
		i := strings.LastIndexAny(f, ".[")
		if i <= 0 {
			break
		}
		f = f[:i]
	}
	return def
}

// ParseSpec parses one rule (a YAML or JSON mapping, as the admin API's PUT
// body carries) without compiling it; pass it to [Set.With] or [Compile].
func ParseSpec(data []byte) (Spec, error) {
	if len(data) > MaxFileBytes {
		return Spec{}, &Error{Index: -1, Msg: "rule larger than 4 MiB"}
	}
	root, e := parseYAML(data)
	if e != nil {
		return Spec{}, e
	}
	if root == nil {
		return Spec{}, &Error{Index: -1, Msg: "empty rule"}
	}
	spec, _, e := decodeSpec(root, -1)
	if e != nil {
		return Spec{}, e
	}
	return spec, nil
}

// parseYAML returns the document's root node, or nil for an empty
// document (or one that is only null). Only the first document counts.
func parseYAML(data []byte) (root *yaml.Node, e *Error) {
	root, _, err := yamlnode.Parse(data)
	if err != nil {
		return nil, &Error{Index: -1, Msg: "invalid YAML: " + err.Error()}
	}
	if yamlnode.IsNull(root) {
		return nil, nil
	}
	return root, nil
}

// decodeSpec decodes one rule mapping (idx is its position, or -1) and
// the lines of its fields' values.
func decodeSpec(n *yaml.Node, idx int) (Spec, fieldLines, *Error) {
	var spec Spec
	lines := fieldLines{}
	name := ""
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if k, v := yamlnode.Resolve(n.Content[i]), yamlnode.Resolve(n.Content[i+1]); k != nil && v != nil && k.Value == "name" && v.Kind == yaml.ScalarNode {
				name = v.Value
			}
		}
	}
	fail := func(field, msg string, line int) *Error {
		return &Error{Rule: name, Index: idx, Field: field, Line: line, Msg: msg}
	}
	str := func(field string, v *yaml.Node, dst *string) *Error {
		if yamlnode.IsNull(v) {
			*dst = ""
			return nil
		}
		if v.Kind != yaml.ScalarNode {
			return fail(field, "must be a string", v.Line)
		}
		*dst = v.Value
		return nil
	}
	integer := func(field string, v *yaml.Node, dst *int64) *Error {
		if yamlnode.IsNull(v) {
			*dst = 0
			return nil
		}
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(dst) != nil {
			return fail(field, "must be an integer", v.Line)
		}
		return nil
	}
	e := yamlnode.Fields(n, func(key string, v *yaml.Node) *Error {
		lines[key] = v.Line
		switch key {
		case "name":
			return str(key, v, &spec.Name)
		case "algorithm":
			return str(key, v, &spec.Algorithm)
		case "limit":
			return integer(key, v, &spec.Limit)
		case "period":
			return str(key, v, &spec.Period)
		case "burst":
			return integer(key, v, &spec.Burst)
		case "min_interval":
			return str(key, v, &spec.MinInterval)
		case "key":
			return str(key, v, &spec.Key)
		case "descriptor":
			return str(key, v, &spec.Descriptor)
		case "on_store_failure":
			return str(key, v, &spec.OnStoreFailure)
		case "on_missing_key":
			return str(key, v, &spec.OnMissingKey)
		case "gateway_share":
			if yamlnode.IsNull(v) {
				return nil
			}
			if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || v.Decode(&spec.GatewayShare) != nil {
				return fail(key, "must be a number", v.Line)
			}
			return nil
		case "max_holders":
			var n int64
			if e := integer(key, v, &n); e != nil {
				return e
			}
			if n < 0 || n > lease.MaxKeyHolders {
				return fail(key, "must be between 1 and "+strconv.Itoa(lease.MaxKeyHolders)+" (0 or absent: "+strconv.Itoa(lease.DefaultMaxHolders)+")", v.Line)
			}
			spec.MaxHolders = int(n)
			return nil
		case "scope":
			return str(key, v, &spec.Scope)
		case "regional_floor":
			if yamlnode.IsNull(v) {
				return nil
			}
			if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || v.Decode(&spec.RegionalFloor) != nil {
				return fail(key, "must be a number", v.Line)
			}
			return nil
		case "shadow":
			if yamlnode.IsNull(v) {
				return nil
			}
			if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!bool" || v.Decode(&spec.Shadow) != nil {
				return fail(key, "must be true or false", v.Line)
			}
			return nil
		case "match":
			if yamlnode.IsNull(v) {
				return nil
			}
			m := &MatchSpec{}
			spec.Match = m
			return yamlnode.Fields(v, func(k string, v *yaml.Node) *Error {
				f := "match." + k
				lines[f] = v.Line
				switch k {
				case "path_prefix":
					return str(f, v, &m.PathPrefix)
				case "host":
					return str(f, v, &m.Host)
				case "methods":
					if yamlnode.IsNull(v) {
						return nil
					}
					if v.Kind == yaml.ScalarNode { // methods: GET
						m.Methods = []string{v.Value}
						return nil
					}
					if v.Kind != yaml.SequenceNode {
						return fail(f, "must be a list of methods", v.Line)
					}
					if len(v.Content) > 16 {
						return fail(f, "more than 16 methods", v.Line)
					}
					for i, mv := range v.Content {
						var s string
						fi := f + "[" + strconv.Itoa(i) + "]"
						lines[fi] = mv.Line
						if e := str(fi, yamlnode.Resolve(mv), &s); e != nil {
							return e
						}
						m.Methods = append(m.Methods, s)
					}
					return nil
				}
				return fail(f, "unknown field (want path_prefix, methods or host)", v.Line)
			}, func(field, msg string, line int) *Error { return fail(prefixed("match", field), msg, line) })
		case "hot":
			if yamlnode.IsNull(v) {
				return nil
			}
			h := &HotSpec{}
			spec.Hot = h
			return yamlnode.Fields(v, func(k string, v *yaml.Node) *Error {
				f := "hot." + k
				lines[f] = v.Line
				switch k {
				case "threshold":
					if yamlnode.IsNull(v) {
						return nil
					}
					if v.Kind != yaml.ScalarNode || (v.ShortTag() != "!!int" && v.ShortTag() != "!!float") || v.Decode(&h.Threshold) != nil {
						return fail(f, "must be a number", v.Line)
					}
					return nil
				case "split":
					var n int64
					if e := integer(f, v, &n); e != nil {
						return e
					}
					if n < 0 || n > MaxSplit {
						return fail(f, "must be between 0 (all nodes) and 1024", v.Line)
					}
					h.Split = int(n)
					return nil
				}
				return fail(f, "unknown field (want threshold or split)", v.Line)
			}, func(field, msg string, line int) *Error { return fail(prefixed("hot", field), msg, line) })
		case "overrides":
			if yamlnode.IsNull(v) {
				return nil
			}
			if v.Kind != yaml.SequenceNode {
				return fail(key, "must be a list of {key, limit, burst, period}", v.Line)
			}
			if len(v.Content) > MaxOverrides {
				return fail(key, "more than 1000 overrides", v.Line)
			}
			spec.Overrides = make([]OverrideSpec, len(v.Content))
			for i, ov := range v.Content {
				o := &spec.Overrides[i]
				p := "overrides[" + strconv.Itoa(i) + "]"
				lines[p] = ov.Line
				e := yamlnode.Fields(yamlnode.Resolve(ov), func(k string, v *yaml.Node) *Error {
					f := p + "." + k
					lines[f] = v.Line
					switch k {
					case "key":
						return str(f, v, &o.Key)
					case "limit":
						return integer(f, v, &o.Limit)
					case "burst":
						return integer(f, v, &o.Burst)
					case "period":
						return str(f, v, &o.Period)
					}
					return fail(f, "unknown field (want key, limit, burst or period)", v.Line)
				}, func(field, msg string, line int) *Error { return fail(prefixed(p, field), msg, line) })
				if e != nil {
					return e
				}
			}
			return nil
		}
		return fail(key, "unknown field", v.Line)
	}, fail)
	return spec, lines, e
}

func prefixed(prefix, field string) string {
	if field == "" {
		return prefix
	}
	return prefix + "." + field
}
