package forward

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/node/engine"
)

// leaseEcho is a Decider and LeaseDecider whose lease answers are a
// function of the op: Granted = Want, Lent = Held + Want, Remaining =
// Need, Wait = Tokens ms, an error for rule "bad", Checked for a key
// "checked", Crowded for "crowded".
type leaseEcho struct{ echoDecider }

func (*leaseEcho) DecideLeases(ops []engine.LeaseOp, results []engine.LeaseResult) {
	for i := range ops {
		results[i] = leaseWant(ops[i])
	}
}

func leaseWant(op engine.LeaseOp) engine.LeaseResult {
	if op.Rule == "bad" {
		return engine.LeaseResult{Err: "unknown rule"}
	}
	r := engine.LeaseResult{Checked: op.Key == "checked", Crowded: op.Key == "crowded",
		Grant: lease.Grant{Granted: op.Want, Lent: op.To.Held + op.Want, Remaining: op.Need,
			Wait: time.Duration(op.Tokens) * time.Millisecond, Reset: op.To.TTL, AheadTokens: op.To.AheadTokens, AheadWindows: op.To.AheadWindows}}
	r.Grant.Crowded, r.Grant.Checked = r.Crowded, r.Checked
	return r
}

func leaseOps() []engine.LeaseOp {
	return []engine.LeaseOp{
		{Kind: engine.LeaseLend, Rule: "per-key", Key: "u1", Holder: "gw.abcd.0123456789abcdef", Want: 40, Need: 2,
			To: lease.Lessee{Held: 3, TTL: 10 * time.Second, SpentBefore: 2, Idle: 5 * time.Millisecond, Call: 7, Unanswered: 9,
				AheadWindows: 4, AheadTokens: 5, First: true}},
		{Kind: engine.LeaseReturn, Rule: "per-key", Key: "u2", Holder: "gw.abcd.r.eu.0123456789abcdef", Region: "eu", Tokens: 5, Demand: 12},
		{Kind: engine.LeasePeek, Rule: "r", Key: "checked"},
		{Kind: engine.LeaseLend, Rule: "bad", Key: "crowded", Holder: "h", Want: 1, Need: 1},
	}
}

func TestLeaseBatchRoundTrip(t *testing.T) {
	ops := leaseOps()
	body, err := AppendLeaseBatch(nil, ops)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeLeaseBatch(nil, body)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, ops) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, ops)
	}
	results := make([]engine.LeaseResult, len(ops))
	for i := range ops {
		results[i] = leaseWant(ops[i])
	}
	back := make([]engine.LeaseResult, len(ops))
	if err := DecodeLeaseReply(back, AppendLeaseReply(nil, results)); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, results) {
		t.Fatalf("reply round trip:\n got %+v\nwant %+v", back, results)
	}
}

func TestLeaseBatchRefusesBadInput(t *testing.T) {
	for name, op := range map[string]engine.LeaseOp{
		"kind":   {Kind: 9, Rule: "r", Key: "k"},
		"rule":   {Kind: engine.LeaseLend, Key: "k"},
		"key":    {Kind: engine.LeaseLend, Rule: "r", Key: strings.Repeat("k", MaxKeyLen+1)},
		"holder": {Kind: engine.LeaseLend, Rule: "r", Key: "k", Holder: strings.Repeat("h", lease.MaxHolderLen+1)},
		"counts": {Kind: engine.LeaseLend, Rule: "r", Key: "k", Want: -1},
	} {
		if _, err := AppendLeaseBatch(nil, []engine.LeaseOp{op}); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want an error naming it", name, err)
		}
	}
	good, _ := AppendLeaseBatch(nil, leaseOps()[:1])
	for name, body := range map[string][]byte{
		"empty":     {},
		"version":   {Version, 0},
		"count":     {LeaseVersion, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"truncated": good[:len(good)-1],
		"trailing":  append(append([]byte(nil), good...), 0),
	} {
		if _, err := DecodeLeaseBatch(nil, body); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

// Lease ops go to the owner signed, as checks do: the right key gets
// the owner's answers in order, another key or none is refused, and an
// owner that applies no lease ops (the previous release) answers an
// error, never a wrong answer.
func TestForwardLeases(t *testing.T) {
	key := []byte("0123456789abcdef")
	s := startServer(t, NewHandler(HandlerConfig{ClusterKey: key}, &leaseEcho{}))
	ops := leaseOps()
	good := newForwarder(t, Config{ClusterKey: key})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	results := make([]engine.LeaseResult, len(ops))
	if err := good.ForwardLeases(ctx, s.addr, ops, results); err != nil {
		t.Fatal(err)
	}
	for i := range ops {
		w := leaseWant(ops[i])
		if i == 3 { // rule "bad" is a valid name: the Decider's error
			w = engine.LeaseResult{Err: "unknown rule"}
		}
		if !reflect.DeepEqual(results[i], w) {
			t.Errorf("op %d: %+v, want %+v", i, results[i], w)
		}
	}
	bad := newForwarder(t, Config{ClusterKey: []byte("fedcba9876543210")})
	if err := bad.ForwardLeases(ctx, s.addr, ops, results); !isUnavailable(err) || !strings.Contains(err.Error(), "401") {
		t.Errorf("wrong key: %v, want a 401", err)
	}
	old := startServer(t, NewHandler(HandlerConfig{ClusterKey: key}, &echoDecider{}))
	if err := good.ForwardLeases(ctx, old.addr, ops, results); !isUnavailable(err) || !strings.Contains(err.Error(), "400") {
		t.Errorf("an owner without lease ops: %v, want a 400", err)
	}
	// An op whose key a client could not send is refused by the owner
	// without reaching its Decider.
	ctl := []engine.LeaseOp{{Kind: engine.LeaseLend, Rule: "r", Key: "a\nb", Holder: "h", Want: 1, Need: 1}}
	res := make([]engine.LeaseResult, 1)
	if err := good.ForwardLeases(ctx, s.addr, ctl, res); err != nil || res[0].Err == "" {
		t.Errorf("a key with a newline: %+v, %v; want an item error", res[0], err)
	}
}

func FuzzDecodeLeaseBatch(f *testing.F) {
	b, err := AppendLeaseBatch(nil, leaseOps())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{LeaseVersion, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := DecodeLeaseBatch(nil, body)
		if err != nil {
			return
		}
		again, err := AppendLeaseBatch(nil, ops)
		if err != nil {
			t.Fatalf("decoded ops do not re-encode: %v", err)
		}
		ops2, err := DecodeLeaseBatch(nil, again)
		if err != nil || !reflect.DeepEqual(ops, ops2) {
			t.Fatalf("round trip: %+v != %+v (%v)", ops, ops2, err)
		}
	})
}

func FuzzDecodeLeaseReply(f *testing.F) {
	ops := leaseOps()
	rs := make([]engine.LeaseResult, len(ops))
	for i := range ops {
		rs[i] = leaseWant(ops[i])
	}
	f.Add(AppendLeaseReply(nil, rs), len(rs))
	f.Fuzz(func(t *testing.T, body []byte, n int) {
		if n < 0 || n > MaxLeaseOps {
			return
		}
		got := make([]engine.LeaseResult, n)
		if err := DecodeLeaseReply(got, body); err != nil {
			return
		}
		back := make([]engine.LeaseResult, n)
		if err := DecodeLeaseReply(back, AppendLeaseReply(nil, got)); err != nil || !reflect.DeepEqual(got, back) {
			t.Fatalf("round trip: %+v != %+v (%v)", got, back, err)
		}
	})
}
