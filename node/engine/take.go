package engine

import (
	"hash/maphash"

	"github.com/sluicehq/sluice/lease"
)

// batchTake gathers the items of a batch that one Manager.TakeMany
// decides, so that their Store calls overlap instead of running one after
// another (a batch of cold keys on Redis: one round trip per
// lease.Config.BatchWorkers keys, not one per key).
//
// TakeMany does not keep the order of several checks of one key, and the
// items it decides are decided before the others of the batch. So that a
// batch is still decided as if its items were decided one by one in order
// (two checks of a key with one token left: the first is allowed), an item
// joins only if no earlier item of the batch has its counter key; the
// others are decided after TakeMany, in order. Items of a request with
// several items (several rules, and their refunds) do not join either.
type batchTake struct {
	cs   []lease.Check // the Take calls; Key is a view (see counterKey)
	idx  []int32       // cs[j] decides items[idx[j]]
	seen keySet        // the counter keys of the batch so far
}

// reset empties b for the next batch (or phase).
func (b *batchTake) reset() {
	clear(b.cs) // drop the key views and errors
	b.cs = b.cs[:0]
	b.idx = b.idx[:0]
	b.seen.reset()
}

// offer adds item i of items to the TakeMany if it can join (see
// batchTake): the only item of its request, not a peek. It reports
// whether the item joined; one that did not must be decided after run, in
// the order of the batch.
func (b *batchTake) offer(items []Item, i int) bool {
	it := &items[i]
	if b.seen.add(it.ckey) || !it.alone || it.peek || it.ri.global {
		return false // a global rule's item is decided by its own Manager
	}
	// In place, as Batch.Add: reset keeps the slots past len zero.
	n := len(b.cs)
	if n < cap(b.cs) {
		b.cs = b.cs[:n+1]
	} else {
		b.cs = append(b.cs, lease.Check{})
	}
	c := &b.cs[n]
	c.Key, c.Policy, c.Hits = it.ckey, it.Policy, it.Hits
	b.idx = append(b.idx, int32(i))
	return true
}

// run decides the items offered with one TakeMany and records their
// decisions in bt's items (as decideLocal does). An item refused by the
// Manager stays undecided; its error is b.cs[j].Err.
func (b *batchTake) run(m *lease.Manager, bt *Batch) {
	if len(b.cs) == 0 {
		return
	}
	m.TakeMany(b.cs)
	for j := range b.cs {
		if c := &b.cs[j]; c.Err == nil {
			it := &bt.Items[b.idx[j]]
			it.Decision = c.Decision
			bt.record(it)
			bt.noteDenied(it)
		}
	}
}

// keySet is a set of keys, kept as their 64-bit hashes (open addressing,
// no allocation once grown). Two keys with one hash count as one: for
// batchTake that only keeps an item out of the TakeMany.
type keySet struct {
	slots []uint64 // 0 is empty; a hash is stored with its low bit set
	n     int
	seed  maphash.Seed
}

func (s *keySet) reset() {
	if s.n > 0 {
		clear(s.slots)
		s.n = 0
	}
}

// add adds key and reports whether it was already in the set.
func (s *keySet) add(key string) bool {
	if 2*(s.n+1) > len(s.slots) {
		s.grow()
	}
	h := maphash.String(s.seed, key) | 1
	if s.insert(h) {
		return true
	}
	s.n++
	return false
}

// insert puts h in place, reporting whether it was there.
func (s *keySet) insert(h uint64) bool {
	mask := uint64(len(s.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch s.slots[i] {
		case h:
			return true
		case 0:
			s.slots[i] = h
			return false
		}
	}
}

// grow doubles the table (64 slots at first) and puts the hashes back.
func (s *keySet) grow() {
	old := s.slots
	if old == nil {
		s.seed = maphash.MakeSeed()
	}
	s.slots = make([]uint64, max(64, 2*len(old)))
	for _, h := range old {
		if h != 0 {
			s.insert(h)
		}
	}
}
