package rls

import (
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/sluicehq/sluice/node/internal/yamlnode"
)

// metadata reads a descriptor's metadata: a mapping of anything (envoy
// does not look inside), kept as the protobuf Struct it becomes in the
// response's dynamic_metadata; nil for none or an empty mapping.
func (p *parser) metadata(n *yaml.Node, path string) (*structpb.Struct, *ConfigError) {
	if n == nil || yamlnode.IsNull(n) {
		return nil, nil
	}
	v, err := p.metaValue(n, path, 0)
	if err != nil {
		return nil, err
	}
	s := v.GetStructValue()
	if s == nil {
		return nil, p.fail(path, "metadata", n.Line, "must be a mapping")
	}
	if len(s.Fields) == 0 {
		return nil, nil
	}
	return s, nil
}

// metaValue converts n as envoyproxy/ratelimit converts what its YAML
// library (YAML 1.1) decodes: mappings (keys as their text, merge keys
// expanded, the last of a key given twice) to structs, lists to lists,
// numbers, booleans (y, yes, on... unquoted too), nulls, and strings.
func (p *parser) metaValue(n *yaml.Node, path string, depth int) (*structpb.Value, *ConfigError) {
	n = yamlnode.Resolve(n)
	if p.nodes++; p.nodes > maxNodes || depth > MaxDepth*4 {
		return nil, p.fail(path, "metadata", n.Line, "too large or too deep")
	}
	switch n.Kind {
	case yaml.MappingNode:
		s := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		if err := p.metaFields(n, s, path, depth); err != nil {
			return nil, err
		}
		return structpb.NewStructValue(s), nil
	case yaml.SequenceNode:
		l := &structpb.ListValue{Values: make([]*structpb.Value, 0, len(n.Content))}
		for _, c := range n.Content {
			v, err := p.metaValue(c, path, depth+1)
			if err != nil {
				return nil, err
			}
			l.Values = append(l.Values, v)
		}
		return structpb.NewListValue(l), nil
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return structpb.NewNullValue(), nil
		case "!!int", "!!float":
			var f float64
			if n.Decode(&f) == nil {
				return structpb.NewNumberValue(f), nil
			}
		case "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return structpb.NewBoolValue(b), nil
			}
		case "!!str":
			if n.Style == 0 {
				if b, err := p.boolean(n, path, "metadata"); err == nil {
					return structpb.NewBoolValue(b), nil
				}
			}
		}
		return structpb.NewStringValue(n.Value), nil
	}
	return nil, p.fail(path, "metadata", n.Line, "not a value")
}

// metaFields adds the fields of mapping n to s.
func (p *parser) metaFields(n *yaml.Node, s *structpb.Struct, path string, depth int) *ConfigError {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := yamlnode.Resolve(n.Content[i]), n.Content[i+1]
		if k == nil || k.Kind != yaml.ScalarNode {
			return p.fail(path, "metadata", n.Content[i].Line, "keys must be plain values")
		}
		if k.ShortTag() == "!!merge" {
			mv, err := p.metaValue(v, path, depth+1)
			if err != nil {
				return err
			}
			var ms []*structpb.Struct
			if m := mv.GetStructValue(); m != nil {
				ms = append(ms, m)
			}
			for j := len(mv.GetListValue().GetValues()) - 1; j >= 0; j-- { // the first counts
				if m := mv.GetListValue().GetValues()[j].GetStructValue(); m != nil {
					ms = append(ms, m)
				}
			}
			for _, m := range ms {
				for mk, x := range m.Fields {
					s.Fields[mk] = x
				}
			}
			continue
		}
		x, err := p.metaValue(v, path, depth+1)
		if err != nil {
			return err
		}
		s.Fields[k.Value] = x
	}
	return nil
}

// dynamicMetadata is the dynamic_metadata of an answer to req, as
// envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA builds it: the domain,
// each descriptor's entries ("key=value"), its limit override and
// hits_addend, the request's hits_addend, and the metadata of the limits
// of the descriptors not over them (merged: the first of a key counts, but
// structs are merged field by field). limits[i] is descriptor i's limit
// (nil: none, or replaced), unlimited[i] whether it was unlimited.
func dynamicMetadata(req *rlsv3.RateLimitRequest, resp *rlsv3.RateLimitResponse, limits []*Limit) *structpb.Struct {
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	ds := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		es := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			es = append(es, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		f := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: es})}
		if l := d.GetLimit(); l != nil {
			f["limit"] = structpb.NewStringValue(prototext.MarshalOptions{}.Format(l))
		}
		if h := d.GetHitsAddend(); h != nil {
			f["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		ds = append(ds, structpb.NewStructValue(&structpb.Struct{Fields: f}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: ds})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i, st := range resp.GetStatuses() {
		if l := limits[i]; l != nil && !l.Unlimited && l.Metadata != nil && st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT {
			mergeMetadata(passed, l.Metadata)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata merges src into dst as envoyproxy/ratelimit does: a key
// dst lacks is added, two structs are merged, anything else keeps dst's.
// What it adds is copied: a configuration's metadata is never changed.
func mergeMetadata(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		d, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
			continue
		}
		if ds, ss := d.GetStructValue(), v.GetStructValue(); ds != nil && ss != nil {
			mergeMetadata(ds, ss)
		}
	}
}
