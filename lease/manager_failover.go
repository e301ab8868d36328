package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/lease/logkey"
)

// failure decides a check of hits by p's failure mode after the Store
// failed with err. b may be nil; then key must be the Manager's own copy
// (it goes to the Stores and the log).
func (m *Manager) failure(b *bucket, key string, p Policy, hits int64, err error) Decision {
	if b != nil {
		key = b.key()
	}
	m.st.degraded.Add(1)
	m.met.decisionsDegraded.Inc()
	m.cfg.Logger.Debug("store unavailable", logkey.Attr(key), "mode", p.OnFailure.String(), "err", err)
	var remaining int64
	if b != nil {
		remaining = m.striped.onHand(b) + b.remaining.Load()
	}
	switch p.OnFailure {
	case FailOpen:
		return Decision{Allowed: true, Limit: p.Limit, Remaining: remaining, Degraded: true}
	case FailClosed:
		// Down (the breaker open, a call refused or failed): 503. Only
		// slow (the check's budget ran out while the Store still works on
		// it, or its call timed out): a denial, 429, as a closed rule
		// denies what it cannot decide in time; the Store is no more
		// unavailable than a busy owner is.
		slow := errors.Is(err, errBudget) || errors.Is(err, errStoreSlow) || errors.Is(err, errTimedOut)
		return Decision{Limit: p.Limit, Remaining: remaining, RetryAfter: m.store.Config().Cooldown, Unavailable: !slow}
	}
	// FailLocal: the same math in this node's memory. Not under the
	// Store's deadline: a local decision never waits on the Store (the
	// check may have spent its budget already) and is never a 503.
	ctx := m.ctx
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
	g, lerr := m.local.Lease(ctx, key, p, hits, hits, Lessee{})
	if lerr != nil {
		return Decision{Limit: p.Limit, RetryAfter: m.store.Config().Cooldown, Unavailable: true}
	}
	if hits == 0 || (g.Granted >= hits && g.Granted > 0) {
		if b != nil && hits > 0 {
			if e, ok := m.degraded.m.Load(b); ok {
				e.(*episode).admitted.Add(hits) // charged to the Store when it returns
			}
		}
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
// go by and starts at Config.UnknownLocalShare of its capacity (full by
// default). The lock is held across the local calls: they
// are this node's memory, and episodes start rarely.
func (m *Manager) seedLocal(ctx context.Context, b *bucket, p Policy) {
	if _, ok := m.degraded.m.Load(b); ok {
		return // the episode goes on, its bucket seeded
	}
	if seedWaitHook != nil {
		seedWaitHook()
	}
	m.degraded.Lock()
	defer m.degraded.Unlock()
	if _, ok := m.degraded.m.Load(b); ok || b.denyUntil.Load() == evicted {
		return
	}
	// The episode is published only once the local bucket is seeded:
	// a check that finds it goes straight to the local bucket, so one
	// that found it mid-seed could spend the unseeded capacity.
	defer func() {
		m.degraded.m.Store(b, &episode{})
		m.degraded.n.Add(1)
	}()
	m.seedLevel(ctx, b, p)
}

// seedLevel charges the local Store down to the level seedLocal starts
// b's episode at.
func (m *Manager) seedLevel(ctx context.Context, b *bucket, p Policy) {
	level, known := b.storeLevel(m.clk.nanosFor(&p))
	if !known {
		if m.cfg.UnknownLocalShare == nil {
			return // the whole capacity
		}
		share := m.cfg.UnknownLocalShare()
		if !(share < 1) {
			return
		}
		level = int64(float64(p.Capacity()) * max(share, 0))
	}
	if level >= p.Capacity() {
		return
	}
	// The local level becomes min(local, Store's): a peek, then a charge
	// of the difference (need 0: it never fails for lack of tokens). A
	// failure leaves the local bucket as it was.
	g, err := m.local.Lease(ctx, b.key(), p, 0, 0, Lessee{})
	if err == nil && g.Remaining > level {
		_, err = m.local.Lease(ctx, b.key(), p, g.Remaining-level, 0, Lessee{})
	}
	if err != nil {
		m.cfg.Logger.Warn("cannot seed the local bucket", logkey.Attr(b.key()), "err", err)
	}
}

// seedWaitHook, when set (by tests only), runs when a check finds no
// episode and goes to start one.
var seedWaitHook func()

// episode is a bucket's FailLocal episode.
type episode struct {
	// admitted is the hits local mode admitted: the Store never saw
	// them, and is charged them when the episode ends.
	admitted atomic.Int64
}

// endDegraded ends b's FailLocal episode, if any (a lease succeeded, or b
// left the index), and charges the Store what it admitted, in the
// background.
func (m *Manager) endDegraded(b *bucket) {
	m.chargeLater(b, m.takeEpisode(b))
}

// chargeLater pays, in the background, for n hits of b's key that local
// mode admitted (see payEpisode).
func (m *Manager) chargeLater(b *bucket, n int64) {
	if n > 0 {
		if !m.goBG(func() { m.payEpisode(b, n) }) {
			// Closing: the caller may hold the key's slot (an eviction),
			// and no lease call is started any more.
			m.payEpisodeHeld(b, n)
		}
	}
}

// payEpisode pays for n hits of b's key that local mode admitted: from
// the tokens this Manager holds of the key first (the Store lent them:
// spending them is the charge, already made), then by charging the
// Store the rest. It holds the key's lease slot, so that no lease call is
// out meanwhile: a grant that lands after the charge found the Store empty
// (the grant took what was left) would otherwise leave the hits unpaid,
// counted as the outage's excess while this Manager holds tokens to pay
// them.
func (m *Manager) payEpisode(b *bucket, n int64) {
	s := m.inflight.claimWait(b)
	defer m.inflight.release(b, s, nil)
	m.payEpisodeHeld(b, n)
}

// payEpisodeHeld is payEpisode for a caller that holds b's key's slot, or
// knows no lease call can start.
func (m *Manager) payEpisodeHeld(b *bucket, n int64) {
	if n -= m.striped.takeUpTo(b, n); n > 0 {
		m.charge(b.key(), *b.pol, n)
	}
}

// takeEpisode ends b's episode and returns the hits it admitted.
func (m *Manager) takeEpisode(b *bucket) int64 {
	if m.degraded.n.Load() == 0 {
		return 0
	}
	m.degraded.Lock()
	e, ok := m.degraded.m.LoadAndDelete(b)
	if ok {
		m.degraded.n.Add(-1)
	}
	m.degraded.Unlock()
	if !ok {
		return 0
	}
	return e.(*episode).admitted.Load()
}

// reconcileAll ends every FailLocal episode when the Store is back (the
// breaker closed), charging each key what local mode admitted, with at
// most ReturnWorkers Store calls at once. Keys checked again meanwhile end
// theirs with their first lease; each episode is charged once.
func (m *Manager) reconcileAll() {
	type charge struct {
		b *bucket
		n int64
	}
	defer m.chargeOwed()
	var todo []charge
	m.degraded.m.Range(func(k, _ any) bool {
		b := k.(*bucket)
		if n := m.takeEpisode(b); n > 0 {
			todo = append(todo, charge{b, n})
		}
		return true
	})
	if len(todo) == 0 {
		return
	}
	m.eachStoreCall(len(todo), func(i int) { m.payEpisode(todo[i].b, todo[i].n) })
	m.cfg.Logger.Info("store back: local-mode admissions charged", "keys", len(todo))
}

// charge takes n tokens of key from the Store for hits local mode
// admitted (need 0: never refused for lack of tokens; an empty Lessee:
// spent at once). What the Store no longer had is the outage's excess. A
// charge that fails is owed (see Manager.owed); key must be the
// Manager's own copy.
func (m *Manager) charge(key string, p Policy, n int64) {
	g, err := m.store.Lease(m.ctx, key, p, n, 0, Lessee{})
	if err != nil {
		if m.ctx.Err() == nil && m.owe(key, p, n) {
			m.cfg.Logger.Debug("local-mode admissions owed to the Store until it is back", logkey.Attr(key), "hits", n, "err", err)
			return
		}
		m.met.reconciledTokens[reconcileFailed].AddInt64(n)
		m.cfg.Logger.Warn("cannot charge the Store for local-mode admissions", logkey.Attr(key), "hits", n, "err", err)
		return
	}
	m.met.reconciledTokens[reconcileCharged].AddInt64(g.Granted)
	m.met.reconciledTokens[reconcileExcess].AddInt64(n - g.Granted)
}

// maxOwed bounds the keys whose local-mode admissions are owed to the
// Store at once (a key and its policy, about 100 bytes each).
const maxOwed = 100_000

// owedKey is a key and policy whose charge is owed.
type owedKey struct {
	key string
	p   Policy
}

// owe records n hits of key owed to the Store; false if maxOwed keys are
// owed already.
func (m *Manager) owe(key string, p Policy, n int64) bool {
	m.owed.Lock()
	defer m.owed.Unlock()
	k := owedKey{key, p}
	if _, ok := m.owed.m[k]; !ok && len(m.owed.m) >= maxOwed {
		return false
	}
	if m.owed.m == nil {
		m.owed.m = make(map[owedKey]int64)
	}
	m.owed.m[k] += n
	return true
}

// chargeOwed charges the Store what is owed to it, with at most
// ReturnWorkers calls at once; what fails again stays owed.
func (m *Manager) chargeOwed() {
	m.owed.Lock()
	owed := m.owed.m
	m.owed.m = nil
	m.owed.Unlock()
	if len(owed) == 0 {
		return
	}
	todo := make([]owedKey, 0, len(owed))
	for k := range owed {
		todo = append(todo, k)
	}
	m.eachStoreCall(len(todo), func(i int) { m.charge(todo[i].key, todo[i].p, owed[todo[i]]) })
	m.cfg.Logger.Info("store back: owed local-mode admissions charged", "keys", len(todo))
}

// dropOwed gives up what is still owed (the Manager closes), counting it
// as failed charges.
func (m *Manager) dropOwed() {
	m.owed.Lock()
	owed := m.owed.m
	m.owed.m = nil
	m.owed.Unlock()
	for k, n := range owed {
		m.met.reconciledTokens[reconcileFailed].AddInt64(n)
		m.cfg.Logger.Warn("cannot charge the Store for local-mode admissions", logkey.Attr(k.key), "hits", n, "err", "the Store is down and the node stops")
	}
}
