// Package memstore is the in-memory Store of package lease (which names
// it lease.MemoryStore, and whose package doc is the contract it keeps:
// the semantics of each algorithm, "Lent tokens", the accuracy contract):
// every key's state in process memory, the pure math of package
// lease/algo applied under a shard lock. It is the Redis store's twin,
// held to the same conformance suite (lease/storetest) and model
// (lease/modeltest), and the Manager's local Store for FailLocal.
//
// A Store is safe for concurrent use.
package memstore

import (
	"context"
	"fmt"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice/lease/algo"
)

// Config configures a Store.
type Config struct {
	// Now is the Store's clock. Nil means time.Now. Tests pass a fake
	// clock; it is called once per Store call, outside any lock.
	Now func() time.Time
	// SweepInterval is how often the store's janitor removes expired
	// state. Zero means 10s; negative means no janitor (call Sweep).
	SweepInterval time.Duration
	// OnBake, when set, is called when a Lease or Return of a token_bucket
	// or gcra key applies the cap of an ended loan to the key's stored
	// level for good (the key had more than 3 ended loans still capping
	// it: see "Lent tokens" in package lease's doc): the loan ended at end,
	// and the tokens lent at its time (lent) count as spent then. It runs
	// under the key's lock, before the call returns, and must not call
	// the Store. For tests (lease/modeltest).
	OnBake func(key string, end time.Time, lent int64)
}

// DefaultConfig returns the defaults: the wall clock, and a
// sweep every 10s, which bounds abandoned state to about 10s of new keys
// while costing one pass over the map per 10s.
func DefaultConfig() Config {
	return Config{Now: time.Now, SweepInterval: 10 * time.Second}
}

// memShards is the number of independently locked maps. 64 keeps
// contention negligible on machines with up to a few dozen cores.
const memShards = 64

// Store is a lease.Store that holds every key's state in process memory,
// with the same semantics as the Redis store (the pure math of package
// algo, whose states it keeps). It is for single-node deployments, embedding and tests.
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
type Store struct {
	now    func() time.Time
	onBake func(key string, end time.Time, lent int64)
	seed   maphash.Seed
	shards [memShards]memShard

	stop      chan struct{} // closed by Close
	done      chan struct{} // closed when the janitor exits (nil: no janitor)
	closeOnce sync.Once
}

// New returns an empty Store. Call Close to stop its janitor.
func New(cfg Config) *Store {
	m := &Store{now: cfg.Now, onBake: cfg.OnBake, seed: maphash.MakeSeed(), stop: make(chan struct{})}
	if m.now == nil {
		m.now = time.Now
	}
	algs := algo.Algorithms()
	for i := range m.shards {
		sh := &m.shards[i]
		sh.seed = m.seed
		sh.spill = make(map[uint32]*memSpill)
		sh.holders = holderTable{ids: make(map[string]uint16), names: []string{""}, refs: []uint32{0}}
		sh.scratch = make([]algo.LeasedState, int(algs[len(algs)-1])+1)
		for _, a := range algs {
			if ps, ok := a.NewState().(algo.LeasedState); ok {
				sh.scratch[a] = ps
			}
		}
	}
	interval := cfg.SweepInterval
	if interval == 0 {
		interval = DefaultConfig().SweepInterval
	}
	if interval > 0 {
		m.done = make(chan struct{})
		go m.janitor(interval)
	}
	return m
}

func (m *Store) janitor(interval time.Duration) {
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
func (m *Store) Close() error {
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
func (m *Store) Sweep(now time.Time) int {
	t := now.UnixMicro()
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

// Len returns the number of keys with state, including expired state not
// yet swept.
func (m *Store) Len() int {
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
func (m *Store) shard(key string) (*memShard, uint64) {
	h := maphash.String(m.seed, key)
	return &m.shards[h%memShards], h
}

// Lease implements lease.Leaser.
func (m *Store) Lease(ctx context.Context, key string, p algo.Policy, want, need int64, to algo.Lessee) (algo.Grant, error) {
	if err := ctx.Err(); err != nil {
		return algo.Grant{}, err
	}
	if err := algo.CheckLease(p, want, need, to); err != nil {
		return algo.Grant{}, fmt.Errorf("cannot lease: %w", err)
	}
	now := m.now()
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	t := now.UnixMicro()
	slot, ok := sh.lookup(key, h, p.Algorithm, t)
	st := sh.state(p.Algorithm, slot, ok)
	defer sh.done(st)
	m.reportBakes(key, st)
	g := st.(algo.LeasedState).Lease(p, now, want, need, to) // algo.CheckLease admits only the leased algorithms
	// A grant, a renewed loan or shares ahead lent write a key's state;
	// on a key with state, so may a call that grants nothing (a loan it
	// settled, maybe to 0, shares ahead it ended, a window it rolled); a
	// call that changed nothing left the state as it was, and saving it
	// again changes nothing.
	if g.Granted > 0 || g.Lent > 0 || g.AheadWindows > 0 || ok {
		if err := sh.save(key, h, slot, ok, p.Algorithm, st, p, t); err != nil {
			return algo.Grant{}, fmt.Errorf("cannot lease: %w", err)
		}
	}
	return g, nil
}

// Return implements lease.Leaser.
func (m *Store) Return(ctx context.Context, key string, p algo.Policy, tokens int64, holder string) error {
	return m.giveBack(ctx, key, p, false, algo.CheckReturn(p, tokens, holder), func(st algo.LeasedState, now time.Time) {
		st.Return(p, now, tokens, holder)
	})
}

// Refund gives back hits that Lease calls without a Lessee ID granted
// (spent at once) for a request that was then denied, as a lease.Manager
// with Config.Direct refunds them: token_bucket's level rises by hits (at most
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
func (m *Store) Refund(ctx context.Context, key string, p algo.Policy, hits int64) error {
	return m.giveBack(ctx, key, p, true, algo.CheckReturn(p, hits, ""), func(st algo.LeasedState, now time.Time) {
		st.Refund(p, now, hits)
	})
}

// giveBack runs a Return or a Refund (refund) of key, whose arguments
// check judged, as give on its state. A key without state is left so; one of
// another algorithm than p's is left as it is by a refund (hits of another
// algorithm: the rule changed since) and dropped by a return, as a lease
// of p's would drop it.
func (m *Store) giveBack(ctx context.Context, key string, p algo.Policy, refund bool, check error, give func(st algo.LeasedState, now time.Time)) error {
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
	t := now.UnixMicro()
	if slot, ok := sh.find(key, h); ok && refund && sh.recs[slot].alg != p.Algorithm {
		return nil
	}
	if slot, ok := sh.lookup(key, h, p.Algorithm, t); ok {
		st := sh.state(p.Algorithm, slot, ok)
		defer sh.done(st)
		m.reportBakes(key, st)
		give(st.(algo.LeasedState), now)
		// A return or refund names no new holder: saving cannot fail.
		if err := sh.save(key, h, slot, ok, p.Algorithm, st, p, t); err != nil {
			return fmt.Errorf("cannot %s tokens: %w", what, err)
		}
	}
	return nil
}

// reportBakes has st tell OnBake, if set, of the ended loans the call on
// key bakes (see Config.OnBake); sh.done clears it.
func (m *Store) reportBakes(key string, st algo.State) {
	if m.onBake == nil {
		return
	}
	if b, ok := st.(interface{ OnBake(func(end, lent int64)) }); ok {
		b.OnBake(func(end, lent int64) { m.onBake(key, time.UnixMicro(end), lent) })
	}
}

// Log implements lease.Exact.
func (m *Store) Log(ctx context.Context, key string, p algo.Policy, hits int64) (algo.Result, error) {
	if err := ctx.Err(); err != nil {
		return algo.Result{}, err
	}
	if err := algo.CheckLog(p, hits); err != nil {
		return algo.Result{}, fmt.Errorf("cannot check sliding log: %w", err)
	}
	now := m.now()
	t := now.UnixMicro()
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	slot, ok := sh.lookup(key, h, p.Algorithm, t)
	st := sh.state(p.Algorithm, slot, ok)
	r := st.(algo.LogState).Check(p, now, hits)
	if ok || (r.Allowed && hits > 0) {
		_ = sh.save(key, h, slot, ok, p.Algorithm, st, p, t) // no loans: cannot fail
	}
	return r, nil
}

// Acquire implements lease.Exact.
func (m *Store) Acquire(ctx context.Context, key string, p algo.Policy, id string, hits int64) (algo.Result, error) {
	if err := ctx.Err(); err != nil {
		return algo.Result{}, err
	}
	if err := algo.CheckAcquire(p, id, hits); err != nil {
		return algo.Result{}, fmt.Errorf("cannot acquire: %w", err)
	}
	now := m.now()
	t := now.UnixMicro()
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	slot, ok := sh.lookup(key, h, p.Algorithm, t)
	st := sh.state(p.Algorithm, slot, ok)
	r := st.(algo.SlotState).Acquire(p, now, id, hits)
	if ok || (r.Allowed && hits > 0) {
		_ = sh.save(key, h, slot, ok, p.Algorithm, st, p, t) // no loans: cannot fail
	}
	return r, nil
}

// Release implements lease.Exact.
func (m *Store) Release(ctx context.Context, key string, p algo.Policy, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := algo.CheckRelease(p, id); err != nil {
		return fmt.Errorf("cannot release: %w", err)
	}
	now := m.now()
	t := now.UnixMicro()
	sh, h := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	held := false
	if slot, ok := sh.lookup(key, h, p.Algorithm, t); ok {
		st := sh.state(p.Algorithm, slot, ok)
		held = st.(algo.SlotState).Release(now, id)
		_ = sh.save(key, h, slot, ok, p.Algorithm, st, p, t) // no loans: cannot fail
	}
	if !held {
		return algo.ErrNoSlot
	}
	return nil
}
