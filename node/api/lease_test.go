package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

const holder = "0123456789abcdef0123456789abcdef"

var leaseSeeds = []string{
	`{"holder":"` + holder + `","ops":[{"op":"lease","rule":"per-key","key":"u1","want":40,"need":1,"held":3,"ttl_ms":10000,"spent_before":2,"idle_ms":5,"call":7,"unanswered":6},{"op":"return","rule":"per-key","key":"u2","tokens":5}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"return","rule":"r","key":"k"}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"peek","rule":"r","key":"k"}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"peek","rule":"r","key":"k","want":1}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"lease","rule":"r","key":"k\u00e9","want":1,"ttl_ms":1,"x":[{}]}]}`,
	`{"holder":"` + holder + `","ops":[]}`,
	`{"holder":"XYZ","ops":[{"op":"lease"}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"lease","rule":"r","key":"k","want":0,"ttl_ms":1}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"lease","rule":"r","key":"k","want":1.5,"ttl_ms":1}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"lease","rule":"r","key":"k","want":2,"need":3,"ttl_ms":1}]}`,
	`{"holder":"` + holder + `","ops":[{"op":"lease","op":"lease"}]}`,
	`{"holder":"` + holder + `","ops":{}}`,
	`[`, `{`, `""`, `{"ops":[1]}`,
	`{"holder":"` + holder + `","region":"eu-west","ops":[{"op":"lease","rule":"r","key":"k","want":1,"ttl_ms":1,"demand":120}]}`,
	`{"holder":"` + holder + `","region":"a b","ops":[{"op":"return","rule":"r","key":"k","demand":1}]}`,
}

func TestDecodeLeaseRoundTrip(t *testing.T) {
	want := LeaseRequest{Holder: holder, Region: "eu-west.1", Ops: []LeaseOp{
		{Op: OpLease, Rule: "per-key", Key: `a"b\c` + "é", Want: 40, Need: 1, Held: 3, TTLMS: 10000, SpentBefore: 2, IdleMS: 5, Call: 1<<32 - 1, Unanswered: 6, Demand: 700},
		{Op: OpLease, Rule: "fw", Key: "u3", Want: 1, TTLMS: 1, AheadWindows: 150, AheadTokens: 12, First: true},
		{Op: OpReturn, Rule: "per-key", Key: "u2", Tokens: 5},
	}}
	body := AppendLeaseRequest(nil, &want)
	if !json.Valid(body) {
		t.Fatalf("not JSON: %s", body)
	}
	var got LeaseRequest
	if err := DecodeLease(body, &got); err != nil {
		t.Fatalf("DecodeLease(%s): %v", body, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, want)
	}
	rs := []LeaseResult{{Granted: 4, Remaining: 5, WaitMS: 6, ResetMS: 7, Lent: 8}, {Lent: 1, AheadTokens: 12, AheadWindows: 150}, {Error: "owner \"x\" unreachable"}}
	rb := AppendLeaseResults(nil, rs)
	back, err := DecodeLeaseResults(rb, nil, 3)
	if err != nil || !reflect.DeepEqual(back, rs) {
		t.Fatalf("results round trip: %+v, %v (%s)", back, err, rb)
	}
	if _, err := DecodeLeaseResults(rb, nil, 4); err == nil {
		t.Fatal("a reply with fewer results than ops was accepted")
	}
	// A bad answer names its field (built only for the error).
	for body, field := range map[string]string{
		`{"results":[{"granted":1},{"lent":-1}]}`:  "results[1].lent",
		`{"results":[{"granted":1},{"error":7}]}`:  "results[1].error",
		`{"results":[{"granted":"x"},{"lent":1}]}`: "results[0].granted",
		`{"results":[{"wait_ms":1.5},{"lent":1}]}`: "results[0].wait_ms",
	} {
		var fe *FieldError
		if _, err := DecodeLeaseResults([]byte(body), nil, 2); !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("DecodeLeaseResults(%s): %v, want a FieldError naming %s", body, err, field)
		}
	}
}

// Every invalid request is refused as a whole with the field named.
func TestDecodeLeaseNamesTheField(t *testing.T) {
	op := func(s string) string {
		return `{"holder":"` + holder + `","ops":[{"op":"lease","rule":"r","key":"k","want":1,"ttl_ms":1},` + s + `]}`
	}
	for body, field := range map[string]string{
		`{"holder":"ABC","ops":[{"op":"return","rule":"r","key":"k"}]}`:                              "holder",
		`{"ops":[{"op":"return","rule":"r","key":"k"}]}`:                                             "holder",
		`{"holder":"` + holder + `"}`:                                                                "ops",
		`{"holder":"` + holder + `","ops":[]}`:                                                       "ops",
		op(`{"op":"lease","rule":"r","key":"k","want":-1,"ttl_ms":1}`):                               "ops[1].want",
		op(`{"op":"peek","rule":"r","key":"k","tokens":1}`):                                          "ops[1].op",
		op(`{"op":"lease","rule":"r","key":"k","want":1099511627777,"ttl_ms":1}`):                    "ops[1].want",
		op(`{"op":"lease","rule":"r","key":"k","want":2,"need":3,"ttl_ms":1}`):                       "ops[1].need",
		op(`{"op":"lease","rule":"r","key":"k","want":2,"ttl_ms":60001}`):                            "ops[1].ttl_ms",
		op(`{"op":"lease","rule":"r","key":"k","want":2}`):                                           "ops[1].ttl_ms",
		op(`{"op":"lease","rule":"r r","key":"k","want":2,"ttl_ms":1}`):                              "ops[1].rule",
		op(`{"op":"lease","rule":"r","key":"","want":2,"ttl_ms":1}`):                                 "ops[1].key",
		op(`{"op":"lease","rule":"r","key":"` + strings.Repeat("k", 257) + `","want":2,"ttl_ms":1}`): "ops[1].key",
		op(`{"op":"take","rule":"r","key":"k"}`):                                                     "ops[1].op",
		op(`{"op":"return","rule":"r","key":"k","want":3}`):                                          "ops[1].op",
		op(`{"op":"return","rule":"r","key":"k","tokens":-1}`):                                       "ops[1].tokens",
		op(`{"op":"lease","rule":"r","key":"k","want":1,"ttl_ms":1,"call":4294967296}`):              "ops[1].call",
		op(`7`): "ops[1]",
		op(`{"op":"lease","rule":"r","key":"k","want":1,"ttl_ms":1,"demand":-1}`):                 "ops[1].demand",
		op(`{"op":"return","rule":"r","key":"k","demand":1}`):                                     "ops[1].op",
		op(`{"op":"lease","rule":"r","key":"k","want":1,"ttl_ms":1,"ahead_windows":65537}`):       "ops[1].ahead_windows",
		op(`{"op":"lease","rule":"r","key":"k","want":1,"ttl_ms":1,"ahead_tokens":-1}`):           "ops[1].ahead_tokens",
		op(`{"op":"return","rule":"r","key":"k","ahead_windows":1}`):                              "ops[1].op",
		`{"holder":"` + holder + `","region":"a b","ops":[{"op":"return","rule":"r","key":"k"}]}`: "region",
		`{"holder":"` + holder + `","region":7,"ops":[{"op":"return","rule":"r","key":"k"}]}`:     "region",
		`{"holder":"` + holder + `","region":"","ops":[{"op":"return","rule":"r","key":"k"}]}`:    "region",
	} {
		var req LeaseRequest
		err := DecodeLease([]byte(body), &req)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != field {
			t.Errorf("DecodeLease(%.80s…) = %v, want a field error naming %s", body, err, field)
		}
	}
	many := `{"holder":"` + holder + `","ops":[` + strings.Repeat(`{"op":"return","rule":"r","key":"k"},`, MaxLeaseOps) + `{"op":"return","rule":"r","key":"k"}]}`
	var req LeaseRequest
	if err := DecodeLease([]byte(many), &req); err == nil || !strings.Contains(err.Error(), "ops") {
		t.Errorf("%d ops accepted: %v", MaxLeaseOps+1, err)
	}
}

func FuzzDecodeLease(f *testing.F) {
	for _, s := range leaseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req LeaseRequest
		if err := DecodeLease(data, &req); err != nil {
			return
		}
		// A request accepted is valid JSON, within bounds, and survives a
		// round trip.
		if !json.Valid(data) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		if HolderMsg([]byte(req.Holder)) != "" || len(req.Ops) == 0 || len(req.Ops) > MaxLeaseOps {
			t.Fatalf("accepted out of bounds: %+v", req)
		}
		for i, op := range req.Ops {
			if op.Op == OpLease && (op.Want < 0 || op.Need < 0 || op.Need > op.Want || op.TTLMS < 1) {
				t.Fatalf("op %d out of bounds: %+v", i, op)
			}
		}
		var again LeaseRequest
		if err := DecodeLease(AppendLeaseRequest(nil, &req), &again); err != nil || !reflect.DeepEqual(again, req) {
			t.Fatalf("round trip of %q: %+v, %v", data, again, err)
		}
	})
}

// The field-name switches agree with the name tables (an error names a
// field by its index in them).
func TestLeaseFieldBits(t *testing.T) {
	for i, n := range leaseFieldNames {
		if got := leaseFieldBit([]byte(n)); got != i {
			t.Errorf("leaseFieldBit(%q) = %d, want %d", n, got, i)
		}
	}
	for i, n := range leaseResultNames {
		if got := leaseResultBit([]byte(n)); got != i {
			t.Errorf("leaseResultBit(%q) = %d, want %d", n, got, i)
		}
	}
	if leaseFieldBit([]byte("granted")) != -1 || leaseResultBit([]byte("want")) != -1 {
		t.Error("a name of the other table was matched")
	}
}

// A first touch's op and its answer carry no optional field that is 0
// (a decoder reads one left out as 0): the node reads half the fields.
func TestLeaseLeavesOutZeros(t *testing.T) {
	req := LeaseRequest{Holder: holder, Ops: []LeaseOp{{Op: OpLease, Rule: "r", Key: "k", Want: 12, TTLMS: 30000}}}
	body := string(AppendLeaseRequest(nil, &req))
	if want := `{"holder":"` + holder + `","ops":[{"op":"lease","rule":"r","key":"k","want":12,"ttl_ms":30000}]}`; body != want {
		t.Fatalf("body %s, want %s", body, want)
	}
	var got LeaseRequest
	if err := DecodeLease([]byte(body), &got); err != nil || !reflect.DeepEqual(got, req) {
		t.Fatalf("DecodeLease: %+v, %v", got, err)
	}
	rs := []LeaseResult{{Granted: 3, Remaining: 9}, {}}
	rb := string(AppendLeaseResults(nil, rs))
	if want := `{"results":[{"granted":3,"remaining":9},{"granted":0,"remaining":0}]}`; rb != want {
		t.Fatalf("results %s, want %s", rb, want)
	}
	back, err := DecodeLeaseResults([]byte(rb), nil, 2)
	if err != nil || !reflect.DeepEqual(back, rs) {
		t.Fatalf("DecodeLeaseResults: %+v, %v", back, err)
	}
}

// A pooled request decoded again holds only what the new body says: a
// region the last one had is gone.
func TestDecodeLeaseReused(t *testing.T) {
	var req LeaseRequest
	if err := DecodeLease([]byte(`{"holder":"`+holder+`","region":"eu","ops":[{"op":"peek","rule":"r","key":"a"},{"op":"peek","rule":"r","key":"b"}]}`), &req); err != nil {
		t.Fatal(err)
	}
	if err := DecodeLease([]byte(`{"holder":"`+holder+`","ops":[{"op":"return","rule":"q","key":"c"}]}`), &req); err != nil {
		t.Fatal(err)
	}
	want := LeaseRequest{Holder: holder, Ops: []LeaseOp{{Op: OpReturn, Rule: "q", Key: "c"}}}
	if !reflect.DeepEqual(req, want) {
		t.Fatalf("got %+v, want %+v", req, want)
	}
	if err := DecodeLease([]byte(`{"ops":[{"op":"return","rule":"q","key":"c"}]}`), &req); err == nil || req.Holder != "" {
		t.Fatalf("no holder: %v, holder %q", err, req.Holder)
	}
}
