// Package lua is Sluice's Redis store: a lease.Store whose every call is
// one atomic Lua script on Redis 7 (a key's first touch aside: see First
// touches), over a rueidis client configured for a standalone server,
// Sentinel or Redis Cluster.
//
// # Scripts
//
// One script per file, embedded and wrapped once per Store with
// rueidis.NewLuaScript (EVALSHA, falling back to EVAL, which also loads
// it, on NOSCRIPT: a restarted or failed-over server needs no
// preparation). Policy parameters travel as arguments, so a rule change
// needs no new script. Every script reads the clock with Redis TIME only
// (now = seconds*1e6 + microseconds) and computes in float64 microseconds,
// operation for operation like the Go definition of its algorithm in
// package lease/algo, so that the Redis store and the memory store give the
// same answers (both pass lease/storetest) and Redis holds the state the Go
// definition does, byte for byte (TestGoLuaParity, below). Durations are returned as whole milliseconds, rounded
// up. Each script's header comment lists its KEYS, ARGV and return value.
//
//	file                       KEYS[1]                           ARGV                                           returns
//	<leased>_lease.lua         string: fields and loans          limit, period_us, capacity, holder, want,      {granted, remaining, wait_ms, reset_ms, lent,
//	                           (see leased.lua)                  need, held, ttl_us, idle_us, spent_before,     (fixed_window: ahead_tokens, ahead_windows,)
//	                                                             call, unanswered, max_holders                  crowded}
//	                                                             (fixed_window: and ahead_windows,
//	                                                             ahead_tokens)
//	<leased>_return.lua        (same)                            limit, period_us, capacity, holder, tokens     the tokens given back
//	first_undo.lua             (same)                            the bytes a first touch wrote                  1 if the key still held them and was deleted
//	sliding_log.lua            zset member→stamp µs              limit, period_us, min_interval_us, hits        {allowed, remaining, retry_ms, reset_ms}
//	concurrency_acquire.lua    zset id→expiry µs                 limit, ttl_us, id, hits (0 = peek)             {allowed, remaining, retry_ms, reset_ms}
//	concurrency_release.lua    (same)                            id                                             1 if id was held, else 0
//
// (<leased>: token_bucket, gcra, fixed_window, sliding_window; the
// lease and return scripts are joined after leased.lua, which parses
// their common arguments and holds the state's encoding.) An algorithm's
// row in store.go's table names its files, its Redis key suffix and, for
// a leased one, the Go packer of its state in that encoding (format.go).
//
// Leased scripts write only when they grant (or take back) tokens, settle
// a holder's loan, or (fixed_window) change a holder's shares ahead: a
// denial or a peek without a loan is read-only, even when a fixed_window
// key's window has ended since it was written (a later window's count,
// the shares lent into it, is what the next write stores).
// Each lease and return script has a fast path for the common states,
// with locals (and for token_bucket and gcra the ended loans' lent and
// expiry, or for the windows the loans' holders and lent, in one flat
// table), one GET, one SET, none of the loan helpers' closures: no state
// yet; for token_bucket and gcra, the caller's loan first and only ended
// loans after it, whether the caller holds it whole or reports tokens
// spent; for sliding_window, any loans; for fixed_window, the caller's
// loan alone, with or without a share ahead, in its window or a later one
// the share covers, or other holders' loans without shares for a caller
// asking none (a return of either window: the caller's loan the only
// one). It is the general path operation for operation on those states
// and writes the same bytes, which TestFastPathMatchesGeneral checks
// against the scripts with their fast paths off; every other state (in a
// token_bucket or gcra key, another holder's loan, or the caller's after
// an ended one; in a fixed_window key, another holder's share ahead, or a
// caller asking one beside other holders' loans) takes the general path,
// which mirrors lease/algo/loans.go and algo.FixedWindowState. Every path
// costs time linear in the key's loans: a token_bucket or gcra key keeps
// its loans by expiry, latest first (an older release's write, in
// another order, is sorted once when read: TestPreviousReleaseSameKeys),
// so that what each loan caps, A(E), is one running sum; each loan costs
// a script about as much as the rest of the call does (BenchmarkLeaseHolders,
// lua/testdata/holders-instructions.sh), and max_holders
// (lease.Lessee.MaxHolders) bounds the holders a key takes: a holder past
// it is crowded out, its call made with no holder for exactly need
// (crowded 1). sliding_log cleans up, counts, checks min_interval
// against the newest stamp, inserts one member per hit ("<stamp>-<n>",
// added with NX so none is ever overwritten) and sets the expiry in one
// script; a check records at most [MaxLogHits] hits.
//
// # First touches
//
// A lease call of a key without state (Lessee.First: the node was never
// granted the key) writes a fresh key's state that only the call's
// arguments and the time decide. For such a call the Store computes that
// state with the lease package's math, packs it as the scripts do, and
// writes it with SET NX PX, with a TIME in the same round trip: a small
// command where the script costs Redis several times as much (see
// docs/performance.md). If the key has state, SET NX writes nothing and
// the script runs. The state is dated by Redis's clock as last sampled
// (at most 100ms before, by a TIME sent with a SET NX or a script),
// projected by the node's clock and pushed later by that projection's
// uncertainty: never before Redis's clock when the node computed it. A
// step of Redis's clock shows in the TIME after the SET; the Store then
// takes the state back (first_undo.lua) and runs the script. See first.go for the bounds,
// and why a Cluster, and by default a batching Store (Config.FirstTouch),
// run the script. TestFirstTouchMatchesScript requires the same
// answer, bytes and expiry as the script for random calls of every leased
// algorithm, so nodes of the previous release (the same format and keys)
// read what a first touch writes. A first touch writes only a key that
// has no state, so no loan there can crowd its caller out
// (Lessee.MaxHolders): where a key has loans, SET NX writes nothing and
// the script decides.
//
// # Keys
//
// A counter key K of algorithm A lives in the Redis key
// "{<prefix>:K}:<a>" (prefix "sl" by default; a = tb3, gc3, fw4, sw3, log,
// cc). A leased key's state is one binary string (fields and loans, see
// leased.lua) read with one GET and written with one SET; its suffix ends
// in the format's version, so nodes of a release that kept another format
// (hashes at tb, gc, fw, sw; strings of doubles at tb2, gc2, fw2, sw2;
// fixed_window without shares ahead at fw3) never share a Redis key with
// this one: releases with different formats never share a Redis key, and
// during a rolling upgrade each release counts a counter's limit on its
// own key, up to the limit once per release.
//
// The whole counter key is the Cluster hash tag: a counter's keys share
// one slot, and counters spread over all slots. A counter key containing
// '}' would end the tag early, so it is tagged with its 64-bit xxhash
// instead and follows the tag: "{sl:#<16 hex>}K:<a>" (still unique, since
// K is kept). Changing a key's algorithm starts fresh state in another
// Redis key; the old one expires on its own (unlike the memory store, a
// switch back before then finds the old state).
//
// Every write sets an expiry at the moment the state stops mattering, so
// abandoned keys disappear: token_bucket when the bucket would be full
// again, gcra at its TAT, the windows two periods after their window
// began (fixed_window: or a period after the end of the last window a
// share ahead covers, if later), sliding_log one period after its newest stamp, concurrency when
// its latest holder expires.
//
// # Memory
//
// MEMORY USAGE of one key (Redis 7.0, jemalloc, counter key "user-000042";
// measured by TestMemoryPerKey, rerun with go test -run MemoryPerKey -v).
// A leased key's state is packed binary (see leased.lua): integers in 1,
// 2, 4 or 7 bytes as their values need, times of loans as distances from
// the key's own time, a holder as an 8-byte digest of its Lessee ID (see
// holderOf). Up to 44 bytes a value shares one allocation with its Redis
// object (embstr), which keeps one holder's loan, with its last spend, an
// ended loan and the last call, within the key's smallest footprint:
//
//	token_bucket     104 bytes; 115 with one holder's loan (holder, lent,
//	                 expiry, last spend; the last call and its grant);
//	                 115 after its second lease, which keeps the tokens it
//	                 reports spent as an ended loan (up to 3, while they
//	                 cap the level)
//	gcra             88 bytes; 115 with one holder's loan; 115 after its
//	                 second lease
//	fixed_window     88 bytes; 99 with one holder's loan, no more with
//	                 its share ahead (lent, share and end: a 24-byte
//	                 value for a per-second window); 136 with three
//	                 holders' loans and shares ahead (a value of 54)
//	sliding_window   88 bytes; 99 with one holder's loan
//	sliding_log      104 bytes with 1 stamp; ~36 bytes per stamp up to 128
//	                 stamps (listpack), ~118 bytes per stamp beyond (skiplist)
//	concurrency      120 bytes with 1 holder; ~51 bytes per holder (32-byte
//	                 ids) up to 128, ~134 beyond
//
// A longer counter key costs about its extra length. BenchmarkScriptCost
// measures used_memory over many keys, which adds the key's entries in
// Redis's key and expiry tables.
//
// # Failures
//
// Every call honors its context's deadline; a context without one gets
// Config.CallTimeout (50ms). A call that gets no answer in time, a lost
// connection or a Redis error returns an error that wraps
// lease.ErrStoreUnavailable and the cause (context.DeadlineExceeded, say),
// for the lease Manager's breaker. Scripts are never retried (they are not
// idempotent); lost connections are redialed on the next call.
//
// # Tests
//
// The tests start real redis-server processes (lua/redistest): the
// conformance suite lease/storetest runs against a standalone server whose
// wall clock is frozen and moved by the test (exact, Slack 0), against a
// standalone server and a 3-master Cluster on the real clock (Slack 25ms,
// retried up to 3 times in a child process because sleeps overshoot on a
// loaded machine). TestGoLuaParity holds every script to the Go definition
// (lease/algo): random call sequences of every algorithm, on random
// extreme policies, with several holders, max_holders and shares ahead,
// run through the scripts (their fast paths, and their general paths in a
// second Store), the Go definition and the MemoryStore on one frozen
// clock, which must give the same answers, and after every call the same
// state (the Go state packed by its row's packer is the bytes Redis
// holds) and expiry; FuzzGoLuaParity runs the sequences the fuzzer's
// bytes spell, TestFastPathMatchesGeneral runs calls aimed at the fast
// paths' states through the same harness, and TestGoLuaParityCorners runs
// sequences written for states random calls seldom reach (some seeded as
// an earlier release wrote them). Each runs every algorithm as a subtest;
// the mutation harness (make mutate-lua, lua/testdata/mutate) checks that
// they fail when one line of a script changes. They need
// redis-server, redis-cli and gcc (the frozen clock is a small C shim
// preloaded into redis-server); with SLUICE_TEST_REDIS=valkey they run on
// valkey-server and valkey-cli (Valkey 8) instead, as make test does too.
//
// # Concurrency
//
// A Store is safe for concurrent use. Concurrent calls share pipelined
// connections (rueidis auto-pipelining). With Config.MaxBatch above 1 (off
// by default: see its doc) concurrent Lease and Return calls also share
// script calls: a call goes out at once, as its own script,
// when no call of its group (the server; on a Cluster, its key's hash
// slot) is in flight; the calls that arrive meanwhile go out together
// when it ends, at most Config.MaxBatch of them, as one EVALSHA of a
// script that holds every lease and return script, each wrapped in a
// function, and runs each call's on its key in turn (see batch.go). Each
// call gets its own script's reply or error; each caller's context bounds
// its own wait.
package lua
