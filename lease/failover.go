package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/lease/logkey"
)

// failover is what a Manager does when the Store fails: FailLocal's
// episodes (a key decided on the local Store, seeded from the Store's last
// answer, what it admitted charged to the Store when it is back) and the
// charges owed to a Store that was down again. It owns the local Store
// and the books of the episodes and of the charges owed; it reaches the
// rest of the Manager it needs (the Store behind its breaker, the tokens
// on hand, the slots, the background goroutines) through the pointers
// NewManager sets once.
type failover struct {
	local Store
	own   *MemoryStore // the default Local, closed by Close
	// degraded holds the buckets in a FailLocal episode: their Store calls
	// failed and their local state was seeded from the Store's last
	// answer. A successful lease or the bucket's eviction ends the
	// episode. The mutex orders starts and ends (m is read without it:
	// every degraded check looks); n counts m's entries, so the lease
	// path skips the lock when there are none.
	degraded struct {
		sync.Mutex
		m sync.Map // *bucket → *episode
		n atomic.Int64
	}
	// owed holds what local mode admitted and the Store could not be
	// charged yet (the Store was down again when the episode ended, as
	// for a key evicted during an outage), per key and policy: charged
	// when the breaker closes and at each sweep with the Store up. At most
	// maxOwed keys; beyond, the hits count as failed charges.
	owed struct {
		sync.Mutex
		m map[owedKey]int64
	}

	store   *Breaker
	ctx     context.Context
	cfg     *Config // Logger, UnknownLocalShare, ReturnWorkers
	met     *leaseMetrics
	clk     *clock
	slots   *slots
	striped *stripeTable
	bg      *background
}

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
	return m.fo.decideLocal(b, key, p, hits)
}

// decideLocal decides a check of hits by FailLocal: the same math in
// this node's memory (see failure).
func (fo *failover) decideLocal(b *bucket, key string, p Policy, hits int64) Decision {
	// Not under the Store's deadline: a local decision never waits on the
	// Store (the check may have spent its budget already) and is never a
	// 503.
	ctx := fo.ctx
	if !p.Algorithm.Leased() {
		r, lerr := fo.local.Log(ctx, key, p, hits)
		if lerr != nil {
			return Decision{Limit: p.Limit, RetryAfter: fo.store.Config().Cooldown, Unavailable: true}
		}
		return Decision{Allowed: r.Allowed, Limit: p.Limit, Remaining: r.Remaining, Reset: r.Reset, RetryAfter: r.RetryAfter, Degraded: true}
	}
	if b != nil {
		fo.seedLocal(ctx, b, p)
	}
	g, lerr := fo.local.Lease(ctx, key, p, hits, hits, Lessee{})
	if lerr != nil {
		return Decision{Limit: p.Limit, RetryAfter: fo.store.Config().Cooldown, Unavailable: true}
	}
	if hits == 0 || (g.Granted >= hits && g.Granted > 0) {
		if b != nil && hits > 0 {
			if e, ok := fo.degraded.m.Load(b); ok {
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
func (fo *failover) seedLocal(ctx context.Context, b *bucket, p Policy) {
	if _, ok := fo.degraded.m.Load(b); ok {
		return // the episode goes on, its bucket seeded
	}
	if seedWaitHook != nil {
		seedWaitHook()
	}
	fo.degraded.Lock()
	defer fo.degraded.Unlock()
	if _, ok := fo.degraded.m.Load(b); ok || b.denyUntil.Load() == evicted {
		return
	}
	// The episode is published only once the local bucket is seeded:
	// a check that finds it goes straight to the local bucket, so one
	// that found it mid-seed could spend the unseeded capacity.
	defer func() {
		fo.degraded.m.Store(b, &episode{})
		fo.degraded.n.Add(1)
	}()
	fo.seedLevel(ctx, b, p)
}

// seedLevel charges the local Store down to the level seedLocal starts
// b's episode at.
func (fo *failover) seedLevel(ctx context.Context, b *bucket, p Policy) {
	level, known := b.storeLevel(fo.clk.nanosFor(&p))
	if !known {
		if fo.cfg.UnknownLocalShare == nil {
			return // the whole capacity
		}
		share := fo.cfg.UnknownLocalShare()
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
	g, err := fo.local.Lease(ctx, b.key(), p, 0, 0, Lessee{})
	if err == nil && g.Remaining > level {
		_, err = fo.local.Lease(ctx, b.key(), p, g.Remaining-level, 0, Lessee{})
	}
	if err != nil {
		fo.cfg.Logger.Warn("cannot seed the local bucket", logkey.Attr(b.key()), "err", err)
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
func (fo *failover) endDegraded(b *bucket) {
	fo.chargeLater(b, fo.takeEpisode(b))
}

// chargeLater pays, in the background, for n hits of b's key that local
// mode admitted (see payEpisode).
func (fo *failover) chargeLater(b *bucket, n int64) {
	if n > 0 {
		if !fo.bg.spawn(func() { fo.payEpisode(b, n) }) {
			// Closing: the caller may hold the key's slot (an eviction),
			// and no lease call is started any more.
			fo.payEpisodeHeld(b, n)
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
func (fo *failover) payEpisode(b *bucket, n int64) {
	s := fo.slots.claimWait(b)
	defer fo.slots.release(b, s, nil)
	fo.payEpisodeHeld(b, n)
}

// payEpisodeHeld is payEpisode for a caller that holds b's key's slot, or
// knows no lease call can start.
func (fo *failover) payEpisodeHeld(b *bucket, n int64) {
	if n -= fo.striped.takeUpTo(b, n); n > 0 {
		fo.charge(b.key(), *b.pol, n)
	}
}

// takeEpisode ends b's episode and returns the hits it admitted.
func (fo *failover) takeEpisode(b *bucket) int64 {
	if fo.degraded.n.Load() == 0 {
		return 0
	}
	fo.degraded.Lock()
	e, ok := fo.degraded.m.LoadAndDelete(b)
	if ok {
		fo.degraded.n.Add(-1)
	}
	fo.degraded.Unlock()
	if !ok {
		return 0
	}
	return e.(*episode).admitted.Load()
}

// reconcileAll ends every FailLocal episode when the Store is back (the
// breaker closed), charging each key what local mode admitted, with at
// most ReturnWorkers Store calls at once. Keys checked again meanwhile end
// theirs with their first lease; each episode is charged once.
func (fo *failover) reconcileAll() {
	type charge struct {
		b *bucket
		n int64
	}
	defer fo.chargeOwed()
	var todo []charge
	fo.degraded.m.Range(func(k, _ any) bool {
		b := k.(*bucket)
		if n := fo.takeEpisode(b); n > 0 {
			todo = append(todo, charge{b, n})
		}
		return true
	})
	if len(todo) == 0 {
		return
	}
	eachStoreCall(fo.cfg.ReturnWorkers, len(todo), func(i int) { fo.payEpisode(todo[i].b, todo[i].n) })
	fo.cfg.Logger.Info("store back: local-mode admissions charged", "keys", len(todo))
}

// charge takes n tokens of key from the Store for hits local mode
// admitted (need 0: never refused for lack of tokens; an empty Lessee:
// spent at once). What the Store no longer had is the outage's excess. A
// charge that fails is owed (see failover.owed); key must be the
// Manager's own copy.
func (fo *failover) charge(key string, p Policy, n int64) {
	g, err := fo.store.Lease(fo.ctx, key, p, n, 0, Lessee{})
	if err != nil {
		if fo.ctx.Err() == nil && fo.owe(key, p, n) {
			fo.cfg.Logger.Debug("local-mode admissions owed to the Store until it is back", logkey.Attr(key), "hits", n, "err", err)
			return
		}
		fo.met.reconciledTokens[reconcileFailed].AddInt64(n)
		fo.cfg.Logger.Warn("cannot charge the Store for local-mode admissions", logkey.Attr(key), "hits", n, "err", err)
		return
	}
	fo.met.reconciledTokens[reconcileCharged].AddInt64(g.Granted)
	fo.met.reconciledTokens[reconcileExcess].AddInt64(n - g.Granted)
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
func (fo *failover) owe(key string, p Policy, n int64) bool {
	fo.owed.Lock()
	defer fo.owed.Unlock()
	k := owedKey{key, p}
	if _, ok := fo.owed.m[k]; !ok && len(fo.owed.m) >= maxOwed {
		return false
	}
	if fo.owed.m == nil {
		fo.owed.m = make(map[owedKey]int64)
	}
	fo.owed.m[k] += n
	return true
}

// chargeOwed charges the Store what is owed to it, with at most
// ReturnWorkers calls at once; what fails again stays owed.
func (fo *failover) chargeOwed() {
	fo.owed.Lock()
	owed := fo.owed.m
	fo.owed.m = nil
	fo.owed.Unlock()
	if len(owed) == 0 {
		return
	}
	todo := make([]owedKey, 0, len(owed))
	for k := range owed {
		todo = append(todo, k)
	}
	eachStoreCall(fo.cfg.ReturnWorkers, len(todo), func(i int) { fo.charge(todo[i].key, todo[i].p, owed[todo[i]]) })
	fo.cfg.Logger.Info("store back: owed local-mode admissions charged", "keys", len(todo))
}

// dropOwed gives up what is still owed (the Manager closes), counting it
// as failed charges.
func (fo *failover) dropOwed() {
	fo.owed.Lock()
	owed := fo.owed.m
	fo.owed.m = nil
	fo.owed.Unlock()
	for k, n := range owed {
		fo.met.reconciledTokens[reconcileFailed].AddInt64(n)
		fo.cfg.Logger.Warn("cannot charge the Store for local-mode admissions", logkey.Attr(k.key), "hits", n, "err", "the Store is down and the node stops")
	}
}
