package rls

import (
	"testing"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func decodeSeeds(t testing.TB) (fast, slow [][]byte) {
	m := func(r *rlsv3.RateLimitRequest) []byte {
		b, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ent := func(kv ...string) []*ratelimitv3.RateLimitDescriptor_Entry {
		var es []*ratelimitv3.RateLimitDescriptor_Entry
		for i := 0; i < len(kv); i += 2 {
			es = append(es, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
		}
		return es
	}
	fast = [][]byte{
		m(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: ent("user", "alice")}}}),
		m(&rlsv3.RateLimitRequest{Domain: "messaging", HitsAddend: 7, Descriptors: []*ratelimitv3.RateLimitDescriptor{
			{Entries: ent("message_type", "marketing", "to_number", "2061111111")},
			{Entries: ent("to_number", "2061111111"), HitsAddend: wrapperspb.UInt64(3)},
			{Entries: ent("k", "")},
			{},
			{HitsAddend: wrapperspb.UInt64(0)},
		}}),
		m(&rlsv3.RateLimitRequest{}),
		m(&rlsv3.RateLimitRequest{Domain: "é", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: ent("", "v")}}}),
	}
	limit := m(&rlsv3.RateLimitRequest{Domain: "d", Descriptors: []*ratelimitv3.RateLimitDescriptor{{Entries: ent("a", "b"),
		Limit: &ratelimitv3.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 5}}}})
	unknown := protowire.AppendVarint(protowire.AppendTag(append([]byte(nil), fast[0]...), 99, protowire.VarintType), 1)
	badUTF8 := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "\xff")
	slow = [][]byte{limit, unknown, badUTF8, {0x0a, 0x05, 'x'}}
	return fast, slow
}

// TestDecodeRequest: the decoder takes the common requests itself, gives
// the same message as the proto library, reusing its messages from one
// request to the next, and declines what it does not decode (the proto
// library then decodes it, or refuses it).
func TestDecodeRequest(t *testing.T) {
	fast, slow := decodeSeeds(t)
	r := &request{}
	for round := 0; round < 2; round++ { // the second round reuses r's messages
		for i, b := range fast {
			if !r.decode(b) {
				t.Fatalf("fast[%d]: declined", i)
			}
			want := &rlsv3.RateLimitRequest{}
			if err := proto.Unmarshal(b, want); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(&r.req, want) {
				t.Errorf("fast[%d]: decoded\n%v\nwant\n%v", i, &r.req, want)
			}
		}
	}
	c := newCodec()
	for i, b := range slow {
		if r.decode(b) {
			t.Errorf("slow[%d]: decoded, want declined", i)
		}
		want := &rlsv3.RateLimitRequest{}
		wantErr := proto.Unmarshal(b, want)
		err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r)
		if (err != nil) != (wantErr != nil) || (err == nil && !proto.Equal(&r.req, want)) {
			t.Errorf("slow[%d]: codec gave %v, %v; proto %v, %v", i, &r.req, err, want, wantErr)
		}
	}
}

// FuzzDecodeRequest: whatever the decoder takes, the proto library
// decodes to the same message.
func FuzzDecodeRequest(f *testing.F) {
	fast, slow := decodeSeeds(f)
	for _, b := range append(fast, slow...) {
		f.Add(b)
	}
	r := &request{}
	f.Fuzz(func(t *testing.T, b []byte) {
		if !r.decode(b) {
			return
		}
		want := &rlsv3.RateLimitRequest{}
		if err := proto.Unmarshal(b, want); err != nil {
			t.Fatalf("decoded what the proto library refuses (%v): %v", err, &r.req)
		}
		if !proto.Equal(&r.req, want) {
			t.Fatalf("decoded\n%v\nwant\n%v", &r.req, want)
		}
	})
}
