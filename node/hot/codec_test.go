package hot

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/shard"
)

func TestPlansRoundTrip(t *testing.T) {
	plans := []shard.Plan{
		{Key: "per-key:user-42", Holders: []string{"n1", "n2", "n3"}, Epoch: 1767225600000000001},
		{Key: "r:ended", Epoch: 7},
		{Key: strings.Repeat("k", MaxKeyLen), Holders: []string{strings.Repeat("m", 300)[:MaxMemberLen]}, Epoch: 1 << 63},
	}
	msg, err := AppendPlans([]byte("x"), plans)
	if err != nil {
		t.Fatal(err)
	}
	if !IsPlans(msg[1:]) || IsPlans(msg) {
		t.Fatal("IsPlans wrong")
	}
	got, err := DecodePlans(make([]shard.Plan, 3), msg[1:])
	if err != nil {
		t.Fatal(err)
	}
	if !equalPlans(got, plans) {
		t.Fatalf("decoded %+v, want %+v", got, plans)
	}
	// Decoded strings do not alias the message.
	clear(msg)
	if got[0].Key != plans[0].Key || got[0].Holders[1] != "n2" {
		t.Fatal("decoded plans alias the message")
	}
}

func TestEncodePlansPacksMessages(t *testing.T) {
	var plans []shard.Plan
	for i := range 40 {
		plans = append(plans, shard.Plan{
			Key:     fmt.Sprintf("rule-%02d:%s", i, strings.Repeat("k", 200)),
			Holders: []string{"node-a:7946", "node-b:7946", "node-c:7946"},
			Epoch:   uint64(i + 1),
		})
	}
	bad := shard.Plan{Key: "r:big", Epoch: 1}
	for i := range 60 {
		bad.Holders = append(bad.Holders, fmt.Sprintf("%s-%02d", strings.Repeat("m", 30), i))
	}
	msgs, errs := EncodePlans(append(append(plans[:20:20], bad, shard.Plan{Key: "", Epoch: 1}), plans[20:]...))
	if len(errs) != 2 || !errors.Is(errs[0], ErrTooLarge) || !strings.Contains(errs[1].Error(), "key") {
		t.Fatalf("errs %v, want one too large and one naming the key", errs)
	}
	var got []shard.Plan
	for _, m := range msgs {
		if len(m) > MaxMessageSize {
			t.Fatalf("message of %d bytes", len(m))
		}
		ps, err := DecodePlans(nil, m)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, ps...)
	}
	if !equalPlans(got, plans) {
		t.Fatalf("decoded %d plans, want the 40 good ones in order", len(got))
	}
	// 248 bytes each: 4 per message.
	if len(msgs) != 10 {
		t.Fatalf("%d messages, want 10", len(msgs))
	}
	if msgs, errs := EncodePlans(nil); len(msgs)+len(errs) != 0 {
		t.Fatalf("no plans: %d messages, %v", len(msgs), errs)
	}
}

func TestAppendPlansRefusesBadPlans(t *testing.T) {
	tests := []struct {
		plan  shard.Plan
		field string
	}{
		{shard.Plan{Epoch: 1}, "plan 0: key"},
		{shard.Plan{Key: strings.Repeat("k", MaxKeyLen+1), Epoch: 1}, "plan 0: key"},
		{shard.Plan{Key: "k"}, "plan 0: epoch"},
		{shard.Plan{Key: "k", Epoch: 1, Holders: make([]string, MaxHolders+1)}, "plan 0: holders"},
		{shard.Plan{Key: "k", Epoch: 1, Holders: []string{"a", ""}}, "plan 0: holder 1"},
		{shard.Plan{Key: "k", Epoch: 1, Holders: []string{"a", "a"}}, "plan 0: holder 1: duplicate"},
		{shard.Plan{Key: strings.Repeat("k", MaxKeyLen), Epoch: 1, Holders: []string{strings.Repeat("m", 256), strings.Repeat("n", 256), strings.Repeat("o", 256), strings.Repeat("p", 256)}}, "message"},
	}
	for _, tt := range tests {
		out, err := AppendPlans([]byte("keep"), []shard.Plan{tt.plan})
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got %v", tt.field, err)
		}
		if string(out) != "keep" {
			t.Errorf("%s: dst changed to %q", tt.field, out)
		}
	}
}

func TestDecodePlansRefusesMalformed(t *testing.T) {
	ok, err := AppendPlans(nil, []shard.Plan{{Key: "k", Holders: []string{"a", "b"}, Epoch: 9}})
	if err != nil {
		t.Fatal(err)
	}
	with := func(b ...byte) []byte { return append([]byte{MsgKind, Version}, b...) }
	tests := []struct {
		name, field string
		msg         []byte
	}{
		{"empty", "too short", nil},
		{"kind", "kind", []byte{'X', Version, 0}},
		{"version", "version", []byte{MsgKind, 2, 0}},
		{"too large", "at most", append(with(1), make([]byte, MaxMessageSize)...)},
		{"count overflow", "count", with(0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
		{"count above bytes", "count", with(9, 1, 'k', 1, 0)},
		{"empty key", "plan 0: key", with(1, 0, 1, 0, 0)},
		{"long key", "plan 0: key", append(append(with(1), binary.AppendUvarint(nil, MaxKeyLen+1)...), 0, 0, 0)},
		{"truncated key", "plan 0: key", with(1, 5, 'k', 1, 0)},
		{"epoch 0", "plan 0: epoch", with(1, 1, 'k', 0, 0)},
		{"truncated epoch", "plan 0: epoch", with(1, 1, 'k', 0x80, 0x80)},
		{"holders above bytes", "plan 0: holders", with(1, 1, 'k', 1, 9, 0)},
		{"too many holders", "plan 0: holders", append(with(1, 1, 'k', 1), binary.AppendUvarint(nil, MaxHolders+1)...)},
		{"empty holder", "plan 0: holder 0", with(1, 1, 'k', 1, 1, 0, 0)},
		{"duplicate holder", "plan 0: holder 1: duplicate", with(1, 1, 'k', 1, 2, 1, 'a', 1, 'a')},
		{"trailing", "after the last plan", append(ok, 0)},
	}
	for _, tt := range tests {
		got, err := DecodePlans(nil, tt.msg)
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got %v, want ErrMalformed naming %q", tt.name, err, tt.field)
		}
		if len(got) != 0 {
			t.Errorf("%s: returned %d plans with the error", tt.name, len(got))
		}
	}
}
