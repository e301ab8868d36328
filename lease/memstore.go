package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strings"
	"sync"
	"time"
)

// MemoryStoreConfig configures a MemoryStore.
type MemoryStoreConfig struct {
	// Now is the Store's clock. Nil means time.Now. Tests pass a fake
	// clock; it is called once per Store call, outside any lock.
	Now func() time.Time
	// SweepInterval is how often the store's janitor removes expired
	// state. Zero means 10s; negative means no janitor (call Sweep).
	SweepInterval time.Duration
	// OnBake, when set, is called when a Lease or Return of a token_bucket
	// or gcra key applies the cap of an ended loan to the key's stored
	// level for good (the key had more than 3 ended loans still capping
	// it: see "Lent tokens" in the package doc): the loan ended at end,
	// and the tokens lent at its time (lent) count as spent then. It runs
	// under the key's lock, before the call returns, and must not call
	// the Store. For tests (lease/modeltest).
	OnBake func(key string, end time.Time, lent int64)
}

// DefaultMemoryStoreConfig returns the defaults: the wall clock, and a
// sweep every 10s, which bounds abandoned state to about 10s of new keys
// while costing one pass over the map per 10s.
func DefaultMemoryStoreConfig() MemoryStoreConfig {
	return MemoryStoreConfig{Now: time.Now, SweepInterval: 10 * time.Second}
}

// memShards is the number of independently locked maps. 64 keeps
// contention negligible on machines with up to a few dozen cores.
const memShards = 64

// MemoryStore is a Store that holds every key's state in process memory,
// with the same semantics as the Redis store (the pure math of the
// algo*.go files). It is for single-node deployments, embedding and tests.
//
// It is safe for concurrent use: keys are spread over 64 shards, each an
// index behind its own mutex, and every call holds one shard lock. State that
// would have expired in Redis (a full bucket, windows two periods old, a
// log whose newest stamp left the window, a concurrency key with nothing
// held) is treated as absent and removed by Sweep, which a janitor
// goroutine owned by the store runs until Close.
//
// A key passed to any method need not outlive the call: the store copies a
// key when it first records state for it (that path allocates anyway), so
// calls on a key that has state allocate nothing for the key.
//
// A key's state is a fixed-size record without pointers (memRec, 64
// bytes) in its shard's slab: a leased algorithm's numbers and its first
// loan, the holder named by an index into the shard's table of holder IDs.
// Only more loans than one, and the states of sliding_log and concurrency
// (lists), are kept beside. The shard finds a key's slot by an
// open-addressing table of slot numbers (4 bytes an entry; the key is in
// a slice beside the slab): a Go map of key to slot costs 35–56 bytes a
// key, as its load factor goes.
type MemoryStore struct {
	now    func() time.Time
	onBake func(key string, end time.Time, lent int64)
	seed   maphash.Seed
	shards [memShards]memShard

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the janitor exits (nil: no janitor)
	closeOnce sync.Once
}

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

// loan is l as holder's Loan of a key of algorithm alg.
func (l memLoan) loan(holder string, alg Algorithm) Loan {
	x := Loan{Holder: holder, Lent: l.lent, Expires: l.expires}
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

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore. Call Close to stop its
// janitor.
func NewMemoryStore(cfg MemoryStoreConfig) *MemoryStore {
	m := &MemoryStore{now: cfg.Now, onBake: cfg.OnBake, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	if m.now == nil {
		m.now = time.Now
	}
	algs := Algorithms()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.seed = m.seed
		sh.spill = make(map[uint32]*memSpill)
		sh.holders = holderTable{ids: make(map[string]uint16), names: []string{""}, refs: []uint32{0}}
		sh.scratch = make([]packedState, int(algs[len(algs)-1])+1)
		for _, a := range algs {
			if ps, ok := algorithms[a].code.newState().(packedState); ok {
				sh.scratch[a] = ps
			}
		}
	}
	interval := cfg.SweepInterval
	if interval == 0 {
		interval = DefaultMemoryStoreConfig().SweepInterval
	}
	if interval > 0 {
		m.done = make(chan struct{})
		go m.janitor(interval)
	}
	return m
}

func (m *MemoryStore) janitor(interval time.Duration) {
	defer close(m.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
			m.Sweep(m.now())
		}
	}
}

// Close stops the janitor and waits for it. It is idempotent; the store
// stays usable after Close (without background sweeping).
func (m *MemoryStore) Close() error {
	m.closeOnce.Do(func() {
		close(m.stop)
		if m.done != nil {
			<-m.done
		}
	})
	return nil
}

// Sweep removes the state of every key that has expired at now and returns
// how many keys it removed. A shard left with more free slots than keys
// is rebuilt to its keys' size.
func (m *MemoryStore) Sweep(now time.Time) int {
	t := unixMicros(now)
	removed := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for slot := range sh.recs {
			if r := &sh.recs[slot]; r.alg != 0 && r.expires <= t {
				sh.remove(sh.hash(sh.keys[slot]), uint32(slot))
				removed++
			}
		}
		if len(sh.free) > sh.live && len(sh.recs) >= minCompact {
			sh.compact()
		}
		sh.mu.Unlock()
	}
	return removed
}

// minCompact is the fewest slots a shard has before Sweep rebuilds it.
const minCompact = 256

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

// Len returns the number of keys with state, including expired state not
// yet swept.
func (m *MemoryStore) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}

// shard returns key's shard and key's hash.
func (m *MemoryStore) shard(key string) (*memShard, uint64) {
	h := maphash.String(m.seed, key)
	return &m.shards[h%memShards], h
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
		ls = append(ls, r.loan.loan(sh.holders.names[r.holder], alg))
	}
	if r.flags&recSpill != 0 {
		for _, l := range sh.spill[slot].loans {
			ls = append(ls, l.loan(sh.holders.names[l.holder], alg))
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
			id, ok := sh.holders.acquire(l.Holder)
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
		sp.loans = sp.loans[:0]
		for i, l := range ls[1:] {
			sp.loans = append(sp.loans, spilledLoan{memLoanOf(l), sh.ids[i+1]})
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

// Lease implements Leaser.
func (m *MemoryStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	if err := ctx.Err(); err != nil {
		return Grant{}, err
	}
	if err := CheckLease(p, want, need, to); err != nil {
		return Grant{}, fmt.Errorf("cannot lease: %w", err)
	}
	now := m.now()
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := unixMicros(now)
	slot, ok := sh.lookup(key, h, p.Algorithm, t)
	st := sh.state(p.Algorithm, slot, ok)
	defer sh.done(st)
	m.reportBakes(key, st)
	g := st.(leasedState).Lease(p, now, want, need, to) // CheckLease admits only the leased algorithms
	// A grant, a renewed loan, (token_bucket, gcra) a loan that a call
	// granting nothing settled, maybe to 0, or (fixed_window) shares ahead
	// lent or ended (a fixed_window call that changed nothing left the
	// state as it was).
	if g.Granted > 0 || g.Lent > 0 || g.AheadWindows > 0 || (ok && (p.Algorithm.refills() || p.Algorithm == FixedWindow)) {
		if err := sh.save(key, h, slot, ok, p.Algorithm, st, p, t); err != nil {
			return Grant{}, fmt.Errorf("cannot lease: %w", err)
		}
	}
	return g, nil
}

// Return implements Leaser.
func (m *MemoryStore) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	return m.giveBack(ctx, key, p, false, CheckReturn(p, tokens, holder), func(st leasedState, now time.Time) {
		st.Return(p, now, tokens, holder)
	})
}

// Refund gives back hits that Lease calls without a Lessee ID granted
// (spent at once) for a request that was then denied, as a Manager with
// Config.Direct refunds them: token_bucket's level rises by hits (at most
// to its capacity), gcra's TAT moves back, the windows' current count
// falls by at most what no loan lends; the caps of a holder's loans still
// hold the level. A refund under another algorithm than the key's state
// changes nothing. The Store cannot tell when the refunded hits were
// granted: a refund that comes Δ after its grant may give back up to
// rate × Δ that a strict bucket would not (refill the capacity clipped
// meanwhile), and one that comes after its window ended counts in the
// current window (as a leasing Manager's refund to its bucket does).
// It is not part of the Store interface: a Store that lends every token
// to a holder gets them back with Return.
// Invalid arguments are refused as Return refuses them; a key without
// state is a no-op.
func (m *MemoryStore) Refund(ctx context.Context, key string, p Policy, hits int64) error {
	return m.giveBack(ctx, key, p, true, CheckReturn(p, hits, ""), func(st leasedState, now time.Time) {
		st.Refund(p, now, hits)
	})
}

// giveBack runs a Return or a Refund (refund) of key, whose arguments
// check judged, as give on its state. A key without state is left so; one of
// another algorithm than p's is left as it is by a refund (hits of another
// algorithm: the rule changed since) and dropped by a return, as a lease
// of p's would drop it.
func (m *MemoryStore) giveBack(ctx context.Context, key string, p Policy, refund bool, check error, give func(st leasedState, now time.Time)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	what := "return"
	if refund {
		what = "refund"
	}
	if check != nil {
		return fmt.Errorf("cannot %s tokens: %w", what, check)
	}
	now := m.now()
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := unixMicros(now)
	if slot, ok := sh.find(key, h); ok && refund && sh.recs[slot].alg != p.Algorithm {
		return nil
	}
	if slot, ok := sh.lookup(key, h, p.Algorithm, t); ok {
		st := sh.state(p.Algorithm, slot, ok)
		defer sh.done(st)
		m.reportBakes(key, st)
		give(st.(leasedState), now)
		// A return or refund names no new holder: saving cannot fail.
		if err := sh.save(key, h, slot, ok, p.Algorithm, st, p, t); err != nil {
			return fmt.Errorf("cannot %s tokens: %w", what, err)
		}
	}
	return nil
}

// reportBakes has st tell OnBake, if set, of the ended loans the call on
// key bakes (see MemoryStoreConfig.OnBake); sh.done clears it.
func (m *MemoryStore) reportBakes(key string, st algoState) {
	if m.onBake == nil {
		return
	}
	f := bakeFunc(func(end, lent int64) { m.onBake(key, time.UnixMicro(end), lent) })
	switch s := st.(type) {
	case *TokenBucketState:
		s.bake = f
	case *GCRAState:
		s.bake = f
	}
}

// Log implements Exact.
func (m *MemoryStore) Log(ctx context.Context, key string, p Policy, hits int64) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if err := CheckLog(p, hits); err != nil {
		return Result{}, fmt.Errorf("cannot check sliding log: %w", err)
	}
	now := m.now()
	t := unixMicros(now)
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	slot, ok := sh.lookup(key, h, p.Algorithm, t)
	st := sh.state(p.Algorithm, slot, ok)
	r := st.(logState).Check(p, now, hits)
	if ok || (r.Allowed && hits > 0) {
		_ = sh.save(key, h, slot, ok, p.Algorithm, st, p, t) // no loans: cannot fail
	}
	return r, nil
}

// Acquire implements Exact.
func (m *MemoryStore) Acquire(ctx context.Context, key string, p Policy, id string, hits int64) (Result, error) {
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	if err := CheckAcquire(p, id, hits); err != nil {
		return Result{}, fmt.Errorf("cannot acquire: %w", err)
	}
	now := m.now()
	t := unixMicros(now)
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	slot, ok := sh.lookup(key, h, p.Algorithm, t)
	st := sh.state(p.Algorithm, slot, ok)
	r := st.(slotState).Acquire(p, now, id, hits)
	if ok || (r.Allowed && hits > 0) {
		_ = sh.save(key, h, slot, ok, p.Algorithm, st, p, t) // no loans: cannot fail
	}
	return r, nil
}

// Release implements Exact.
func (m *MemoryStore) Release(ctx context.Context, key string, p Policy, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckRelease(p, id); err != nil {
		return fmt.Errorf("cannot release: %w", err)
	}
	now := m.now()
	t := unixMicros(now)
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := false
	if slot, ok := sh.lookup(key, h, p.Algorithm, t); ok {
		st := sh.state(p.Algorithm, slot, ok)
		held = st.(slotState).Release(now, id)
		_ = sh.save(key, h, slot, ok, p.Algorithm, st, p, t) // no loans: cannot fail
	}
	if !held {
		return ErrNoSlot
	}
	return nil
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
