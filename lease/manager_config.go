package lease

import (
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"
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
	// making a Store call per check. A token_bucket or gcra key far from
	// its limit (its rate at most half the policy's, and the Store's last
	// answer leaving it half the capacity after the loan) asks for more
	// when that is at least twice the sizing by rate: a loan for its rate
	// over the loan's fast-path life (half LeaseTTL), at most half the
	// capacity, topped up each time it has spent a quarter of the
	// capacity, so that a slow key calls the Store once per that quarter
	// rather than once per smallest lease. Zero means 1/8;
	// negative means no floor (leases sized by rate alone, and none for the
	// loan's life); above 1 means 1.
	MinLeaseShare float64
	// Idle is how long a key goes unchecked before its tokens go back to
	// the Store and its bucket is dropped, unless it is kept (KeepIdle).
	// Zero means 10s; at most 24h.
	Idle time.Duration
	// KeepIdle is how many idle keys at most keep their loan past Idle. A
	// key unchecked for Idle whose tokens are still spendable on the fast
	// path (until the end of their window for fixed_window and
	// sliding_window, or of the last window a fixed_window key has a share
	// of: see AheadHorizon; half their LeaseTTL for token_bucket and gcra) and
	// whose loan is a slow key's (what the Store lends this Manager of it
	// is at most twice the smallest lease, MinLeaseShare of its capacity:
	// a slow key's leases are that smallest one; at most half the
	// capacity for a token_bucket or gcra key far from its limit, which
	// leases for its loan's life)
	// keeps its bucket, with no Store call, so that a check
	// coming back after an idle spell is answered from memory. It is
	// dropped as any other once its tokens are no longer spendable on the
	// fast path, or when more than KeepIdle keys are kept (the longest
	// idle first). ReturnKeys and Close return kept loans as any other.
	// Zero means 100000; negative means none (every key idle for Idle is
	// dropped).
	KeepIdle int
	// Holder names this Manager to the Store, which counts the tokens it
	// lends to each holder against the key's capacity (see "Lent tokens"
	// in the package doc). It must be unique among the Managers sharing a
	// Store and must change when a process restarts (a node passes its
	// name and a boot nonce), so that a restarted node never inherits the
	// tokens lent to its former self. Empty means a random ID per Manager.
	// At most MaxHolderLen bytes.
	Holder string
	// LeaseTTL is how long leased token_bucket and gcra tokens stay
	// spendable: until LeaseTTL after the lease call that granted (or last
	// renewed) them was sent. The Store counts them as lent until LeaseTTL
	// after it received that call, then as spent. A check that finds its
	// key's tokens past half their TTL renews them in the background (a
	// lease call that re-lends what is on hand). Windowed algorithms'
	// tokens are lent until their window ends instead. Zero means 5m;
	// between 1s and MaxLeaseTTL.
	LeaseTTL time.Duration
	// AheadHorizon is how far ahead a fixed_window key's lease calls ask
	// for shares of the next windows (Lessee.AheadWindows): the smallest
	// lease (MinLeaseShare of the capacity) in each of the AheadHorizon /
	// Period windows after the current one (none when Period is longer).
	// A check that finds its window over then rolls into the next on its
	// share with no Store call, so that a slow key checked every few
	// windows makes one Store call per AheadHorizon instead of one per
	// window. Only that floor goes ahead: a hot key's bigger need is still
	// leased window by window, so what the key's other holders can lose to
	// a holder's unspent shares is at most the floor per window, as to a
	// kept idle loan. Zero means half the LeaseTTL (the fast-path life of
	// a token_bucket loan); negative means none ahead; at most
	// MaxLeaseTTL.
	AheadHorizon time.Duration
	// LowWater is the prefetch mark as a fraction of the last grant: when
	// a check leaves fewer local tokens, the Manager leases again in the
	// background. Zero means 0.25; it must be in (0, 1).
	LowWater float64
	// StoreTimeout is the timeout of a Store call, stretched up to
	// Breaker.MaxTimeout (zero: 4×) for a Store that is steadily slower:
	// with it, what a failing Store can add to a check. Zero means 50ms.
	// It overrides Breaker.Timeout.
	StoreTimeout time.Duration
	// CheckBudget is how long a check may wait on the Store: for its own
	// lease call, or for the key's call another check (or a prefetch)
	// has in flight. A check still waiting when it runs out is decided by
	// its policy's OnFailure from what the Manager knows (FailLocal: this
	// node's memory, as while the Store is down; FailOpen: allowed;
	// FailClosed: Unavailable), while its call goes on in the background:
	// that call's grant is kept for the next checks, and what FailLocal
	// admitted meanwhile is charged to the Store with it, as at the end
	// of an outage. So a stalled Store adds at most CheckBudget to a
	// check. Zero means none: a check waits as long as its Store call may
	// take (StoreTimeout, stretched). sluiced sets 20ms, a gateway's
	// usual timeout for its rate-limit call. The exact algorithms
	// (sliding_log, concurrency) and peeks of unknown keys are not
	// budgeted: their one Store call is the decision.
	CheckBudget time.Duration
	// AfterFunc is the clock of the checks' budgets (CheckBudget) and of
	// ReturnTimeout. Nil
	// means time.AfterFunc; tests pass a fake clock's.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
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
	// ReturnTimeout bounds the time spent returning many leases together
	// (idle sweep, ReturnKeys, Close): no return call starts after it
	// (the biggest loans go first), and the loans not returned are left
	// to end on their own (LeaseTTL; a window's at its end), as a
	// crashed node's do, logged in one line. The calls in flight then
	// end within their StoreTimeout. Zero means 5s; it runs on AfterFunc's
	// clock.
	ReturnTimeout time.Duration
	// BatchWorkers is how many checks of one TakeMany at most wait for the
	// Store at once. Zero means 64.
	BatchWorkers int
	// Direct decides each check of a leased algorithm with one Store call
	// of its own that spends its hits at once (a Lease without a Lessee
	// ID), and keeps no bucket: nothing is leased, so nothing is held
	// unspent, idle, returned or prefetched, and every decision is the
	// Store's. It is for a Store in the process's own memory (a
	// MemoryStore), where a call costs about what a bucket's check does
	// (a shard's lock and the algorithm's arithmetic: 0.1–0.6 µs) and a
	// lease would only keep each key twice. The calls run without
	// StoreTimeout or CheckBudget, and the Store is handed the caller's
	// key (a Store that keeps it must copy it, as MemoryStore does).
	// Refund gives hits back through the Store's Refund method when it has
	// one (MemoryStore.Refund), and is a no-op otherwise.
	Direct bool
	// Local is the Store that FailLocal rules decide from while the Store
	// is unavailable: this node's memory. Nil means a private MemoryStore.
	Local Store
	// UnknownLocalShare is the share of a key's capacity that FailLocal
	// admits from this node's memory for a key it has no Store level for
	// (it never leased the key: in a cluster, a key another node owns,
	// decided here because its forward failed under overload). Nil means
	// 1, the whole capacity. A node of an N-member cluster returns 1/N:
	// N nodes deciding such a key at once then admit at most its limit,
	// where each starting full would admit N times it.
	UnknownLocalShare func() float64
	// Now is the clock. Nil means time.Now, read through a coarse clock
	// (1ms resolution) on the fast path. Tests inject a fake clock; the
	// fast path then calls it on every check.
	Now func() time.Time
	// Logger receives the Manager's logs. Nil means slog.Default().
	Logger *slog.Logger
	// Metrics is the set the Manager's and its Breaker's metrics
	// (sluice_lease_*, sluice_store_*) are registered in. Nil means the
	// process's default set, which metrics.WritePrometheus writes: right
	// for one Manager per process; give each its own set when several
	// share one (a test cluster), or their counts mix.
	Metrics *metrics.Set
}

// DefaultConfig returns the defaults. Horizon 100ms: big enough that a hot
// key touches the Store about ten times a second, small enough that a
// lease never strands much quota. Idle 10s: tokens of a key that stopped
// go back soon, and a key checked every few seconds is not churned.
// LeaseTTL 5m, thirty times Idle: a key left idle returns its tokens (after
// Idle, plus up to a sweep interval) long before they expire, so an idle
// spell loses nothing; a key still in use renews its tokens at most once
// per 2.5 min (one Store call, only when its lease lasts that long: a
// slow key's lease of MinLeaseShare of its capacity often does); and a
// crashed node's lent tokens come back (as spent) within 5 minutes. With
// 1m, the renewals of a long tail of slow keys were most of the Store's
// calls (TestRedisOpsRenewals: 1.5% script calls per decision, against
// 0.33% for first leases alone).
// LowWater 0.25: a prefetch started with a quarter of the lease left has a
// quarter of a horizon (25ms by default) to come back, dozens of Redis
// round trips. StoreTimeout is the breaker's timeout (50ms: see
// DefaultBreakerConfig), the most a failing Store may add to a check.
//
// KeepIdle 100000 (DefaultKeepIdle): a slow key's lease is MinLeaseShare
// of its capacity, which lasts it many checks; dropped at Idle, a key that
// comes back every 15s would lease again on every check (measured: one
// Store call per check, TestIdleKeepStoreCallsPerVisit), each costing the
// Store about twice a naive counter's update. Kept, it makes one call per
// half LeaseTTL (0.11 per check there). ReturnTimeout 5s: a return takes
// one Store round trip, ReturnWorkers at once (a return script costs
// Redis 50-70µs), so 5s returns tens of thousands of loans from a healthy
// Redis (the biggest first); past it a shutting-down
// node leaves the rest to end on their own rather than hold up its exit,
// and a node whose Store is down does not log one line per key.
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
//
// AheadHorizon is left 0: half of whatever LeaseTTL is (2.5 min with 5m).
// A per-second key checked every 2 s then leases once per 150 windows
// (TestAheadStoreCallsPerHorizon), each share of the floor.
func DefaultConfig() Config {
	return Config{
		Horizon:       100 * time.Millisecond,
		MinLeaseShare: DefaultMinLeaseShare,
		Idle:          10 * time.Second,
		LeaseTTL:      5 * time.Minute,
		LowWater:      0.25,
		StoreTimeout:  DefaultBreakerConfig().Timeout,
		Breaker:       DefaultBreakerConfig(),
		ReturnWorkers: 8,
		ReturnTimeout: 5 * time.Second,
		KeepIdle:      DefaultKeepIdle,
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
	switch {
	case c.LeaseTTL == 0:
		c.LeaseTTL = d.LeaseTTL
	case c.LeaseTTL < time.Second:
		c.LeaseTTL = time.Second
	case c.LeaseTTL > MaxLeaseTTL:
		c.LeaseTTL = MaxLeaseTTL
	}
	switch {
	case c.AheadHorizon == 0:
		c.AheadHorizon = c.LeaseTTL / 2
	case c.AheadHorizon < 0:
		c.AheadHorizon = 0 // none
	}
	c.AheadHorizon = min(c.AheadHorizon, MaxLeaseTTL)
	if c.Holder == "" {
		c.Holder = "m-" + newID()
	}
	if len(c.Holder) > MaxHolderLen {
		c.Holder = c.Holder[:MaxHolderLen]
	}
	if !(c.LowWater > 0 && c.LowWater < 1) {
		c.LowWater = d.LowWater
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = d.StoreTimeout
	}
	c.CheckBudget = max(c.CheckBudget, 0)
	if c.SweepInterval == 0 {
		c.SweepInterval = c.Idle / 4
	}
	if c.ReturnWorkers <= 0 {
		c.ReturnWorkers = d.ReturnWorkers
	}
	if c.ReturnTimeout <= 0 {
		c.ReturnTimeout = d.ReturnTimeout
	}
	if c.KeepIdle == 0 {
		c.KeepIdle = d.KeepIdle
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

// DefaultKeepIdle is Config.KeepIdle's default: a kept key costs the node
// its bucket, its key and its index entry (TestMemoryPerKey: about 120 B
// plus the key; 150-200 B of RSS), so 100000 kept keys cost 15-20 MB, a
// small part of a node sized for a million active keys, and they save a
// Store call for each return of a slow key within its loan's life.
const DefaultKeepIdle = 100_000

// maxIdle bounds Config.Idle: use times are kept in 32-bit milliseconds.
const maxIdle = 24 * time.Hour
