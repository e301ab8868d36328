package lease

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/VictoriaMetrics/metrics"
)

// BreakerConfig configures a [Breaker]. Every field's zero value means its
// default (see [DefaultBreakerConfig]).
type BreakerConfig struct {
	// Timeout is the least a Store call gets to answer, the configured
	// timeout. Zero means 50ms. A Manager sets it to its
	// Config.StoreTimeout.
	Timeout time.Duration
	// MaxTimeout is the most a Store call gets. Each call gets
	// 2 × (srtt + 4·rttvar) of the round trips seen so far (the TCP
	// retransmission timeout, RFC 6298, with a factor of two), between
	// Timeout and MaxTimeout: adaptation only stretches the timeout, so a
	// steadily slow Store (+30ms on a 50ms timeout), or a loaded host's
	// bursty latency, gets the room it needs instead of failing call after
	// call and opening the breaker, and a Store slower than MaxTimeout
	// still fails. Returns (no check waits for them) always get
	// MaxTimeout. Zero means 4 × Timeout; a value ≤ Timeout turns
	// adaptation off.
	MaxTimeout time.Duration
	// Failures is the number of consecutive failed round trips (errors or
	// timeouts, not the caller's own context ending) that open the
	// breaker. Calls that were in flight together and failed together
	// (pipelined on one connection, stalled by one freeze) are one failed
	// round trip: a failure counts only if its call started after the
	// last counted failure. Zero means 5.
	Failures int
	// Cooldown is how long the breaker stays open before it probes the
	// Store (half-open): in the background, so that an idle node also
	// sees the Store come back, or with the first call after it. Zero
	// means 1s. FailClosed rules report it as RetryAfter.
	Cooldown time.Duration
	// Now is the clock used for the cool-down. Nil means time.Now. A
	// Manager sets it to its own clock.
	Now func() time.Time
	// AfterFunc schedules the background probe on Now's clock. Nil means
	// time.AfterFunc. Tests pass a fake clock's.
	AfterFunc func(d time.Duration, f func()) (stop func() bool)
	// Metrics is the set of the sluice_store_* metrics. Nil means the
	// process's default set (see Config.Metrics).
	Metrics *metrics.Set
	// Logger receives one line per state change, with its cause. Nil
	// means slog.Default(). A Manager sets it to its own.
	Logger *slog.Logger
	// OnClose, if set, is called when the breaker closes again (the Store
	// is back), with the breaker's lock held: it must not block or call
	// the breaker. A Manager starts its reconciliation from it.
	OnClose func()
}

// DefaultBreakerConfig returns the defaults: a 50ms timeout (a rate-limit
// check must stay fast; a healthy Redis answers in well under 1ms),
// stretched up to 200ms for a Store that is steadily that slow, 5
// consecutive failed round trips (one
// slow call or a lost packet does not flip a whole node into its failure
// mode) and a 1s cool-down (one probe per second is no load on a
// recovering Redis).
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{Timeout: 50 * time.Millisecond, Failures: 5, Cooldown: time.Second, Now: time.Now}
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	d := DefaultBreakerConfig()
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = 4 * c.Timeout
	}
	c.MaxTimeout = max(c.MaxTimeout, c.Timeout)
	if c.Failures <= 0 {
		c.Failures = d.Failures
	}
	if c.Cooldown <= 0 {
		c.Cooldown = d.Cooldown
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.AfterFunc == nil {
		c.AfterFunc = func(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// BreakerState is the state of a [Breaker].
type BreakerState uint8

const (
	// BreakerClosed lets every call through.
	BreakerClosed BreakerState = iota
	// BreakerOpen fails every call fast with ErrStoreUnavailable.
	BreakerOpen
	// BreakerHalfOpen lets one probe call through; its success closes the
	// breaker, its failure opens it again.
	BreakerHalfOpen
)

func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerOpen:
		return "open"
	case BreakerHalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("breaker_state(%d)", s)
}

// Pinger is what the background probe calls when the wrapped Store has it
// (the Redis store does). A Store without it is probed with a peek (a
// lease of 0 tokens) of a key of its own.
type Pinger interface {
	Ping(ctx context.Context) error
}

// probeKey and probePolicy are the peek of a Store that is not a Pinger.
const probeKey = "sluice-breaker-probe"

var probePolicy = Policy{Algorithm: TokenBucket, Limit: 1, Period: time.Hour}

// Breaker is a Store that wraps another Store with a per-call timeout and a
// circuit breaker: after Failures consecutive failed round trips it opens,
// and calls fail fast with an error wrapping ErrStoreUnavailable; once
// Cooldown has passed one probe goes through (in the background, or the
// first call), and its success closes the breaker. Errors that are the
// caller's (its context ending, a policy the Store refuses,
// ErrWrongAlgorithm) pass through and are not counted. Every state change
// is logged once, with its cause.
//
// The timeout is applied through the context: the wrapped Store must honour
// its context's deadline (every network call does). A DeadlineStore's
// context carries the deadline without a timer.
//
// A Breaker is safe for concurrent use. Its background probe runs only
// while it is open; Close stops it.
type Breaker struct {
	store Store
	// byDeadline: the store is a DeadlineStore.
	byDeadline bool
	cfg        BreakerConfig
	met        *leaseMetrics
	state      atomic.Uint32 // BreakerState, readable without mu
	// openUntil is, while open, when the cool-down ends (Unix ns): until
	// then Rejecting answers without the mutex.
	openUntil atomic.Int64
	// epoch counts the failures that counted; a call notes it when it
	// starts, and its failure counts only if no other failure counted
	// since (it is then a new round trip).
	epoch atomic.Uint64
	// timeout is the adaptive per-call timeout (ns).
	timeout atomic.Int64
	// bg tracks the background probe in flight, for Close.
	bg sync.WaitGroup

	// mu protects the fields of the state machine and the estimator.
	mu struct {
		sync.Mutex
		failures  int         // consecutive failed round trips while closed
		openedAt  time.Time   // when the breaker last opened
		downSince time.Time   // when it opened from closed: the outage's start
		probing   bool        // a half-open probe is in flight
		cause     error       // the last counted failure
		stopProbe func() bool // cancels the background probe set, if any
		probeGen  uint64      // which schedule is current
		closed    bool        // Close was called: no more background probes
		rtt       RTTEstimator
	}
}

// NewBreaker returns a Breaker around store.
func NewBreaker(store Store, cfg BreakerConfig) *Breaker {
	_, byDeadline := store.(DeadlineStore)
	b := &Breaker{store: store, byDeadline: byDeadline, cfg: cfg.withDefaults(), met: newLeaseMetrics(cfg.Metrics)}
	b.timeout.Store(int64(b.cfg.Timeout))
	return b
}

// Close stops the background probe and waits for one in flight. The
// Breaker stays usable (calls probe the Store after the cool-down).
// Idempotent.
func (b *Breaker) Close() {
	b.mu.Lock()
	b.mu.closed = true
	if b.mu.stopProbe != nil {
		b.mu.stopProbe()
		b.mu.stopProbe = nil
	}
	b.mu.Unlock()
	b.bg.Wait()
}

// State returns the breaker's state.
func (b *Breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// Rejecting reports whether a call made now would fail fast (open, in its
// cool-down). Callers use it to skip work they would do only to reach a
// Store call; it takes no lock.
func (b *Breaker) Rejecting() bool {
	return BreakerState(b.state.Load()) == BreakerOpen && b.cfg.Now().UnixNano() < b.openUntil.Load()
}

// Config returns the breaker's configuration with defaults filled in.
func (b *Breaker) Config() BreakerConfig { return b.cfg }

// Timeout returns the per-call timeout the next call gets.
func (b *Breaker) Timeout() time.Duration { return time.Duration(b.timeout.Load()) }

var errBreakerOpen = fmt.Errorf("%w: circuit breaker open", ErrStoreUnavailable)

// admit decides whether a call may go through; probe reports whether the
// call is the half-open probe.
func (b *Breaker) admit() (probe bool, ok bool) {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return false, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.admitLocked()
}

func (b *Breaker) admitLocked() (probe bool, ok bool) {
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return false, true
	case BreakerOpen:
		if b.cfg.Now().Sub(b.mu.openedAt) < b.cfg.Cooldown {
			return false, false
		}
		b.setState(BreakerHalfOpen, "cool-down passed: probing the Store")
	}
	if b.mu.probing {
		return false, false
	}
	b.mu.probing = true
	return true, true
}

// open opens the breaker and schedules the background probe; mu must be
// held.
func (b *Breaker) open(why string) {
	b.mu.openedAt = b.cfg.Now()
	if BreakerState(b.state.Load()) == BreakerClosed {
		b.mu.downSince = b.mu.openedAt
	}
	b.openUntil.Store(b.mu.openedAt.Add(b.cfg.Cooldown).UnixNano())
	b.setState(BreakerOpen, why)
	b.schedule(b.cfg.Cooldown)
}

// schedule sets the background probe d from now, replacing one already
// set; mu must be held.
func (b *Breaker) schedule(d time.Duration) {
	if b.mu.stopProbe != nil {
		b.mu.stopProbe()
		b.mu.stopProbe = nil
	}
	if b.mu.closed {
		return
	}
	b.mu.probeGen++
	gen := b.mu.probeGen
	b.bg.Add(1)
	var once sync.Once
	stop := b.cfg.AfterFunc(d, func() {
		once.Do(func() {
			defer b.bg.Done()
			b.backgroundProbe(gen)
		})
	})
	b.mu.stopProbe = func() bool {
		if stop() {
			once.Do(b.bg.Done) // it will never run
			return true
		}
		return false
	}
}

// backgroundProbe probes the Store once the cool-down has passed, unless a
// call is probing it already, the breaker closed meanwhile, or a newer
// probe was scheduled (gen is the schedule's).
func (b *Breaker) backgroundProbe(gen uint64) {
	b.mu.Lock()
	if gen != b.mu.probeGen {
		b.mu.Unlock()
		return
	}
	b.mu.stopProbe = nil
	if b.mu.closed || BreakerState(b.state.Load()) != BreakerOpen {
		b.mu.Unlock()
		return
	}
	if left := b.mu.openedAt.Add(b.cfg.Cooldown).Sub(b.cfg.Now()); left > 0 {
		b.schedule(left) // the timer ran ahead of Now's clock
		b.mu.Unlock()
		return
	}
	probe, ok := b.admitLocked()
	b.mu.Unlock()
	if !ok || !probe {
		return // a call is probing: its outcome decides
	}
	timeout := b.Timeout()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	var err error
	if p, ok := b.store.(Pinger); ok {
		err = p.Ping(ctx)
	} else {
		_, err = b.store.Lease(ctx, probeKey, probePolicy, 0, 0, Lessee{})
	}
	timedOut := ctx.Err() != nil
	cancel()
	switch {
	case err == nil && timedOut:
		err = fmt.Errorf("probe timed out after %v", timeout)
	case err != nil && callerError(err):
		err = nil // the Store answered
	}
	b.record(true, true, err, 0, -1)
}

// setState must be called with mu held; why is the cause, logged.
func (b *Breaker) setState(s BreakerState, why string) {
	old := BreakerState(b.state.Swap(uint32(s)))
	if old == s {
		return
	}
	b.met.breakerState.Add(stateWeight(s) - stateWeight(old))
	b.met.breakerTransitions[s].Inc()
	attrs := []any{"from", old.String(), "to", s.String(), "cause", why}
	switch {
	case s == BreakerOpen && old == BreakerClosed:
		b.cfg.Logger.Warn("store breaker opened", attrs...)
	case s == BreakerClosed:
		// open_for is the last open interval (a cool-down, when probes
		// failed before); unavailable_for the whole outage, from when the
		// breaker first opened.
		now := b.cfg.Now()
		b.cfg.Logger.Info("store breaker closed", append(attrs, "unavailable_for", now.Sub(b.mu.downSince).String(),
			"open_for", now.Sub(b.mu.openedAt).String())...)
		if b.cfg.OnClose != nil {
			b.cfg.OnClose()
		}
	default:
		// The probe cycle of a continuing outage: one line a cool-down.
		b.cfg.Logger.Info("store breaker", attrs...)
	}
}

func stateWeight(s BreakerState) float64 {
	switch s {
	case BreakerOpen:
		return 1
	case BreakerHalfOpen:
		return 0.5
	}
	return 0
}

// record feeds one call's outcome into the state machine. counted is
// false for an outcome that says nothing about the Store (the caller's
// context ended); err is the failure, nil for a success; epoch is what the
// call saw when it started; rtt is its round trip (negative: unknown).
func (b *Breaker) record(probe, counted bool, err error, epoch uint64, rtt time.Duration) {
	if !probe && !counted {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if counted {
		b.observe(err, rtt)
	}
	if probe {
		b.mu.probing = false
		if !counted {
			return // stay half-open: the next call probes again
		}
		if err != nil {
			b.open("probe failed: " + err.Error())
		} else {
			b.mu.failures = 0
			b.setState(BreakerClosed, "probe succeeded")
		}
		return
	}
	if err == nil {
		b.mu.failures = 0
		return
	}
	if !b.epoch.CompareAndSwap(epoch, epoch+1) {
		return // in flight with a failure that counted: the same round trip
	}
	b.mu.failures++
	b.mu.cause = err
	if b.mu.failures >= b.cfg.Failures && BreakerState(b.state.Load()) == BreakerClosed {
		b.open(fmt.Sprintf("%d consecutive failed round trips, the last: %v", b.mu.failures, err))
	}
}

// observe feeds a round trip into the timeout estimator; mu must be held.
// A timeout is a sample of the timeout itself (the round trip took at
// least that): a Store that slows down pushes the timeout up to its
// maximum instead of failing call after call at a low one.
func (b *Breaker) observe(err error, rtt time.Duration) {
	if b.cfg.MaxTimeout <= b.cfg.Timeout {
		return
	}
	switch {
	case err == nil && rtt >= 0:
		b.mu.rtt.Add(rtt)
	case errors.Is(err, errTimedOut):
		b.mu.rtt.Add(b.Timeout())
	default:
		return
	}
	b.timeout.Store(int64(b.mu.rtt.Timeout(b.cfg.Timeout, b.cfg.MaxTimeout)))
}

// RTTEstimator is a smoothed round trip and its mean deviation (RFC
// 6298, alpha 1/8, beta 1/4), from which an adaptive timeout is derived:
// the Breaker's per-call Store timeout and node/forward's per-peer
// forwarding timeout. Pure: samples are passed in. The zero value has no
// sample; not safe for concurrent use.
type RTTEstimator struct {
	srtt, rttvar time.Duration
	n            int
}

// Add records a round trip of r.
func (e *RTTEstimator) Add(r time.Duration) {
	if e.n == 0 {
		e.srtt, e.rttvar = r, r/2
	} else {
		d := e.srtt - r
		if d < 0 {
			d = -d
		}
		e.rttvar += (d - e.rttvar) / 4
		e.srtt += (r - e.srtt) / 8
	}
	e.n++
}

// Timeout is 2 × (srtt + 4·rttvar) within [lo, hi]; lo before any sample.
func (e *RTTEstimator) Timeout(lo, hi time.Duration) time.Duration {
	if e.n == 0 {
		return lo
	}
	return min(max(2*(e.srtt+4*e.rttvar), lo), hi)
}

// callerError reports whether err is the caller's fault rather than the
// Store's: a refused policy or algorithm is an answer, not a failure.
func callerError(err error) bool {
	var fe *FieldError
	return errors.Is(err, ErrWrongAlgorithm) || errors.Is(err, ErrNoSlot) || errors.As(err, &fe)
}

// errTimedOut marks a call that the breaker's timeout ended.
var errTimedOut = errors.New("timed out")

// do runs one Store call through the breaker.
func do[T any](b *Breaker, ctx context.Context, op int, f func(context.Context) (T, error)) (T, error) {
	var zero T
	probe, ok := b.admit()
	if !ok {
		b.met.storeCalls[op][resultRejected].Inc()
		return zero, errBreakerOpen
	}
	epoch := b.epoch.Load()
	if err := ctx.Err(); err != nil {
		b.record(probe, false, nil, epoch, -1)
		b.met.storeCalls[op][resultCanceled].Inc()
		return zero, err
	}
	timeout := b.Timeout()
	if op == opReturn {
		// No check waits for a return, and a return that times out
		// loses its tokens (under-admission): it gets the maximum.
		timeout = b.cfg.MaxTimeout
	}
	start := time.Now()
	var cctx context.Context
	cancel := func() {}
	if b.byDeadline {
		cctx = withDeadline(ctx, start.Add(timeout))
	} else {
		cctx, cancel = context.WithTimeout(ctx, timeout)
	}
	v, err := f(cctx)
	rtt := time.Since(start)
	// Read before cancel, after which cctx.Err() is never nil.
	timedOut := cctx.Err() != nil
	cancel()
	b.met.storeLatency[op].Update(rtt.Seconds())
	switch {
	case err == nil || callerError(err):
		b.record(probe, true, nil, epoch, rtt)
		b.met.storeCalls[op][resultOK].Inc()
		return v, err
	case ctx.Err() != nil:
		// The caller's context ended: says nothing about the Store.
		b.record(probe, false, nil, epoch, -1)
		b.met.storeCalls[op][resultCanceled].Inc()
		return zero, err
	case errors.Is(err, context.DeadlineExceeded) || timedOut:
		err = fmt.Errorf("cannot %s: %w: %w after %v", opNames[op], ErrStoreUnavailable, errTimedOut, timeout)
		b.record(probe, true, err, epoch, -1)
		b.met.storeCalls[op][resultTimeout].Inc()
		return zero, err
	default:
		if errors.Is(err, ErrStoreUnavailable) {
			err = fmt.Errorf("cannot %s: %w", opNames[op], err)
		} else {
			err = fmt.Errorf("cannot %s: %w: %w", opNames[op], ErrStoreUnavailable, err)
		}
		b.record(probe, true, err, epoch, -1)
		b.met.storeCalls[op][resultError].Inc()
		return zero, err
	}
}

// Lease implements Leaser.
func (b *Breaker) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	return do(b, ctx, opLease, func(ctx context.Context) (Grant, error) { return b.store.Lease(ctx, key, p, want, need, to) })
}

// Return implements Leaser.
func (b *Breaker) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	_, err := do(b, ctx, opReturn, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.store.Return(ctx, key, p, tokens, holder)
	})
	return err
}

// Log implements Exact.
func (b *Breaker) Log(ctx context.Context, key string, p Policy, hits int64) (Result, error) {
	return do(b, ctx, opLog, func(ctx context.Context) (Result, error) { return b.store.Log(ctx, key, p, hits) })
}

// Acquire implements Exact.
func (b *Breaker) Acquire(ctx context.Context, key string, p Policy, id string, hits int64) (Result, error) {
	return do(b, ctx, opAcquire, func(ctx context.Context) (Result, error) { return b.store.Acquire(ctx, key, p, id, hits) })
}

// Release implements Exact.
func (b *Breaker) Release(ctx context.Context, key string, p Policy, id string) error {
	_, err := do(b, ctx, opRelease, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, b.store.Release(ctx, key, p, id)
	})
	return err
}
