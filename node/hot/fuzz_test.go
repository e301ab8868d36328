package hot

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/shard"
)

// FuzzDecodePlans checks that DecodePlans never panics, that what it
// accepts re-encodes to the same bytes, and that a Hot receiving it keeps
// a consistent table.
func FuzzDecodePlans(f *testing.F) {
	seed := func(ps ...shard.Plan) {
		m, err := AppendPlans(nil, ps)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(m)
	}
	seed()
	seed(shard.Plan{Key: "per-key:user-42", Holders: []string{"n1", "n2", "n3"}, Epoch: 1767225600000000001})
	seed(shard.Plan{Key: "r:a", Epoch: 2}, shard.Plan{Key: "r:b", Holders: []string{"x"}, Epoch: 1 << 62})
	f.Add([]byte{MsgKind, Version, 1, 1, 'k', 0x80, 0x80})
	f.Add([]byte{MsgKind, Version, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 1})
	f.Add([]byte("H\x01\x01\x01k\x01\x02\x01a\x01a"))

	cfg := testConfig("n1", clocktest.New(), 1000, 0)
	f.Fuzz(func(t *testing.T, msg []byte) {
		h, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		ps, err := DecodePlans(nil, msg)
		h.Receive(msg)
		if err != nil {
			if len(ps) != 0 {
				t.Fatalf("%d plans returned with error %v", len(ps), err)
			}
			return
		}
		out, err := AppendPlans(nil, ps)
		if err != nil {
			t.Fatalf("decoded plans do not encode: %v", err)
		}
		if !bytes.Equal(out, msg) {
			// Varints have one canonical form only if minimal; a
			// non-minimal varint decodes but re-encodes shorter.
			again, err := DecodePlans(nil, out)
			if err != nil || !equalPlans(again, ps) {
				t.Fatalf("re-encoded plans decode to %+v, %v; want %+v", again, err, ps)
			}
		}
		for _, p := range h.RecentPlans(nil) {
			if got, ok := h.Lookup(p.Key); p.Split() && (!ok || got.Epoch != p.Epoch) {
				t.Fatalf("table inconsistent for %q", p.Key)
			}
		}
	})
}
