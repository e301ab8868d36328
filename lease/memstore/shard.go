package memstore

// A Store shard: its slab of records, the open-addressing table
// that finds a key's slot, the table of holder IDs its loans name, and
// how a leased algorithm's state is packed into a record and back (see
// Store). Every method wants the shard's lock held.

import (
	"errors"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/lease/algo"
)

type memShard struct {
	mu   sync.Mutex
	seed maphash.Seed // the store's
	// recs are the records and keys their keys, by slot; the slots of
	// removed keys are zero (alg 0) and listed in free, for the next new
	// key.
	recs []memRec // guarded by mu
	keys []string // guarded by mu
	free []uint32 // guarded by mu
	// tab finds a key's slot: open addressing with linear probing from
	// the key's hash (its bits above the shard's), each entry a slot + 1,
	// 0 for empty, memTombstone for a removed key's; a power of two long, at
	// most 3/4 used (live counts the keys, used the tombstones too).
	tab        []uint32 // guarded by mu
	live, used int      // guarded by mu
	// spill holds what a record has no room for, by slot (see memSpill).
	spill   map[uint32]*memSpill // guarded by mu
	holders holderTable          // guarded by mu
	// scratch is, per packed algorithm (by Algorithm), the state a call
	// works on: unpacked from the key's record, packed back after a
	// write. ls and ids are buffers that calls reuse.
	scratch []algo.LeasedState // guarded by mu
	ls      algo.Loans         // guarded by mu
	ids     []uint16           // guarded by mu
}

// memRec is one key's state in its shard: what a leased algorithm keeps
// (its numbers, algo.Fields, and its first loan) in 64 bytes without
// pointers, so that the garbage collector need not scan the slab.
type memRec struct {
	// expires is the unix µs from which the state equals no state
	// (recomputed on every write, like a Redis PEXPIRE).
	expires int64
	num     [3]int64
	loan    memLoan // the first loan, with recLoan
	call    uint32  // algo.Fields.Call
	holder  uint16  // the first loan's holder: its index in the holder table
	alg     algo.Algorithm
	flags   uint8 // recLoan, recSpill
}

const (
	recLoan  = 1 << iota // loan and holder hold the first loan
	recSpill             // the slot has a memSpill
)

// memLoan is a Loan without its holder. aux is its LastSpend, or for an
// algorithm that leases ahead (fixed_window) its Share: no algorithm's
// loans have both.
type memLoan struct{ lent, expires, aux int64 }

func memLoanOf(l algo.Loan) memLoan { return memLoan{l.Lent, l.Expires, l.LastSpend + l.Share} }

// loan is l as the Loan of holder (its index id in the shard's holder
// table) of a key of algorithm alg.
func (l memLoan) loan(holder string, id uint16, alg algo.Algorithm) algo.Loan {
	x := algo.Loan{Holder: holder, Lent: l.lent, Expires: l.expires, Ref: id}
	if alg.LeasesAhead() {
		x.Share = l.aux
	} else {
		x.LastSpend = l.aux
	}
	return x
}

// memSpill is what a key's record has no room for: a leased algorithm's
// loans past the first (a key that several holders lease, or that keeps
// ended loans), or the whole state of an algorithm whose state is a list
// (sliding_log's stamps, concurrency's held ids).
type memSpill struct {
	loans []spilledLoan
	state algo.State
}

type spilledLoan struct {
	memLoan
	holder uint16
}

// holderTable is a shard's copy of the holder IDs its keys' loans name,
// each once, by a 16-bit index: index 0 is no holder (an ended loan).
// An ID is dropped when the last loan that names it goes.
type holderTable struct {
	ids   map[string]uint16
	names []string
	refs  []uint32 // the loans that name names[i]
	free  []uint16
}

// errHolders is the refusal of a loan to a new holder when 65535 holders
// already have loans of keys in the shard.
var errHolders = errors.New("the memory store holds loans of 65535 holders in this key's shard")

// acquire returns id's index, counting one more loan that names it; ok is
// false when the table is full. "" is index 0, not counted.
func (h *holderTable) acquire(id string) (i uint16, ok bool) {
	if id == "" {
		return 0, true
	}
	if i, ok := h.ids[id]; ok {
		h.refs[i]++
		return i, true
	}
	if n := len(h.free); n > 0 {
		i, h.free = h.free[n-1], h.free[:n-1]
	} else {
		if len(h.names) > math.MaxUint16 {
			return 0, false
		}
		i = uint16(len(h.names))
		h.names, h.refs = append(h.names, ""), append(h.refs, 0)
	}
	name := strings.Clone(id) // the caller's id may be a reused buffer
	h.names[i], h.refs[i], h.ids[name] = name, 1, i
	return i, true
}

// release counts one loan fewer that names index i.
func (h *holderTable) release(i uint16) {
	if i == 0 {
		return
	}
	if h.refs[i]--; h.refs[i] == 0 {
		delete(h.ids, h.names[i])
		h.names[i] = ""
		h.free = append(h.free, i)
	}
}

// memTombstone is the entry of a removed key in a shard's tab: probes go
// on past it.
const memTombstone = math.MaxUint32

// minTab is the smallest tab.
const minTab = 8

// hash is key's hash, which picks its shard (its low bits) and where its
// shard's probes start (the bits above).
func (sh *memShard) hash(key string) uint64 { return maphash.String(sh.seed, key) }

// find returns the slot of key, whose hash is h; ok is false when key has
// no state. sh.mu must be held.
func (sh *memShard) find(key string, h uint64) (slot uint32, ok bool) {
	if len(sh.tab) == 0 {
		return 0, false
	}
	mask := uint64(len(sh.tab) - 1)
	for i := (h / memShards) & mask; ; i = (i + 1) & mask {
		switch v := sh.tab[i]; {
		case v == 0:
			return 0, false
		case v != memTombstone && sh.keys[v-1] == key:
			return v - 1, true
		}
	}
}

// place enters slot, whose key (hash h) the table does not hold yet.
// sh.mu must be held.
func (sh *memShard) place(h uint64, slot uint32) {
	if (sh.used+1)*4 > len(sh.tab)*3 {
		sh.rehash(sh.live + 1)
	}
	mask := uint64(len(sh.tab) - 1)
	i := (h / memShards) & mask
	for sh.tab[i] != 0 && sh.tab[i] != memTombstone {
		i = (i + 1) & mask
	}
	if sh.tab[i] == 0 {
		sh.used++
	}
	sh.tab[i] = slot + 1
	sh.live++
}

// unplace removes slot, whose key has hash h, from the table. sh.mu must
// be held.
func (sh *memShard) unplace(h uint64, slot uint32) {
	mask := uint64(len(sh.tab) - 1)
	i := (h / memShards) & mask
	for sh.tab[i] != slot+1 {
		i = (i + 1) & mask
	}
	sh.tab[i] = memTombstone
	sh.live--
}

// rehash rebuilds the table without tombstones, at most half full with n
// keys. sh.mu must be held.
func (sh *memShard) rehash(n int) {
	size := minTab
	for size < 2*n {
		size *= 2
	}
	sh.tab, sh.live, sh.used = make([]uint32, size), 0, 0
	for slot := range sh.recs {
		if sh.recs[slot].alg != 0 {
			sh.place(sh.hash(sh.keys[slot]), uint32(slot))
		}
	}
}

// compact rebuilds the shard's slab, keys, spill and table with its keys
// alone. sh.mu must be held.
func (sh *memShard) compact() {
	recs := make([]memRec, 0, sh.live)
	keys := make([]string, 0, sh.live)
	spill := make(map[uint32]*memSpill, len(sh.spill))
	for slot := range sh.recs {
		if sh.recs[slot].alg == 0 {
			continue
		}
		if sp, ok := sh.spill[uint32(slot)]; ok {
			spill[uint32(len(recs))] = sp
		}
		recs, keys = append(recs, sh.recs[slot]), append(keys, sh.keys[slot])
	}
	sh.recs, sh.keys, sh.spill, sh.free = recs, keys, spill, nil
	sh.rehash(len(recs))
}

// lookup returns the slot of key's live state for algorithm alg; ok is
// false without one. State of another algorithm (the key's policy
// changed) or expired state is removed: the key starts fresh. sh.mu must
// be held.
func (sh *memShard) lookup(key string, h uint64, alg algo.Algorithm, t int64) (slot uint32, ok bool) {
	slot, ok = sh.find(key, h)
	if ok {
		if r := &sh.recs[slot]; r.alg != alg || r.expires <= t {
			sh.remove(h, slot)
			return 0, false
		}
	}
	return slot, ok
}

// remove removes the key whose record is at slot (its hash h). sh.mu
// must be held.
func (sh *memShard) remove(h uint64, slot uint32) {
	sh.releaseLoans(slot)
	delete(sh.spill, slot)
	sh.unplace(h, slot)
	sh.recs[slot], sh.keys[slot] = memRec{}, ""
	sh.free = append(sh.free, slot)
}

// releaseLoans releases the holders of the loans of the record at slot.
func (sh *memShard) releaseLoans(slot uint32) {
	r := &sh.recs[slot]
	if r.flags&recLoan != 0 {
		sh.holders.release(r.holder)
	}
	if r.flags&recSpill != 0 {
		for _, l := range sh.spill[slot].loans {
			sh.holders.release(l.holder)
		}
	}
}

// state returns key's state for a call of algorithm alg: for a leased
// algorithm the shard's scratch state, set from the record at slot (ok)
// or without state; else the state kept beside the record, or a new one.
// sh.mu must be held until the call is done with it.
func (sh *memShard) state(alg algo.Algorithm, slot uint32, ok bool) algo.State {
	ps := sh.scratch[alg]
	if ps == nil {
		if ok {
			return sh.spill[slot].state
		}
		return alg.NewState()
	}
	ls := sh.ls[:0]
	if !ok {
		ps.SetFields(algo.Fields{}, ls)
		return ps
	}
	r := &sh.recs[slot]
	if r.flags&recLoan != 0 {
		ls = append(ls, r.loan.loan(sh.holders.names[r.holder], r.holder, alg))
	}
	if r.flags&recSpill != 0 {
		sp := sh.spill[slot].loans
		n := len(ls)
		ls = slices.Grow(ls, len(sp))[:n+len(sp)]
		for i := range sp {
			ls[n+i] = sp[i].loan(sh.holders.names[sp[i].holder], sp[i].holder, alg)
		}
	}
	ps.SetFields(algo.Fields{Num: r.num, Call: r.call}, ls)
	return ps
}

// done ends a call's use of st (from state): a scratch state's loans,
// which may name the caller's holder ID, are cleared for the next call.
func (sh *memShard) done(st algo.State) {
	if ps, ok := st.(algo.LeasedState); ok {
		ls := ps.Lent()
		clear(ls)
		sh.ls = ls[:0]
		ps.SetFields(algo.Fields{}, nil)
	}
}

// save records st as key's state after a write (ok: key has the record at
// slot), or removes the key when the state already equals no state. It
// fails, changing nothing, when a new holder's loan finds the shard's
// holder table full. sh.mu must be held.
func (sh *memShard) save(key string, h uint64, slot uint32, ok bool, alg algo.Algorithm, st algo.State, p algo.Policy, t int64) error {
	exp := st.Expiry(p)
	if exp <= t {
		if ok {
			sh.remove(h, slot)
		}
		return nil
	}
	ps, packed := st.(algo.LeasedState)
	var ls algo.Loans
	if packed {
		// The holders first: the one step that can fail.
		ls = ps.Lent()
		sh.ids = sh.ids[:0]
		for _, l := range ls {
			id, ok := l.Ref, true
			if id != 0 {
				sh.holders.refs[id]++ // read from this shard's record (state): no lookup
			} else {
				id, ok = sh.holders.acquire(l.Holder)
			}
			if !ok {
				for _, id := range sh.ids {
					sh.holders.release(id)
				}
				return errHolders
			}
			sh.ids = append(sh.ids, id)
		}
	}
	if ok {
		sh.releaseLoans(slot)
	} else {
		slot = sh.insert(key, h, alg)
	}
	r := &sh.recs[slot]
	r.expires = exp
	if !packed {
		if r.flags&recSpill == 0 {
			sh.spill[slot] = &memSpill{state: st}
			r.flags |= recSpill
		}
		return nil
	}
	f := ps.Fields()
	r.num, r.call = f.Num, f.Call
	r.flags &^= recLoan
	if len(ls) > 0 {
		r.flags |= recLoan
		r.holder, r.loan = sh.ids[0], memLoanOf(ls[0])
	}
	switch sp := sh.spill[slot]; {
	case len(ls) > 1 && sp == nil:
		sp = &memSpill{}
		sh.spill[slot] = sp
		fallthrough
	case len(ls) > 1:
		sp.loans = slices.Grow(sp.loans[:0], len(ls)-1)[:len(ls)-1]
		ids := sh.ids[1:len(ls)]
		for i := range sp.loans {
			sp.loans[i] = spilledLoan{memLoanOf(ls[i+1]), ids[i]}
		}
		r.flags |= recSpill
	case sp != nil:
		delete(sh.spill, slot)
		r.flags &^= recSpill
	}
	return nil
}

// insert gives key (hash h) a record of algorithm alg, in a free slot or
// a new one, and returns its slot. sh.mu must be held.
func (sh *memShard) insert(key string, h uint64, alg algo.Algorithm) uint32 {
	var slot uint32
	if n := len(sh.free); n > 0 {
		slot, sh.free = sh.free[n-1], sh.free[:n-1]
	} else {
		slot = uint32(len(sh.recs))
		sh.recs, sh.keys = append(sh.recs, memRec{}), append(sh.keys, "")
	}
	sh.place(h, slot) // first: a rehash enters the slots in use, this one not yet
	sh.recs[slot] = memRec{alg: alg}
	sh.keys[slot] = strings.Clone(key) // the caller's key may be a reused buffer
	return slot
}
