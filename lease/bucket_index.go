package lease

import (
	"hash/maphash"
	"math/bits"
	"sync"
	"sync/atomic"
)

// index maps counter keys to their buckets. It is the fast path's only
// lookup and the largest per-key cost after the bucket itself, so it is
// built for both: reads are lock-free, and a key costs one pointer slot
// and a byte of tag.
//
// Keys are spread over indexShards shards by hash. Each shard is an
// open-addressing table (linear probing) of atomic bucket pointers, in
// groups of 8 with their tags (slotGroup); the key lives in the bucket's
// allocation. Readers load the shard's table and probe it without a lock. Writers hold the shard's mutex; they set slots in place (insert,
// replace, delete with a tombstone), or build a whole new table and publish
// it (grow, shrink, clear tombstones). A reader still on an older table may
// miss a key inserted since, or find a bucket deleted since; the Manager
// handles both (the slow path retries under the write path, and a deleted
// bucket is marked evicted first).
//
// Measured against sync.Map (BenchmarkIndex in bucket_index_test.go) it
// is faster on lookups and takes about 18 bytes per key instead of about
// 120.
type index struct {
	seed   maphash.Seed
	shards [indexShards]indexShard
	// prefixes are the Prefixes' indexes (Manager.Prefix), each of some of
	// these buckets; a slice replaced whole under prefixMu. A bucket is in
	// a Prefix's index only while it is in this one: linked holding its
	// shard's mutex here (see link), unlinked by the writers that take it
	// out, under the same mutex.
	prefixes atomic.Pointer[[]*prefixIndex]
	prefixMu sync.Mutex
}

// indexShards spreads writers (new keys, evictions) so that they rarely
// contend, and keeps each table's rebuild small.
const indexShards = 64

type indexShard struct {
	tab atomic.Pointer[indexTable]
	mu  sync.Mutex // serialises writers; protects live and used
	// live is the number of buckets; used counts tombstones too.
	live, used int
	_          [32]byte // keep shards on separate cache lines
}

type indexTable struct {
	mask   uint64
	groups []slotGroup
}

// slotGroup is 8 slots and their tags: 8 bits of the hash of each slot's
// key. A probe reads the bucket of a slot only if its tag is the key's,
// so that a lookup reads the cache lines of its own bucket, not those of
// the keys probed before it (a bucket and its key: two or three lines
// each, missed in the cache when the keys are many). Writers set a
// slot's tag before its bucket; a tombstone keeps the tag of the key it
// replaced. The tags cost a byte per slot; being next to their slots,
// no cache line of their own.
type slotGroup struct {
	tags  atomic.Uint64
	slots [8]atomic.Pointer[bucket]
}

// tagOf is the tag of a key whose hash is h: bits that neither the shard
// (the top 6) nor the slot (the low ones) use.
func tagOf(h uint64) uint64 { return h >> 40 & 0xff }

func (t *indexTable) size() int { return len(t.groups) * 8 }

// slot is slot i.
func (t *indexTable) slot(i uint64) *atomic.Pointer[bucket] { return &t.groups[i/8].slots[i%8] }

// set stores b, whose key's hash is h, in slot i. Callers hold the
// shard's mutex (or own t: a table not yet published).
func (t *indexTable) set(i uint64, b *bucket, h uint64) {
	g := &t.groups[i/8]
	sh := i % 8 * 8
	g.tags.Store(g.tags.Load()&^(0xff<<sh) | tagOf(h)<<sh)
	g.slots[i%8].Store(b)
}

// tombstone fills the slot of a deleted key so that probes continue past
// it. It is never handed out.
var tombstone = newBucket("\x00tombstone", nil)

const minIndexTable = 8

func newIndexTable(size int) *indexTable {
	return &indexTable{mask: uint64(size - 1), groups: make([]slotGroup, size/8)}
}

func (x *index) init() {
	x.seed = maphash.MakeSeed()
	for i := range x.shards {
		x.shards[i].tab.Store(newIndexTable(minIndexTable))
	}
}

func (x *index) locate(key string) (*indexShard, uint64) {
	h := maphash.String(x.seed, key)
	return &x.shards[h>>(64-6)], h
}

// load returns key's bucket or nil.
func (x *index) load(key string) *bucket {
	sh, h := x.locate(key)
	t := sh.tab.Load()
	tag := tagOf(h)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		g := &t.groups[i/8]
		b := g.slots[i%8].Load()
		if b == nil {
			return nil
		}
		if g.tags.Load()>>(i%8*8)&0xff == tag && b.key() == key && b != tombstone {
			return b
		}
	}
}

// find returns the slot of key, whose hash is h, in t, or -1; the
// table's keys are its buckets' keys from off (0, or a Prefix's length).
// As load, it reads the bucket of a slot only if its tag is the key's:
// a new key's insert probes past slots whose buckets are not in the
// cache. Callers hold the shard's mutex.
func (t *indexTable) find(key string, off int, h uint64) int {
	tag := tagOf(h)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		g := &t.groups[i/8]
		b := g.slots[i%8].Load()
		if b == nil {
			return -1
		}
		if g.tags.Load()>>(i%8*8)&0xff == tag && b != tombstone && len(b.key()) == off+len(key) && b.key()[off:] == key {
			return int(i)
		}
	}
}

// loadOrStore returns key's bucket if there is one (loaded = true), else
// stores b, whose key must be key.
func (x *index) loadOrStore(key string, b *bucket) (*bucket, bool) {
	sh, h := x.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if i := t.find(key, 0, h); i >= 0 {
		return t.slot(uint64(i)).Load(), true
	}
	sh.insert(b, h, x.rehash)
	return b, false
}

// insert stores b, whose key's hash is h and which is not in the shard's
// table, growing the table first if it is three quarters full (of
// buckets and tombstones). Callers hold the shard's mutex.
func (sh *indexShard) insert(b *bucket, h uint64, rehash func(*bucket) uint64) {
	t := sh.tab.Load()
	if (sh.used+1)*4 > t.size()*3 {
		t = sh.rebuild(max(minIndexTable, 1<<bits.Len(uint(sh.live*2))), rehash)
	}
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		old := t.slot(i).Load()
		if old == nil || old == tombstone {
			if old == nil {
				sh.used++
			}
			sh.live++
			t.set(i, b, h)
			return
		}
	}
}

// rehash is the hash of b's key in x (for rebuild).
func (x *index) rehash(b *bucket) uint64 { return maphash.String(x.seed, b.key()) }

// compareAndSwap replaces key's bucket old with b.
func (x *index) compareAndSwap(key string, old, b *bucket) bool {
	sh, h := x.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	i := t.find(key, 0, h)
	if i < 0 || t.slot(uint64(i)).Load() != old {
		return false
	}
	t.slot(uint64(i)).Store(b)
	x.unlinkPrefixes(old)
	return true
}

// compareAndDelete deletes key if its bucket is b.
func (x *index) compareAndDelete(key string, b *bucket) bool {
	sh, h := x.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if !sh.delete(key, 0, h, b, x.rehash) {
		return false
	}
	x.unlinkPrefixes(b)
	return true
}

// delete replaces b, the bucket of key (whose hash is h; see find for
// off), with a tombstone, shrinking the table when it is under an
// eighth full; false if key's bucket is not b. Callers hold the shard's
// mutex.
func (sh *indexShard) delete(key string, off int, h uint64, b *bucket, rehash func(*bucket) uint64) bool {
	t := sh.tab.Load()
	i := t.find(key, off, h)
	if i < 0 || t.slot(uint64(i)).Load() != b {
		return false
	}
	t.slot(uint64(i)).Store(tombstone)
	sh.live--
	if t.size() > minIndexTable && sh.live*8 < t.size() {
		sh.rebuild(max(minIndexTable, 1<<bits.Len(uint(sh.live*2))), rehash)
	}
	return true
}

// rebuild publishes a new table of size slots holding the live buckets,
// placed by rehash. Callers hold the shard's mutex.
func (sh *indexShard) rebuild(size int, rehash func(*bucket) uint64) *indexTable {
	old := sh.tab.Load()
	t := newIndexTable(size)
	for i := range uint64(old.size()) {
		b := old.slot(i).Load()
		if b == nil || b == tombstone {
			continue
		}
		h := rehash(b)
		for j := h & t.mask; ; j = (j + 1) & t.mask {
			if t.slot(j).Load() == nil {
				t.set(j, b, h)
				break
			}
		}
	}
	sh.used = sh.live
	sh.tab.Store(t)
	return t
}

// rangeAll calls f for every bucket (those added or deleted meanwhile may
// or may not be seen); f may delete.
func (x *index) rangeAll(f func(*bucket)) {
	for i := range x.shards {
		t := x.shards[i].tab.Load()
		for j := range uint64(t.size()) {
			if b := t.slot(j).Load(); b != nil && b != tombstone {
				f(b)
			}
		}
	}
}
