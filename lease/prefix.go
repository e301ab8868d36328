package lease

import (
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

// A Prefix is the keys of a Manager that start with one prefix (in a
// gateway's Limiter, a rule's "name:"), checked by the rest of the key:
// its checks build no counter key on the fast path and look the key up in
// an index of the Prefix's own, by a hash of the rest alone (cheaper
// than the Manager's: see strHash). It is no second engine: its index
// holds the Manager's own buckets, those of the keys with the prefix
// that were checked through Prefix.Take, each for as long as it is in the
// Manager's index (a bucket replaced or evicted leaves both at once).
// A Prefix is safe for concurrent use.
type Prefix struct {
	m    *Manager
	x    *prefixIndex
	keys sync.Pool // *[]byte: counter keys built by Take
}

// Prefix returns the Manager's Prefix of prefix. The Prefixes of one
// prefix share their index; a Manager keeps the index of each prefix it
// was asked for (an index with no keys costs about 1.5 KiB) and makes its
// evictions a little slower (a key is unlinked from every Prefix it has),
// so a caller asks for a bounded set of prefixes, such as its rules'.
func (m *Manager) Prefix(prefix string) *Prefix {
	return &Prefix{m: m, x: m.buckets.prefixIndex(prefix)}
}

// TakeLocal decides a check of hits under policy p of the counter key
// prefix+key from the tokens the Manager holds of it, as Take's fast path
// does, and reports ok; the check is then allowed, and remaining and
// reset are its Decision's Remaining and Reset (its Limit is p.Limit, its
// RetryAfter 0, and it is neither Degraded nor Unavailable). When it
// cannot decide (no bucket for the key in the Prefix's index, or one of
// another policy, too few tokens on hand, tokens past their time, hits
// outside [1, MaxHits], an exact policy) it reports !ok and changes
// nothing: the caller then calls Take, which decides the check fully.
// It never calls the Store and never allocates, and key is not kept.
//
// It answers in three words rather than a Decision, whose copies a
// caller that builds its own answer would pay for on every check.
func (px *Prefix) TakeLocal(key string, p *Policy, hits int64) (remaining int64, reset time.Duration, ok bool) {
	if hits <= 0 || hits > MaxHits {
		return 0, 0, false
	}
	m := px.m
	var now int64
	if m.clk.coarse != nil && !p.Algorithm.Windowed() { // see clock.nanosFor
		now = m.clk.coarse.Nanos()
	}
	if now == 0 {
		now = m.clk.now().UnixNano()
	}
	b := px.x.load(key)
	if b == nil || !samePolicy(b.pol, p) || !b.spendable(now) {
		return 0, 0, false
	}
	left, ok := b.quickTake(hits)
	if !ok {
		was := left + hits
		if left, ok = m.striped.quickTakeStriped(b, hits); !ok {
			if left, ok = m.striped.take(b, hits, was); !ok {
				return 0, 0, false
			}
		}
	}
	b.touch(now, m.touchMs)
	if low := b.low.Load(); left < int64(low) && b.low.CompareAndSwap(low, -1) {
		m.prefetch(b)
	}
	return min(left+b.remaining.Load(), b.pol.Capacity()), b.reset(left, now), true
}

// Take is the Manager's Take of the counter key prefix+key; the key's
// bucket, if it has one then, is indexed in the Prefix for TakeLocal.
// key need not outlive the call.
func (px *Prefix) Take(key string, p Policy, hits int64) (Decision, error) {
	bp, _ := px.keys.Get().(*[]byte)
	if bp == nil {
		bp = new([]byte)
	}
	ck := append(append((*bp)[:0], px.x.prefix...), key...)
	ckey := unsafe.String(unsafe.SliceData(ck), len(ck))
	d, err := px.m.Take(ckey, p, hits)
	if err == nil && p.Algorithm.Leased() {
		if b := px.m.buckets.load(ckey); b != nil && px.x.load(key) != b {
			px.m.buckets.link(px.x, b)
		}
	}
	*bp = ck
	px.keys.Put(bp)
	return d, err
}

// prefixIndex is a Prefix's index: the buckets of some keys that start
// with prefix, by the rest of their key. It is the Manager's index's
// table (see index), hashed by strHash; a bucket is in it only while it
// is in the Manager's index (see link and unlinkPrefixes).
type prefixIndex struct {
	prefix string
	hash   strHash
	shards [prefixShards]indexShard
}

// prefixShards spreads a Prefix's writers over fewer shards than the
// Manager's index (they write under a mutex of that index's, so they
// contend less): an index with no keys costs about 1.5 KiB.
const prefixShards = 8

// prefixIndex returns the index of prefix, making it if there is none.
func (x *index) prefixIndex(prefix string) *prefixIndex {
	x.prefixMu.Lock()
	defer x.prefixMu.Unlock()
	var ps []*prefixIndex
	if p := x.prefixes.Load(); p != nil {
		ps = *p
	}
	for _, px := range ps {
		if px.prefix == prefix {
			return px
		}
	}
	px := &prefixIndex{prefix: strings.Clone(prefix), hash: newStrHash()}
	for i := range px.shards {
		px.shards[i].tab.Store(newIndexTable(minIndexTable))
	}
	ps = append(slices.Clip(ps), px)
	x.prefixes.Store(&ps)
	return px
}

// link indexes b in px if b is in x (under the mutex of b's shard in x,
// which the writers that take b out of x hold while they unlink it: a
// bucket linked is unlinked when it leaves). b's key starts with
// px.prefix.
func (x *index) link(px *prefixIndex, b *bucket) {
	sh, h := x.locate(b.key())
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if i := t.find(b.key(), 0, h); i >= 0 && t.slot(uint64(i)).Load() == b {
		px.store(b)
	}
}

// unlinkPrefixes takes b out of every Prefix's index. Callers hold the
// mutex of b's shard in x and have just taken b out of x.
func (x *index) unlinkPrefixes(b *bucket) {
	ps := x.prefixes.Load()
	if ps == nil {
		return
	}
	for _, px := range *ps {
		if strings.HasPrefix(b.key(), px.prefix) {
			px.delete(b)
		}
	}
}

func (px *prefixIndex) locate(key string) (*indexShard, uint64) {
	h := px.hash.sum(key)
	return &px.shards[h>>(64-3)], h
}

// rehash is the hash of b's key in px (for rebuild).
func (px *prefixIndex) rehash(b *bucket) uint64 { return px.hash.sum(b.key()[len(px.prefix):]) }

// load returns the bucket of prefix+key, or nil; lock-free, as
// index.load. A key of 1 to 16 bytes (the common one) is hashed and
// compared as two words, which hold all of its bytes (see shortWords), in
// this function alone: the calls of the general path (strHash.sum, a
// string comparison) would cost it about half again.
func (px *prefixIndex) load(key string) *bucket {
	n := len(key)
	if uint(n-1) >= 16 {
		return px.loadLong(key)
	}
	// shortWords of the key, then of each candidate's, written out: the
	// function is too big to be inlined. No bounds checks: n is 1 to 16,
	// and a candidate's rest is n bytes too.
	p := unsafe.Pointer(unsafe.StringData(key))
	var a, b uint64
	switch {
	case n >= 8:
		a, b = r8(p), r8(unsafe.Add(p, n-8))
	case n >= 4:
		a, b = r4(p), r4(unsafe.Add(p, n-4))
	default:
		a = uint64(*(*byte)(p)) | uint64(*(*byte)(unsafe.Add(p, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(p, n-1)))<<16
	}
	h := px.hash.short(a, b, n)
	t := px.shards[h>>(64-3)].tab.Load()
	tag := tagOf(h)
	off := len(px.prefix)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		g := &t.groups[i/8]
		bk := g.slots[i%8].Load()
		if bk == nil {
			return nil
		}
		if g.tags.Load()>>(i%8*8)&0xff != tag || bk == tombstone {
			continue
		}
		bkey := bk.key()
		if len(bkey) != off+n {
			continue
		}
		q := unsafe.Add(unsafe.Pointer(unsafe.StringData(bkey)), off)
		var ka, kb uint64
		switch {
		case n >= 8:
			ka, kb = r8(q), r8(unsafe.Add(q, n-8))
		case n >= 4:
			ka, kb = r4(q), r4(unsafe.Add(q, n-4))
		default:
			ka = uint64(*(*byte)(q)) | uint64(*(*byte)(unsafe.Add(q, n>>1)))<<8 | uint64(*(*byte)(unsafe.Add(q, n-1)))<<16
		}
		if ka == a && kb == b {
			return bk
		}
	}
}

// loadLong is load of a key of 0 or more than 16 bytes.
func (px *prefixIndex) loadLong(key string) *bucket {
	sh, h := px.locate(key)
	t := sh.tab.Load()
	tag := tagOf(h)
	off := len(px.prefix)
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		g := &t.groups[i/8]
		b := g.slots[i%8].Load()
		if b == nil {
			return nil
		}
		if g.tags.Load()>>(i%8*8)&0xff == tag && b != tombstone && len(b.key()) == off+len(key) && b.key()[off:] == key {
			return b
		}
	}
}

// store indexes b (replacing the bucket of its key, if any). Callers
// hold the mutex of b's shard in the Manager's index (see link).
func (px *prefixIndex) store(b *bucket) {
	key := b.key()[len(px.prefix):]
	sh, h := px.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := sh.tab.Load()
	if i := t.find(key, len(px.prefix), h); i >= 0 {
		t.slot(uint64(i)).Store(b)
		return
	}
	sh.insert(b, h, px.rehash)
}

// delete takes b out of px if it is there.
func (px *prefixIndex) delete(b *bucket) {
	key := b.key()[len(px.prefix):]
	sh, h := px.locate(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.delete(key, len(px.prefix), h, b, px.rehash)
}
