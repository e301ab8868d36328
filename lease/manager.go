package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures a [Manager]. Every field's zero value means its default
// (see [DefaultConfig]).
type Config struct {
	// Horizon is how much of a key's traffic one lease covers: a key
	// checked r times per second leases about r × Horizon tokens at a time.
	// Zero means 100ms.
	Horizon time.Duration
	// MinLeaseShare is the smallest lease as a fraction of the policy's
	// capacity: a lease asks for max(rate × Horizon, MinLeaseShare ×
	// capacity) tokens (at least the check's need, at most capacity). It
	// keeps cold keys, whose rate × Horizon is below one token, from
	// making a Store call per check. Zero means 1/8; negative means no
	// floor (leases sized by rate alone); above 1 means 1.
	MinLeaseShare float64
	// Idle is how long a key goes unchecked before its tokens go back to
	// the Store and its bucket is dropped. Zero means 10s; at most 24h.
	Idle time.Duration
	// LowWater is the prefetch mark as a fraction of the last grant: when
	// a check leaves fewer local tokens, the Manager leases again in the
	// background. Zero means 0.25; it must be in (0, 1).
	LowWater float64
	// StoreTimeout bounds every Store call, and so what a failing Store can
	// add to a check. Zero means 50ms. It overrides Breaker.Timeout.
	StoreTimeout time.Duration
	// Breaker configures the breaker around the Store. Zero fields mean
	// their defaults (5 consecutive failures open it; a probe after 1s).
	Breaker BreakerConfig
	// SweepInterval is how often the idle sweeper runs. Zero means Idle/4.
	// Negative disables the sweeper goroutine (tests call sweep directly).
	SweepInterval time.Duration
	// ReturnWorkers is how many Store calls at most run at once when many
	// leases are returned together (idle sweep, ReturnKeys, Close). Zero
	// means 8.
	ReturnWorkers int
	// BatchWorkers is how many checks of one TakeMany at most wait for the
	// Store at once. Zero means 64.
	BatchWorkers int
	// Local is the Store that FailLocal rules decide from while the Store
	// is unavailable: this node's memory. Nil means a private MemoryStore.
	Local Store
	// Now is the clock. Nil means time.Now, read through a coarse clock
	// (1ms resolution) on the fast path. Tests inject a fake clock; the
	// fast path then calls it on every check.
	Now func() time.Time
	// Logger receives the Manager's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the defaults. Horizon 100ms: big enough that a hot
// key touches the Store about ten times a second, small enough that a
// lease never strands much quota. Idle 10s: tokens of a key that stopped
// go back soon, and a key checked every few seconds is not churned.
// LowWater 0.25: a prefetch started with a quarter of the lease left has a
// quarter of a horizon (25ms by default) to come back, dozens of Redis
// round trips. StoreTimeout 50ms: the most a failing Store may add to a
// check.
//
// MinLeaseShare 1/8: a key checked less than 1/Horizon times a second
// would otherwise lease one token per check (measured: 33% Store calls
// per decision for Zipf keys). With owner routing a key has one holder, so
// a bigger lease costs little: unspent tokens go back after Idle, and die
// at the window's end for fixed_window and sliding_window. What it does
// cost: a key holds up to 1/8 of its capacity that the Store counts as
// spent (under-admission while a split's other holders are denied, until
// idle return), and a quiet token_bucket or gcra key whose Store bucket
// has refilled can burst capacity + 1/8 until its idle return (hot keys,
// leasing up to a whole capacity, already could). Measured by
// TestLeaseFloorStoreCalls (Zipf(1.1) over 20k keys at 20k checks/s,
// token_bucket per minute, seconds 10-15, no idle return): Store calls
// per decision with limit 100: 28% without a floor, 12% at 1/32, 8.6% at
// 1/16, 6.8% at 1/8, 5.9% at 1/4; limit 10000: 34% without, 2.5-2.7%
// from 1/32 to 1/4. Of what is left, 2.1% is first leases of keys not
// seen in the first 10s (the same run with no limit at all); with limit
// 100 the rest is keys over their limit, one call per admitted hit when a
// token takes longer than a horizon to refill. 1/8 takes most of the
// gain at half the stranded share of 1/4; two Managers sharing a key
// still admit 100% of the limit (lua TestTwoManagers*). BatchWorkers 64:
// enough round trips in flight to hide a Store's latency behind a batch of
// cold keys, few enough not to flood it.
func DefaultConfig() Config {
	return Config{
		Horizon:       100 * time.Millisecond,
		MinLeaseShare: DefaultMinLeaseShare,
		Idle:          10 * time.Second,
		LowWater:      0.25,
		StoreTimeout:  50 * time.Millisecond,
		Breaker:       DefaultBreakerConfig(),
		ReturnWorkers: 8,
		BatchWorkers:  64,
		Now:           nil,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Horizon <= 0 {
		c.Horizon = d.Horizon
	}
	switch {
	case c.MinLeaseShare == 0 || c.MinLeaseShare != c.MinLeaseShare: // NaN: the default
		c.MinLeaseShare = d.MinLeaseShare
	case c.MinLeaseShare < 0:
		c.MinLeaseShare = 0
	case c.MinLeaseShare > 1:
		c.MinLeaseShare = 1
	}
	if c.Idle <= 0 {
		c.Idle = d.Idle
	}
	c.Idle = min(c.Idle, maxIdle)
	if !(c.LowWater > 0 && c.LowWater < 1) {
		c.LowWater = d.LowWater
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = d.StoreTimeout
	}
	if c.SweepInterval == 0 {
		c.SweepInterval = c.Idle / 4
	}
	if c.ReturnWorkers <= 0 {
		c.ReturnWorkers = d.ReturnWorkers
	}
	if c.BatchWorkers <= 0 {
		c.BatchWorkers = d.BatchWorkers
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Breaker.Timeout = c.StoreTimeout
	return c
}

// DefaultMinLeaseShare is Config.MinLeaseShare's default: a cold key
// leases an eighth of its capacity at a time (see DefaultConfig for why).
const DefaultMinLeaseShare = 1.0 / 8

// maxIdle bounds Config.Idle: use times are kept in 32-bit milliseconds.
const maxIdle = 24 * time.Hour

// Manager answers checks for the counter keys this node serves.
//
// For the leased algorithms it keeps a local bucket per key: tokens taken
// from the Store by lease calls and spent with one compare-and-swap per
// check, with no I/O and no allocation. A check that finds too few tokens
// leases synchronously, asking for about Horizon of the key's measured
// rate but at least MinLeaseShare of the policy's capacity (at least the
// check's need, at most the capacity); only
// one lease call per key is in flight, and other checks of the key wait
// for it. When a check leaves fewer than LowWater × the last grant, the
// Manager leases again in the background. When the Store grants nothing,
// the key is denied locally, without Store calls, until the time the
// Store said a batch will be available (RetryAfter; for token_bucket and
// gcra, up to a horizon later, so that the next lease finds up to
// MinLeaseShare of the capacity instead of one token); a check bigger than
// the one the Store denied asks the Store, which knows its longer wait.
// Leased tokens of fixed_window and sliding_window are spent only in the
// window they were granted in; those left at its end are dropped. Keys
// unchecked for Idle give their tokens back and are dropped; so do keys
// whose policy changed (the new policy starts fresh) and keys passed to
// ReturnKeys.
// Refund puts tokens back into the local bucket, never above what the
// last lease left on hand (a refund racing with a background lease may be
// refused: under-admission of a few hits, never over-admission).
//
// The exact algorithms (sliding_log, concurrency) make one Store call per
// check.
//
// TakeMany decides a batch of checks with their Store calls overlapped.
//
// The Store is wrapped in a [Breaker] with Config.StoreTimeout per call,
// so a failing Store adds at most StoreTimeout to a check (a check that
// waits for another's lease call shares that budget). When a Store call
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
	cfg     Config
	store   *Breaker
	local   Store
	own     *MemoryStore // the default Local, closed by Close
	clock   *coarseClock // nil when cfg.Now was given
	nowFn   func() time.Time
	touchMs uint32 // lastUse resolution
	idleMs  uint32

	buckets index

	// policies interns the policies of buckets, so a bucket holds a
	// pointer instead of a copy.
	policies struct {
		sync.Mutex
		m map[Policy]*Policy
	}
	// inflight holds the lease slot of every bucket that has a Store call
	// in flight (sync lease, prefetch or return).
	inflight struct {
		sync.Mutex
		m map[*bucket]*slot
	}
	// degraded holds the buckets in a FailLocal episode: their Store calls
	// failed and their local state was seeded from the Store's last
	// answer. A successful lease or the bucket's eviction ends the
	// episode. The mutex orders starts and ends (m is read without it:
	// every degraded check looks); n counts m's entries, so the lease
	// path skips the lock when there are none.
	degraded struct {
		sync.Mutex
		m sync.Map // *bucket → struct{}
		n atomic.Int64
	}
	// bg tracks the Manager's background goroutines.
	bg struct {
		sync.Mutex
		closed bool
		wg     sync.WaitGroup
	}

	// ctx is the parent of every Store call. It is never cancelled: each
	// call is bounded by StoreTimeout, and Close waits for them.
	ctx       context.Context
	stopSweep chan struct{}
	sweepDone chan struct{}
	closeOnce sync.Once
	closeErr  error

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
}

// Stats is a snapshot of a Manager's counters.
type Stats struct {
	// ActiveKeys is the number of local buckets.
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
	// Breaker is the state of the Store's breaker.
	Breaker BreakerState
}

// slot is a bucket's lease slot: one Store call per bucket at a time.
// err is the outcome of the call, written before done is closed.
type slot struct {
	done chan struct{}
	err  error
}

// NewManager returns a Manager that leases from store.
func NewManager(store Store, cfg Config) *Manager {
	cfg = cfg.withDefaults()
	m := &Manager{cfg: cfg}
	if cfg.Now == nil {
		m.clock = startCoarseClock(coarseTick)
		m.nowFn = time.Now
	} else {
		m.nowFn = cfg.Now
	}
	bc := cfg.Breaker
	bc.Now = m.nowFn
	m.store = NewBreaker(store, bc)
	m.local = cfg.Local
	if m.local == nil {
		m.own = NewMemoryStore(MemoryStoreConfig{Now: m.nowFn})
		m.local = m.own
	}
	m.touchMs = uint32(max(cfg.Idle/100/time.Millisecond, 1))
	m.idleMs = uint32(cfg.Idle / time.Millisecond)
	m.buckets.init()
	m.policies.m = make(map[Policy]*Policy)
	m.inflight.m = make(map[*bucket]*slot)
	m.ctx = context.Background()
	m.stopSweep = make(chan struct{})
	m.sweepDone = make(chan struct{})
	if cfg.SweepInterval > 0 {
		go m.sweeper(cfg.SweepInterval)
	} else {
		close(m.sweepDone)
	}
	return m
}

// nanos is the fast path's clock.
func (m *Manager) nanos() int64 {
	if m.clock != nil {
		if ns := m.clock.Nanos(); ns != 0 {
			return ns
		}
	}
	return m.nowFn().UnixNano()
}

func errHits(hits int64) error {
	return &FieldError{Field: "hits", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), hits)}
}

// Take checks hits against key's limit p and spends them if allowed. It
// serves every algorithm but concurrency (ErrWrongAlgorithm: use Acquire).
// hits = 0 peeks. The error is non-nil only for a bad call: hits outside
// [0, MaxHits], an invalid policy, or the concurrency algorithm.
//
// key need not outlive the call: the Manager copies it when it keeps it (a
// new bucket) and hands Stores only its own copies, so a caller may pass a
// view of a reused buffer. A check of a key that has a bucket does not
// allocate.
func (m *Manager) Take(key string, p Policy, hits int64) (Decision, error) {
	if hits < 0 || hits > MaxHits {
		return Decision{}, errHits(hits)
	}
	if !p.Algorithm.Leased() {
		return m.takeExact(key, p, hits)
	}
	now := m.nanos()
	b := m.buckets.load(key)
	// The fast path, as takeFast (written out here: the call costs the
	// single-check benchmark about a third).
	if b != nil && *b.pol == p && hits > 0 && b.spendable(now) {
		if left, ok := b.tryTake(hits); ok {
			m.touch(b, now)
			if low := b.low.Load(); left < int64(low) && b.low.CompareAndSwap(low, -1) {
				m.prefetch(b)
			}
			return b.decision(left, now), nil
		}
	}
	return m.takeSlow(b, key, p, hits, now)
}

// takeFast is the fast path of a leased check, for TakeMany (Take has its
// own copy): b (may be nil) has enough spendable tokens for hits > 0 under
// policy p. No I/O, no allocation.
func (m *Manager) takeFast(b *bucket, p Policy, hits, now int64) (Decision, bool) {
	if b != nil && *b.pol == p && hits > 0 && b.spendable(now) {
		if left, ok := b.tryTake(hits); ok {
			m.touch(b, now)
			if low := b.low.Load(); left < int64(low) && b.low.CompareAndSwap(low, -1) {
				m.prefetch(b)
			}
			return b.decision(left, now), true
		}
	}
	return Decision{}, false
}

// Check is one item of [Manager.TakeMany]: the arguments of a Take (Key,
// Policy, Hits) and, once TakeMany returns, its results (Decision, Err).
type Check struct {
	Key    string
	Policy Policy
	Hits   int64

	Decision Decision
	Err      error
}

// errPending marks the checks of a TakeMany still to be decided.
var errPending = errors.New("lease: check not decided yet")

// TakeMany decides every check of cs as Take(c.Key, c.Policy, c.Hits)
// would, writing each one's Decision and Err in place. It is for batches
// (POST /v1/checks): their Store calls overlap instead of running one after
// another.
//
// First every check that local tokens can answer is decided, in order, with
// no I/O; when that is all of them TakeMany does not allocate. The rest
// (new keys, keys out of tokens, peeks, sliding_log, and bad calls, which
// get their error as from Take) are then decided concurrently by at most
// Config.BatchWorkers goroutines that TakeMany starts and waits for, the
// calling goroutine being one of them: with a pipelining Store (rueidis)
// a batch of cold keys costs about one Store round trip per BatchWorkers
// keys, not one per key. Each check keeps Take's guarantees: one lease
// call in flight per key (checks of a key that has one wait for it),
// StoreTimeout per Store call, failure modes instead of errors. A failing
// Store costs the batch about StoreTimeout (the first calls fail together
// and open the breaker; the others are then rejected at once), at most
// StoreTimeout for each BatchWorkers checks that miss.
//
// Order: checks of different keys are independent. Several checks of the
// same key are not decided in the order of cs when some need the Store:
// together they never admit more than the key's limit, but which of them
// are allowed is not set. A caller that needs the order (a request that
// matches the same key twice) should sum the hits into one check.
//
// The keys need not outlive the call, as for Take; cs must not be used by
// other goroutines during it. TakeMany is safe for concurrent use.
func (m *Manager) TakeMany(cs []Check) {
	now := m.nanos()
	misses := 0
	for i := range cs {
		c := &cs[i]
		if c.Policy.Algorithm.Leased() && c.Hits > 0 && c.Hits <= MaxHits {
			if d, ok := m.takeFast(m.buckets.load(c.Key), c.Policy, c.Hits, now); ok {
				c.Decision, c.Err = d, nil
				continue
			}
		}
		c.Decision, c.Err = Decision{}, errPending
		misses++
	}
	if misses == 0 {
		return
	}
	if misses == 1 {
		for i := range cs {
			if c := &cs[i]; c.Err == errPending {
				c.Decision, c.Err = m.Take(c.Key, c.Policy, c.Hits)
				return
			}
		}
	}
	var next atomic.Int64
	work := func() {
		for {
			i := next.Add(1) - 1
			if i >= int64(len(cs)) {
				return
			}
			if c := &cs[i]; c.Err == errPending {
				c.Decision, c.Err = m.Take(c.Key, c.Policy, c.Hits)
			}
		}
	}
	var wg sync.WaitGroup
	for range min(misses, m.cfg.BatchWorkers) - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
}

// decision is an allowed Decision with left tokens on hand.
func (b *bucket) decision(left, now int64) Decision {
	return Decision{
		Allowed:   true,
		Limit:     b.pol.Limit,
		Remaining: min(left+b.remaining.Load(), b.pol.Capacity()),
		Reset:     b.reset(left, now),
	}
}

// reset is the Decision's Reset with local tokens on hand: the time until
// the key's limit would be fully available again if those tokens were
// still in the Store. The Store's Reset (at the last lease) counts them as
// spent; for token_bucket and gcra each is worth Period/Limit of refill,
// so they are taken off it (never below 0), and Reset agrees with
// Remaining (local + the Store's remaining). A window's Reset is the end
// of a window, whoever holds the tokens: unchanged.
func (b *bucket) reset(local, now int64) time.Duration {
	r := b.resetAt.Load() - now
	if r <= 0 {
		return 0
	}
	if local > 0 && (b.pol.Algorithm == TokenBucket || b.pol.Algorithm == GCRA) {
		// In float64: local × Period can overflow int64.
		held := float64(local) * float64(b.pol.Period) / float64(b.pol.Limit)
		if held >= float64(r) {
			return 0
		}
		r -= int64(held)
	}
	return time.Duration(r)
}

// takeSlow handles every leased check the fast path could not: a new key,
// a policy change, a peek, a deny-until, too few tokens.
func (m *Manager) takeSlow(b *bucket, key string, p Policy, hits, now int64) (Decision, error) {
	if b == nil || *b.pol != p {
		if err := p.Validate(); err != nil {
			return Decision{}, err
		}
		if hits == 0 && b == nil {
			return m.peekStore(strings.Clone(key), p), nil
		}
		b = m.bucketFor(key, p, now)
	}
	if hits == 0 {
		return m.peekLocal(b, key, p, now), nil
	}
	if hits > p.Capacity() {
		// Can never be met: deny without asking, and without a
		// deny-until that would also refuse smaller checks.
		return Decision{Limit: p.Limit, Remaining: b.tokens.Load() + b.remaining.Load(), RetryAfter: p.Period,
			Reset: b.reset(b.tokens.Load(), now)}, nil
	}
	m.touch(b, now)
	// The check's budget for Store calls and waits, in real time (the
	// Manager's clock may be a test's fake); set when first needed.
	var deadline time.Time
	waited := false
	for {
		if b.spendable(now) {
			if left, ok := b.tryTake(hits); ok {
				return b.decision(left, now), nil
			}
		}
		du := b.denyUntil.Load()
		if du == evicted {
			b = m.bucketFor(key, p, now)
			continue
		}
		if now < du && hits <= b.denyHits.Load() {
			m.st.localDenials.Add(1)
			decisionsDenyLoc.Inc()
			local := b.tokens.Load()
			return Decision{Limit: p.Limit, Remaining: local + b.remaining.Load(),
				RetryAfter: time.Duration(du - now), Reset: b.reset(local, now)}, nil
		}
		if m.store.Rejecting() {
			storeCalls[opLease][resultRejected].Inc()
			return m.failure(b, key, p, hits, errBreakerOpen), nil
		}
		if deadline.IsZero() {
			deadline = time.Now().Add(m.cfg.StoreTimeout)
		}
		s, owner := m.claim(b)
		if !owner {
			// Another check (or a prefetch) is leasing for this key: wait
			// for it rather than stampede, within this check's budget.
			if !m.waitSlot(s, deadline) {
				return m.failure(b, key, p, hits, errStoreSlow), nil
			}
			if s.err != nil {
				return m.failure(b, key, p, hits, s.err), nil
			}
			waited = true
			now = max(now, m.nanos())
			continue
		}
		if b.denyUntil.Load() == evicted {
			m.release(b, s, nil)
			continue
		}
		ctx := m.ctx
		if waited {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(m.ctx, deadline)
			defer cancel()
		}
		return m.leaseSync(ctx, b, s, p, hits, now), nil
	}
}

var errStoreSlow = fmt.Errorf("%w: a lease in flight for the key did not finish in time", ErrStoreUnavailable)

// waitSlot waits for s until deadline; false if time ran out.
func (m *Manager) waitSlot(s *slot, deadline time.Time) bool {
	select {
	case <-s.done:
		return true
	default:
	}
	d := time.Until(deadline)
	if d <= 0 {
		return false
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.done:
		return true
	case <-t.C:
		return false
	}
}

// leaseSync leases for a check of hits while holding b's slot s, and
// releases it.
func (m *Manager) leaseSync(ctx context.Context, b *bucket, s *slot, p Policy, hits, now int64) Decision {
	local := b.tokens.Swap(0)
	// Tokens of a window that ended are dropped: the Store counted them
	// in that window (consumption is still measured from all of them).
	keep := local
	if !b.spendable(now) {
		keep = 0
	}
	if keep >= hits {
		b.tokens.Add(keep - hits)
		m.release(b, s, nil)
		return b.decision(keep-hits, now)
	}
	need := hits - keep
	want := m.sizeLease(b, b.basis.Load()-local, now, need)

	m.st.storeDecisions.Add(1)
	m.st.leases.Add(1)
	decisionsStore.Inc()
	g, err := m.store.Lease(ctx, b.key, p, want, need)
	if err != nil {
		b.tokens.Add(keep)
		m.release(b, s, err)
		return m.failure(b, b.key, p, hits, err)
	}
	m.endDegraded(b)
	// The Store's durations count from its answer, not from now.
	after := max(now, m.nanos())
	b.remaining.Store(g.Remaining)
	b.resetAt.Store(addTime(after, g.Reset))
	if g.Granted >= need && g.Granted > 0 {
		m.countLocal(b.basis.Load() - local)
		m.st.tokensLeased.Add(g.Granted)
		tokensLeased.AddInt64(g.Granted)
		b.lastLeaseMs = unixMs32(now)
		exp := leaseExpiry(p, now, g)
		if keep > 0 {
			// Kept tokens may belong to the window before the grant's.
			exp = min(exp, b.expires.Load())
		}
		b.expires.Store(exp)
		left := b.tokens.Add(g.Granted + keep - hits)
		// basis bounds Refund, so it counts the hits just spent; they
		// are measured as consumed at the next lease.
		b.basis.Store(left + hits)
		b.low.Store(lowMark(m.cfg.LowWater, g.Granted))
		m.release(b, s, nil)
		return b.decision(left, now)
	}
	// Denied: basis stays (it bounds refunds of hits spent before), and
	// the consumption since the last grant is measured at the next one.
	b.tokens.Add(keep)
	wait := max(g.Wait, time.Millisecond) + batchWait(p, m.cfg.MinLeaseShare, need, m.cfg.Horizon)
	b.denyHits.Store(hits)
	b.denyTill(addTime(after, wait))
	m.release(b, s, nil)
	return Decision{Limit: p.Limit, Remaining: keep + g.Remaining, RetryAfter: wait, Reset: b.reset(keep, after)}
}

// touch records a check at now, to touchMs resolution (most checks only
// read lastUse).
func (m *Manager) touch(b *bucket, now int64) {
	if ms := unixMs32(now); ms-b.lastUse.Load() >= m.touchMs {
		b.lastUse.Store(ms)
	}
}

// sizeLease updates b's rate with consumed hits since the last grant and
// returns the tokens to ask for, at least need. The caller holds b's slot.
func (m *Manager) sizeLease(b *bucket, consumed, now, need int64) int64 {
	first := b.lastLeaseMs == 0
	elapsed := time.Duration(unixMs32(now)-b.lastLeaseMs) * time.Millisecond
	ewma, sizing := observeRate(float64(b.rate), consumed, elapsed, m.cfg.Horizon, first)
	b.rate = float32(ewma)
	return leaseWant(sizing, m.cfg.Horizon, m.cfg.MinLeaseShare, need, b.pol.Capacity())
}

// countLocal records hits admitted from leased tokens since the last lease.
func (m *Manager) countLocal(n int64) {
	if n > 0 {
		m.st.localHits.Add(n)
		localHits.AddInt64(n)
	}
}

// failure decides a check of hits by p's failure mode after the Store
// failed with err. b may be nil; then key must be the Manager's own copy
// (it goes to the Stores and the log).
func (m *Manager) failure(b *bucket, key string, p Policy, hits int64, err error) Decision {
	if b != nil {
		key = b.key
	}
	m.st.degraded.Add(1)
	decisionsDegraded.Inc()
	m.cfg.Logger.Debug("store unavailable", "key", key, "mode", p.OnFailure.String(), "err", err)
	var remaining int64
	if b != nil {
		remaining = b.tokens.Load() + b.remaining.Load()
	}
	switch p.OnFailure {
	case FailOpen:
		return Decision{Allowed: true, Limit: p.Limit, Remaining: remaining, Degraded: true}
	case FailClosed:
		return Decision{Limit: p.Limit, Remaining: remaining, RetryAfter: m.store.Config().Cooldown, Unavailable: true}
	}
	// FailLocal: the same math in this node's memory.
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StoreTimeout)
	defer cancel()
	if !p.Algorithm.Leased() {
		r, lerr := m.local.Log(ctx, key, p, hits)
		if lerr != nil {
			return Decision{Limit: p.Limit, RetryAfter: m.store.Config().Cooldown, Unavailable: true}
		}
		return Decision{Allowed: r.Allowed, Limit: p.Limit, Remaining: r.Remaining, Reset: r.Reset, RetryAfter: r.RetryAfter, Degraded: true}
	}
	if b != nil {
		m.seedLocal(ctx, b, p)
	}
	g, lerr := m.local.Lease(ctx, key, p, hits, hits)
	if lerr != nil {
		return Decision{Limit: p.Limit, RetryAfter: m.store.Config().Cooldown, Unavailable: true}
	}
	if hits == 0 || (g.Granted >= hits && g.Granted > 0) {
		return Decision{Allowed: true, Limit: p.Limit, Remaining: g.Remaining, Reset: g.Reset, Degraded: true}
	}
	return Decision{Limit: p.Limit, Remaining: g.Remaining, Reset: g.Reset, RetryAfter: max(g.Wait, time.Millisecond), Degraded: true}
}

// seedLocal starts b's FailLocal episode, once per episode: the local
// Store, which may never have seen the key (a full bucket) or saw it in an
// earlier outage, is charged down to the Store's level as this node last
// knew it (or left lower, if an earlier episode left it lower), so local
// mode continues from there instead of admitting up to a whole extra
// capacity. Tokens still on hand in b are not counted: the
// fast path spends them first. A key this node never leased has nothing to
// go by and starts full. The lock is held across the local calls: they
// are this node's memory, and episodes start rarely.
func (m *Manager) seedLocal(ctx context.Context, b *bucket, p Policy) {
	if _, ok := m.degraded.m.Load(b); ok {
		return // the episode goes on
	}
	m.degraded.Lock()
	defer m.degraded.Unlock()
	if _, ok := m.degraded.m.Load(b); ok || b.denyUntil.Load() == evicted {
		return
	}
	m.degraded.m.Store(b, struct{}{})
	m.degraded.n.Add(1)
	level, known := b.storeLevel(m.nanos())
	if !known || level >= p.Capacity() {
		return
	}
	// The local level becomes min(local, Store's): a peek, then a charge
	// of the difference (need 0: it never fails for lack of tokens). A
	// failure leaves the local bucket as it was.
	g, err := m.local.Lease(ctx, b.key, p, 0, 0)
	if err == nil && g.Remaining > level {
		_, err = m.local.Lease(ctx, b.key, p, g.Remaining-level, 0)
	}
	if err != nil {
		m.cfg.Logger.Warn("cannot seed the local bucket", "key", b.key, "err", err)
	}
}

// endDegraded ends b's FailLocal episode, if any (a lease succeeded, or b
// left the index).
func (m *Manager) endDegraded(b *bucket) {
	if m.degraded.n.Load() == 0 {
		return
	}
	m.degraded.Lock()
	if _, ok := m.degraded.m.LoadAndDelete(b); ok {
		m.degraded.n.Add(-1)
	}
	m.degraded.Unlock()
}

// peekLocal answers hits = 0 for a known key from what the Manager knows,
// or from the Store if the key never leased.
func (m *Manager) peekLocal(b *bucket, key string, p Policy, now int64) Decision {
	if b.resetAt.Load() == 0 {
		return m.peekStore(b.key, p)
	}
	local := b.tokens.Load()
	d := Decision{Allowed: true, Limit: p.Limit, Remaining: min(local+b.remaining.Load(), p.Capacity()),
		Reset: b.reset(local, now)}
	if du := b.denyUntil.Load(); du != evicted && now < du && b.tokens.Load() == 0 {
		d.Allowed = false
		d.RetryAfter = time.Duration(du - now)
	}
	return d
}

// peekStore answers hits = 0 with a Store peek; it creates no bucket. key
// must be the Manager's own copy.
func (m *Manager) peekStore(key string, p Policy) Decision {
	m.st.storeDecisions.Add(1)
	decisionsStore.Inc()
	g, err := m.store.Lease(m.ctx, key, p, 0, 0)
	if err != nil {
		return m.failure(nil, key, p, 0, err)
	}
	return Decision{Allowed: true, Limit: p.Limit, Remaining: g.Remaining, Reset: g.Reset}
}

// takeExact serves sliding_log (and refuses concurrency).
func (m *Manager) takeExact(key string, p Policy, hits int64) (Decision, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, err
	}
	if p.Algorithm != SlidingLog {
		return Decision{}, fmt.Errorf("cannot take %s: %w (use Acquire)", p.Algorithm, ErrWrongAlgorithm)
	}
	m.st.storeDecisions.Add(1)
	decisionsStore.Inc()
	key = strings.Clone(key) // Stores may keep it (a call that timed out may still be queued)
	r, err := m.store.Log(m.ctx, key, p, hits)
	if err != nil {
		if callerError(err) {
			return Decision{}, err
		}
		return m.failure(nil, key, p, hits, err), nil
	}
	return Decision{Allowed: r.Allowed, Limit: p.Limit, Remaining: r.Remaining, Reset: r.Reset, RetryAfter: r.RetryAfter}, nil
}

// Refund gives back hits that Take admitted for a request that another
// rule then denied (a denied request burns no quota). Leased algorithms
// put them back into the local bucket, never above what the last lease
// left on hand; exact algorithms, unknown keys and changed policies
// ignore it.
//
// Refund only decisions that are not Degraded: a Degraded decision was made
// by the failure mode and took nothing from the local bucket, so refunding
// it would put tokens there that no Store ever granted (over-admission).
func (m *Manager) Refund(key string, p Policy, hits int64) {
	if hits <= 0 || hits > MaxHits || !p.Algorithm.Leased() {
		return
	}
	b := m.buckets.load(key)
	if b == nil || *b.pol != p || b.denyUntil.Load() == evicted {
		return
	}
	b.refund(hits)
}

// Acquire takes one slot of a concurrency limit for a new unique id,
// returned when allowed. As for Take, key need not outlive the call (and
// so for Refund and Release). hits = 0 peeks (no id). The error is non-nil only
// for a bad call: hits other than 0 or 1, an invalid policy, or an
// algorithm other than concurrency (ErrWrongAlgorithm).
func (m *Manager) Acquire(key string, p Policy, hits int64) (Decision, string, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, "", err
	}
	if p.Algorithm != Concurrency {
		return Decision{}, "", fmt.Errorf("cannot acquire %s: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	if hits != 0 && hits != 1 {
		return Decision{}, "", &FieldError{Field: "hits", Msg: fmt.Sprintf("must be 0 or 1 for concurrency, got %d", hits)}
	}
	var id string
	if hits == 1 {
		id = newID()
	}
	key = strings.Clone(key) // Stores may keep it
	m.st.storeDecisions.Add(1)
	decisionsStore.Inc()
	r, err := m.store.Acquire(m.ctx, key, p, id, hits)
	degraded := false
	if err != nil {
		if callerError(err) {
			return Decision{}, "", err
		}
		m.st.degraded.Add(1)
		decisionsDegraded.Inc()
		degraded = true
		switch p.OnFailure {
		case FailOpen:
			return Decision{Allowed: true, Limit: p.Limit, Degraded: true}, id, nil
		case FailClosed:
			return Decision{Limit: p.Limit, RetryAfter: m.store.Config().Cooldown, Unavailable: true}, "", nil
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StoreTimeout)
		r, err = m.local.Acquire(ctx, key, p, id, hits)
		cancel()
		if err != nil {
			return Decision{Limit: p.Limit, RetryAfter: m.store.Config().Cooldown, Unavailable: true}, "", nil
		}
	}
	d := Decision{Allowed: r.Allowed, Limit: p.Limit, Remaining: r.Remaining, Reset: r.Reset, RetryAfter: r.RetryAfter, Degraded: degraded}
	if !r.Allowed {
		id = ""
	}
	return d, id, nil
}

// Release frees the concurrency slot id of key. An unknown id is not an
// error. It fails (with an error wrapping ErrStoreUnavailable) when the
// Store cannot be reached; the slot then expires after the policy's Period.
func (m *Manager) Release(key string, p Policy, id string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Algorithm != Concurrency {
		return fmt.Errorf("cannot release %s: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	if id == "" {
		return &FieldError{Field: "lease_id", Msg: "must not be empty"}
	}
	key = strings.Clone(key) // Stores may keep it
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StoreTimeout)
	_ = m.local.Release(ctx, key, p, id) // a slot taken while degraded
	cancel()
	return m.store.Release(m.ctx, key, p, id)
}

// newID returns 16 random bytes in hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand docs)
	return hex.EncodeToString(b[:])
}

// intern returns the shared copy of p.
func (m *Manager) intern(p Policy) *Policy {
	m.policies.Lock()
	defer m.policies.Unlock()
	if q, ok := m.policies.m[p]; ok {
		return q
	}
	q := new(Policy)
	*q = p
	m.policies.m[p] = q
	return q
}

// bucketFor returns key's live bucket for p, creating it, or replacing a
// bucket of another policy (whose tokens go back to the Store in the
// background).
func (m *Manager) bucketFor(key string, p Policy, now int64) *bucket {
	for {
		old := m.buckets.load(key)
		if old != nil && *old.pol == p && old.denyUntil.Load() != evicted {
			return old
		}
		nb := &bucket{pol: m.intern(p)}
		nb.lastUse.Store(unixMs32(now))
		if old == nil {
			nb.key = strings.Clone(key)
			if got, loaded := m.buckets.loadOrStore(nb.key, nb); loaded {
				if *got.pol == p && got.denyUntil.Load() != evicted {
					return got
				}
				continue
			}
			m.st.active.Add(1)
			activeKeys.Inc()
			return nb
		}
		nb.key = old.key
		if !m.buckets.compareAndSwap(old.key, old, nb) {
			continue
		}
		// The policy changed (rules reloaded): the old bucket's tokens go
		// back under its old policy, and the key starts fresh.
		marked := old.markEvicted()
		m.endDegraded(old)
		if marked {
			if !m.goBG(func() { m.returnBucket(context.Background(), old) }) {
				m.returnBucket(m.ctx, old)
			}
		}
		return nb
	}
}

// claim takes b's lease slot if it is free (owner = true), else returns
// the slot in flight.
func (m *Manager) claim(b *bucket) (s *slot, owner bool) {
	m.inflight.Lock()
	defer m.inflight.Unlock()
	if s := m.inflight.m[b]; s != nil {
		return s, false
	}
	s = &slot{done: make(chan struct{})}
	m.inflight.m[b] = s
	return s, true
}

// claimWait takes b's lease slot, waiting for calls in flight.
func (m *Manager) claimWait(b *bucket) *slot {
	for {
		s, owner := m.claim(b)
		if owner {
			return s
		}
		<-s.done
	}
}

// release frees b's slot s with the outcome err of its Store call.
func (m *Manager) release(b *bucket, s *slot, err error) {
	m.inflight.Lock()
	delete(m.inflight.m, b)
	m.inflight.Unlock()
	s.err = err
	close(s.done)
}

// goBG runs f in a goroutine that Close waits for; false once closed.
func (m *Manager) goBG(f func()) bool {
	m.bg.Lock()
	defer m.bg.Unlock()
	if m.bg.closed {
		return false
	}
	m.bg.wg.Add(1)
	go func() {
		defer m.bg.wg.Done()
		f()
	}()
	return true
}

// prefetch leases again for b in the background; the caller has set b.low
// to -1, which stops further triggers until a lease sets it again.
func (m *Manager) prefetch(b *bucket) {
	if !m.goBG(func() { m.prefetchNow(b) }) {
		b.low.Store(0)
	}
}

func (m *Manager) prefetchNow(b *bucket) {
	s, owner := m.claim(b)
	if !owner {
		return // a sync lease is in flight and will set low
	}
	if b.denyUntil.Load() == evicted {
		m.release(b, s, nil)
		return
	}
	p := *b.pol
	now := m.nanos()
	local := b.tokens.Load()
	want := m.sizeLease(b, b.basis.Load()-local, now, 1)
	m.st.prefetches.Add(1)
	prefetches.Inc()
	g, err := m.store.Lease(m.ctx, b.key, p, want, 1)
	if err != nil {
		// low stays -1: the next sync lease retries, or fails over.
		m.release(b, s, err)
		return
	}
	m.endDegraded(b)
	m.countLocal(b.basis.Load() - local)
	m.st.tokensLeased.Add(g.Granted)
	tokensLeased.AddInt64(g.Granted)
	b.remaining.Store(g.Remaining)
	b.resetAt.Store(addTime(max(now, m.nanos()), g.Reset))
	b.lastLeaseMs = unixMs32(now)
	if g.Granted > 0 {
		exp := leaseExpiry(p, now, g)
		if !b.spendable(now) || b.tokens.Load() == 0 {
			b.tokens.Swap(0) // of a window that ended: dropped
		} else {
			// Tokens on hand may belong to the window before the grant's.
			exp = min(exp, b.expires.Load())
		}
		b.expires.Store(exp)
	}
	// The fast path kept spending while we were away: the new basis is
	// what is on hand now.
	b.basis.Store(b.tokens.Add(g.Granted))
	if g.Granted > 0 {
		b.low.Store(lowMark(m.cfg.LowWater, g.Granted))
	}
	// Granted 0: nothing available; low stays -1 and the next check that
	// runs out leases synchronously and gets a deny-until.
	m.release(b, s, nil)
}

// returnBucket gives an evicted bucket's tokens back to the Store.
func (m *Manager) returnBucket(ctx context.Context, b *bucket) error {
	s := m.claimWait(b)
	tokens := b.tokens.Swap(0)
	m.countLocal(b.basis.Load() - tokens)
	b.basis.Store(0)
	if now := m.nanos(); !b.spendable(now) {
		// Tokens of a window that ended: a return would lower the count
		// of the current window, which never granted them.
		tokens = 0
	} else if b.refilled(now) {
		// The Store said it would be full again by now, counting these
		// tokens as spent: it caps a return at capacity, so the call
		// would change nothing (unless another holder of the key took
		// tokens since, which this node cannot see: then they wait for
		// the refill, under-admission of at most these tokens). Not
		// made: the idle return of a cold key would double its Store
		// calls.
		tokens = 0
	}
	var err error
	if tokens > 0 {
		m.st.returns.Add(1)
		err = m.store.Return(ctx, b.key, *b.pol, tokens)
		if err == nil {
			m.st.tokensReturned.Add(tokens)
			tokensReturned.AddInt64(tokens)
		} else {
			m.cfg.Logger.Warn("cannot return leased tokens", "key", b.key, "tokens", tokens, "err", err)
		}
	}
	m.release(b, s, err)
	if err == nil && tokens > 0 {
		// A newer bucket of the key (after a policy change, or a check
		// racing with eviction) may be denying until a batch that the
		// Store could not see coming: these tokens. Let it lease again.
		// Holding its slot orders this after any lease it has in flight.
		if nb := m.buckets.load(b.key); nb != nil && nb != b {
			ns := m.claimWait(nb)
			nb.clearDeny()
			m.release(nb, ns, nil)
		}
	}
	return err
}

// evict removes b (the bucket of key) from the index and marks it; false
// if it was already gone.
func (m *Manager) evict(b *bucket) bool {
	if !m.buckets.compareAndDelete(b.key, b) {
		return false
	}
	m.st.active.Add(-1)
	activeKeys.Dec()
	marked := b.markEvicted()
	m.endDegraded(b) // after the mark, which seedLocal checks under the lock
	return marked
}

// returnAll returns the tokens of evicted buckets with at most
// ReturnWorkers Store calls at once; it reports the first error.
func (m *Manager) returnAll(ctx context.Context, bs []*bucket) error {
	if len(bs) == 0 {
		return nil
	}
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
		fails int
	)
	workers := min(m.cfg.ReturnWorkers, len(bs))
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(bs) {
					return
				}
				if err := m.returnBucket(ctx, bs[i]); err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					fails++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return fmt.Errorf("cannot return the leases of %d keys: %w", fails, first)
	}
	return nil
}

// sweep evicts the buckets unused since now - Idle and returns their
// tokens; it returns how many it evicted.
func (m *Manager) sweep(now time.Time) int {
	nowMs := unixMs32(now.UnixNano())
	var idle []*bucket
	m.buckets.rangeAll(func(b *bucket) {
		// Signed: a bucket used after now was read (checks go on during
		// a sweep) is not idle, not 49 days idle.
		if int32(nowMs-b.lastUse.Load()) >= int32(m.idleMs) && m.evict(b) {
			idle = append(idle, b)
		}
	})
	_ = m.returnAll(m.ctx, idle) // logged per key
	m.prunePolicies()
	return len(idle)
}

// prunePolicies forgets the interned policies that no bucket uses, so that
// rule reloads do not grow the Manager forever. A policy interned by a
// bucketFor racing with it may be interned again: harmless, buckets
// compare policies by value.
func (m *Manager) prunePolicies() {
	live := make(map[*Policy]struct{})
	m.buckets.rangeAll(func(b *bucket) { live[b.pol] = struct{}{} })
	m.policies.Lock()
	defer m.policies.Unlock()
	for p, q := range m.policies.m {
		if _, ok := live[q]; !ok {
			delete(m.policies.m, p)
		}
	}
}

func (m *Manager) sweeper(every time.Duration) {
	defer close(m.sweepDone)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stopSweep:
			return
		case <-t.C:
			m.sweep(m.nowFn())
		}
	}
}

// ReturnKeys returns the leases of every key for which keep is false and
// drops their buckets (ownership moved to another node). It waits for the
// returns and reports the first failure. keep must not call the Manager.
func (m *Manager) ReturnKeys(keep func(key string) bool) error {
	var gone []*bucket
	m.buckets.rangeAll(func(b *bucket) {
		if !keep(b.key) && m.evict(b) {
			gone = append(gone, b)
		}
	})
	return m.returnAll(m.ctx, gone)
}

// Close stops the Manager's goroutines and returns every lease to the
// Store. It reports the first failed return. Close is idempotent. Call it
// after the last check: checks made during or after Close still work (no
// longer prefetching), but the tokens they lease are not returned.
func (m *Manager) Close() error {
	m.closeOnce.Do(func() {
		close(m.stopSweep)
		<-m.sweepDone
		m.bg.Lock()
		m.bg.closed = true
		m.bg.Unlock()
		m.bg.wg.Wait()
		m.closeErr = m.ReturnKeys(func(string) bool { return false })
		if m.own != nil {
			_ = m.own.Close() // stops its janitor; it stays usable
		}
		if m.clock != nil {
			m.clock.Stop() // nanos falls back to nowFn
		}
	})
	return m.closeErr
}

// Stats returns a snapshot of the Manager's counters.
func (m *Manager) Stats() Stats {
	return Stats{
		ActiveKeys:        m.st.active.Load(),
		LocalHits:         m.st.localHits.Load(),
		LocalDenials:      m.st.localDenials.Load(),
		StoreDecisions:    m.st.storeDecisions.Load(),
		DegradedDecisions: m.st.degraded.Load(),
		Leases:            m.st.leases.Load(),
		Prefetches:        m.st.prefetches.Load(),
		Returns:           m.st.returns.Load(),
		TokensLeased:      m.st.tokensLeased.Load(),
		TokensReturned:    m.st.tokensReturned.Load(),
		Breaker:           m.store.State(),
	}
}

// StoreHealthy reports whether the Store's breaker is closed.
func (m *Manager) StoreHealthy() bool { return m.store.State() == BreakerClosed }
