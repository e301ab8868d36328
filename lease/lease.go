// Package lease owns Sluice's decisions: the contract of the algorithms
// (below; their table and pure math are package lease/algo, whose types
// this package re-exports), the Store interface that holds the
// authoritative state of every counter key (the in-memory Store is
// package lease/memstore, re-exported as MemoryStore), and the Manager
// that keeps leased tokens in memory so that almost every check is
// answered without I/O. On a Store in the process's own memory a Manager
// may instead decide each check in the Store (Config.Direct), leasing
// nothing.
//
// # Algorithms
//
// Six algorithms are supported (see [Algorithm]). Four are leased: a node
// takes a batch of tokens from the Store and spends them locally. Two are
// exact (sliding_log and concurrency): every check is one Store call.
//
// The semantics below are the contract that every Store implements (the
// in-memory store in Go, the Redis store in Lua) and that the conformance
// suite in lease/storetest checks. "now" is the Store's clock (Redis TIME
// for Redis). Durations are reported in whole milliseconds, rounded up, so
// that a client that waits retry_after is never early.
//
// A lease call is Lease(key, policy, want, need) with 0 ≤ need ≤ want. Let
// avail be the whole tokens available now after refill. If avail ≥ need the
// Store grants min(want, avail) tokens, which are gone from the Store (they
// are the caller's to spend); otherwise it grants nothing and reports Wait,
// the time until need tokens will be available. need = 0 with want = 0 is a
// peek: nothing changes, Remaining says what is available. A need larger
// than the policy's capacity can never be met: nothing is granted and Wait
// is one Period.
//
//   - token_bucket: capacity = Burst, refill Limit tokens per Period,
//     continuously. State: tokens (fractional) and the time of the last
//     update. avail = floor(tokens). Wait = (need - tokens) / rate.
//     Reset = (capacity - tokens_after) / rate: when the bucket is full again.
//   - gcra: the same limits expressed as one theoretical arrival time (TAT):
//     emission interval T = Period/Limit, tolerance tau = Burst*T.
//     avail = floor((now + tau - max(TAT, now)) / T). A grant of g moves
//     TAT to max(TAT, now) + g*T. Wait = max(TAT,now) + need*T - tau - now.
//     Reset = TAT_after - now.
//   - fixed_window: windows aligned on multiples of Period since the Unix
//     epoch; avail = Limit - count of the current window. Wait and Reset are
//     the time to the end of the current window. State expires after two
//     windows.
//   - sliding_window: the weighted estimate
//     est = prev * (1 - elapsed/Period) + cur, where elapsed is the time
//     since the current window began; avail = floor(Limit - est). A grant
//     adds to cur. Wait: the time until est + need ≤ Limit (inside the
//     current window if prev's weight falling is enough, else in the next
//     window where cur becomes prev). Reset: the time until est would be 0
//     (end of the next window if cur > 0, end of this one if only prev > 0).
//
// The exact algorithms:
//
//   - sliding_log (the rolling window of the sorted-set design): stamps older
//     than now - Period are removed; if count + hits > Limit the check is
//     denied and RetryAfter is the time until enough stamps have left the
//     window; else if MinInterval > 0 and the newest stamp is less than
//     MinInterval old, it is denied and RetryAfter is the time until it is
//     MinInterval old; else hits stamps of now are recorded (each a distinct
//     member). hits = 0 peeks: always allowed, records nothing.
//     Remaining = Limit - count after the check.
//     Reset = time until the newest stamp leaves the window.
//   - concurrency: Limit is the maximum in flight, Period the lease TTL.
//     Acquire reaps ids whose expiry has passed, then admits the id (scored
//     now + Period) if fewer than Limit are held; RetryAfter on denial is the
//     time until the earliest held id expires. Release removes an id (an
//     unknown id is not an error). Remaining = Limit - held. hits = 0
//     peeks: it answers whether an Acquire would be admitted now (a
//     concurrency limit has no amount to report otherwise) and records
//     nothing; it is the one peek that can be "denied".
//
// # Lent tokens
//
// Granted tokens are lent, not gone: the Store keeps, per key and per
// holder h (a Lessee ID: one per Manager, see Config.Holder), lent_h, the
// tokens it lent h and does not know to be spent or returned, and, for
// token_bucket and gcra, exp_h, when that loan ends.
//
//   - A lease call from h says held, the tokens h still holds unspent of
//     the key when it sends the call; idle, how long since h last spent
//     one; and spent_before, how many of what the Store lent h as of h's
//     previous call h had spent before sending that call and did not
//     refund since. For token_bucket and gcra the call splits lent_h:
//     run = min(lent_h, held) are still lent; early = min(spent_before,
//     lent_h − run) were spent by last_h, h's last spend before its
//     previous call (that call's now − idle, which the Store keeps with the
//     loan); late, the rest, were spent by now − idle. The call sees early
//     and late as loans that ended then, so their refill since is not
//     withheld (crediting from the call instead would let a holder that
//     spends late also spend their refill). Every call of h with a running
//     loan settles it: a grant of g sets lent_h = run + g, a call that
//     grants nothing lent_h = run + late (h may still refund those); both
//     set exp_h = max(exp_h, now + TTL) and last_h = now − idle, and the
//     parts they settle become ended loans (below), so that their credit
//     holds whatever later calls say. For the windows a grant sets lent_h = min(lent_h, held) +
//     g and a call that grants nothing leaves the loan. Grant.Lent reports
//     lent_h after the call.
//   - token_bucket: the refill never passes capacity − Σ lent_h: at every
//     time t, level(t) + Σ_h lent_h(t) ≤ capacity. A loan that ends at
//     exp_h counts as spent then, and the refill goes on from where the cap
//     held it. gcra: the same, as a floor on the TAT: TAT ≥ now + Σ lent_h
//     × Period/Limit. The Store keeps the level as the refill less the
//     grants (the TAT as the grants') and applies the caps when it reads
//     it: those of the running loans, and those of the loans that ended
//     (the tokens a call reports spent, as of when they were spent; a loan
//     that expired or was returned, as of its end), which it keeps while
//     they still cap the level, at most 3 per key (beyond, the oldest
//     one's cap is applied to the stored level for good). So a holder's
//     spent tokens that another holder's call finds still lent hold the
//     level back only until they are reported. A grant to no holder (an
//     empty Lessee ID: spent at once, lending nothing) is taken off the
//     level as the caps leave it (the TAT moves on from the floor), so
//     that such spends while a loan runs never pass capacity − Σ lent_h
//     however far the refill alone would have gone; when a cap binds,
//     that bakes it into the stored level as the oldest ended loan's is
//     baked (the loans' tokens count as spent by then at the latest).
//   - fixed_window, sliding_window: a grant already counts in its window,
//     so lent_h does not cap anything; it lives in the window (a new
//     window starts with no loans) and bounds returns.
//   - fixed_window's shares ahead: a call of h may also ask share_h of each
//     of the next k windows (Lessee.AheadWindows, AheadTokens), so that a
//     key checked across many windows needs no call per window. The Store
//     lends min(asked, limit − the other holders' shares ahead), so the
//     shares never sum past the limit; when a window they cover starts,
//     its count starts at Σ_h share_h and lent_h = share_h, as if each
//     holder had been granted its share at the window's start. A return
//     ends h's loan with its shares; a call asking none ends them after
//     the current window; the key lives until a window after the last
//     window a share covers.
//   - Unanswered calls (token_bucket, gcra): each call carries a random
//     id (Lessee.Call); the Store keeps, per key, the id of the last call
//     that settled a loan and what it granted. A call whose answer h
//     never got (it timed out after the Store ran it) granted tokens h
//     cannot spend: h's next call of the key names it
//     (Lessee.Unanswered), and if it is still the key's last call, the
//     Store takes its grant off lent_h and gives it back to the key, as a
//     return would, before the call runs. A grant comes back once, and
//     only the named call's: if another call settled a loan after it
//     (another holder's, or h's calls reordered), nothing comes back and
//     the grant counts as spent (under-admission, never over).
//   - Return(key, p, r, h) ends h's loan: min(r, lent_h) tokens go back
//     (for windows, into the current window's count if the loan is of
//     that window); a return can never add tokens the Store did not lend
//     to h, and an empty holder ("") gets nothing back.
//   - A bounded number of holders (Lessee.MaxHolders = M > 0): h's loan
//     runs while the Store counts it: for token_bucket and gcra while
//     exp_h > now (token_bucket: now, or the key's stored time if later);
//     for the windows, a loan of the current window, a fixed_window share
//     lent into it or into a later window included. A call of h with no
//     running loan, when M holders have one, is crowded out: it lends
//     nothing and settles nothing; it is made as a call with no Lessee
//     for exactly need tokens (want is taken as need): need granted if
//     avail ≥ need, spent at once (taken off the level as the loans' caps
//     leave it, as any grant to no holder), else nothing, with need's
//     Wait; Grant.Lent is 0 and Grant.Crowded true. So the check that
//     asked is decided by the Store as a check, exactly, and a key has at
//     most M holders' running loans (h's loan that ended counts as spent
//     at its end, as any that expires). A holder with a running loan is
//     never crowded out, whatever M; a new holder gets in once a loan
//     ends (a return, its TTL, its window, a call that settles it to 0).
//     M = 0 bounds nothing. A Store call costs time linear in the key's
//     loans (a refilling key keeps them by expiry: A(E) of every loan is
//     one running sum), so M bounds it.
//
// A holder (the Manager) spends a token only while the Store counts it as
// lent: it dates a grant from when it sent the call, drops tokens at sent
// + TTL (≤ the Store's exp_h: no clock sync needed), makes at most one
// lease or return call per key at a time (so held is exact), and never
// holds more than Grant.Lent (tokens refunded while a call was out are
// clipped to it). It spends a share ahead only inside its window, which
// it dates from the call that lent it, late rather than early (from when
// the answer came plus Reset and the windows between, to when the call
// was sent plus the same, with an allowance for the two clocks' rates).
//
// The accuracy contract that follows, across all holders and for any
// interval [t, t+T] (A = hits admitted in it; the only excess is writes a
// Redis failover lost):
//
//	token_bucket, gcra:  A ≤ burst + T × limit/period
//	fixed_window:        A ≤ limit, per window
//	sliding_window:      prev × (1 − e/period) + cur ≤ limit at every e
//	sliding_log:         exact;  concurrency: in flight ≤ limit
//
// since the tokens in the system, level + Σ_h unspent_h ≤ level + Σ_h
// lent_h, never pass the burst, and only the refill adds to them.
//
// Under-admission is bounded too. A check is denied only when (a) the
// Store's last answer, projected to now by the refill since, cannot cover
// its hits (each check is judged on its own hits; hits = 0 is a peek and
// never denied), or (b) tokens it could use are lent, to any holder, and
// not yet reported spent: the Store counts a loan whole until that holder's
// next lease call reports what it still holds (Held), since when it spends
// nothing (Idle) and what of it it had spent before its previous call
// (SpentBefore), a return ends it, or it ends (at most LeaseTTL after the
// holder's last call); at most the sum of the holders' leases; for
// fixed_window, the shares lent into the window ahead count from its start
// the same way (the Manager asks only its smallest lease ahead,
// MinLeaseShare of the capacity: at most that per holder per window, as
// a kept idle loan; see Config.AheadHorizon). A call
// credits the refill of the tokens it reports spent from when they were
// spent as far as the holder can tell: those spent before its previous
// call from that call's last spend, the others from now − Idle (the
// holder's last spend, which may be later than some of them); a return
// credits from the return, and a holder's first lease of a key after its
// idle sweep dropped the key unreturned from Idle before the call. Once
// reported, spent tokens hold nothing back, whatever other holders' calls
// did meanwhile, unless the key had more than 3 ended loans still capping
// it: the oldest one's cap, applied to the stored level for good, counts
// the tokens lent at its time as spent then (at most those, until the
// bucket is full again); or unless a grant without a Lessee ID came while
// a loan's cap held the level (a Direct Manager's check beside a holder's
// loan): the caps that held it, applied the same way, count the tokens
// lent then as spent then; or (c) the key is saturated: the Store denied
// it, or (token_bucket, gcra) granted a check's lease call and was left
// fewer than the smallest lease, ceil(MinLeaseShare × capacity) (the
// Manager counts such a grant only for a key saturated lately: within ten
// horizons of the end of its last wait for a batch, and for at most 15
// grants since the Store last denied it). Until the Wait of the denial, or the time until the Store has
// the call's need back (at least a millisecond either way), plus at most
// Config.Horizon, a check whose hits the projection covers, and the
// tokens on hand do not, still waits for a batch
// (min(MinLeaseShare × capacity − hits, Horizon × rate) more tokens), so
// that a saturated key costs a Store call per batch, not per token; or
// (d) it is a check whose hits were refunded after a later lease call of
// the same Manager that was granted tokens reported them spent: Refund
// puts back at most what the Store lends the Manager (at most the
// refunded hits).
//
// A Manager's idle sweep keeps a slow key's loan past Config.Idle while
// its tokens are spendable on the fast path (Config.KeepIdle): nothing in
// (b) changes, the loan counts as any other until the key's next call, its
// return (when the sweep drops the key, or ReturnKeys, or Close) or its
// end; only for longer than the idle return would have, at most the loan's
// fast-path life (half LeaseTTL; a window's end), and at most twice the
// smallest lease (MinLeaseShare of the capacity) or, for a token_bucket or
// gcra key far from its limit, which leases for its loan's life, half the
// capacity (see Config.MinLeaseShare).
//
// A crash costs the crashed holder's lent tokens: they count as spent at
// exp_h (at most TTL after its last call; Config.LeaseTTL, 5 minutes by
// default), and the bucket refills from there; nothing stays lost.
//
// # Arithmetic
//
// Integer state is exact: counts, window starts, gcra's TAT and all times
// are integers below 2^53 µs in float64 (Lua) and int64 (Go). For that,
// Policy.Validate refuses a token_bucket or gcra whose burst × period /
// limit (the time to refill a whole burst, the most gcra's TAT runs ahead
// of now) passes 2^52 µs, about 142 years, naming the burst field; there is
// no cap that would under-charge. The products that decide whole tokens
// are exact too: Validate refuses a gcra whose burst × period (µs), and a
// sliding_window whose limit × period, passes 2^52 (d × limit and prev ×
// (period − e) stay exact integers, so their floor and ceil are right).
// token_bucket's level is a fraction by design (float64, the same
// operations in both stores); reported durations saturate at about 292
// years.
//
// # Adding an algorithm
//
// An algorithm is defined once, in Go, in package lease/algo: its row of
// the algorithm table and its file. Everything that depends on the
// algorithm consults the table, by the row's traits (Algorithm's methods:
// Leased, Refills, Windowed, Logged, Acquired, HasBurst, HasMinInterval,
// StoresEveryHit, LeasesAhead, WindowReset, ViewsAnswerTime) or its code,
// never by its name (TestNoAlgorithmNamedOutsideTheTable fails on a
// comparison with a named algorithm anywhere in the repository): the
// Manager, the memory store, Policy.Validate, rule files and RLS
// configurations (ParseAlgorithm), the admin API and through it the
// dashboard's rule editor, the CLI's lint. The Redis store's scripts are
// the same math in Lua, held to the Go definition state by state by the
// tests. A new algorithm of an existing kind (leased and refilling, leased
// and counted per window, checked by Store.Log, or slots acquired and
// released) is:
//
//  1. One Go file, lease/algo/<name>.go: its code, a zero-size type
//     (validate: the policy bounds that are its own, such as gcra's
//     exactness bound; newState; for a leased algorithm the holder's view
//     of the Store's answers, embedding refillView or windowView where it
//     has their shape; an exact one embeds exactCode), and its state, the
//     pure math under algo's numeric choices: a type with Lease, Return,
//     Refund, Fields, Lent and SetFields (leased: three numbers and a
//     call id beside its loans, each loan a LastSpend or a Share, so that
//     the memory store's records hold it; its Lease crowds a call out as
//     Loans.crowd says, Lessee.MaxHolders, and costs time linear in the
//     key's loans), Check, or Acquire and Release, and Expiry.
//  2. Its scripts, in package lua: <name>_lease.lua and <name>_return.lua
//     (behind prelude.lua and leased.lua, whose head packs its fields and
//     whose loans().read reads them back) or <name>.lua, the same math in
//     the same operation order; and its row
//     in lua/store.go's table: its Redis key suffix, its files and (leased)
//     the Go packer of its state in the scripts' format (lua/format.go),
//     which a first touch writes.
//  3. One table row, in lease/algo/table.go: a constant after the last
//     one, its configuration name, its kind, its traits and its code.
//
// Then what it promises: its semantics above (# Algorithms, and the
// accuracy contract of a leased one), its row in docs/rules.md's table
// of algorithms and a rule of it in deploy/rules.example.yaml
// (TestDocsNameEveryAlgorithm in node/rules); and its tests: cases in
// lease/storetest (run against both Stores) and its model in
// lease/modeltest (which refuses an algorithm it does not know). The
// tests that run every algorithm draw them from the table and need no
// change: the table's checks (TestAlgorithmTable in algo and lua), the
// Go/Lua parity tests (TestGoLuaParity, FuzzGoLuaParity,
// TestFastPathMatchesGeneral, TestFirstTouchMatchesScript in lua) and
// the admin API's and the dashboard's.
//
// A new kind (another Store operation) also needs a Store method, a
// Manager path and the front ends that call it.
//
// # Concurrency
//
// Every exported type in this package is safe for concurrent use unless its
// comment says otherwise.
package lease

import (
	"context"
	"errors"

	"github.com/sluicehq/sluice/lease/algo"
)

// Store holds the authoritative state of every counter key. Implementations
// must make each call atomic with respect to all others on the same key and
// must be safe for concurrent use. The in-memory Store is [MemoryStore]; the
// Redis one is lua.Store.
type Store interface {
	Leaser
	Exact
}

// Leaser is the Store half used by the leased algorithms.
type Leaser interface {
	// Lease grants min(want, available) tokens of key if at least need
	// are available, else none (see the package doc for each algorithm).
	// The tokens are lent to the lessee to: the Store counts them against
	// the key's capacity until to spends, returns or loses them (see
	// "Lent tokens" in the package doc).
	Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error)
	// Return ends holder's lease of key: it gives back tokens that were
	// lent to holder and not spent (0: none, the loan just ends), and
	// holder holds nothing more of key.
	// At most what the Store lent to holder goes back (a return can never
	// add tokens the Store did not lend); for windowed algorithms only
	// tokens lent in the current window go back. Returning to a key whose
	// state expired, or for a holder the Store lent nothing, is a no-op.
	Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error
}

// DefaultMaxHolders is the bound on a key's holders a node sets for the
// holders of the lease protocol unless a rule says otherwise
// (Lessee.MaxHolders, a rule's max_holders): the largest round number
// whose lease call, on a key with that many holders, costs at most 3×
// one on a key with one holder, on Redis (its time per script call) and
// on the MemoryStore. Measured by BenchmarkLeaseHolders in lease and lua
// (docs/performance.md): with 16 holders a call costs Redis 2.6× (20:
// 3.2×, 32: 3.7×; each loan costs a script about a tenth of a one-holder
// call), the MemoryStore 2.0× (32: 3.0×).
const DefaultMaxHolders = 16

// Exact is the Store half used by the algorithms that cannot be leased.
type Exact interface {
	// Log runs one sliding_log check of hits.
	Log(ctx context.Context, key string, p Policy, hits int64) (Result, error)
	// Acquire takes one concurrency slot of key for id (hits = 0 peeks and
	// records nothing); Release frees it, or returns ErrNoSlot when id
	// holds no slot of key (never acquired, released already, or expired
	// and reaped).
	Acquire(ctx context.Context, key string, p Policy, id string, hits int64) (Result, error)
	Release(ctx context.Context, key string, p Policy, id string) error
}

// Errors.
var (
	// ErrStoreUnavailable means the Store could not answer in time (or at
	// all); the breaker counts it, and rules follow on_store_failure.
	ErrStoreUnavailable = errors.New("store unavailable")
	// ErrWrongAlgorithm means a call was made for a policy whose algorithm
	// does not support it (a lease for sliding_log, say): algo's.
	ErrWrongAlgorithm = algo.ErrWrongAlgorithm
	// ErrNoSlot means a release named an id that holds no slot of the key
	// (a caller's error: the Store answered): algo's.
	ErrNoSlot = algo.ErrNoSlot
)
