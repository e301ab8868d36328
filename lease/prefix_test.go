package lease

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rangePrefix calls f for every bucket in px's index.
func rangePrefix(px *prefixIndex, f func(*bucket)) {
	for i := range px.shards {
		t := px.shards[i].tab.Load()
		for j := range uint64(t.size()) {
			if b := t.slot(j).Load(); b != nil && b != tombstone {
				f(b)
			}
		}
	}
}

// prefixKey is a key of n bytes (1 to 40: both of load's paths) made of i.
func prefixKey(i, n int) string {
	s := fmt.Sprintf("%d-", i)
	return (s + strings.Repeat("x", n))[:n]
}

// A Prefix's index against a map: buckets of keys of every length from 1
// to 40 bytes, with and without the prefix, put in the Manager's index,
// linked, replaced and deleted there at random; after every step the
// Prefix finds exactly the linked buckets still in the Manager's index,
// by the rest of their key, and holds nothing else (a bucket replaced or
// deleted is unlinked at once: nothing stale is kept).
func TestPrefixIndexAgainstMap(t *testing.T) {
	x := newTestIndex()
	px := x.prefixIndex("rule:")
	if x.prefixIndex("rule:") != px {
		t.Fatal("a second prefixIndex of the same prefix is another index")
	}
	other := x.prefixIndex("rul")  // a prefix of the prefix: both hold rule:*
	main := map[string]*bucket{}   // the Manager's index
	linked := map[string]*bucket{} // px's, by the rest of the key
	linkedO := map[string]*bucket{}
	rng := rand.New(rand.NewPCG(5, 6))
	var keys []string
	for i := range 600 {
		k := prefixKey(i, 1+i%40)
		keys = append(keys, "rule:"+k, "other:"+k)
	}
	check := func(step int) {
		t.Helper()
		for _, k := range keys {
			if rest, ok := strings.CutPrefix(k, "rule:"); ok {
				if got := px.load(rest); got != linked[rest] {
					t.Fatalf("step %d: load(%q) = %p, want %p", step, rest, got, linked[rest])
				}
			}
		}
		n := 0
		rangePrefix(px, func(b *bucket) {
			n++
			if linked[b.key()[len("rule:"):]] != b || main[b.key()] != b {
				t.Fatalf("step %d: the index holds %q, which it should not", step, b.key())
			}
		})
		if n != len(linked) {
			t.Fatalf("step %d: the index holds %d buckets, want %d", step, n, len(linked))
		}
		m := 0
		rangePrefix(other, func(*bucket) { m++ })
		if m != len(linkedO) {
			t.Fatalf("step %d: the other index holds %d buckets, want %d", step, m, len(linkedO))
		}
	}
	for step := range 20000 {
		k := keys[rng.IntN(len(keys))]
		rest, hasPrefix := strings.CutPrefix(k, "rule:")
		switch op := rng.IntN(10); {
		case op < 4: // a new bucket, linked
			if main[k] == nil {
				b := newBucket(k, nil)
				if _, loaded := x.loadOrStore(k, b); loaded {
					t.Fatalf("step %d: %q was there", step, k)
				}
				main[k] = b
			}
			if hasPrefix {
				x.link(px, main[k])
				linked[rest] = main[k]
				if op < 2 {
					x.link(other, main[k])
					linkedO[k] = main[k]
				}
			}
		case op < 5: // linking a bucket no longer in the index does nothing
			if hasPrefix {
				x.link(px, newBucket(k, nil))
			}
		case op < 7: // replaced (a policy change)
			if old := main[k]; old != nil {
				nb := newBucket(k, nil)
				if !x.compareAndSwap(k, old, nb) {
					t.Fatalf("step %d: compareAndSwap %q failed", step, k)
				}
				main[k] = nb
				if hasPrefix {
					delete(linked, rest)
					delete(linkedO, k)
				}
			}
		default: // deleted (an eviction)
			if old := main[k]; old != nil {
				if !x.compareAndDelete(k, old) {
					t.Fatalf("step %d: compareAndDelete %q failed", step, k)
				}
				delete(main, k)
				if hasPrefix {
					delete(linked, rest)
					delete(linkedO, k)
				}
			}
		}
		if step%500 == 0 {
			check(step)
		}
	}
	check(-1)
}

// A key's probe chain full of other keys with its hash's tag (forced:
// placed in its chain, not where their own hashes would put them), of its
// length and differing in one byte, and of other lengths, and
// tombstones: load skips each of them and finds the key, on both of its
// paths (up to 16 bytes, and longer).
func TestPrefixLoadForcedCollisions(t *testing.T) {
	const prefix = "r:"
	for _, key := range []string{"k", "ab", "abc", "abcd", "abcdefg", "abcdefgh", "0123456789abcdef", "0123456789abcdefg", strings.Repeat("z", 100)} {
		px := (&index{}).prefixIndex(prefix)
		h := px.hash.sum(key)
		sh := &px.shards[h>>(64-3)]
		same := func(*bucket) uint64 { return h } // every key of the chain: the key's hash
		var decoys []*bucket
		for i := range len(key) {
			c := []byte(key)
			c[i] ^= 0x20
			decoys = append(decoys, newBucket(prefix+string(c), nil))
		}
		// Longer and shorter keys (an index holds only keys with its
		// prefix: load compares the rest alone).
		decoys = append(decoys, newBucket(prefix+key+"x", nil), newBucket(prefix+key[1:], nil))
		for _, d := range decoys {
			sh.insert(d, h, same)
			if got := px.load(key); got != nil {
				t.Fatalf("%q: load found %q", key, got.key())
			}
		}
		// Tombstones in the chain: delete the first half of the decoys.
		for _, d := range decoys[:len(decoys)/2] {
			if !sh.delete(d.key()[len(prefix):], len(prefix), h, d, same) {
				t.Fatalf("%q: the decoy %q was not deleted", key, d.key())
			}
		}
		b := newBucket(prefix+key, nil)
		sh.insert(b, h, same)
		if got := px.load(key); got != b {
			t.Fatalf("%q: load = %v, want its bucket", key, got)
		}
		if got := px.load(strings.Clone(key)); got != b {
			t.Fatalf("%q: load of a copy = %v, want its bucket", key, got)
		}
		for _, d := range decoys {
			if got := px.load(d.key()[len(prefix):]); got != nil && got != d {
				t.Fatalf("%q: load(%q) found %q", key, d.key()[len(prefix):], got.key())
			}
		}
	}
}

// Links racing with deletes and replacements (run with -race): no
// reader sees another key's bucket, and once the writers are done the
// Prefix's index holds only buckets still in the Manager's index: a link
// never outlives the bucket's place there.
func TestPrefixIndexConcurrent(t *testing.T) {
	x := newTestIndex()
	px := x.prefixIndex("p:")
	const n = 500
	keys := make([]string, n)
	for i := range keys {
		keys[i] = prefixKey(i, 1+i%24)
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() { // linkers: look the key up in the index, link it
			for range 20 {
				for i := w; i < n; i += 2 {
					if b := x.load("p:" + keys[i]); b != nil {
						x.link(px, b)
					}
				}
			}
		})
		wg.Go(func() { // writers: insert, replace, delete
			for round := range 20 {
				for i := w; i < n; i += 2 {
					k := "p:" + keys[i]
					b, _ := x.loadOrStore(k, newBucket(k, nil))
					switch round % 3 {
					case 1:
						x.compareAndSwap(k, b, newBucket(k, nil))
					case 2:
						x.compareAndDelete(k, b)
					}
				}
			}
		})
	}
	wg.Go(func() { // a reader
		for range 20 {
			for _, k := range keys {
				if b := px.load(k); b != nil && b.key() != "p:"+k {
					t.Errorf("load(%q) returned the bucket of %q", k, b.key())
					return
				}
			}
		}
	})
	wg.Wait()
	rangePrefix(px, func(b *bucket) {
		if x.load(b.key()) != b {
			t.Errorf("the Prefix's index holds %q, gone from the Manager's", b.key())
		}
	})
}

// Through the Manager: a key whose policy changed (its bucket replaced)
// or that went idle (evicted) leaves the Prefix's index, and TakeLocal
// then refuses it; a Take through the Prefix links the new bucket.
func TestPrefixFollowsTheManager(t *testing.T) {
	m, _, clk := testManager(t, func(c *Config) { c.Idle, c.KeepIdle = time.Minute, -1 })
	px := m.Prefix("r:")
	p, q := perSecond(100), perSecond(50)
	for _, k := range []string{"a", "b"} {
		if d, err := px.Take(k, p, 1); err != nil || !d.Allowed {
			t.Fatalf("Take %s: %+v, %v", k, d, err)
		}
		if _, _, ok := px.TakeLocal(k, &p, 1); !ok {
			t.Fatalf("TakeLocal refused %s after its Take", k)
		}
	}
	// The policy of a changes: a Take of the Manager's (not through the
	// Prefix) replaces its bucket, which leaves the Prefix's index.
	mustTake(t, m, "r:a", q, 1)
	if b := px.x.load("a"); b != nil {
		t.Fatalf("the replaced bucket of a is still in the Prefix (its policy %v)", *b.pol)
	}
	if _, _, ok := px.TakeLocal("a", &q, 1); ok {
		t.Fatal("TakeLocal decided a key the Prefix no longer has")
	}
	if d, err := px.Take("a", q, 1); err != nil || !d.Allowed {
		t.Fatalf("Take a: %+v, %v", d, err)
	}
	if _, _, ok := px.TakeLocal("a", &q, 1); !ok {
		t.Fatal("TakeLocal refused a after a Take of its new policy")
	}
	// Both go idle: the sweep evicts them, and the Prefix holds nothing.
	clk.Advance(2 * time.Minute)
	if n := m.SweepIdle(clk.Now()); n != 2 {
		t.Fatalf("the sweep evicted %d keys, want 2", n)
	}
	n := 0
	rangePrefix(px.x, func(*bucket) { n++ })
	if n != 0 {
		t.Fatalf("the Prefix's index holds %d buckets after the sweep, want 0", n)
	}
}

// BenchmarkPrefixTakeLocal is a gateway's fast path in the Manager: a
// leased key of a Prefix, and the same key striped (with -cpu 1, the
// striped fast path's own cost).
func BenchmarkPrefixTakeLocal(b *testing.B) {
	for _, striped := range []bool{false, true} {
		name := "single"
		if striped {
			name = "striped"
		}
		b.Run(name, func(b *testing.B) {
			m := benchManager(b)
			px := m.Prefix("rule:")
			if d, err := px.Take("hot", hotPolicy, 1); err != nil || !d.Allowed {
				b.Fatalf("%+v %v", d, err)
			}
			if striped {
				bk := m.buckets.load("rule:hot")
				m.striped.stripe(bk)
				if bk.tokens.Load() >= 0 {
					b.Fatal("not striped")
				}
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, _, ok := px.TakeLocal("hot", &hotPolicy, 1); !ok {
						b.Fatal("refused")
					}
				}
			})
		})
	}
}

// The accuracy contract through a Prefix on a striped key: TakeLocal
// spends from the goroutine's stripe (quickTakeStriped), then from the
// others; checks from many goroutines at once, each TakeLocal first and
// Take when it refuses, admit exactly what the Store grants.
func TestPrefixStripedKeyAdmitsExactlyWhatItHolds(t *testing.T) {
	for _, hits := range []int64{1, 3} {
		m, fs, _ := testManager(t, wholeLease)
		const limit = 3000
		p := Policy{Algorithm: TokenBucket, Limit: limit, Period: time.Hour}
		px := m.Prefix("r:")
		if d, err := px.Take("k", p, 1); err != nil || !d.Allowed {
			t.Fatalf("first check: %+v, %v", d, err)
		}
		b := m.buckets.load("r:k")
		m.striped.stripe(b)
		if b.tokens.Load() >= 0 {
			t.Fatal("not striped")
		}
		var admitted, local atomic.Int64
		admitted.Add(1)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for {
					if _, _, ok := px.TakeLocal("k", &p, hits); ok {
						admitted.Add(hits)
						local.Add(hits)
						continue
					}
					d, err := px.Take("k", p, hits)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						return
					}
					admitted.Add(hits)
				}
			})
		}
		wg.Wait()
		want := int64(limit - (limit-1)%hits)
		if got := admitted.Load(); got != want {
			t.Fatalf("hits %d: admitted %d, want %d (the limit: exactly what was granted)", hits, got, want)
		}
		if local.Load() < limit/2 {
			t.Fatalf("hits %d: TakeLocal admitted %d of %d: the striped fast path was not taken", hits, local.Load(), want)
		}
		if got := fs.available(t, "r:k", p); got != 0 {
			t.Fatalf("hits %d: the Store has %d left, want 0", hits, got)
		}
	}
}
