package lua

import (
	"context"
	"crypto/sha1"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/algo"
)

var (
	// prelude.lua goes in front of every script, leased.lua after it in
	// front of the leased algorithms' scripts (see newScripts).
	//go:embed prelude.lua
	preludeSrc string
	//go:embed leased.lua
	leasedSrc string
	//go:embed first_undo.lua
	firstUndoSrc string
	// The script files the algorithm table names.
	//go:embed *.lua
	scriptFiles embed.FS
	// scriptFS is where scriptSource reads the table's script files:
	// scriptFiles (a test may point it at a directory of mutated copies:
	// scriptdir_test.go).
	scriptFS fs.ReadFileFS = scriptFiles
)

// algorithms is the Redis side of lease's algorithm table: for each
// algorithm, the suffix of its Redis key (so that a counter key whose rule
// changes algorithm starts fresh instead of meeting another algorithm's
// state, or a WRONGTYPE error; the leased algorithms' suffixes end in their
// state's format version: a key is read only by the scripts that wrote its
// format, and nodes of releases that wrote another format use other keys:
// tb, gc, fw, sw held hashes, tb2, gc2, fw2, sw2 strings of doubles, fw3
// fixed_window's compact string without shares ahead) and
// its script files: lease and ret for a leased algorithm (Store.Lease and
// Return), log for an algorithm checked by Store.Log (sliding_log),
// acquire and release for one whose slots are acquired (concurrency); and
// for a leased algorithm, pack, which packs its state (package algo's
// type) as its scripts do (leased.lua's head and pack_loan; nil for no
// state), for first touches (first.go).
var algorithms = [...]struct {
	suffix                string
	lease, ret            string
	log, acquire, release string
	pack                  func(algo.LeasedState) []byte
}{
	lease.TokenBucket:   {suffix: "tb3", lease: "token_bucket_lease.lua", ret: "token_bucket_return.lua", pack: packTokenBucket},
	lease.GCRA:          {suffix: "gc3", lease: "gcra_lease.lua", ret: "gcra_return.lua", pack: packGCRA},
	lease.FixedWindow:   {suffix: "fw4", lease: "fixed_window_lease.lua", ret: "fixed_window_return.lua", pack: packFixedWindow},
	lease.SlidingWindow: {suffix: "sw3", lease: "sliding_window_lease.lua", ret: "sliding_window_return.lua", pack: packSlidingWindow},
	lease.SlidingLog:    {suffix: "log", log: "sliding_log.lua"},
	lease.Concurrency:   {suffix: "cc", acquire: "concurrency_acquire.lua", release: "concurrency_release.lua"},
}

// scripts holds one wrapped script per file, by algorithm. rueidis.Lua
// sends EVALSHA and falls back to EVAL (which also loads the script) on
// NOSCRIPT, so a restarted or new server needs no preparation.
type scripts [len(algorithms)]struct {
	lease, ret            *rueidis.Lua
	log, acquire, release *rueidis.Lua
	leaseSrc, leaseSha    string // the lease script's source and SHA1, for leaseSampling
}

// newScripts builds every script of the table (see scriptsWith).
func newScripts() *scripts { return scriptsWith(true) }

// scriptsWith builds every script of the table. Each joins its file with
// the shared prelude (TIME, the ttl and ms helpers) and, for the leased
// algorithms, their argument parsing, state encoding and loan helpers:
// each script file holds only its own logic, and Redis still gets one
// self-contained script per file. With fast false the lease scripts skip
// their fast paths and take the general path in every state (a test
// compares the two).
func scriptsWith(fast bool) *scripts {
	var s scripts
	script := func(name string, leased bool) *rueidis.Lua {
		if name == "" {
			return nil
		}
		return rueidis.NewLuaScript(scriptSource(name, leased, fast))
	}
	for a, f := range algorithms {
		s[a].lease, s[a].ret = script(f.lease, true), script(f.ret, true)
		if f.lease != "" {
			s[a].leaseSrc = scriptSource(f.lease, true, fast)
			sum := sha1.Sum([]byte(s[a].leaseSrc))
			s[a].leaseSha = hex.EncodeToString(sum[:])
		}
		s[a].log, s[a].acquire, s[a].release = script(f.log, false), script(f.acquire, false), script(f.release, false)
	}
	return &s
}

// scriptSource is the source Redis runs for the script file name: the
// prelude, the leased algorithms' helpers if leased, then the file (with
// its fast path turned off if not fast).
func scriptSource(name string, leased, fast bool) string {
	src, err := scriptFS.ReadFile(name)
	if err != nil {
		panic("lua: the algorithm table names a script that is not embedded: " + name)
	}
	body := string(src)
	if !fast {
		body = strings.Replace(body, "local fast = true", "local fast = false", 1)
	}
	if leased {
		return preludeSrc + leasedSrc + body
	}
	return preludeSrc + body
}

// MaxLogHits bounds the hits of one sliding_log check: the script records
// one sorted-set member per hit, and a check must not block Redis for
// long (10,000 members take a few milliseconds).
const MaxLogHits = 10_000

// Store is a lease.Store in Redis. It is safe for concurrent use.
type Store struct {
	client      rueidis.Client
	scripts     *scripts
	batch       *batcher // nil: every call its own script call (MaxBatch 1)
	prefix      string
	callTimeout time.Duration
	closeOnce   sync.Once
	// first touches (first.go): on unless on a Cluster or refused
	firstOn atomic.Bool
	clock   redisClock
	odds    firstOdds
	met     firstMetrics
	undo    *rueidis.Lua // first_undo.lua
}

var _ lease.Store = (*Store)(nil)

// NewStore connects to Redis as cfg says (standalone, Sentinel or Cluster;
// see Config.Addrs) and returns a Store. It fails if cfg is invalid or no
// server answers: a node should not start against an unreachable Redis.
// Once running, lost connections are redialed on demand.
func NewStore(cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	opt := rueidis.ClientOption{
		InitAddress:      append([]string(nil), cfg.Addrs...),
		Username:         cfg.Username,
		Password:         cfg.Password,
		SelectDB:         cfg.DB,
		ClientName:       cfg.ClientName,
		Dialer:           net.Dialer{Timeout: cfg.DialTimeout},
		ConnWriteTimeout: cfg.ConnWriteTimeout,
		// Client-side caching is for reads; every call here is a script
		// that writes.
		DisableCache: true,
		// Scripts are not idempotent: never resend one that may have run.
		DisableRetry: true,
		// Auto-pipelining (the default) batches concurrent calls on one
		// connection.
	}
	if cfg.SentinelMaster != "" {
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet: cfg.SentinelMaster,
			Username:  cfg.SentinelUsername,
			Password:  cfg.SentinelPassword,
			Dialer:    net.Dialer{Timeout: cfg.DialTimeout},
		}
	}
	client, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("cannot connect to redis %s: %w: %w", strings.Join(cfg.Addrs, ","), lease.ErrStoreUnavailable, err)
	}
	s := &Store{
		client:      client,
		scripts:     newScripts(),
		prefix:      cfg.KeyPrefix,
		callTimeout: cfg.CallTimeout,
		clock:       redisClock{now: time.Now, drift: clockDrift, sleep: pause},
	}
	if cfg.Clock == nil && testClock != nil {
		cfg.Clock = testClock(cfg.Addrs[0])
	}
	if cfg.Clock != nil {
		s.clock.now, s.clock.drift = cfg.Clock, 0
	}
	s.firstOn.Store(client.Mode() != rueidis.ClientModeCluster &&
		(cfg.FirstTouch == "on" || cfg.FirstTouch == "" && cfg.MaxBatch <= 1))
	s.met = newFirstMetrics(cfg.Metrics)
	s.undo = rueidis.NewLuaScript(firstUndoSrc)
	if cfg.MaxBatch > 1 {
		s.batch = newBatcher(client, newBatchScript(), cfg.MaxBatch)
	}
	return s, nil
}

// Close closes the connections. It is idempotent; calls after Close fail.
func (s *Store) Close() {
	s.closeOnce.Do(s.client.Close)
}

// Ping reports whether Redis answers (every node, for a Cluster).
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	for _, c := range s.client.Nodes() {
		if err := c.Do(ctx, c.B().Ping().Build()).Error(); err != nil {
			return unavailable("ping", err)
		}
	}
	return nil
}

// Key returns the Redis key that holds counter key's state for algorithm
// a. The whole counter key is the hash tag, so a counter's keys share one
// Cluster slot and different counters spread over all slots. A counter key
// containing '}' would end the tag early; such keys are tagged with the
// hex xxhash of the counter key instead, and the counter key follows the
// tag so that the Redis key stays unique:
//
//	{sl:user-42}:tb3
//	{sl:#9f86d081884c7d65}we}ird:tb3
func (s *Store) Key(counter string, a lease.Algorithm) string {
	suffix := "x" // not a valid algorithm: no script ever uses it
	if int(a) < len(algorithms) && algorithms[a].suffix != "" {
		suffix = algorithms[a].suffix
	}
	if strings.IndexByte(counter, '}') < 0 {
		return "{" + s.prefix + ":" + counter + "}:" + suffix
	}
	var sum [8]byte
	h := xxhash.Sum64String(counter)
	for i := range sum {
		sum[i] = byte(h >> (56 - 8*i))
	}
	return "{" + s.prefix + ":#" + hex.EncodeToString(sum[:]) + "}" + counter + ":" + suffix
}

// Lease implements lease.Leaser.
func (s *Store) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	if err := lease.CheckLease(p, want, need, to); err != nil {
		return lease.Grant{}, err
	}
	key = s.Key(key, p.Algorithm)
	sample := false  // run the script with a TIME (first.go)
	refusal := false // first touches refused: off if the script answers
	if to.First && to.ID != "" && s.firstOn.Load() {
		g, done, err := s.first(ctx, key, p, want, need, to)
		refusal = errors.Is(err, errRefused)
		if done || err != nil && !refusal {
			return g, err
		}
		_, _, fresh := s.clock.estimate(s.clock.now())
		sample = !fresh && !refusal
	}
	args := []string{itoa(p.Limit), itoa(micros(p.Period)), itoa(p.Capacity()), holderOf(to.ID),
		itoa(want), itoa(need), itoa(to.Held), itoa(micros(to.TTL)), itoa(micros(to.Idle)), itoa(to.SpentBefore),
		strconv.FormatUint(uint64(to.Call), 10), strconv.FormatUint(uint64(to.Unanswered), 10), strconv.Itoa(to.MaxHolders)}
	n := 6
	if p.Algorithm.LeasesAhead() {
		args = append(args, itoa(to.AheadWindows), itoa(to.AheadTokens))
		n = 8
	}
	var m rueidis.RedisMessage
	var err error
	if sample {
		m, err = s.leaseSampling(ctx, p.Algorithm, key, args)
	} else {
		m, err = s.leased(ctx, "lease", p.Algorithm, true, key, args)
	}
	if err != nil {
		return lease.Grant{}, err
	}
	if refusal {
		s.turnOff()
	}
	v, err := ints("lease", m, n)
	if err != nil {
		return lease.Grant{}, err
	}
	g := lease.Grant{Granted: v[0], Remaining: v[1], Wait: millis(v[2]), Reset: millis(v[3]), Lent: v[4], Crowded: v[n-1] == 1}
	if n == 8 {
		g.AheadTokens, g.AheadWindows = v[5], v[6]
	}
	return g, nil
}

// Return implements lease.Leaser.
func (s *Store) Return(ctx context.Context, key string, p lease.Policy, tokens int64, holder string) error {
	if err := lease.CheckReturn(p, tokens, holder); err != nil {
		return err
	}
	if holder == "" {
		return nil // nothing lent: nothing to give back
	}
	args := []string{itoa(p.Limit), itoa(micros(p.Period)), itoa(p.Capacity()), holderOf(holder), itoa(tokens)}
	_, err := s.leased(ctx, "return", p.Algorithm, false, s.Key(key, p.Algorithm), args)
	return err
}

// leased runs the lease (isLease) or return script of algorithm a on key,
// batched with concurrent calls unless batching is off.
func (s *Store) leased(ctx context.Context, op string, a lease.Algorithm, isLease bool, key string, args []string) (rueidis.RedisMessage, error) {
	if err := ctx.Err(); err != nil {
		return rueidis.RedisMessage{}, unavailable(op, err)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	script := s.scripts[a].ret
	if isLease {
		script = s.scripts[a].lease
	}
	if s.batch != nil {
		return s.batch.do(&call{op: op, single: script, body: bodyIndex(a, isLease), key: key, args: args, ctx: ctx})
	}
	m, err := script.Exec(ctx, s.client, []string{key}, args).ToMessage()
	if err != nil {
		return m, unavailable(op, err)
	}
	return m, nil
}

// Log implements lease.Exact for sliding_log.
func (s *Store) Log(ctx context.Context, key string, p lease.Policy, hits int64) (lease.Result, error) {
	if err := lease.CheckLog(p, hits); err != nil {
		return lease.Result{}, err
	}
	if hits > MaxLogHits {
		return lease.Result{}, &lease.FieldError{Field: "hits", Msg: fmt.Sprintf("must be at most %d for sliding_log in Redis (one sorted-set member per hit), got %d", MaxLogHits, hits)}
	}
	args := []string{itoa(p.Limit), itoa(micros(p.Period)), itoa(micros(p.MinInterval)), itoa(hits)}
	v, err := s.exec(ctx, p.Algorithm.String(), s.scripts[p.Algorithm].log, s.Key(key, p.Algorithm), args, 4)
	if err != nil {
		return lease.Result{}, err
	}
	return result(v), nil
}

// Acquire implements lease.Exact for concurrency.
func (s *Store) Acquire(ctx context.Context, key string, p lease.Policy, id string, hits int64) (lease.Result, error) {
	if err := lease.CheckAcquire(p, id, hits); err != nil {
		return lease.Result{}, err
	}
	args := []string{itoa(p.Limit), itoa(micros(p.Period)), id, itoa(hits)}
	v, err := s.exec(ctx, "acquire", s.scripts[p.Algorithm].acquire, s.Key(key, p.Algorithm), args, 4)
	if err != nil {
		return lease.Result{}, err
	}
	return result(v), nil
}

// Release implements lease.Exact for concurrency.
func (s *Store) Release(ctx context.Context, key string, p lease.Policy, id string) error {
	if err := lease.CheckRelease(p, id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return unavailable("release", err)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	held, err := s.scripts[p.Algorithm].release.Exec(ctx, s.client, []string{s.Key(key, p.Algorithm)}, []string{id}).AsInt64()
	if err != nil {
		return unavailable("release", err)
	}
	if held == 0 {
		return lease.ErrNoSlot
	}
	return nil
}

// exec runs script on key and returns its n integers.
func (s *Store) exec(ctx context.Context, op string, script *rueidis.Lua, key string, args []string, n int) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, unavailable(op, err)
	}
	ctx, cancel := s.withTimeout(ctx)
	defer cancel()
	m, err := script.Exec(ctx, s.client, []string{key}, args).ToMessage()
	if err != nil {
		return nil, unavailable(op, err)
	}
	return ints(op, m, n)
}

// ints is a script's reply of n integers.
func ints(op string, m rueidis.RedisMessage, n int) ([]int64, error) {
	v, err := m.AsIntSlice()
	if err != nil {
		return nil, unavailable(op, err)
	}
	if len(v) != n {
		return nil, fmt.Errorf("cannot run %s: %w: script returned %d values, want %d", op, lease.ErrStoreUnavailable, len(v), n)
	}
	return v, nil
}

// withTimeout applies the call timeout to a context without a deadline.
// A context that is already done is returned as is: rueidis then fails the
// call without sending it.
func (s *Store) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || s.callTimeout <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.callTimeout)
}

// unavailable wraps a Redis or transport error: every failure to get an
// answer from Redis is lease.ErrStoreUnavailable, and the cause (such as
// context.DeadlineExceeded) stays visible to errors.Is.
func unavailable(op string, err error) error {
	if errors.Is(err, lease.ErrStoreUnavailable) {
		return err
	}
	return fmt.Errorf("cannot run %s: %w: %w", op, lease.ErrStoreUnavailable, err)
}

func result(v []int64) lease.Result {
	return lease.Result{Allowed: v[0] == 1, Remaining: v[1], RetryAfter: millis(v[2]), Reset: millis(v[3])}
}

// holderOf is the name a key's state gives a holder: the Lessee ID's
// 64-bit xxhash as 8 bytes, whatever the ID's length (a Manager's is 34).
// Two holders of one key would share a loan only if their IDs' hashes
// collided (about 2^-64 for a pair). "" (no holder) stays "".
func holderOf(id string) string {
	if id == "" {
		return ""
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], xxhash.Sum64String(id))
	return string(b[:])
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// micros is d in whole microseconds, truncated like the algorithms' math
// (lease/algo).
func micros(d time.Duration) int64 { return d.Microseconds() }

func millis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
