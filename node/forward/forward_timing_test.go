package forward

import (
	"context"
	"encoding/hex"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/shard"
)

func batch256() []Item {
	items := make([]Item, 256)
	for i := range items {
		items[i] = Item{Op: OpCheck, Rule: "per-key", Key: "user-" + strconv.Itoa(100000+i), Hits: 1}
	}
	return items
}

func reply256() ([]Result, []shard.Plan) {
	rs := make([]Result, 256)
	for i := range rs {
		rs[i] = Result{Allowed: i%3 != 0, Limit: 1000, Remaining: int64(i), ResetMS: 60000, RetryAfterMS: int64(i % 3 * 7)}
	}
	return rs, []shard.Plan{{Key: "per-key:user-100007", Holders: []string{"n1", "n2", "n3"}, Epoch: 1 << 60}}
}

func BenchmarkAppendBatch256(b *testing.B) {
	items := batch256()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendBatch(buf[:0], items)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeBatch256(b *testing.B) {
	body, _ := AppendBatch(nil, batch256())
	var items []Item
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		items, _ = DecodeBatch(items, body)
	}
}

// BenchmarkDecodeBatch256View is the handler's decoding: strings are
// views of the body.
func BenchmarkDecodeBatch256View(b *testing.B) {
	body, _ := AppendBatch(nil, batch256())
	var items []Item
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		items, _ = decodeBatch(items, body, true)
	}
}

func BenchmarkAppendReply256(b *testing.B) {
	rs, ps := reply256()
	var buf []byte
	b.ReportAllocs()
	for b.Loop() {
		buf, _ = AppendReply(buf[:0], rs, ps)
	}
	b.SetBytes(int64(len(buf)))
}

func BenchmarkDecodeReply256(b *testing.B) {
	rs0, ps0 := reply256()
	body, _ := AppendReply(nil, rs0, ps0)
	var rs []Result
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		rs, _, _ = DecodeReply(rs, nil, body)
	}
}

// BenchmarkForward is the forwarding throughput over loopback: parallel
// callers of Forward, one owner serving a hand-written Decider (so the
// figure is the forwarding path alone). Reported as items/s, with the
// mean items per request. With fewer callers than MaxBatch in flight,
// every batch waits out the 200µs flush interval.
func BenchmarkForward(b *testing.B) {
	for _, eager := range []bool{false, true} {
		for _, par := range []int{16, 256} {
			name := "callers=" + strconv.Itoa(par*runtime.GOMAXPROCS(0))
			if eager {
				name = "eager/" + name
			}
			b.Run(name, func(b *testing.B) { benchForward(b, par, eager) })
		}
	}
}

func benchForward(b *testing.B, par int, eager bool) {
	s := startServer(b, NewHandler(HandlerConfig{ClusterKey: []byte("k")}, &countDecider{}))
	f := New(Config{ClusterKey: []byte("k"), Timeout: 5 * time.Second, EagerFlush: eager})
	defer f.Close()
	var failed atomic.Int64
	var n atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(par)
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		it := Item{Op: OpCheck, Rule: "per-key", Key: "user-" + strconv.FormatInt(n.Add(1), 10), Hits: 1}
		for pb.Next() {
			if _, err := f.Forward(context.Background(), s.addr, it); err != nil {
				failed.Add(1)
			}
		}
	})
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "items/s")
	if st := f.Stats(); st.Requests > 0 {
		b.ReportMetric(float64(st.Items)/float64(st.Requests), "items/request")
	}
	if failed.Load() > 0 {
		b.Errorf("%d of %d calls failed", failed.Load(), b.N)
	}
}

// countDecider allows everything.
type countDecider struct{}

func (countDecider) DecideBatch(items []Item, results []Result) []shard.Plan {
	for i := range items {
		results[i] = Result{Allowed: true, Limit: 100, Remaining: 99}
	}
	return nil
}

// BenchmarkSignVerify is the cost authentication adds to one internal
// request: the sender's nonce and signature, the owner's verification and
// nonce check, and the reply's signature made and checked, for a batch of
// 1 and of 256 items (MaxBatch).
//
//	go test -run '^$' -bench SignVerify ./node/forward
func BenchmarkSignVerify(b *testing.B) {
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, n := range []int{1, 256} {
		items := make([]Item, n)
		for i := range items {
			items[i] = Item{Op: OpCheck, Rule: "per-key", Key: "user-" + strconv.Itoa(100000+i), Hits: 1}
		}
		body, _ := AppendBatch(nil, items)
		reply, _ := AppendReply(nil, make([]Result, n), nil)
		b.Run("items="+strconv.Itoa(n), func(b *testing.B) {
			sig := newSigner(key)
			nonces := newNonceCache(DefaultWindow, DefaultMaxNonces)
			added := 0
			now := time.Now()
			var hdr, rhdr []byte
			var mac [32]byte
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				nonce := newNonce()
				hdr = sig.appendAuth(hdr[:0], "POST", Path, "", now.UnixMilli(), &nonce, body)
				a, _, err := sig.verify(hdr, "POST", Path, "", body, now, DefaultWindow)
				if added++; added == DefaultMaxNonces { // a full window's worth: start afresh
					nonces, added = newNonceCache(DefaultWindow, DefaultMaxNonces), 0
				}
				if err == nil {
					err = nonces.add(&a.nonce, now)
				}
				if err != nil {
					b.Fatal(err)
				}
				rhdr = hex.AppendEncode(rhdr[:0], sig.replyMAC(mac[:0], &a.nonce, reply))
				if err := sig.verifyReply(rhdr, &nonce, reply); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
