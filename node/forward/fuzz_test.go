package forward

import (
	"bytes"
	"reflect"
	"testing"

	"github.com/sluicehq/sluice/shard"
)

func FuzzDecodeBatch(f *testing.F) {
	seeds := [][]Item{
		nil,
		{{Op: OpCheck, Rule: "per-key", Key: "user-42", Hits: 1}},
		{{Op: OpRefund, Rule: "r", Key: "k", Hits: MaxHits}, {Op: OpCheck, Rule: "r", Key: "é", Hits: 0}},
	}
	for _, s := range seeds {
		b, err := AppendBatch(nil, s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add([]byte{Version, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{Version, 1, 1, 1, 'r', 1, 'k', 0x80})
	f.Fuzz(func(t *testing.T, body []byte) {
		items, err := DecodeBatch(nil, body)
		if err != nil {
			return
		}
		// What decodes re-encodes (canonically) and decodes the same.
		again, err := AppendBatch(nil, items)
		if err != nil {
			t.Fatalf("decoded items do not re-encode: %v", err)
		}
		items2, err := DecodeBatch(nil, again)
		if err != nil {
			t.Fatalf("re-encoded batch does not decode: %v", err)
		}
		if len(items) != len(items2) || (len(items) > 0 && !reflect.DeepEqual(items, items2)) {
			t.Fatalf("round trip: %+v != %+v", items, items2)
		}
		if len(again) > len(body) {
			t.Fatalf("canonical encoding of %d bytes is longer than the input's %d", len(again), len(body))
		}
	})
}

func FuzzDecodeReply(f *testing.F) {
	seed := func(rs []Result, ps []shard.Plan) {
		b, err := AppendReply(nil, rs, ps)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(nil, nil)
	seed([]Result{{Allowed: true, Limit: 100, Remaining: 99, ResetMS: 600}}, nil)
	seed([]Result{{Remaining: -1, Degraded: true}, {Error: "unknown rule"}, {Unavailable: true, RetryAfterMS: 5}},
		[]shard.Plan{{Key: "r:hot", Holders: []string{"a", "b"}, Epoch: 42}, {Key: "r:x", Epoch: 1}})
	f.Add([]byte{Version, 0, 1})
	f.Fuzz(func(t *testing.T, body []byte) {
		rs, ps, err := DecodeReply(nil, nil, body)
		if err != nil {
			return
		}
		again, err := AppendReply(nil, rs, ps)
		if err != nil {
			t.Fatalf("decoded reply does not re-encode: %v", err)
		}
		rs2, ps2, err := DecodeReply(nil, nil, again)
		if err != nil {
			t.Fatalf("re-encoded reply does not decode: %v", err)
		}
		if len(rs) != len(rs2) || (len(rs) > 0 && !reflect.DeepEqual(rs, rs2)) {
			t.Fatalf("results round trip: %+v != %+v", rs, rs2)
		}
		if len(ps) != len(ps2) || (len(ps) > 0 && !reflect.DeepEqual(ps, ps2)) {
			t.Fatalf("plans round trip: %+v != %+v", ps, ps2)
		}
		again2, _ := AppendReply(nil, rs2, ps2)
		if !bytes.Equal(again, again2) {
			t.Fatal("encoding is not deterministic")
		}
	})
}
