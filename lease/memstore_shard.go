package lease

// A MemoryStore shard: its slab of records, the open-addressing table
// that finds a key's slot, the table of holder IDs its loans name, and
// how a leased algorithm's state is packed into a record and back (see
// MemoryStore). Every method wants the shard's lock held.

import (
	"errors"
	"hash/maphash"
	"math"
	"slices"
	"strings"
	"sync"
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
	scratch []packedState // guarded by mu
	ls      loans         // guarded by mu
	ids     []uint16      // guarded by mu
}

// memRec is one key's state in its shard: what a leased algorithm keeps
// (its numbers, see packedState, and its first loan) in 64 bytes without
// pointers, so that the garbage collector need not scan the slab.
type memRec struct {
	// expires is the unix µs from which the state equals no state
	// (recomputed on every write, like a Redis PEXPIRE).
	expires int64
	num     [3]int64
	loan    memLoan // the first loan, with recLoan
	call    uint32  // lastCall.Call (token_bucket, gcra)
	holder  uint16  // the first loan's holder: its index in the holder table
	alg     Algorithm
	flags   uint8 // recLoan, recSpill
}

const (
	recLoan  = 1 << iota // loan and holder hold the first loan
	recSpill             // the slot has a memSpill
)

// memLoan is a Loan without its holder. aux is its LastSpend, or for
// fixed_window its Share: no algorithm's loans have both.
type memLoan struct{ lent, expires, aux int64 }

func memLoanOf(l Loan) memLoan { return memLoan{l.Lent, l.Expires, l.LastSpend + l.Share} }

// loan is l as the Loan of holder (its index id in the shard's holder
// table) of a key of algorithm alg.
func (l memLoan) loan(holder string, id uint16, alg Algorithm) Loan {
	x := Loan{Holder: holder, Lent: l.lent, Expires: l.expires, ref: id}
	if alg == FixedWindow {
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
	state algoState
}

type spilledLoan struct {
	memLoan
	holder uint16
}

// packedState is an algorithm's memory-store state that fits a memRec:
// the leased algorithms'. The store unpacks a key's record into a scratch
// state, runs the algorithm's math on it and packs it back.
type packedState interface {
	leasedState
	// unpack sets the state from r's numbers and the loans ls; a zero r
	// and no loans are a key without state.
	unpack(r memRec, ls loans)
	// pack writes the state's numbers (not its loans) to r.
	pack(r *memRec)
	// lent returns the state's loans.
	lent() loans
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
func (sh *memShard) lookup(key string, h uint64, alg Algorithm, t int64) (slot uint32, ok bool) {
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

// state returns key's state for a call of algorithm alg: for a packed
// algorithm the shard's scratch state, unpacked from the record at slot
// (ok) or without state; else the state kept beside the record, or a
// new one. sh.mu must be held until the call is done with it.
func (sh *memShard) state(alg Algorithm, slot uint32, ok bool) algoState {
	ps := sh.scratch[alg]
	if ps == nil {
		if ok {
			return sh.spill[slot].state
		}
		return algorithms[alg].code.newState()
	}
	ls := sh.ls[:0]
	if !ok {
		ps.unpack(memRec{}, ls)
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
	ps.unpack(*r, ls)
	return ps
}

// done ends a call's use of st (from state): a scratch state's loans,
// which may name the caller's holder ID, are cleared for the next call.
func (sh *memShard) done(st algoState) {
	if ps, ok := st.(packedState); ok {
		ls := ps.lent()
		clear(ls)
		sh.ls = ls[:0]
		ps.unpack(memRec{}, nil)
	}
}

// save records st as key's state after a write (ok: key has the record at
// slot), or removes the key when the state already equals no state. It
// fails, changing nothing, when a new holder's loan finds the shard's
// holder table full. sh.mu must be held.
func (sh *memShard) save(key string, h uint64, slot uint32, ok bool, alg Algorithm, st algoState, p Policy, t int64) error {
	exp := st.Expiry(p)
	if exp <= t {
		if ok {
			sh.remove(h, slot)
		}
		return nil
	}
	ps, packed := st.(packedState)
	var ls loans
	if packed {
		// The holders first: the one step that can fail.
		ls = ps.lent()
		sh.ids = sh.ids[:0]
		for _, l := range ls {
			id, ok := l.ref, true
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
	ps.pack(r)
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
func (sh *memShard) insert(key string, h uint64, alg Algorithm) uint32 {
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

// The leased algorithms' states packed in a memRec: num holds their
// numbers, call the Call of lastCall; the loans are the record's.

func (s *TokenBucketState) unpack(r memRec, ls loans) {
	*s = TokenBucketState{Tokens: math.Float64frombits(uint64(r.num[0])), Updated: r.num[1], Loans: ls, Last: lastCall{Call: r.call, Grant: r.num[2]}}
}

func (s *TokenBucketState) pack(r *memRec) {
	r.num, r.call = [3]int64{int64(math.Float64bits(s.Tokens)), s.Updated, s.Last.Grant}, s.Last.Call
}

func (s *TokenBucketState) lent() loans { return s.Loans }

func (s *GCRAState) unpack(r memRec, ls loans) {
	*s = GCRAState{TAT: r.num[0], Loans: ls, Last: lastCall{Call: r.call, Grant: r.num[2]}}
}

func (s *GCRAState) pack(r *memRec) {
	r.num, r.call = [3]int64{s.TAT, 0, s.Last.Grant}, s.Last.Call
}

func (s *GCRAState) lent() loans { return s.Loans }

func (s *FixedWindowState) unpack(r memRec, ls loans) {
	*s = FixedWindowState{Start: r.num[0], Count: r.num[1], Loans: ls}
}

func (s *FixedWindowState) pack(r *memRec) { r.num, r.call = [3]int64{s.Start, s.Count, 0}, 0 }

func (s *FixedWindowState) lent() loans { return s.Loans }

func (s *SlidingWindowState) unpack(r memRec, ls loans) {
	*s = SlidingWindowState{Start: r.num[0], Prev: r.num[1], Cur: r.num[2], Loans: ls}
}

func (s *SlidingWindowState) pack(r *memRec) { r.num, r.call = [3]int64{s.Start, s.Prev, s.Cur}, 0 }

func (s *SlidingWindowState) lent() loans { return s.Loans }
