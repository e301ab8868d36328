package forward

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

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

// FuzzVerify: any header and body are refused (or accepted only when
// signed with the key), without a panic; a request signed with the key
// and then modified in any byte of its body, path, method or header is
// refused.
func FuzzVerify(f *testing.F) {
	key := []byte("0123456789abcdef")
	sig := newSigner(key)
	now := time.UnixMilli(1_795_000_000_000)
	body, _ := AppendBatch(nil, []Item{{Op: OpCheck, Rule: "per-key", Key: "user-42", Hits: 1}})
	refund, _ := AppendBatch(nil, []Item{{Op: OpRefund, Rule: "day", Key: "victim", Hits: 600}})
	for _, b := range [][]byte{nil, body, refund} {
		n := [NonceLen]byte{1, 2, 3}
		f.Add(sig.appendAuth(nil, "POST", Path, "", now.UnixMilli(), &n, b), b, uint(0), byte(0))
		f.Add(sig.appendAuth(nil, "POST", Path, "", now.UnixMilli(), &n, b), b, uint(len(b)/2), byte(1))
	}
	f.Add([]byte("1795000000000.00000000000000000000000000000000.0000000000000000000000000000000000000000000000000000000000000000"), body, uint(3), byte(0x80))
	f.Add([]byte("not a signature"), []byte{}, uint(0), byte(0))
	f.Fuzz(func(t *testing.T, hdr, body []byte, pos uint, x byte) {
		// Arbitrary input: never a panic, and never accepted unless it is
		// exactly what the key signs.
		a, _, err := sig.verify(hdr, "POST", Path, "", body, now, DefaultWindow)
		if err == nil {
			var mac [32]byte
			if !bytes.Equal(sig.requestMAC(mac[:0], "POST", Path, "", a.ts, &a.nonce, body), a.mac[:]) {
				t.Fatal("accepted a request whose MAC does not match")
			}
		} else if !errors.Is(err, ErrAuth) {
			t.Fatalf("error %v does not wrap ErrAuth", err)
		}
		// Sign body, then modify it: refused.
		n := newNonce()
		good := sig.appendAuth(nil, "POST", Path, "", now.UnixMilli(), &n, body)
		if _, _, err := sig.verify(good, "POST", Path, "", body, now, DefaultWindow); err != nil {
			t.Fatalf("a correctly signed request is refused: %v", err)
		}
		mod := append([]byte(nil), body...)
		if len(mod) > 0 && x != 0 {
			mod[pos%uint(len(mod))] ^= x
		} else {
			mod = append(mod, x) // or a byte more
		}
		if _, _, err := sig.verify(good, "POST", Path, "", mod, now, DefaultWindow); !errors.Is(err, errSignature) {
			t.Fatalf("a modified body is not refused: %v", err)
		}
		if len(body) > 0 {
			if _, _, err := sig.verify(good, "POST", Path, "", body[:len(body)-1], now, DefaultWindow); !errors.Is(err, errSignature) {
				t.Fatalf("a truncated body is not refused: %v", err)
			}
		}
		if _, _, err := sig.verify(good, "POST", Path+"x", "", body, now, DefaultWindow); !errors.Is(err, errSignature) {
			t.Fatalf("another path is not refused: %v", err)
		}
		hmod := append([]byte(nil), good...)
		hmod[pos%uint(len(hmod))] ^= x | 1
		if _, _, err := sig.verify(hmod, "POST", Path, "", body, now, DefaultWindow); err == nil {
			t.Fatalf("a modified header %q is accepted", hmod)
		}
	})
}

// FuzzHandler runs the internal endpoint in-process on any signature
// header and body: no panic; a keyed handler refuses all of them (the
// fuzzer does not know the key), an open one answers 200 only to bodies
// that decode.
func FuzzHandler(f *testing.F) {
	keyed := NewHandler(HandlerConfig{ClusterKey: []byte("0123456789abcdef")}, &echoDecider{})
	open := NewHandler(HandlerConfig{}, &echoDecider{})
	body, _ := AppendBatch(nil, []Item{{Op: OpCheck, Rule: "per-key", Key: "user-42", Hits: 1}, {Op: OpRefund, Rule: "r", Key: "k", Hits: 3}})
	n := [NonceLen]byte{}
	f.Add(newSigner([]byte("another key 0123")).appendAuth(nil, "POST", Path, "", time.Now().UnixMilli(), &n, body), body)
	f.Add([]byte{}, body)
	f.Add([]byte("1.2.3"), []byte{Version, 1, 1, 1, 'r', 1, 'k', 1})
	f.Add([]byte{}, []byte{Version, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, hdr, body []byte) {
		for _, h := range []fasthttp.RequestHandler{keyed, open} {
			var ctx fasthttp.RequestCtx
			ctx.Request.Header.SetMethod("POST")
			ctx.Request.SetRequestURI(Path)
			ctx.Request.Header.SetBytesV(AuthHeader, hdr)
			ctx.Request.SetBody(body)
			h(&ctx)
			code := ctx.Response.StatusCode()
			if _, derr := DecodeBatch(nil, body); code == 200 && derr != nil {
				t.Fatalf("200 to a body that does not decode (%v)", derr)
			}
			if code == 200 {
				if _, _, err := DecodeReply(nil, nil, ctx.Response.Body()); err != nil {
					t.Fatalf("200 with a reply that does not decode: %v", err)
				}
			}
		}
		var ctx fasthttp.RequestCtx
		ctx.Request.Header.SetMethod("POST")
		ctx.Request.SetRequestURI(Path)
		ctx.Request.Header.SetBytesV(AuthHeader, hdr)
		ctx.Request.SetBody(body)
		keyed(&ctx)
		if ctx.Response.StatusCode() == 200 {
			t.Fatalf("the keyed handler accepted a request the fuzzer made up: %q", hdr)
		}
	})
}
