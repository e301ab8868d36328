package lease

import (
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"
)

func newTestIndex() *index {
	x := new(index)
	x.init()
	return x
}

// TestIndexAgainstMap drives the index and a plain map through the same
// inserts, replacements and deletes (growing and shrinking the tables)
// and compares them after every step.
func TestIndexAgainstMap(t *testing.T) {
	x := newTestIndex()
	want := map[string]*bucket{}
	check := func(step string) {
		t.Helper()
		for k, b := range want {
			if got := x.load(k); got != b {
				t.Fatalf("%s: load(%q) = %p, want %p", step, k, got, b)
			}
		}
		n := 0
		x.rangeAll(func(b *bucket) {
			n++
			if want[b.key()] != b {
				t.Fatalf("%s: range found %q, not in the map", step, b.key())
			}
		})
		if n != len(want) {
			t.Fatalf("%s: range saw %d buckets, want %d", step, n, len(want))
		}
	}
	const n = 5000
	for i := range n {
		k := "k" + strconv.Itoa(i)
		b := newBucket(k, nil)
		if got, loaded := x.loadOrStore(k, b); loaded || got != b {
			t.Fatalf("insert %q: loaded %v", k, loaded)
		}
		want[k] = b
		if got, loaded := x.loadOrStore(k, newBucket(k, nil)); !loaded || got != b {
			t.Fatalf("second insert of %q stored", k)
		}
	}
	check("after inserts")
	for i := 0; i < n; i += 3 {
		k := "k" + strconv.Itoa(i)
		nb := newBucket(k, nil)
		if x.compareAndSwap(k, newBucket("", nil), nb) {
			t.Fatal("compareAndSwap with the wrong old bucket succeeded")
		}
		if !x.compareAndSwap(k, want[k], nb) {
			t.Fatalf("compareAndSwap %q failed", k)
		}
		want[k] = nb
	}
	check("after replacements")
	for i := range n {
		if i%10 == 0 {
			continue
		}
		k := "k" + strconv.Itoa(i)
		if x.compareAndDelete(k, newBucket("", nil)) {
			t.Fatal("compareAndDelete with the wrong bucket succeeded")
		}
		if !x.compareAndDelete(k, want[k]) {
			t.Fatalf("delete %q failed", k)
		}
		delete(want, k)
		if x.load(k) != nil {
			t.Fatalf("%q still there after delete", k)
		}
	}
	check("after deletes (tables shrank)")
	for i := range n {
		k := "k" + strconv.Itoa(i)
		if _, ok := want[k]; !ok {
			b := newBucket(k, nil)
			x.loadOrStore(k, b)
			want[k] = b
		}
	}
	check("after reinserting over tombstones")
	if x.load("\x00tombstone") != nil {
		t.Fatal("the tombstone's key was found")
	}
}

// TestIndexConcurrent: readers never see a wrong bucket while writers
// insert, delete and rebuild (run with -race).
func TestIndexConcurrent(t *testing.T) {
	x := newTestIndex()
	const n = 2000
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("key-%d", i)
	}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for round := range 5 {
				for i := w; i < n; i += 2 {
					b, _ := x.loadOrStore(keys[i], newBucket(keys[i], nil))
					if round%2 == 1 {
						x.compareAndDelete(keys[i], b)
					}
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 5 {
				for _, k := range keys {
					if b := x.load(k); b != nil && b.key() != k {
						t.Errorf("load(%q) returned the bucket of %q", k, b.key())
						return
					}
				}
			}
		})
	}
	wg.Wait()
}

// syncMapIndex is the alternative the index was measured against.
type syncMapIndex struct{ m sync.Map }

func (s *syncMapIndex) load(key string) *bucket {
	v, ok := s.m.Load(key)
	if !ok {
		return nil
	}
	return v.(*bucket)
}

// BenchmarkIndex compares the index with sync.Map: lookups of one hot key,
// of 1M keys, and the heap bytes per key (beyond the bucket and the key).
func BenchmarkIndex(b *testing.B) {
	const n = 1 << 20
	keys := benchKeys(n)
	type impl struct {
		name  string
		load  func(string) *bucket
		store func(string, *bucket)
	}
	mk := func() []impl {
		x := newTestIndex()
		s := new(syncMapIndex)
		return []impl{
			{"index", x.load, func(k string, bk *bucket) { x.loadOrStore(k, bk) }},
			{"sync.Map", s.load, func(k string, bk *bucket) { s.m.Store(k, bk) }},
		}
	}
	buckets := make([]*bucket, n)
	for i := range buckets {
		buckets[i] = newBucket(keys[i], nil)
	}
	for _, im := range mk() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i, k := range keys {
			im.store(k, buckets[i])
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perKey := float64(after.HeapAlloc-before.HeapAlloc) / n
		b.Run(im.name+"/hot", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if im.load("user-42") == nil {
						b.Fatal("missing")
					}
				}
			})
			b.ReportMetric(perKey, "B/key")
		})
		b.Run(im.name+"/1M", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if im.load(keys[i&(n-1)]) == nil {
						b.Fatal("missing")
					}
					i += 7919
				}
			})
			b.ReportMetric(perKey, "B/key")
		})
		runtime.KeepAlive(im)
	}
}
