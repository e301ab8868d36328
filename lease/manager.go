package lease

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Manager answers checks for the counter keys this node serves.
//
// For the leased algorithms it keeps a local bucket per key: tokens taken
// from the Store by lease calls and spent with one compare-and-swap per
// check, with no I/O and no allocation. A check that finds too few tokens
// leases synchronously, asking for about Horizon of the key's measured
// rate but at least MinLeaseShare of the policy's capacity (at least the
// check's need, at most the capacity); a token_bucket or gcra key far
// from its limit tops its loan up to its rate over the loan's fast-path
// life, at most half the capacity (roomyLoan). Only
// one lease call per key is in flight, and other checks of the key wait
// for it. When a check leaves fewer than LowWater × the last grant (a key
// far from its limit: once it has spent a quarter of the capacity since
// its last call, see lowFor), the Manager leases again in the background. A check the local tokens
// cannot cover is judged on its own hits against the Store's last answer
// projected to now (the refill since, see bucket.coverAt): if that cannot
// cover it, it is denied locally, without a Store call, with RetryAfter
// the time it will; otherwise the Manager asks the Store. After the Store
// denied a key, or (token_bucket and gcra) a grant left it less than the
// smallest lease soon after the key was saturated, checks also wait for a
// batch (up to a horizon longer, so that the next lease finds up to
// MinLeaseShare of the capacity instead of one token). hits = 0 peeks and
// is never denied.
// Tokens are lent (see "Lent tokens" in the package doc): every lease call
// says how many this Manager still holds, a grant is dated from when its
// call was sent, token_bucket and gcra tokens are spent only within
// LeaseTTL of that (renewed in the background past half of it), and only
// one Store call per key is in flight, so what the Manager says it holds
// is exact.
// Leased tokens of fixed_window and sliding_window are spent only in the
// window they were granted in; those left at its end are dropped. A
// fixed_window lease call also asks for a share of each window up to
// AheadHorizon ahead (the smallest lease): a check that finds its window
// over rolls into the next on its share, with no Store call, where the
// share is surely inside its window on the Store's clock (see
// manager_ahead.go). Keys
// unchecked for Idle give their tokens back and are dropped, but for up
// to KeepIdle slow keys, which keep their small loans while they are
// spendable on the fast path; so do keys whose policy changed (the new
// policy starts fresh) and keys passed to ReturnKeys.
// Refund puts tokens back into the local bucket, never above what the
// Store lends this Manager (Grant.Lent of its last answer; a grant of
// nothing leaves it): a refund racing with a lease call may be clipped
// (under-admission of a few hits, never over-admission).
//
// The exact algorithms (sliding_log, concurrency) make one Store call per
// check.
//
// TakeMany decides a batch of checks with their Store calls overlapped.
//
// The Store is wrapped in a [Breaker] with Config.StoreTimeout per call,
// stretched up to Breaker.MaxTimeout (4 × StoreTimeout) for a Store that is
// steadily slower, so a failing Store adds at most that to a check (a
// check that waits for another's lease call shares that budget), or with
// Config.CheckBudget at most the budget: the check is then decided by its
// failure mode while its call goes on in the background. What
// FailLocal admits is charged to the Store when it is back. When a Store call
// fails, or the breaker is open, the policy's OnFailure decides: FailLocal
// runs the same math on a private in-memory Store (this node's memory)
// until the Store answers again, starting each key from the Store's level
// at its last lease (aged by refill), not from a full bucket; FailOpen allows, marking the Decision
// Degraded; FailClosed denies it as Unavailable with RetryAfter = the
// breaker's cool-down. Tokens already leased stay valid meanwhile.
//
// A counter key must identify one policy at a time (the rule name belongs
// in the key): two policies alternating on one key would replace each
// other's bucket on every check.
//
// Errors: Take, Acquire and Release return an error only for a bad call
// (hits out of range, an invalid policy, an algorithm the method does not
// serve: ErrWrongAlgorithm). A Store failure is never an error from Take
// or Acquire: it is a Decision made by the policy's failure mode.
//
// A Manager owns goroutines (a 1ms coarse clock unless Config.Now is set,
// the idle sweeper, prefetches and background returns); Close stops them
// and returns every lease. A Manager is safe for concurrent use.
type Manager struct {
	cfg   Config
	met   *leaseMetrics
	store *Breaker
	// fo is the failure modes' state: the local Store, FailLocal's
	// episodes and the charges owed to the Store.
	fo failover
	// direct is the Store itself with Config.Direct (nil without): its
	// calls skip the breaker, whose timeout and latency histogram would
	// cost a call into memory more than the call. refunder is its Refund,
	// nil without one.
	direct   Store
	refunder refunder
	clk      clock
	touchMs  uint32 // lastUse resolution
	ahead    aheadTerms
	idleMs   uint32

	buckets index
	// striped holds the stripes of the contended keys' tokens on hand.
	striped stripeTable

	policies policyTable
	// inflight holds the lease slot of every key with a Store call out.
	inflight slots
	// unanswered holds the buckets whose last lease call got no answer.
	unanswered unansweredCalls
	// bg tracks the Manager's background goroutines.
	bg background

	// ctx is the parent of every Store call. It is never cancelled: each
	// call is bounded by StoreTimeout, and Close waits for them.
	ctx       context.Context
	stopSweep chan struct{}
	sweepDone chan struct{}
	closeOnce sync.Once
	closeErr  error
	// leftUntil (Unix ns): until then a bucket's first lease does not
	// date the last spend of a loan the Manager may still have on its key
	// back to Idle (see leaseSync): a return that was to end a loan whose
	// spends may be recent (ReturnKeys, Close, a policy change) failed or
	// was left by ReturnTimeout, and the loan runs until LeaseTTL after
	// its last call.
	leftUntil atomic.Int64

	st stats
}

// stats are the Manager's counters, all updated off the fast path.
type stats struct {
	active         atomic.Int64
	localHits      atomic.Int64
	localDenials   atomic.Int64
	storeDecisions atomic.Int64
	degraded       atomic.Int64
	leases         atomic.Int64
	prefetches     atomic.Int64
	returns        atomic.Int64
	tokensLeased   atomic.Int64
	tokensReturned atomic.Int64
	aheadRolls     atomic.Int64
}

// Stats is a snapshot of a Manager's counters.
type Stats struct {
	// ActiveKeys is the number of local buckets; with Config.Direct,
	// which keeps none, the keys the Store holds state for, when it can
	// count them (MemoryStore.Len), as the sluice_lease_active_keys gauge
	// does after each sweep.
	ActiveKeys int64
	// LocalHits is the hits spent from leased tokens (including those of
	// the check that made each lease). It is counted when the bucket next
	// leases or returns its tokens (the fast path keeps no counter), so it
	// lags by at most one lease per key.
	LocalHits int64
	// LocalDenials is the checks denied locally during a deny-until.
	LocalDenials int64
	// StoreDecisions is the checks that waited for a Store call (sync
	// lease, peek, sliding_log, concurrency).
	StoreDecisions int64
	// DegradedDecisions is the checks decided by a failure mode.
	DegradedDecisions int64
	// Leases and Prefetches count lease calls made synchronously and in
	// the background; Returns counts return calls. StoreDecisions +
	// Prefetches + Returns is every Store call the Manager made but
	// Release.
	Leases, Prefetches, Returns int64
	// TokensLeased and TokensReturned are the tokens granted by and given
	// back to the Store.
	TokensLeased, TokensReturned int64
	// AheadRolls is the windows a fixed_window key moved into on a share
	// leased ahead, with no Store call (see Config.AheadHorizon).
	AheadRolls int64
	// Breaker is the state of the Store's breaker.
	Breaker BreakerState
	// Direct is Config.Direct: every check is a Store call of its own
	// (StoreDecisions), nothing is leased.
	Direct bool
}

// NewManager returns a Manager that leases from store.
func NewManager(store Store, cfg Config) *Manager {
	cfg = cfg.withDefaults()
	m := &Manager{cfg: cfg, met: newLeaseMetrics(cfg.Metrics)}
	m.clk = clock{now: cfg.Now, after: cfg.AfterFunc}
	if cfg.Now == nil {
		m.clk.coarse = startCoarseClock(coarseTick)
		m.clk.now = time.Now
	}
	bc := cfg.Breaker
	bc.Now = m.clk.now
	if bc.Metrics == nil {
		bc.Metrics = cfg.Metrics
	}
	if bc.Logger == nil {
		bc.Logger = cfg.Logger
	}
	if bc.OnClose == nil {
		// The Store is back: charge what local mode admitted.
		bc.OnClose = func() { m.bg.spawn(m.fo.reconcileAll) }
	}
	if bc.AfterFunc == nil && cfg.Now != nil {
		// A clock of the caller's (a test's): no real timer for the
		// background probe, whose cool-down runs on that clock; calls
		// probe. Tests that want it pass Breaker.AfterFunc.
		bc.AfterFunc = func(time.Duration, func()) func() bool { return func() bool { return true } }
	}
	m.store = NewBreaker(store, bc)
	if cfg.Direct {
		m.direct = store
		m.refunder, _ = store.(refunder)
	}
	m.fo = failover{local: cfg.Local, store: m.store, cfg: &m.cfg, met: m.met, clk: &m.clk,
		slots: &m.inflight, striped: &m.striped, bg: &m.bg}
	if m.fo.local == nil {
		m.fo.own = NewMemoryStore(MemoryStoreConfig{Now: m.clk.now})
		m.fo.local = m.fo.own
	}
	m.touchMs = uint32(max(cfg.Idle/100/time.Millisecond, 1))
	m.idleMs = uint32(cfg.Idle / time.Millisecond)
	m.ahead = aheadTerms{horizon: cfg.AheadHorizon, leaseHorizon: cfg.Horizon, minShare: cfg.MinLeaseShare}
	m.buckets.init()
	m.striped.init(&m.clk, &m.inflight)
	m.inflight.init()
	m.ctx = context.Background()
	m.fo.ctx = m.ctx
	m.stopSweep = make(chan struct{})
	m.sweepDone = make(chan struct{})
	if cfg.SweepInterval > 0 {
		go m.sweeper(cfg.SweepInterval)
	} else {
		close(m.sweepDone)
	}
	return m
}

// Stats returns a snapshot of the Manager's counters.
func (m *Manager) Stats() Stats {
	active := m.st.active.Load()
	if c, ok := m.direct.(interface{ Len() int }); ok {
		active = int64(c.Len())
	}
	return Stats{
		ActiveKeys:        active,
		LocalHits:         m.st.localHits.Load(),
		LocalDenials:      m.st.localDenials.Load(),
		StoreDecisions:    m.st.storeDecisions.Load(),
		DegradedDecisions: m.st.degraded.Load(),
		Leases:            m.st.leases.Load(),
		Prefetches:        m.st.prefetches.Load(),
		Returns:           m.st.returns.Load(),
		TokensLeased:      m.st.tokensLeased.Load(),
		TokensReturned:    m.st.tokensReturned.Load(),
		AheadRolls:        m.st.aheadRolls.Load(),
		Breaker:           m.store.State(),
		Direct:            m.cfg.Direct,
	}
}

// Store returns the Store the Manager leases from, behind its breaker:
// other holders of the same Store (a node serving gateways' leases) call
// it with their own holder ids and the same timeouts.
func (m *Manager) Store() *Breaker { return m.store }

// Lender is the Store that other holders' calls go to through this
// Manager's node (the lease protocol's, which a node applies for
// gateways with their own holder ids): the Store behind its breaker, with
// the same timeouts, or with Config.Direct the memory store itself, a
// call into memory that cannot time out.
func (m *Manager) Lender() Store {
	if m.direct != nil {
		return m.direct
	}
	return m.store
}

// StoreHealthy reports whether the Store's breaker is closed.
func (m *Manager) StoreHealthy() bool { return m.store.State() == BreakerClosed }

// Holding is what a Manager holds of a group of keys (Manager.Holdings).
type Holding struct {
	// Keys is how many of the group's keys it holds; Lent what the Store
	// lends it of them as of each key's last answer (its tokens on hand
	// at most); Store the Store's remaining of them as of the same
	// answers.
	Keys, Lent, Store int64
}

// Holdings sums what the Manager holds by group(key) (a rule's name, say;
// "" leaves the key out). It walks every key held: for a stats page, not
// a hot path. A Manager that decides in the Store (Config.Direct) holds
// nothing.
func (m *Manager) Holdings(group func(key string) string) map[string]Holding {
	out := map[string]Holding{}
	m.buckets.rangeAll(func(b *bucket) {
		if b.denyUntil.Load() == evicted {
			return
		}
		g := group(b.key())
		if g == "" {
			return
		}
		h := out[g]
		h.Keys++
		h.Lent += b.basis.Load()
		h.Store += b.remaining.Load()
		out[g] = h
	})
	return out
}
