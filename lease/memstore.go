package lease

import (
	"context"
	"fmt"
	"hash/maphash"
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
// It is safe for concurrent use: keys are spread over 64 shards, each a map
// behind its own mutex, and every call holds one shard lock. State that
// would have expired in Redis (a full bucket, windows two periods old, a
// log whose newest stamp left the window, a concurrency key with nothing
// held) is treated as absent and removed by Sweep, which a janitor
// goroutine owned by the store runs until Close.
//
// A key passed to any method need not outlive the call: the store copies a
// key when it first records state for it (that path allocates anyway), so
// calls on a key that has state allocate nothing for the key.
type MemoryStore struct {
	now    func() time.Time
	seed   maphash.Seed
	shards [memShards]memShard

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the janitor exits (nil: no janitor)
	closeOnce sync.Once
}

type memShard struct {
	mu      sync.Mutex
	m       map[string]*memEntry // guarded by mu
	holders map[string]string    // guarded by mu; see holder
	_       [40]byte             // keep shards on separate cache lines
}

// maxHolders bounds a shard's table of holder IDs (see holder): a node's
// Manager and the gateways that lease from it are a few IDs, but IDs of
// holders gone for good would otherwise pile up.
const maxHolders = 256

// holder returns id as a string the shard owns, one copy per ID shared by
// every key's loans (a key's state keeps its holders' IDs past the call,
// and the caller's id may be a reused buffer): a copy per key's loan was
// a sixth of a key's memory. A full table is cleared; IDs in use are then
// copied once again. sh.mu must be held.
func (sh *memShard) holder(id string) string {
	if h, ok := sh.holders[id]; ok {
		return h
	}
	if len(sh.holders) >= maxHolders {
		clear(sh.holders)
	}
	h := strings.Clone(id)
	sh.holders[h] = h
	return h
}

// memEntry is one key's state.
type memEntry struct {
	alg Algorithm
	// expires is the unix µs from which the state equals no state
	// (recomputed on every write, like a Redis PEXPIRE).
	expires int64
	// state is alg's state (its row's newState).
	state algoState
}

var _ Store = (*MemoryStore)(nil)

// NewMemoryStore returns an empty MemoryStore. Call Close to stop its
// janitor.
func NewMemoryStore(cfg MemoryStoreConfig) *MemoryStore {
	m := &MemoryStore{now: cfg.Now, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	if m.now == nil {
		m.now = time.Now
	}
	for i := range m.shards {
		m.shards[i].m = make(map[string]*memEntry)
		m.shards[i].holders = make(map[string]string)
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
// how many keys it removed.
func (m *MemoryStore) Sweep(now time.Time) int {
	t := unixMicros(now)
	removed := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		for k, e := range sh.m {
			if e.expires <= t {
				delete(sh.m, k)
				removed++
			}
		}
		sh.mu.Unlock()
	}
	return removed
}

// Len returns the number of keys with state, including expired state not
// yet swept.
func (m *MemoryStore) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

func (m *MemoryStore) shard(key string) *memShard {
	return &m.shards[maphash.String(m.seed, key)%memShards]
}

// lookup returns key's live state for algorithm alg, or nil. State of
// another algorithm (the key's policy changed) or expired state is removed:
// the key starts fresh. sh.mu must be held.
func (sh *memShard) lookup(key string, alg Algorithm, t int64) *memEntry {
	e := sh.m[key]
	if e != nil && (e.alg != alg || e.expires <= t) {
		delete(sh.m, key)
		return nil
	}
	return e
}

// save records st as key's state after a write, or removes the key when
// the state already equals no state. sh.mu must be held.
func (sh *memShard) save(key string, e *memEntry, alg Algorithm, st algoState, p Policy, t int64) {
	exp := st.expiry(p)
	if exp <= t {
		delete(sh.m, key)
		return
	}
	if e == nil {
		e = &memEntry{alg: alg, state: st}
		sh.m[strings.Clone(key)] = e // the caller's key may be a reused buffer
	}
	e.expires = exp
}

// state returns e's state, or alg's new state if e is nil.
func state(e *memEntry, alg Algorithm) algoState {
	if e != nil {
		return e.state
	}
	return algorithms[alg].code.newState()
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
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := unixMicros(now)
	e := sh.lookup(key, p.Algorithm, t)
	st := state(e, p.Algorithm)
	if to.ID != "" {
		to.ID = sh.holder(to.ID) // the state may keep it in a loan
	}
	g := st.(leasedState).Lease(p, now, want, need, to) // CheckLease admits only the leased algorithms
	// A grant, a renewed loan, or (token_bucket, gcra) a loan that a call
	// granting nothing settled, maybe to 0.
	if g.Granted > 0 || g.Lent > 0 || (e != nil && p.Algorithm.refills()) {
		sh.save(key, e, p.Algorithm, st, p, t)
	}
	return g, nil
}

// Return implements Leaser.
func (m *MemoryStore) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := CheckReturn(p, tokens, holder); err != nil {
		return fmt.Errorf("cannot return tokens: %w", err)
	}
	now := m.now()
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := unixMicros(now)
	if e := sh.lookup(key, p.Algorithm, t); e != nil {
		e.state.(leasedState).Return(p, now, tokens, holder)
		sh.save(key, e, p.Algorithm, e.state, p, t)
	}
	return nil
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
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.lookup(key, p.Algorithm, t)
	st := state(e, p.Algorithm)
	r := st.(logState).Check(p, now, hits)
	if e != nil || (r.Allowed && hits > 0) {
		sh.save(key, e, p.Algorithm, st, p, t)
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
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e := sh.lookup(key, p.Algorithm, t)
	st := state(e, p.Algorithm)
	r := st.(slotState).Acquire(p, now, id, hits)
	if e != nil || (r.Allowed && hits > 0) {
		sh.save(key, e, p.Algorithm, st, p, t)
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
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := false
	if e := sh.lookup(key, p.Algorithm, t); e != nil {
		held = e.state.(slotState).Release(now, id)
		sh.save(key, e, p.Algorithm, e.state, p, t)
	}
	if !held {
		return ErrNoSlot
	}
	return nil
}
