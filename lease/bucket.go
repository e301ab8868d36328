package lease

import (
	"math"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/lease/algo"
)

// bucket is the local leased bucket of one counter key: tokens taken from
// the Store and not yet spent, and what the Manager knows about the key.
//
// The atomic fields are read and written by any goroutine. rate and
// lastLeaseMs belong to the holder of the bucket's lease slot (see
// slots.claim): only one goroutine at a time talks to the Store about a
// bucket, and the slot's mutex orders their accesses.
//
// Times are Unix nanoseconds.
type bucket struct {
	// tokens is the leased tokens on hand. It never goes negative: the
	// fast path takes with compare-and-swap. A negative value marks a
	// striped bucket, whose tokens on hand are in stripes (stripes.go):
	// read and change them with the Manager's methods there.
	tokens atomic.Int64
	// denyUntil is set when the Store denied the key, or when a grant
	// left the Store less than a batch soon after (Manager.dryWait,
	// deniedLately): until then the key is saturated, and a check waits
	// for a batch (see batchWait) on top of the tokens it needs. Its low
	// bits count the dry grants since the Store's denial (dryStamp).
	// evicted marks a bucket that left the index.
	denyUntil atomic.Int64
	// remaining and resetAt are the Store's answer at the last lease.
	// resetAt is 0 until the first lease (or when the answer is stale: the
	// next check asks).
	remaining atomic.Int64
	resetAt   atomic.Int64
	// aux is one word that the algorithms use apart (the bucket's size is
	// its memory budget): for one whose view reads when the Store's last
	// answer came (sliding_window: Algorithm.ViewsAnswerTime), that time
	// (Unix ns, see answeredAt); for one that leases ahead (fixed_window:
	// Algorithm.LeasesAhead), its shares of the windows ahead (see
	// aheadWord; written by the slot's holder, or by a roll under the
	// Manager's inflight lock when no slot is held); for a refilling one
	// (token_bucket, gcra: Algorithm.Refills), kept (see keptSwap).
	aux atomic.Int64
	// basis is what the Store lends this Manager of the key as of its last
	// answer (Grant.Lent): the bound on the tokens on hand, so on Refund,
	// and the base from which consumption is measured.
	basis atomic.Int64
	// expires is when the tokens on hand stop being spendable on the
	// fast path: the end of the window they were granted in for
	// fixed_window and sliding_window (in the next window the Store grants
	// a whole limit again, and counts these tokens in the window they were
	// granted in); for token_bucket and gcra half their LeaseTTL after the
	// lease call that granted or renewed them was sent (the slow path
	// spends them for another half TTL, renewing them; see
	// Manager.usable). 0 before the first grant.
	expires atomic.Int64

	// low is the prefetch mark: a take that leaves fewer tokens starts a
	// prefetch. -1 while a prefetch is due or running. It saturates at
	// MaxInt32 (a lease of 8 billion tokens).
	low atomic.Int32
	// lastUse is the last check in Unix milliseconds modulo 2^32 (compared
	// by signed difference: fine for idle times under 24 days, and a use
	// after the sweep's now is not idle), to the Manager's touch
	// resolution.
	lastUse atomic.Uint32

	pol *Policy // interned and immutable; a policy change replaces the bucket

	rate        atomic.Uint32 // EWMA of hits per second and the roomy mark, float32 bits (see rateOf); written by the slot holder only
	lastLeaseMs uint32        // Unix ms modulo 2^32 of the last grant; 0 before it; slot holder only
}

// The bucket and its key are the bulk of a key's memory: keep the bucket
// at 80 bytes, so that with its key (below) it takes 96 bytes, a malloc
// size class, for keys of up to 15 bytes, and the next classes for longer
// ones.
const bucketSize = 80

// A bucket is allocated with its key after it (newBucket), immutable: a
// key of up to 254 bytes as its length in one byte at bucketSize and its
// bytes from there on; a longer one as 255 there, its length as a uint32
// at bucketSize+4 and its bytes from bucketSize+8. That saves the string
// header a key field would take and the key's own allocation (with its
// rounding to a size class), and puts the key the index compares next to
// the bucket's words: a bucket and a key of up to 15 bytes take 96 bytes,
// one of up to 31, 112. Every bucket comes from newBucket: key reads past
// the struct.
const (
	shortKeyOff = bucketSize + 1
	longKeyOff  = bucketSize + 8
	longKey     = 255
)

// key is b's counter key. Its bytes are b's: whatever keeps the string
// (a queued Store call, a map of keys) keeps b's allocation with it.
func (b *bucket) key() string {
	p := unsafe.Add(unsafe.Pointer(b), bucketSize)
	if n := *(*uint8)(p); n != longKey {
		return unsafe.String((*byte)(unsafe.Add(p, 1)), n)
	}
	return unsafe.String((*byte)(unsafe.Add(p, longKeyOff-bucketSize)), *(*uint32)(unsafe.Add(p, 4)))
}

// newBucket returns a zero bucket for key under p, key's bytes copied
// after it. The allocation's type is a struct of the bucket and a byte
// array (keyedType), so the collector scans pol as in any bucket and
// treats the rest as bytes.
func newBucket(key string, p *Policy) *bucket {
	off := shortKeyOff
	if len(key) >= longKey {
		if uint64(len(key)) > math.MaxUint32 {
			panic("lease: a counter key longer than 4 GiB")
		}
		off = longKeyOff
	}
	ptr := reflect.New(keyedType(off + len(key))).UnsafePointer()
	if off == shortKeyOff {
		*(*uint8)(unsafe.Add(ptr, bucketSize)) = uint8(len(key))
	} else {
		*(*uint8)(unsafe.Add(ptr, bucketSize)) = longKey
		*(*uint32)(unsafe.Add(ptr, bucketSize+4)) = uint32(len(key))
	}
	copy(unsafe.Slice((*byte)(unsafe.Add(ptr, off)), len(key)), key)
	b := (*bucket)(ptr)
	b.pol = p
	return b
}

// keyedType is the type of a bucket allocation of n bytes: a bucket and a
// byte array. Up to 512 bytes, n is rounded up to 16 (malloc rounds an
// allocation that small up to its size class, a multiple of 16 bytes, so
// the rounding costs nothing) and the types are in an array; a larger one
// has a header in its allocation, so it is made to measure (to 8 bytes,
// the bucket's alignment), its type cached by size.
func keyedType(n int) reflect.Type {
	if n <= smallKeyed {
		n = (n + 15) &^ 15
		c := &smallKeyedTypes[n/16]
		if t := c.Load(); t != nil {
			return *t
		}
		t := structOfKeyed(n)
		c.Store(&t)
		return t
	}
	n = (n + 7) &^ 7
	if t, ok := largeKeyedTypes.Load(n); ok {
		return t.(reflect.Type)
	}
	v, _ := largeKeyedTypes.LoadOrStore(n, structOfKeyed(n))
	return v.(reflect.Type)
}

const smallKeyed = 512

var (
	smallKeyedTypes [smallKeyed/16 + 1]atomic.Pointer[reflect.Type]
	largeKeyedTypes sync.Map // size → reflect.Type
)

func structOfKeyed(size int) reflect.Type {
	t := reflect.StructOf([]reflect.StructField{
		{Name: "B", Type: reflect.TypeFor[bucket]()},
		{Name: "K", Type: reflect.ArrayOf(size-bucketSize, reflect.TypeFor[byte]())},
	})
	if t.Size() != uintptr(size) {
		panic("lease: unexpected layout of a bucket allocation")
	}
	return t
}

// rateOf is b's EWMA of hits per second as of its last lease call, and
// whether that call asked for a loan for the key's life (see roomyLoan;
// kept in the sign bit, a rate being at least 0). Any goroutine may read
// it; setRate sets both, the slot holder only.
func (b *bucket) rateOf() (rate float64, roomy bool) {
	v := b.rate.Load()
	return float64(math.Float32frombits(v &^ roomyBit)), v&roomyBit != 0
}

func (b *bucket) setRate(r float64, roomy bool) {
	v := math.Float32bits(float32(max(r, 0)))
	if roomy {
		v |= roomyBit
	}
	b.rate.Store(v)
}

const roomyBit = 1 << 31 // a float32's sign bit

// unixMs32 is Unix milliseconds modulo 2^32, for lastUse and lastLeaseMs.
func unixMs32(ns int64) uint32 { return uint32(ns / int64(time.Millisecond)) }

// evicted is denyUntil's value for a bucket that left the index. Its
// tokens are (or will be) returned to the Store; checks that still hold a
// pointer to it look the key up again.
const evicted = math.MaxInt64

// markEvicted sets the evicted mark; it reports false if it was already set.
func (b *bucket) markEvicted() bool {
	for {
		du := b.denyUntil.Load()
		if du == evicted {
			return false
		}
		if b.denyUntil.CompareAndSwap(du, evicted) {
			return true
		}
	}
}

// dryStamp is deny-until t (a Unix ns time) carrying in its low bits the
// number of dry grants that kept the key saturated since the Store last
// denied it (at most dryMax; 0 for a Store denial): t less 1 to 31 ns
// (never later than t: a wait may end a little early, never late), its
// low four bits n. Times before 32 ns and far-future times keep no count;
// none becomes evicted.
func dryStamp(t int64, n int) int64 {
	if t < 32 || t >= evicted-64 {
		return min(t, evicted-64)
	}
	return (t-16)&^dryMask | int64(n)&dryMask
}

// dryCount is the count dryStamp put in deny-until du.
func dryCount(du int64) int { return int(du & dryMask) }

// dryMax bounds dryStamp's count: a key stays saturated for at most 15
// dry grants (about one per horizon) after the Store last denied it. It
// must fit in dryMask.
const dryMax, dryMask = 15, 15

// denyTill sets denyUntil unless the bucket was evicted.
func (b *bucket) denyTill(t int64) {
	for {
		du := b.denyUntil.Load()
		if du == evicted || b.denyUntil.CompareAndSwap(du, t) {
			return
		}
	}
}

// forget drops the Store's last answer (tokens came back that it did not
// count): the next check that needs the Store asks it.
func (b *bucket) forget() {
	b.resetAt.Store(0)
	if b.pol.Algorithm.LeasesAhead() {
		b.aux.Store(0) // its shares are placed from resetAt: see aheadTerms.span
	}
	b.clearDeny()
}

// clearDeny ends a deny-until (unless the bucket was evicted).
func (b *bucket) clearDeny() {
	for {
		du := b.denyUntil.Load()
		if du == 0 || du == evicted || b.denyUntil.CompareAndSwap(du, 0) {
			return
		}
	}
}

// takeUpTo takes at most n > 0 tokens and returns how many it took (0
// if b is striped: see Manager.takeUpTo).
func (b *bucket) takeUpTo(n int64) int64 {
	for {
		t := b.tokens.Load()
		k := min(t, n)
		if k <= 0 {
			return 0
		}
		if b.tokens.CompareAndSwap(t, t-k) {
			return k
		}
	}
}

// refund puts hits back, never above basis; it returns how many it put
// back (counted in kept after they are on hand: see keptSwap), or -1 if
// b is striped (see Manager.refund).
func (b *bucket) refund(hits int64) int64 {
	for {
		t := b.tokens.Load()
		if t < 0 {
			return -1
		}
		n := min(t+hits, b.basis.Load())
		if n <= t {
			return 0
		}
		if b.tokens.CompareAndSwap(t, n) {
			b.keptAdd(n - t)
			return n - t
		}
	}
}

// spendable reports whether tokens on hand may be spent at now on the
// fast path.
func (b *bucket) spendable(now int64) bool { return now < b.expires.Load() }

// settle records lent, the Store's Grant.Lent, as the bound on the tokens
// on hand (basis) and takes off what passes it (tokens refunded while the
// call was out, or of a loan the Store no longer counts). It returns the
// tokens on hand. b is not striped (see Manager.settle).
func (b *bucket) settle(lent int64) int64 {
	b.basis.Store(lent)
	for {
		t := b.tokens.Load()
		if t <= lent || b.tokens.CompareAndSwap(t, lent) {
			return min(t, lent)
		}
	}
}

// leaseExpiry is until when tokens of grant g, asked for at now (before
// the Store call, so at or before the Store's own now), may be spent on
// the fast path (algo's Policy.LeaseExpiry).
func leaseExpiry(p Policy, now int64, g Grant, ttl time.Duration) int64 {
	return p.LeaseExpiry(now, g, ttl)
}

// lastAnswer is the Store's last answer as b keeps it, its Reset at
// resetAt (≠ 0): the values algo's views of the answers take.
func (b *bucket) lastAnswer(resetAt int64) algo.Answer {
	a := algo.Answer{Remaining: b.remaining.Load(), ResetAt: resetAt}
	if b.pol.Algorithm.ViewsAnswerTime() {
		a.At = b.answeredAt()
	}
	return a
}

// storeLevel is the Store's whole tokens of b's key at now as far as this
// node knows: its answer to the last lease, aged to now (algo's
// Policy.Level). known is false before the first lease. Other holders of
// the key may have taken tokens since; this node cannot know, and the
// level is the best it has.
func (b *bucket) storeLevel(now int64) (level int64, known bool) {
	resetAt := b.resetAt.Load()
	if resetAt == 0 {
		return 0, false
	}
	return b.pol.Level(b.lastAnswer(resetAt), now), true
}

// coverAt is when, by the Store's last answer, the key will have need
// tokens (Unix ns; need ≤ capacity), and how much later than the Store's
// own time that may be (algo's Policy.CoverAt). Before the first answer it
// is 0 (ask the Store). Other holders may have taken tokens since: the
// Store then denies, with a new answer.
func (b *bucket) coverAt(need int64) (at, slack int64) {
	resetAt := b.resetAt.Load()
	if resetAt == 0 {
		return 0, 0
	}
	return b.pol.CoverAt(b.lastAnswer(resetAt), need)
}

// answer records the Store's answer g, received at (Unix ns).
func (b *bucket) answer(g Grant, at int64) {
	b.remaining.Store(g.Remaining)
	if b.pol.Algorithm.ViewsAnswerTime() {
		b.aux.Store(at)
	}
	b.resetAt.Store(addTime(at, g.Reset))
	if answerHook != nil {
		answerHook(b)
	}
}

// answerHook, when set (by tests only), runs when a lease call has
// published the Store's answer in b.
var answerHook func(b *bucket)

// answeredAt is when the Store's last answer came (Unix ns; for an
// algorithm whose view reads it: Algorithm.ViewsAnswerTime).
func (b *bucket) answeredAt() int64 { return b.aux.Load() }

// kept (token_bucket, gcra) is what this Manager held of the key when it
// sent its last lease call, plus what the call granted, plus what Refund
// put back since: the tokens of its loan it may not have spent before
// that call. The next call reports basis − kept as spent before it
// (Lessee.SpentBefore). The lease slot's holder takes it (keptSwap) before
// it reads the tokens on hand for a call, so that a refund in between
// counts twice (in held and in kept: fewer tokens reported spent), never
// not at all, and adds held + granted back on the answer (keptAdd), or
// what it took if the call failed.
func (b *bucket) keptSwap() int64 { return b.aux.Swap(0) }

// keptAdd adds n to kept (token_bucket, gcra).
func (b *bucket) keptAdd(n int64) {
	if b.pol.Algorithm.Refills() {
		b.aux.Add(n)
	}
}

// spentBefore is Lessee.SpentBefore for a call of b's key that took kept
// (keptSwap): what the Store lends this Manager and it had spent before its
// previous call, not refunded since.
// (kept < 0, an overflow of refunds that no lease call reset: unknown, 0).
func (b *bucket) spentBefore(kept int64) int64 {
	if kept < 0 {
		return 0
	}
	return min(max(b.basis.Load()-kept, 0), MaxHits)
}

// projected is the Store's whole tokens of b's key at now by its last
// answer, as coverAt projects it (0 before the first answer).
func (b *bucket) projected(now int64) int64 {
	resetAt := b.resetAt.Load()
	if resetAt == 0 {
		return 0
	}
	return b.pol.Projected(b.lastAnswer(resetAt), now)
}

// refilled reports whether b's key is, by the Store's answer to the last
// lease, back to full capacity at now, counting what it lent this
// Manager as spent: token_bucket and gcra only (a window's count never
// refills while its tokens are spendable).
func (b *bucket) refilled(now int64) bool {
	r := b.resetAt.Load()
	return b.pol.Algorithm.Refills() && r != 0 && now >= r
}

// addTime is t + d for a time t in Unix ns, saturating below evicted (a
// Store's Wait or Reset can exceed what int64 nanoseconds hold).
func addTime(t int64, d time.Duration) int64 {
	if int64(d) >= evicted-1-t {
		return evicted - 1
	}
	return t + int64(d)
}

// The lease sizing math. Pure: time is passed in.

// minRateWindow bounds the window over which a rate is measured from
// below, as a fraction of the horizon: a burst of a few hits in the same
// millisecond must not look like a million hits per second. It caps the
// growth of a lease at 10× per lease call. It does not hold back a key's
// first leases: those are sized by Config.MinLeaseShare (nothing is
// measured yet), so with the default 1/8 a key that turns out hot reaches
// a full-capacity lease at its second lease call; without the floor (a
// negative MinLeaseShare) a key starts at one token and grows 10× a call.
const minRateWindowDiv = 10

// rateTau is the EWMA time constant, in horizons: the smoothed rate forgets
// a burst after about ten horizons (1s by default).
const rateTauHorizons = 10

// observeRate folds consumed hits over elapsed into the EWMA rate (hits
// per second). It returns the new EWMA and the rate to size the next lease
// with: the larger of the EWMA and the latest measurement, so that a key
// heating up gets big leases at once and a key cooling down shrinks them
// gradually. first is true for a bucket's first lease (nothing measured).
func observeRate(ewma float64, consumed int64, elapsed, horizon time.Duration, first bool) (newEWMA, sizing float64) {
	if first {
		return 0, 0
	}
	consumed = max(consumed, 0)
	elapsed = max(elapsed, 0)
	win := max(elapsed, horizon/minRateWindowDiv, time.Microsecond)
	inst := float64(consumed) / win.Seconds()
	tau := float64(horizon) * rateTauHorizons
	alpha := float64(elapsed) / (float64(elapsed) + tau)
	newEWMA = ewma + alpha*(inst-ewma)
	return newEWMA, max(newEWMA, inst)
}

// leaseWant is the number of tokens to ask for: the larger of rate ×
// horizon and minShare × capacity, at least need (the check at hand), at
// most capacity (the Store cannot grant more). minShare ≤ 0 means no
// floor: a key whose rate × horizon is below one token then leases one
// token per check.
func leaseWant(rate float64, horizon time.Duration, minShare float64, need, capacity int64) int64 {
	f := math.Ceil(max(rate*horizon.Seconds(), minShare*float64(capacity)))
	w := need
	if f > float64(w) { // false for NaN
		if f >= float64(capacity) {
			w = capacity
		} else {
			w = int64(f)
		}
	}
	return max(min(w, capacity), need)
}

// batchWait is how much longer than the Store's Wait (the time until need
// tokens are back) a saturated key (the Store denied it, or a grant left
// the Store dry: Manager.dryWait) waits before it leases again, so that
// the lease finds a batch instead of one token: a key over its limit
// would otherwise cost a Store call per admitted hit. The batch
// is up to minShare × capacity tokens (the smallest lease), but waiting
// for it takes at most one horizon, in whole tokens: a saturated key
// costs at most about one Store call per horizon, like a hot one, and its
// RetryAfter grows by at most a horizon. Only refilling buckets
// (token_bucket, gcra): a window's Wait already ends when the whole limit
// is back.
func batchWait(p Policy, minShare float64, need int64, horizon time.Duration) time.Duration {
	if !p.Algorithm.Refills() {
		return 0
	}
	extra := math.Ceil(minShare*float64(p.Capacity())) - float64(need)
	perToken := float64(p.Period) / float64(p.Limit)
	n := min(extra, math.Floor(float64(horizon)/perToken))
	if !(n >= 1) {
		return 0
	}
	return time.Duration(n * perToken)
}

// lowMark is the prefetch mark for a grant: LowWater × grant, rounded
// down, at most MaxInt32.
func lowMark(lowWater float64, granted int64) int32 {
	return int32(min(int64(lowWater*float64(granted)), math.MaxInt32))
}

// idleFor is how long before now b's key last spent a token here, at
// most (lastUse is rounded down to whole ms and to res, the Manager's
// touchMs): 0 if unknown.
func (b *bucket) idleFor(now int64, res uint32) time.Duration {
	d := int32(unixMs32(now)-b.lastUse.Load()) - int32(res) - 1
	if d <= 0 {
		return 0
	}
	return time.Duration(d) * time.Millisecond
}

// touch records a spend at now, to res resolution (the Manager's
// touchMs: most checks only read lastUse). Checks that spend nothing do
// not touch: lastUse is also when this Manager last spent a token of the
// key (Lessee.Idle).
func (b *bucket) touch(now int64, res uint32) {
	if ms := unixMs32(now); ms-b.lastUse.Load() >= res {
		b.lastUse.Store(ms)
	}
}
