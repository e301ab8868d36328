package rls

import (
	"unicode/utf8"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// request is a RateLimitRequest and the messages it points to, reused
// through a pool: the gRPC handler decodes into one (see codec.Unmarshal)
// and releases it once the call is answered. Strings are copied out of the
// wire bytes, so what a call keeps of them (metrics labels) outlives it.
type request struct {
	req     rlsv3.RateLimitRequest
	descs   []*ratelimitv3.RateLimitDescriptor       // decoded into, in order
	entries []*ratelimitv3.RateLimitDescriptor_Entry // decoded into, in order
	hits    []*wrapperspb.UInt64Value                // decoded into, in order
	// Arrays of the decoded request's slices.
	descSlice  []*ratelimitv3.RateLimitDescriptor
	entrySlice []*ratelimitv3.RateLimitDescriptor_Entry
}

// unmarshal decodes b into r.req: with decode, or with the proto library
// when decode declines.
func (r *request) unmarshal(b []byte) error {
	if r.decode(b) {
		return nil
	}
	return proto.Unmarshal(b, &r.req)
}

// decode decodes b into r.req as proto.Unmarshal would, reusing r's
// messages, and reports whether it could: a field it does not decode (a
// descriptor's limit override or is_negative_hits, a field unknown to it)
// or a singular message given twice (which protobuf merges) makes it
// report false, and the caller decodes with the proto library instead.
func (r *request) decode(b []byte) bool {
	r.req.Reset()
	var nd, ne, nh int
	// Each descriptor's entries are a run of entrySlice; their subslices
	// are set once every descriptor is decoded (entrySlice may move).
	type run struct{ lo, hi int }
	var runs [MaxDescriptors]run
	descs := r.descSlice[:0]
	entries := r.entrySlice[:0]
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch {
		case num == 1 && typ == protowire.BytesType: // domain
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || !utf8.Valid(v) {
				return false
			}
			r.req.Domain, b = string(v), b[n:]
		case num == 2 && typ == protowire.BytesType: // descriptors
			v, n := protowire.ConsumeBytes(b)
			if n < 0 || len(descs) == MaxDescriptors {
				return false // more than the bound: validation refuses it, the proto library decodes it
			}
			b = b[n:]
			if nd == len(r.descs) {
				r.descs = append(r.descs, &ratelimitv3.RateLimitDescriptor{})
			}
			d := r.descs[nd]
			nd++
			d.Reset()
			lo := len(entries)
			var ok bool
			if entries, nh, ok = r.decodeDescriptor(v, d, entries, nh, &ne); !ok {
				return false
			}
			runs[len(descs)] = run{lo, len(entries)}
			descs = append(descs, d)
		case num == 3 && typ == protowire.VarintType: // hits_addend
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			r.req.HitsAddend, b = uint32(v), b[n:]
		default:
			return false
		}
	}
	for i, d := range descs {
		if rn := runs[i]; rn.hi > rn.lo {
			d.Entries = entries[rn.lo:rn.hi:rn.hi]
		}
	}
	if len(descs) > 0 {
		r.req.Descriptors = descs
	}
	r.descSlice, r.entrySlice = descs, entries
	return true
}

// decodeDescriptor decodes b into d, appending its entries to entries.
func (r *request) decodeDescriptor(b []byte, d *ratelimitv3.RateLimitDescriptor, entries []*ratelimitv3.RateLimitDescriptor_Entry, nh int, ne *int) ([]*ratelimitv3.RateLimitDescriptor_Entry, int, bool) {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, 0, false
		}
		b = b[n:]
		v, n := protowire.ConsumeBytes(b)
		if typ != protowire.BytesType || n < 0 {
			return nil, 0, false
		}
		b = b[n:]
		switch num {
		case 1: // entries
			if len(entries) == MaxDescriptors*MaxEntries {
				return nil, 0, false
			}
			if *ne == len(r.entries) {
				r.entries = append(r.entries, &ratelimitv3.RateLimitDescriptor_Entry{})
			}
			e := r.entries[*ne]
			*ne++
			e.Reset()
			if !decodeEntry(v, e) {
				return nil, 0, false
			}
			entries = append(entries, e)
		case 3: // hits_addend
			if d.HitsAddend != nil {
				return nil, 0, false // given twice: merged
			}
			if nh == len(r.hits) {
				r.hits = append(r.hits, &wrapperspb.UInt64Value{})
			}
			h := r.hits[nh]
			nh++
			h.Reset()
			for len(v) > 0 {
				num, typ, n := protowire.ConsumeTag(v)
				if n < 0 || num != 1 || typ != protowire.VarintType {
					return nil, 0, false
				}
				x, m := protowire.ConsumeVarint(v[n:])
				if m < 0 {
					return nil, 0, false
				}
				h.Value, v = x, v[n+m:]
			}
			d.HitsAddend = h
		default:
			return nil, 0, false
		}
	}
	return entries, nh, true
}

// decodeEntry decodes b into e.
func decodeEntry(b []byte, e *ratelimitv3.RateLimitDescriptor_Entry) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return false
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 || !utf8.Valid(v) {
			return false
		}
		b = b[n+m:]
		switch num {
		case 1:
			e.Key = string(v)
		case 2:
			e.Value = string(v)
		default:
			return false
		}
	}
	return true
}
