package forward

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/shard"
)

func TestBatchRoundTrip(t *testing.T) {
	tests := []struct {
		name  string
		items []Item
	}{
		{"empty", nil},
		{"one", []Item{{Op: OpCheck, Rule: "per-key", Key: "user-42", Hits: 1}}},
		{"mixed", []Item{
			{Op: OpCheck, Rule: "r", Key: "a", Hits: 0},
			{Op: OpRefund, Rule: "r", Key: "b", Hits: MaxHits},
			{Op: OpCheck, Rule: strings.Repeat("x", MaxRuleLen), Key: strings.Repeat("é", MaxKeyLen/2), Hits: 300},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body, err := AppendBatch(nil, tt.items)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeBatch(nil, body)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.items) || (len(got) > 0 && !reflect.DeepEqual(got, tt.items)) {
				t.Errorf("round trip: got %+v, want %+v", got, tt.items)
			}
		})
	}
}

func TestReplyRoundTrip(t *testing.T) {
	results := []Result{
		{Allowed: true, Limit: 100, Remaining: 41, ResetMS: 1000, RetryAfterMS: 0},
		{Allowed: false, Limit: 100, Remaining: 0, ResetMS: 60000, RetryAfterMS: 600},
		{Remaining: -3, Degraded: true},
		{Allowed: false, Unavailable: true, RetryAfterMS: 50},
		{Error: "unknown rule \"x\""},
	}
	plans := []shard.Plan{
		{Key: "per-key:hot", Holders: []string{"n1", "n2", "n3"}, Epoch: 1 << 62},
		{Key: "per-key:cold", Epoch: 7}, // the end of a split
	}
	body, err := AppendReply(nil, results, plans)
	if err != nil {
		t.Fatal(err)
	}
	gotR, gotP, err := DecodeReply(nil, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(gotR, results) {
		t.Errorf("results: got %+v, want %+v", gotR, results)
	}
	if !reflect.DeepEqual(gotP, plans) {
		t.Errorf("plans: got %+v, want %+v", gotP, plans)
	}
}

func TestReplyTruncatesLongError(t *testing.T) {
	body, err := AppendReply(nil, []Result{{Error: strings.Repeat("e", 2*MaxErrorLen)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, _, err := DecodeReply(nil, nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if len(r[0].Error) != MaxErrorLen {
		t.Errorf("error of %d bytes, want %d", len(r[0].Error), MaxErrorLen)
	}
}

func TestAppendBatchRefuses(t *testing.T) {
	tests := []struct {
		it    Item
		field string
	}{
		{Item{Op: 0, Rule: "r", Key: "k"}, "op"},
		{Item{Op: 3, Rule: "r", Key: "k"}, "op"},
		{Item{Op: OpCheck, Key: "k"}, "rule"},
		{Item{Op: OpCheck, Rule: strings.Repeat("r", MaxRuleLen+1), Key: "k"}, "rule"},
		{Item{Op: OpCheck, Rule: "r"}, "key"},
		{Item{Op: OpCheck, Rule: "r", Key: strings.Repeat("k", MaxKeyLen+1)}, "key"},
		{Item{Op: OpCheck, Rule: "r", Key: "k", Hits: -1}, "hits"},
		{Item{Op: OpCheck, Rule: "r", Key: "k", Hits: MaxHits + 1}, "hits"},
	}
	for _, tt := range tests {
		items := []Item{{Op: OpCheck, Rule: "ok", Key: "ok", Hits: 1}, tt.it}
		dst := []byte("prefix")
		got, err := AppendBatch(dst, items)
		if err == nil || !strings.Contains(err.Error(), "item 1: "+tt.field+":") {
			t.Errorf("AppendBatch(%+v): error %v, want one naming item 1 and %s", tt.it, err, tt.field)
		}
		if string(got) != "prefix" {
			t.Errorf("AppendBatch(%+v) on error left %q, want dst unchanged", tt.it, got)
		}
	}
	if _, err := AppendBatch(nil, make([]Item, MaxItems+1)); err == nil {
		t.Error("AppendBatch accepted more than MaxItems items")
	}
}

// item encodes one raw item for the decoder tests.
func rawItem(op byte, rule, key string, hits uint64) []byte {
	b := []byte{op}
	b = appendString(b, rule)
	b = appendString(b, key)
	return binary.AppendUvarint(b, hits)
}

func rawBatch(n uint64, items ...[]byte) []byte {
	b := binary.AppendUvarint([]byte{Version}, n)
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func TestDecodeBatchRefuses(t *testing.T) {
	good := rawItem(1, "r", "k", 1)
	tests := []struct {
		name, field string
		body        []byte
	}{
		{"empty body", "version", nil},
		{"version 2", "version", []byte{2, 0}},
		{"no count", "count", []byte{Version}},
		{"count too large", "items", rawBatch(MaxItems+1, good)},
		{"count beyond body", "items", rawBatch(1000, good)},
		{"unknown op", "item 1: op", rawBatch(2, good, rawItem(9, "r", "k", 1))},
		{"empty rule", "item 0: rule", rawBatch(1, rawItem(1, "", "k", 1), good)},
		{"long rule", "item 0: rule", rawBatch(1, rawItem(1, strings.Repeat("r", MaxRuleLen+1), "k", 1))},
		{"empty key", "item 0: key", rawBatch(1, rawItem(1, "r", "", 1), good)},
		{"long key", "item 0: key", rawBatch(1, rawItem(1, "r", strings.Repeat("k", MaxKeyLen+1), 1))},
		{"hits too large", "item 0: hits", rawBatch(1, rawItem(1, "r", "k", MaxHits+1))},
		{"truncated key", "item 1: key", rawBatch(2, good, good[:4])},
		{"trailing bytes", "body", append(rawBatch(1, good), 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			items, err := DecodeBatch(make([]Item, 0, 4), tt.body)
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %q does not name %q", err, tt.field)
			}
			if len(items) != 0 {
				t.Errorf("%d items on error, want 0", len(items))
			}
		})
	}
}

func TestDecodeReplyRefuses(t *testing.T) {
	ok, err := AppendReply(nil, []Result{{Allowed: true, Limit: 1}}, []shard.Plan{{Key: "k", Holders: []string{"a"}, Epoch: 1}})
	if err != nil {
		t.Fatal(err)
	}
	// ok = version, count, flags, limit, remaining, reset, retry, nplans, plan...
	tests := []struct {
		name, field string
		body        []byte
	}{
		{"version", "version", append([]byte{9}, ok[1:]...)},
		{"unknown flag", "result 0: flags", func() []byte { b := bytes.Clone(ok); b[2] = 0x10; return b }()},
		{"error with allowed", "result 0: flags", func() []byte { b := bytes.Clone(ok); b[2] = flagError | flagAllowed; return b }()},
		{"too many plans", "plans", append(bytes.Clone(ok[:7]), binary.AppendUvarint(nil, MaxPlans+1)...)},
		{"truncated plan", "plan 0", ok[:len(ok)-1]},
		{"trailing", "body", append(bytes.Clone(ok), 0)},
		{"count beyond body", "results", []byte{Version, 100, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := DecodeReply(nil, nil, tt.body)
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.field) {
				t.Errorf("error %v, want ErrMalformed naming %q", err, tt.field)
			}
		})
	}
}

func TestAppendReplyRefusesBadPlans(t *testing.T) {
	tests := []struct {
		plan  shard.Plan
		field string
	}{
		{shard.Plan{}, "key"},
		{shard.Plan{Key: strings.Repeat("k", MaxPlanKeyLen+1)}, "key"},
		{shard.Plan{Key: "k", Holders: make([]string, MaxHolders+1)}, "holders"},
		{shard.Plan{Key: "k", Holders: []string{"a", ""}}, "holder 1"},
	}
	for _, tt := range tests {
		_, err := AppendReply(nil, nil, []shard.Plan{tt.plan})
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("AppendReply(%+v): error %v, want one naming %s", tt.plan, err, tt.field)
		}
	}
}

func TestDecodeBatchSharesRuleStrings(t *testing.T) {
	body, _ := AppendBatch(nil, []Item{
		{Op: OpCheck, Rule: "per-key", Key: "a", Hits: 1},
		{Op: OpCheck, Rule: "per-key", Key: "b", Hits: 1},
	})
	dst := make([]Item, 0, 2)
	allocs := testing.AllocsPerRun(100, func() {
		dst, _ = DecodeBatch(dst, body)
	})
	// One string per key and one for the shared rule name.
	if allocs > 3 {
		t.Errorf("%v allocations to decode 2 items of one rule, want ≤ 3", allocs)
	}
}

func TestResultDecision(t *testing.T) {
	d := lease.Decision{
		Allowed: false, Limit: 10, Remaining: 0,
		Reset: 1500*time.Microsecond + 1, RetryAfter: 999 * time.Microsecond,
		Degraded: true,
	}
	r := ResultOf(d)
	want := Result{Limit: 10, ResetMS: 2, RetryAfterMS: 1, Degraded: true}
	if r != want {
		t.Errorf("ResultOf(%+v) = %+v, want %+v (durations rounded up)", d, r, want)
	}
	back := r.Decision()
	if back.RetryAfter != time.Millisecond || back.Reset != 2*time.Millisecond || !back.Degraded || back.Limit != 10 {
		t.Errorf("Decision() = %+v", back)
	}
}

func TestPeerMetricsAcceptAnyAddress(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:8080", "[::1]:8080", "[fe80::1%eth0]:80", "node-1.example:80", `we"ird\addr:1`} {
		m := newPeerMetrics(metrics.NewSet(), addr) // panics on an invalid metric name
		m.items.Inc()
	}
}
