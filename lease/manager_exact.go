package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// takeExact serves sliding_log (and refuses concurrency).
func (m *Manager) takeExact(key string, p Policy, hits int64) (Decision, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, err
	}
	if !p.Algorithm.Logged() {
		return Decision{}, fmt.Errorf("cannot take %s: %w (use Acquire)", p.Algorithm, ErrWrongAlgorithm)
	}
	m.st.storeDecisions.Add(1)
	m.met.decisionsStore.Inc()
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

// Acquire takes one slot of a concurrency limit for a new unique id,
// returned when allowed. As for Take, key need not outlive the call (and
// so for Refund and Release). hits = 0 peeks (no id). The error is non-nil only
// for a bad call: hits other than 0 or 1, an invalid policy, or an
// algorithm other than concurrency (ErrWrongAlgorithm).
func (m *Manager) Acquire(key string, p Policy, hits int64) (Decision, string, error) {
	if err := p.Validate(); err != nil {
		return Decision{}, "", err
	}
	if !p.Algorithm.Acquired() {
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
	m.met.decisionsStore.Inc()
	r, err := m.store.Acquire(m.ctx, key, p, id, hits)
	degraded := false
	if err != nil {
		if callerError(err) {
			return Decision{}, "", err
		}
		m.st.degraded.Add(1)
		m.met.decisionsDegraded.Inc()
		degraded = true
		switch p.OnFailure {
		case FailOpen:
			return Decision{Allowed: true, Limit: p.Limit, Degraded: true}, id, nil
		case FailClosed:
			return Decision{Limit: p.Limit, RetryAfter: m.store.Config().Cooldown, Unavailable: true}, "", nil
		}
		ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StoreTimeout)
		r, err = m.fo.local.Acquire(ctx, key, p, id, hits)
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
	if !p.Algorithm.Acquired() {
		return fmt.Errorf("cannot release %s: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	if id == "" {
		return &FieldError{Field: "lease_id", Msg: "must not be empty"}
	}
	key = strings.Clone(key) // Stores may keep it
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.StoreTimeout)
	localErr := m.fo.local.Release(ctx, key, p, id) // a slot taken while degraded
	cancel()
	err := m.store.Release(m.ctx, key, p, id)
	if errors.Is(err, ErrNoSlot) && localErr == nil {
		return nil // the slot was taken from memory while the Store was down
	}
	return err
}

// newID returns 16 random bytes in hex.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand docs)
	return hex.EncodeToString(b[:])
}
