package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// BreakerConfig configures a [Breaker]. Every field's zero value means its
// default (see [DefaultBreakerConfig]).
type BreakerConfig struct {
	// Timeout bounds each Store call. Zero means 50ms. A Manager sets it to
	// its Config.StoreTimeout.
	Timeout time.Duration
	// Failures is the number of consecutive failures (errors or timeouts,
	// not the caller's own context ending) that open the breaker. Zero
	// means 5.
	Failures int
	// Cooldown is how long the breaker stays open before it lets one probe
	// call through (half-open). Zero means 1s. FailClosed rules report it
	// as RetryAfter.
	Cooldown time.Duration
	// Now is the clock used for the cool-down. Nil means time.Now. A
	// Manager sets it to its own clock.
	Now func() time.Time
}

// DefaultBreakerConfig returns the defaults: a 50ms timeout (a rate-limit
// check must stay fast; a healthy Redis answers in well under 1ms), 5
// consecutive failures (one slow call or a lost packet does not flip a
// whole node into its failure mode) and a 1s cool-down (one probe per
// second is no load on a recovering Redis, and a check waits at most a
// second longer than needed to go back to leasing).
func DefaultBreakerConfig() BreakerConfig {
	return BreakerConfig{Timeout: 50 * time.Millisecond, Failures: 5, Cooldown: time.Second, Now: time.Now}
}

func (c BreakerConfig) withDefaults() BreakerConfig {
	d := DefaultBreakerConfig()
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.Failures <= 0 {
		c.Failures = d.Failures
	}
	if c.Cooldown <= 0 {
		c.Cooldown = d.Cooldown
	}
	if c.Now == nil {
		c.Now = d.Now
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

// Breaker is a Store that wraps another Store with a per-call timeout and a
// circuit breaker: after Failures consecutive failures it opens, and calls
// fail fast with an error wrapping ErrStoreUnavailable until Cooldown has
// passed; then one probe call goes through, and its success closes the
// breaker. Errors that are the caller's (its context ending, a policy the
// Store refuses, ErrWrongAlgorithm) pass through and are not counted.
//
// The timeout is applied through the context: the wrapped Store must honour
// its context's deadline (every network call does).
//
// A Breaker is safe for concurrent use.
type Breaker struct {
	store Store
	cfg   BreakerConfig
	state atomic.Uint32 // BreakerState, readable without mu
	// openUntil is, while open, when the cool-down ends (Unix ns): until
	// then Rejecting answers without the mutex.
	openUntil atomic.Int64

	// mu protects the fields of the state machine.
	mu struct {
		sync.Mutex
		failures int       // consecutive failures while closed
		openedAt time.Time // when the breaker last opened
		probing  bool      // a half-open probe is in flight
	}
}

// NewBreaker returns a Breaker around store.
func NewBreaker(store Store, cfg BreakerConfig) *Breaker {
	return &Breaker{store: store, cfg: cfg.withDefaults()}
}

// State returns the breaker's state. An open breaker whose cool-down has
// passed reports BreakerOpen until a call probes it.
func (b *Breaker) State() BreakerState { return BreakerState(b.state.Load()) }

// Rejecting reports whether a call made now would fail fast (open, in its
// cool-down). Callers use it to skip work they would do only to reach a
// Store call; it takes no lock.
func (b *Breaker) Rejecting() bool {
	return BreakerState(b.state.Load()) == BreakerOpen && b.cfg.Now().UnixNano() < b.openUntil.Load()
}

// Config returns the breaker's configuration with defaults filled in.
func (b *Breaker) Config() BreakerConfig { return b.cfg }

var errBreakerOpen = fmt.Errorf("%w: circuit breaker open", ErrStoreUnavailable)

// admit decides whether a call may go through; probe reports whether the
// call is the half-open probe.
func (b *Breaker) admit() (probe bool, ok bool) {
	if BreakerState(b.state.Load()) == BreakerClosed {
		return false, true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state.Load()) {
	case BreakerClosed:
		return false, true
	case BreakerOpen:
		if b.cfg.Now().Sub(b.mu.openedAt) < b.cfg.Cooldown {
			return false, false
		}
		b.setState(BreakerHalfOpen)
	}
	if b.mu.probing {
		return false, false
	}
	b.mu.probing = true
	return true, true
}

// open opens the breaker; mu must be held.
func (b *Breaker) open() {
	b.mu.openedAt = b.cfg.Now()
	b.openUntil.Store(b.mu.openedAt.Add(b.cfg.Cooldown).UnixNano())
	b.setState(BreakerOpen)
}

// setState must be called with mu held.
func (b *Breaker) setState(s BreakerState) {
	old := BreakerState(b.state.Swap(uint32(s)))
	breakerState.Add(stateWeight(s) - stateWeight(old))
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

// record feeds one call's outcome into the state machine: failed is true
// for a failure that counts, counted is false for an outcome that says
// nothing about the Store (the caller's context ended).
func (b *Breaker) record(probe, counted, failed bool) {
	if !probe && !counted {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if probe {
		b.mu.probing = false
		if !counted {
			return // stay half-open: the next call probes again
		}
		if failed {
			b.open()
		} else {
			b.mu.failures = 0
			b.setState(BreakerClosed)
		}
		return
	}
	if !failed {
		b.mu.failures = 0
		return
	}
	b.mu.failures++
	if b.mu.failures >= b.cfg.Failures && BreakerState(b.state.Load()) == BreakerClosed {
		b.open()
	}
}

// callerError reports whether err is the caller's fault rather than the
// Store's: a refused policy or algorithm is an answer, not a failure.
func callerError(err error) bool {
	var fe *FieldError
	return errors.Is(err, ErrWrongAlgorithm) || errors.As(err, &fe)
}

// do runs one Store call through the breaker.
func do[T any](b *Breaker, ctx context.Context, op int, f func(context.Context) (T, error)) (T, error) {
	var zero T
	probe, ok := b.admit()
	if !ok {
		storeCalls[op][resultRejected].Inc()
		return zero, errBreakerOpen
	}
	if err := ctx.Err(); err != nil {
		b.record(probe, false, false)
		storeCalls[op][resultCanceled].Inc()
		return zero, err
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	start := time.Now()
	v, err := f(cctx)
	// Read before cancel, after which cctx.Err() is never nil.
	timedOut := cctx.Err() != nil
	cancel()
	storeLatency[op].UpdateDuration(start)
	switch {
	case err == nil || callerError(err):
		b.record(probe, true, false)
		storeCalls[op][resultOK].Inc()
		return v, err
	case ctx.Err() != nil:
		// The caller's context ended: says nothing about the Store.
		b.record(probe, false, false)
		storeCalls[op][resultCanceled].Inc()
		return zero, err
	case errors.Is(err, context.DeadlineExceeded) || timedOut:
		b.record(probe, true, true)
		storeCalls[op][resultTimeout].Inc()
		return zero, fmt.Errorf("cannot %s: %w: timed out after %v", opNames[op], ErrStoreUnavailable, b.cfg.Timeout)
	default:
		b.record(probe, true, true)
		storeCalls[op][resultError].Inc()
		if errors.Is(err, ErrStoreUnavailable) {
			return zero, fmt.Errorf("cannot %s: %w", opNames[op], err)
		}
		return zero, fmt.Errorf("cannot %s: %w: %w", opNames[op], ErrStoreUnavailable, err)
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
