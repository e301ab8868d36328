package lua

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lua/redistest"
)

func init() {
	// A store of a server with a fake clock dates first touches by it.
	testClock = func(addr string) func() time.Time {
		if c := redistest.ClockAt(addr); c != nil {
			return c.Now
		}
		return nil
	}
}

// testTimeout is the call timeout of test stores: generous, because the
// test machine is shared and a slow call must not fail a semantic test.
const testTimeout = 2 * time.Second

func newTestStore(t testing.TB, addrs ...string) *Store {
	t.Helper()
	// Batched and with first touches (off by default with batching): the
	// package's tests run both paths.
	s, err := NewStore(Config{Addrs: addrs, CallTimeout: testTimeout, MaxBatch: testBatch, FirstTouch: "on"})
	if err != nil {
		t.Fatalf("NewStore(%v): %v", addrs, err)
	}
	t.Cleanup(s.Close)
	return s
}

// testBatch turns batching on in the package's tests (it is off by
// default): the store's batched path runs under every test that does not
// ask for single calls (newUnbatchedStore, MaxBatch 1).
const testBatch = 64

var keySeq atomic.Int64

// uniqueKey returns a counter key no other test uses.
func uniqueKey(t testing.TB) string {
	return fmt.Sprintf("%s-%d-%d", t.Name(), time.Now().UnixNano(), keySeq.Add(1))
}

// hashTag is the part of a Redis key that Cluster hashes: the content of
// the first {...} if non-empty, else the whole key.
func hashTag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

func TestKey(t *testing.T) {
	s := &Store{prefix: "sl"}
	algs := []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow, lease.SlidingLog, lease.Concurrency}
	counters := []string{"user-42", "", "a{b", "a}b", "}", "{}", "x}:tb", "#0000000000000000", "with space|pipe", "ü"}
	seen := map[string]string{}
	for _, c := range counters {
		tags := map[string]bool{}
		for _, a := range algs {
			k := s.Key(c, a)
			if prev, ok := seen[k]; ok {
				t.Errorf("Key(%q, %v) = %q, the same as for %s", c, a, k, prev)
			}
			seen[k] = fmt.Sprintf("(%q, %v)", c, a)
			tags[hashTag(k)] = true
			if !strings.HasPrefix(hashTag(k), "sl:") {
				t.Errorf("Key(%q, %v) = %q: hash tag %q does not start with the prefix", c, a, k, hashTag(k))
			}
		}
		if len(tags) != 1 {
			t.Errorf("keys of counter %q use %d hash tags, want 1 (one slot per counter): %v", c, len(tags), tags)
		}
	}
	if got, want := s.Key("user-42", lease.TokenBucket), "{sl:user-42}:tb3"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if hashTag(s.Key("a}b", lease.GCRA)) == hashTag(s.Key("a}c", lease.GCRA)) {
		t.Error("counters a}b and a}c share a hash tag")
	}
}

// TestExpiry checks, on a frozen Redis clock, that every key this store
// writes gets the TTL at which its state stops mattering (rounded up to the
// millisecond, plus 1ms), and that abandoned keys disappear then.
func TestExpiry(t *testing.T) {
	start := time.Date(2026, 3, 1, 12, 34, 56, 789012000, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	s := newTestStore(t, srv.Addr)
	ctx := context.Background()
	ttl := func(d time.Duration) time.Duration { // as the scripts compute it
		return (d+time.Millisecond-1)/time.Millisecond*time.Millisecond + time.Millisecond
	}
	hourLeft := start.Truncate(time.Hour).Add(time.Hour).Sub(start.Truncate(time.Microsecond))
	const hour = time.Hour
	tests := []struct {
		p    lease.Policy
		run  func(key string, p lease.Policy) error
		want time.Duration // PTTL right after the call
		why  string
	}{
		{lease.Policy{Algorithm: lease.TokenBucket, Limit: 10, Period: hour}, leaseOf(s, 4), ttl(24 * time.Minute),
			"4 of 10 tokens per hour: full again in 24 minutes"},
		{lease.Policy{Algorithm: lease.GCRA, Limit: 10, Period: hour}, leaseOf(s, 4), ttl(24 * time.Minute),
			"TAT 4 × 6 minutes ahead"},
		{lease.Policy{Algorithm: lease.FixedWindow, Limit: 10, Period: hour}, leaseOf(s, 4), ttl(hourLeft + hour),
			"two windows after the current window began"},
		{lease.Policy{Algorithm: lease.SlidingWindow, Limit: 10, Period: hour}, leaseOf(s, 4), ttl(hourLeft + hour),
			"two windows after the current window began"},
		{lease.Policy{Algorithm: lease.SlidingLog, Limit: 10, Period: hour}, func(k string, p lease.Policy) error {
			_, err := s.Log(ctx, k, p, 3)
			return err
		}, ttl(hour), "one period after the newest stamp"},
		{lease.Policy{Algorithm: lease.Concurrency, Limit: 10, Period: hour}, func(k string, p lease.Policy) error {
			_, err := s.Acquire(ctx, k, p, "id-1", 1)
			return err
		}, ttl(hour), "when the latest holder expires"},
	}
	var keys []string
	for _, tt := range tests {
		key := uniqueKey(t)
		if err := tt.run(key, tt.p); err != nil {
			t.Fatalf("%v: %v", tt.p.Algorithm, err)
		}
		rkey := s.Key(key, tt.p.Algorithm)
		keys = append(keys, rkey)
		pttl := srv.Do("PTTL", rkey)
		if want := strconv.FormatInt(tt.want.Milliseconds(), 10); pttl != want {
			t.Errorf("%v: PTTL = %s ms, want %s ms (%s)", tt.p.Algorithm, pttl, want, tt.why)
		}
	}
	// Abandoned: each key is still there 1ms before its TTL runs out and
	// gone 1ms after (Redis expires a key when now > its expiry).
	sort.Slice(tests, func(a, b int) bool { return tests[a].want < tests[b].want })
	sort.Slice(keys, func(a, b int) bool { return ttlOf(keys[a]) < ttlOf(keys[b]) })
	var elapsed time.Duration
	for i, key := range keys {
		want := tests[i].want
		for _, c := range []struct {
			at     time.Duration
			exists string
		}{{want - time.Millisecond, "1"}, {want + time.Millisecond, "0"}} {
			if c.at < elapsed {
				continue // a key with the same TTL was checked at a later time
			}
			clock.Advance(c.at - elapsed)
			elapsed = c.at
			if got := srv.Do("EXISTS", key); got != c.exists {
				t.Errorf("%v: EXISTS %s at +%v = %s, want %s (TTL %v)", tests[i].p.Algorithm, key, elapsed, got, c.exists, want)
			}
		}
	}
}

// ttlOf orders TestExpiry's keys as their algorithms' TTLs are ordered.
func ttlOf(key string) int {
	for i, suffix := range []string{":tb3", ":gc3", ":log", ":cc", ":fw4", ":sw3"} {
		if strings.HasSuffix(key, suffix) {
			return i
		}
	}
	return 99
}

func leaseOf(s *Store, n int64) func(string, lease.Policy) error {
	return func(key string, p lease.Policy) error {
		g, err := s.Lease(context.Background(), key, p, n, n, lease.Lessee{})
		if err == nil && g.Granted != n {
			err = fmt.Errorf("granted %d, want %d", g.Granted, n)
		}
		return err
	}
}

// TestMemoryPerKey measures the Redis memory of one counter key of each
// algorithm with MEMORY USAGE (the figures in the package doc).
func TestMemoryPerKey(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, srv.Addr)
	ctx := context.Background()
	usage := func(key string) int64 {
		t.Helper()
		n, err := strconv.ParseInt(srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0"), 10, 64)
		if err != nil {
			t.Fatalf("MEMORY USAGE %s: %v", key, err)
		}
		return n
	}
	const counter = "user-000042" // a typical 11-byte counter key
	for _, a := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		p := lease.Policy{Algorithm: a, Limit: 1000, Period: time.Hour}
		if err := leaseOf(s, 7)(counter, p); err != nil {
			t.Fatal(err)
		}
		n := usage(s.Key(counter, a))
		// The same key leased by one holder (a Manager: "m-" and 32 hex
		// digits, a random call id), which the Store keeps a loan for.
		held := counter + "-held"
		to := lease.Lessee{ID: "m-" + strings.Repeat("5f", 16), TTL: 5 * time.Minute, Idle: time.Second, Call: 3_141_592_653}
		if _, err := s.Lease(ctx, held, p, 7, 7, to); err != nil {
			t.Fatal(err)
		}
		h := usage(s.Key(held, a)) - int64(len("-held"))
		// The holder spent the 7 and leases again: the Store keeps the 7
		// as an ended loan (token_bucket, gcra) while it caps the level.
		to.Idle, to.Call = 0, 2_718_281_828
		if _, err := s.Lease(ctx, held, p, 7, 7, to); err != nil {
			t.Fatal(err)
		}
		e := usage(s.Key(held, a)) - int64(len("-held"))
		t.Logf("%-14s %3d bytes, %3d with one holder's loan, %3d after its second lease (key %q)", a, n, h, e, s.Key(counter, a))
		if n <= 0 || n > 256 || h > 256 || e > 256 {
			t.Errorf("%v: %d bytes per key, %d with a loan, %d after a second lease, want ≤ 256", a, n, h, e)
		}
	}
	// fixed_window with shares ahead: a holder leasing 7 of a window of a
	// second and a share of 10 of each of the next 2 (a per-second key
	// checked every 2s), then two more holders doing the same; against
	// the same holder's loan without a share, on a key as long.
	pa := lease.Policy{Algorithm: lease.FixedWindow, Limit: 1000, Period: time.Second}
	const plain, ahead = "user-000043", "user-000044" // as long as counter
	if _, err := s.Lease(ctx, plain, pa, 7, 7, lease.Lessee{ID: fmt.Sprintf("m-%032x", 1), TTL: 5 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	noShare := usage(s.Key(plain, lease.FixedWindow))
	var withShares [3]int64
	var valueLen string
	for i := range withShares {
		to := lease.Lessee{ID: fmt.Sprintf("m-%032x", i+1), TTL: 5 * time.Minute, AheadWindows: 2, AheadTokens: 10}
		if g, err := s.Lease(ctx, ahead, pa, 7, 7, to); err != nil || g.AheadTokens != 10 {
			t.Fatalf("Lease asking shares ahead: %+v %v", g, err)
		}
		withShares[i] = usage(s.Key(ahead, lease.FixedWindow))
		if i == 0 {
			valueLen = srv.Do("STRLEN", s.Key(ahead, lease.FixedWindow))
		}
	}
	t.Logf("fixed_window   %3d bytes with one holder's loan (key %q), %3d with its share ahead too (2 windows of 1s; a %s-byte value), %3d with three holders' loans and shares", noShare, s.Key(plain, lease.FixedWindow), withShares[0], valueLen, withShares[2])
	if n, _ := strconv.Atoi(valueLen); n > 44 || withShares[2] > 256 {
		t.Errorf("fixed_window with shares ahead: a %s-byte value with one holder's, want ≤ 44 (one allocation with the object); %d bytes with three, want ≤ 256", valueLen, withShares[2])
	}
	pl := lease.Policy{Algorithm: lease.SlidingLog, Limit: 1000, Period: time.Hour}
	pc := lease.Policy{Algorithm: lease.Concurrency, Limit: 1000, Period: time.Hour}
	// Sorted sets of up to 128 entries are compact listpacks; beyond, a
	// skiplist plus a dict costs more per entry.
	for _, n := range []int{1, 10, 100, 1000} {
		lk, ck := fmt.Sprintf("log-%d", n), fmt.Sprintf("cc-%d", n)
		for i := 0; i < n; i++ {
			if r, err := s.Log(ctx, lk, pl, 1); err != nil || !r.Allowed {
				t.Fatalf("Log: %+v %v", r, err)
			}
			if r, err := s.Acquire(ctx, ck, pc, fmt.Sprintf("%032x", i), 1); err != nil || !r.Allowed {
				t.Fatalf("Acquire: %+v %v", r, err)
			}
		}
		lu, cu := usage(s.Key(lk, lease.SlidingLog)), usage(s.Key(ck, lease.Concurrency))
		t.Logf("sliding_log    %6d bytes with %4d stamps  (%3d per stamp)", lu, n, lu/int64(n))
		t.Logf("concurrency    %6d bytes with %4d holders (%3d per holder, 32-byte ids)", cu, n, cu/int64(n))
		if lu/int64(n) > 256 {
			t.Errorf("sliding_log costs %d bytes per stamp with %d stamps, want ≤ 256", lu/int64(n), n)
		}
	}
}

// TestUnavailable checks that a hung or dead Redis fails calls within the
// caller's deadline with lease.ErrStoreUnavailable, and that the store
// works again once Redis is back (scripts reloaded on NOSCRIPT).
func TestUnavailable(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, srv.Addr)
	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 100, Period: time.Hour}
	key := uniqueKey(t)
	call := func(timeout time.Duration) (lease.Grant, error, time.Duration) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		start := time.Now()
		g, err := s.Lease(ctx, key, p, 1, 1, lease.Lessee{})
		return g, err, time.Since(start)
	}
	if _, err, _ := call(testTimeout); err != nil {
		t.Fatal(err)
	}

	srv.Pause()
	for i := 0; i < 3; i++ {
		_, err, took := call(50 * time.Millisecond)
		if !errors.Is(err, lease.ErrStoreUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("paused Redis: err = %v, want ErrStoreUnavailable wrapping DeadlineExceeded", err)
		}
		// That the call gives up at its deadline instead of waiting for
		// the server is what returning at all shows (it would hang until
		// Resume); how long it took is the machine's business.
		t.Logf("paused Redis: call gave up after %v with a 50ms deadline", took)
	}
	// A context without deadline gets the store's CallTimeout.
	short, err := NewStore(Config{Addrs: []string{srv.Addr}, CallTimeout: 30 * time.Millisecond})
	if err == nil {
		_, err := short.Lease(context.Background(), key, p, 1, 1, lease.Lessee{})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("no deadline, CallTimeout 30ms: err = %v, want DeadlineExceeded", err)
		}
		short.Close()
	} // (NewStore itself may fail against a paused server: that is fine too.)
	srv.Resume()
	waitOK(t, func() error { _, err, _ := call(testTimeout); return err })

	srv.Kill()
	for i := 0; i < 3; i++ {
		_, err, took := call(50 * time.Millisecond)
		if !errors.Is(err, lease.ErrStoreUnavailable) {
			t.Fatalf("dead Redis: err = %v, want ErrStoreUnavailable", err)
		}
		t.Logf("dead Redis: call gave up after %v with a 50ms deadline", took)
	}
	srv.Restart() // empty, and without the scripts loaded
	waitOK(t, func() error {
		g, err, _ := call(testTimeout)
		if err == nil && g.Granted != 1 {
			return fmt.Errorf("granted %d after restart, want 1", g.Granted)
		}
		return err
	})
}

// waitOK retries f until it succeeds (a client reconnecting after an
// outage may fail a few calls), failing the test after 30s (a bound for a
// hung test, not a measurement).
func waitOK(t *testing.T, f func() error) {
	t.Helper()
	clocktest.EventuallyState(t, 30*time.Second, "the store to recover", func() (bool, string) {
		if err := f(); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func TestValidation(t *testing.T) {
	s := newTestStore(t, redistest.Start(t))
	ctx := context.Background()
	tb := lease.Policy{Algorithm: lease.TokenBucket, Limit: 10, Period: time.Second}
	logp := lease.Policy{Algorithm: lease.SlidingLog, Limit: 10, Period: time.Second}
	var fe *lease.FieldError
	if _, err := s.Lease(ctx, "k", lease.Policy{Algorithm: lease.TokenBucket, Period: time.Second}, 1, 1, lease.Lessee{}); !errors.As(err, &fe) || fe.Field != "limit" {
		t.Errorf("Lease with limit 0: %v, want a FieldError naming limit", err)
	}
	if _, err := s.Lease(ctx, "k", tb, 1, 2, lease.Lessee{}); !errors.As(err, &fe) || fe.Field != "need" {
		t.Errorf("Lease with need > want: %v, want a FieldError naming need", err)
	}
	if _, err := s.Lease(ctx, "k", logp, 1, 1, lease.Lessee{}); !errors.Is(err, lease.ErrWrongAlgorithm) {
		t.Errorf("Lease on sliding_log: %v, want ErrWrongAlgorithm", err)
	}
	if _, err := s.Log(ctx, "k", logp, MaxLogHits+1); !errors.As(err, &fe) || fe.Field != "hits" {
		t.Errorf("Log with %d hits: %v, want a FieldError naming hits", MaxLogHits+1, err)
	}
	// The largest check records one member per hit, in batches.
	big := lease.Policy{Algorithm: lease.SlidingLog, Limit: MaxLogHits, Period: time.Hour}
	if r, err := s.Log(ctx, "big", big, MaxLogHits); err != nil || !r.Allowed || r.Remaining != 0 {
		t.Errorf("Log(%d hits) with limit %d = %+v, %v; want allowed with 0 remaining", MaxLogHits, MaxLogHits, r, err)
	}
	if r, err := s.Log(ctx, "big", big, 1); err != nil || r.Allowed {
		t.Errorf("Log after the log is full = %+v, %v; want denied", r, err)
	}
}

// TestUpgradeKeysDisjoint: nodes of an earlier release and of this one on
// the same counter keys during a rolling upgrade. Each release keeps a
// key's state in its own format under its own Redis key (strings of
// doubles at :tb2, :gc2, :fw2, :sw2, whose scripts are kept in
// testdata/previous; compact strings at :fw3 without shares ahead, kept in
// testdata/previous-fw3; this release's at :tb3, :gc3, :fw4, :sw3), so
// neither release's scripts ever meet the other's format (which they
// would misread) and both keep the contract on their own key. The cost:
// while both run, a counter's limit is counted once by each release.
func TestUpgradeKeysDisjoint(t *testing.T) {
	srv := redistest.StartServer(t)
	s := newTestStore(t, srv.Addr)
	ctx := context.Background()
	prev := func(dir, name string) *rueidis.Lua {
		var src []byte
		for _, f := range []string{"prelude", "leased", name} {
			b, err := os.ReadFile(filepath.Join("testdata", dir, f+".lua"))
			if err != nil {
				t.Fatal(err)
			}
			src = append(src, b...)
		}
		return rueidis.NewLuaScript(string(src))
	}
	file := map[lease.Algorithm]string{lease.TokenBucket: "token_bucket", lease.GCRA: "gcra", lease.FixedWindow: "fixed_window", lease.SlidingWindow: "sliding_window"}
	for _, c := range []struct {
		a           lease.Algorithm
		dir, suffix string
	}{
		{lease.TokenBucket, "previous", "tb2"},
		{lease.GCRA, "previous", "gc2"},
		{lease.FixedWindow, "previous", "fw2"},
		{lease.SlidingWindow, "previous", "sw2"},
		{lease.FixedWindow, "previous-fw3", "fw3"},
	} {
		a := c.a
		p := lease.Policy{Algorithm: a, Limit: 10, Period: time.Hour}
		counter := "upgrade-" + c.suffix
		prevKey := "{sl:" + counter + "}:" + c.suffix
		if prevKey == s.Key(counter, a) {
			t.Fatalf("%v: this release uses the previous release's key %s", a, prevKey)
		}
		prevL, prevR := prev(c.dir, file[a]+"_lease"), prev(c.dir, file[a]+"_return")
		// The previous release's arguments: limit, period, capacity, holder,
		// want, need, held, ttl, idle, spent_before, call, unanswered.
		prevLease := func(want int64, call int) []int64 {
			args := []string{"10", itoa(micros(time.Hour)), "10", holderOf("m-old"), itoa(want), "1", "0", itoa(micros(time.Minute)), "0", "0", strconv.Itoa(call), "0"}
			v, err := prevL.Exec(ctx, s.client, []string{prevKey}, args).AsIntSlice()
			if err != nil {
				t.Fatalf("%v: previous release's lease script: %v", a, err)
			}
			return v
		}
		to := newLessee("m-new")
		if a.LeasesAhead() {
			to.AheadWindows, to.AheadTokens = 2, 4 // this release's format: a share ahead
		}
		for i := range 3 {
			if v := prevLease(3, i+1); v[0] != 3 {
				t.Errorf("%v: previous release, lease %d granted %d, want 3", a, i, v[0])
			}
			g, err := s.Lease(ctx, counter, p, 3, 1, to)
			if err != nil {
				t.Fatalf("%v: this release's lease: %v", a, err)
			}
			if g.Granted != 3 {
				t.Errorf("%v: this release, lease %d granted %d, want 3 (its own key: the previous release's grants do not count here)", a, i, g.Granted)
			}
			to.Held, to.Call = to.Held+3, to.Call+1
		}
		// Each release sees its own 9 of 10 lent.
		if v := prevLease(10, 9); v[0] != 1 {
			t.Errorf("%v: previous release granted %d of its last token, want 1", a, v[0])
		}
		if g, err := s.Lease(ctx, counter, p, 10, 1, to); err != nil || g.Granted != 1 {
			t.Errorf("%v: this release granted %d, %v of its last token, want 1", a, g.Granted, err)
		}
		if err := prevR.Exec(ctx, s.client, []string{prevKey}, []string{"10", itoa(micros(time.Hour)), "10", holderOf("m-old"), "2"}).Error(); err != nil {
			t.Errorf("%v: previous release's return script: %v", a, err)
		}
		if err := s.Return(ctx, counter, p, 2, to.ID); err != nil {
			t.Errorf("%v: this release's return: %v", a, err)
		}
		if n := srv.Do("EXISTS", prevKey); n != "1" {
			t.Errorf("%v: previous release's key %s: EXISTS %s, want 1", a, prevKey, n)
		}
		if typ := srv.Do("TYPE", s.Key(counter, a)); typ != "string" {
			t.Errorf("%v: this release's key is a %s, want string", a, typ)
		}
	}
}

// newLessee is a Manager-like holder with a 5-minute lease TTL.
func newLessee(id string) lease.Lessee {
	return lease.Lessee{ID: id, TTL: 5 * time.Minute, Call: 1}
}
