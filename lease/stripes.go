package lease

import (
	"math"
	"math/bits"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Striped tokens. A bucket's tokens on hand are one atomic counter: every
// check of the key compare-and-swaps it, and when several cores check one
// key at once the counter's cache line (the bucket's, read by every check)
// moves from core to core on each check. A key seen contended (checks'
// compare-and-swaps of its counter lost to other checks: see raced) is
// given stripes: its tokens on hand are spread over counters on cache
// lines of their own, and each check spends from the stripe its
// goroutine hashes to (its home), then from the others, before it goes
// the slow way. Two goroutines whose homes are one stripe are seen the
// same way, on that stripe, and every goroutine's home is drawn again
// (see rehome). The bucket's counter then holds stripedMark plus the
// stripes' place in the Manager's table, and is read, not written, by
// the checks.
//
// The accuracy contract is unchanged: a token is in exactly one stripe
// until a check spends it, the stripes' sum is what the bucket holds
// (what lease calls report held, returns give back, settle bounds by what
// the Store lends), and a check spends from one stripe with
// compare-and-swap, never below zero. What adds tokens (lease answers,
// Refund) holds the stripes' mutex and reads their sum under it while
// checks can only lower it: a bound (basis, Grant.Lent) checked against
// that sum holds for the true one.
//
// Only contended keys grow, and at most maxStriped of them per Manager
// (the bucket, the per-key cost, is unchanged): a striped bucket keeps its
// stripes until it leaves the index.

// stripedMark, plus the index of a bucket's stripes in the Manager's
// table, is the counter of a striped bucket. Any negative counter is one:
// a bucket's tokens are never negative otherwise.
const stripedMark = math.MinInt64

// maxStriped bounds the striped keys of a Manager: with stripesPerKey
// stripes of stripeBytes each, their memory is bounded (64 keys × 16 ×
// 128 bytes = 128 KiB on up to 4 cores).
const maxStriped = 64

// stripeBytes is a stripe's size: two cache lines, so that the adjacent
// line prefetch does not pull a neighbour's counter along.
const stripeBytes = 128

// minStripeBasis: a key is striped only if the Store lends this Manager
// at least this many tokens of it per stripe (fewer, spread over the
// stripes, would leave most of them empty: checks would go round all of
// them, then the slow way).
const minStripeBasis = 4

// A key is seen contended when racesToStripe compare-and-swaps of checks
// of it lost to other checks within raceWithinMs of the first: checks of
// it overlap, from several cores, at a high rate (a lost race needs two
// checks within a few nanoseconds of each other). One goroutine's checks
// never race one another, nor do the checks of goroutines that take turns
// at the key, however many. The races are counted in a table of
// 2^raceBits words per Manager, by bucket.
const (
	racesToStripe = 4
	raceWithinMs  = 10
	raceBits      = 8
)

type stripe struct {
	tokens atomic.Int64
	_      [stripeBytes - 8]byte
}

// stripes are a striped bucket's tokens on hand.
type stripes struct {
	owner *bucket // checks holding a stale bucket find another owner: empty
	mask  uint64  // len(s) - 1
	shift uint8   // 64 - log2(len(s))
	s     []stripe
	// mult is the odd multiplier of the goroutines' hints that makes
	// their homes (see home); rehome draws it again, at most once a
	// millisecond (movedMs, Unix ms modulo 2^32).
	mult    atomic.Uint64
	movedMs atomic.Uint32
	_       [stripeBytes]byte // the checks read the line above; mu is written
	// mu serialises what adds tokens (put, refund) and settle: see above.
	mu sync.Mutex
}

// stripeTable is a Manager's striped buckets' stripes, by index.
type stripeTable struct {
	n      int // stripes per key, a power of 2; 1: no striping (one core)
	clk    *clock
	slots  *slots // a key is striped under its slot (see stripe)
	mu     sync.Mutex
	used   atomic.Int32 // written under mu
	places [maxStriped]atomic.Pointer[stripes]
	_      [stripeBytes]byte // places are read by checks, races written
	// races counts the lost races of the buckets that hash to each word:
	// the bucket's hash (32 bits), the races (16), the time of the first
	// (Unix ms, 16).
	races [1 << raceBits]atomic.Uint64
	_     [stripeBytes]byte // nor the Manager's next fields share its lines
}

func (tab *stripeTable) init(clk *clock, sl *slots) {
	tab.clk, tab.slots = clk, sl
	// Four stripes per core, at least 16: two goroutines on two cores
	// hash to the same stripe one time in 16.
	tab.n = 1 << bits.Len(uint(max(4*runtime.GOMAXPROCS(0), 16)-1))
	tab.n = min(tab.n, 64)
	if runtime.GOMAXPROCS(0) == 1 {
		tab.n = 1 // one core: no cache line to move
	}
}

// of returns the stripes of b, whose counter read t (negative), or nil
// when b's stripes are gone (b left the index: it holds nothing).
func (tab *stripeTable) of(b *bucket, c int64) *stripes {
	i := uint64(c - stripedMark)
	if i >= maxStriped {
		return nil
	}
	if s := tab.places[i].Load(); s != nil && s.owner == b {
		return s
	}
	return nil
}

// add gives b stripes, if a place is free.
func (tab *stripeTable) add(b *bucket) (int, *stripes) {
	tab.mu.Lock()
	defer tab.mu.Unlock()
	if tab.used.Load() >= maxStriped {
		return -1, nil
	}
	for i := range tab.places {
		if tab.places[i].Load() == nil {
			s := &stripes{owner: b, mask: uint64(tab.n - 1), shift: uint8(64 - bits.TrailingZeros(uint(tab.n))), s: make([]stripe, tab.n)}
			s.mult.Store(rand.Uint64() | 1)
			tab.places[i].Store(s)
			tab.used.Add(1)
			return i, s
		}
	}
	return -1, nil
}

// full reports whether no key can be striped now.
func (tab *stripeTable) full() bool { return tab.used.Load() >= maxStriped }

// remove frees b's place (b left the index and its tokens were drained).
func (tab *stripeTable) remove(b *bucket) {
	c := b.tokens.Load()
	if c >= 0 {
		return
	}
	tab.mu.Lock()
	defer tab.mu.Unlock()
	i := uint64(c - stripedMark)
	if i >= maxStriped {
		return
	}
	if s := tab.places[i].Load(); s != nil && s.owner == b {
		tab.places[i].Store(nil)
		tab.used.Add(-1)
	}
}

// goroutineHint is the 2 KiB block of the calling goroutine's stack that
// holds an address on it: the same for every call a goroutine makes from
// one place in its code (until its stack moves), different for
// goroutines alive at once (their stacks are apart, in blocks of at least
// 2 KiB).
func goroutineHint() uint64 {
	var here byte
	return uint64(uintptr(unsafe.Pointer(&here))) >> 11
}

// home is the stripe a check starts from: its goroutine's hint times
// mult, its high bits (a multiply-shift hash: two goroutines' hints
// share a home for about one multiplier in len(s), and a goroutine keeps
// its home until rehome draws another).
func (s *stripes) home() uint64 { return goroutineHint() * s.mult.Load() >> s.shift }

// take spends hits > 0 tokens from one stripe, its home first. left is
// an estimate of the tokens left on hand (the stripe's, times the
// stripes): reading the others would move their cache lines here.
// raced reports that a compare-and-swap of its home lost to another
// check (see rehome).
func (s *stripes) take(hits int64) (left int64, ok, raced bool) {
	h := s.home()
	for i := range uint64(len(s.s)) {
		st := &s.s[(h+i)&s.mask].tokens
		t := st.Load()
		for t >= hits {
			if st.CompareAndSwap(t, t-hits) {
				return (t - hits) * int64(len(s.s)), true, raced
			}
			last := t
			if t = st.Load(); t < last && i == 0 {
				raced = true
			}
		}
	}
	return 0, false, raced
}

// rehome draws the goroutines' homes again (a new multiplier), unless
// they were drawn in the millisecond at now: a check lost a race on its
// home to another check, so two goroutines that run at once probably
// share it. The new homes are apart for two goroutines with about 15
// chances in 16 (16 stripes); with as many running goroutines as
// stripes some share one whatever the draw, and the draws stay one a
// millisecond at most: each moves every goroutine's home once.
func (s *stripes) rehome(now int64) {
	ms := unixMs32(now)
	if last := s.movedMs.Load(); last != ms && s.movedMs.CompareAndSwap(last, ms) {
		s.mult.Store(rand.Uint64() | 1)
	}
}

// sum is the tokens on hand: under mu, at least what is there at its
// end (checks only lower them meanwhile).
func (s *stripes) sum() int64 {
	var n int64
	for i := range s.s {
		n += s.s[i].tokens.Load()
	}
	return n
}

// takeUpTo takes at most n > 0 tokens from the stripes and returns how
// many it took.
func (s *stripes) takeUpTo(n int64) int64 {
	took := int64(0)
	for i := range s.s {
		st := &s.s[i].tokens
		for took < n {
			t := st.Load()
			k := min(t, n-took)
			if k <= 0 {
				break
			}
			if st.CompareAndSwap(t, t-k) {
				took += k
			}
		}
	}
	return took
}

// drain takes every token on hand.
func (s *stripes) drain() int64 {
	var n int64
	for i := range s.s {
		n += s.s[i].tokens.Swap(0)
	}
	return n
}

// put spreads n ≥ 0 tokens over the stripes. The caller holds mu.
func (s *stripes) put(n int64) {
	if n <= 0 {
		return
	}
	k := int64(len(s.s))
	each, rest := n/k, n%k
	for i := range s.s {
		add := each
		if int64(i) < rest {
			add++
		}
		if add > 0 {
			s.s[i].tokens.Add(add)
		}
	}
}

// The bucket's tokens on hand, striped or not. Lease calls, returns and
// sweeps (which hold the key's slot) and checks use these, never the
// counter itself.

// quickTake is take's common case, small enough to be inlined in the
// fast paths: b is not striped, no other check came in between. When it
// reports false it changed nothing: call take.
func (b *bucket) quickTake(hits int64) (left int64, ok bool) {
	t := b.tokens.Load()
	return t - hits, t >= hits && b.tokens.CompareAndSwap(t, t-hits)
}

// take spends hits > 0 tokens of b if there are that many on hand (on
// one stripe, if striped) and returns an estimate of those left. was is
// the counter as the caller's quickTake of these hits read it (it
// failed), or -1. A compare-and-swap that failed, its own or quickTake's,
// and a counter found lower after it is a race lost to another check
// (what else lowers it, a lease call's settle or a return, is rare):
// counted by raced, or on a striped key by rehome if it was the check's
// home.
func (tab *stripeTable) take(b *bucket, hits, was int64) (left int64, ok bool) {
	t := b.tokens.Load()
	if t < was && t >= 0 {
		tab.raced(b)
	}
	for t >= hits {
		if b.tokens.CompareAndSwap(t, t-hits) {
			return t - hits, true
		}
		last := t
		if t = b.tokens.Load(); t < last && t >= 0 {
			tab.raced(b)
		}
	}
	if t >= 0 {
		return t, false
	}
	s := tab.of(b, t)
	if s == nil {
		return 0, false
	}
	left, ok, raced := s.take(hits)
	if raced {
		s.rehome(tab.clk.nanos())
	}
	return left, ok
}

// raced records that a check of b lost a race to another check, and
// stripes b at the racesToStripe-th race within raceWithinMs of the
// first: several cores check the key at once, at a high rate. Checks
// that only follow one another (one goroutine's, or goroutines that take
// turns) never race.
func (tab *stripeTable) raced(b *bucket) {
	if tab.n <= 1 {
		return // one core: no cache line to move
	}
	k := uint64(uintptr(unsafe.Pointer(b))) * 0x9e3779b97f4a7c15 >> 32 << 32
	w := &tab.races[k>>(64-raceBits)]
	ms := uint64(uint16(unixMs32(tab.clk.nanos())))
	n := uint64(1)
	if old := w.Load(); old&^0xffffffff == k && uint16(ms-old&0xffff) <= raceWithinMs {
		n, ms = min(old>>16&0xffff+1, 0xffff), old&0xffff
	}
	w.Store(k | n<<16 | ms)
	if n >= racesToStripe {
		tab.stripe(b)
	}
}

// stripe gives b stripes (it was seen contended), unless they would not
// pay or cannot be had now: the key's slot is busy (a lease call of it
// is out: the next race tries again), the table is full, b holds too
// little.
func (tab *stripeTable) stripe(b *bucket) {
	if b.basis.Load() < minStripeBasis*int64(tab.n) || tab.full() {
		return
	}
	sl, owner := tab.slots.claim(b)
	if !owner {
		return
	}
	defer tab.slots.release(b, sl, nil)
	if b.denyUntil.Load() == evicted || b.tokens.Load() < 0 {
		return
	}
	i, s := tab.add(b)
	if s == nil {
		return
	}
	if stripeHook != nil {
		stripeHook(b)
	}
	// Checks that read the counter before the swap spend from it; those
	// after it find the stripes, empty until the put (they go the slow
	// way and wait for the slot, held here). Refunds add to the stripes
	// once the swap is done, under mu.
	s.mu.Lock()
	s.put(b.tokens.Swap(stripedMark + int64(i)))
	s.mu.Unlock()
}

// stripeHook, when set (by tests only), runs when a bucket is about to
// be striped.
var stripeHook func(b *bucket)

// onHand is b's tokens on hand.
func (tab *stripeTable) onHand(b *bucket) int64 {
	t := b.tokens.Load()
	if t >= 0 {
		return t
	}
	if s := tab.of(b, t); s != nil {
		return s.sum()
	}
	return 0
}

// takeAll takes all of b's tokens on hand and returns them. The caller
// holds b's slot.
func (tab *stripeTable) takeAll(b *bucket) int64 {
	t := b.tokens.Load()
	if t >= 0 {
		return b.tokens.Swap(0) // striped only under the slot: still >= 0
	}
	if s := tab.of(b, t); s != nil {
		return s.drain()
	}
	return 0
}

// put adds n ≥ 0 tokens to b's tokens on hand. The caller holds b's slot.
func (tab *stripeTable) put(b *bucket, n int64) {
	t := b.tokens.Load()
	if t >= 0 {
		b.tokens.Add(n)
		return
	}
	if s := tab.of(b, t); s != nil {
		s.mu.Lock()
		s.put(n)
		s.mu.Unlock()
	}
}

// takeUpTo takes at most n > 0 of b's tokens and returns how many it took.
func (tab *stripeTable) takeUpTo(b *bucket, n int64) int64 {
	if t := b.tokens.Load(); t < 0 {
		if s := tab.of(b, t); s != nil {
			return s.takeUpTo(n)
		}
		return 0
	}
	return b.takeUpTo(n)
}

// refund puts hits back on hand, never above basis; it returns how many
// it put back (counted in kept: see keptSwap).
func (tab *stripeTable) refund(b *bucket, hits int64) int64 {
	if t := b.tokens.Load(); t < 0 {
		s := tab.of(b, t)
		if s == nil {
			return 0
		}
		s.mu.Lock()
		n := min(hits, b.basis.Load()-s.sum())
		if n > 0 {
			s.s[s.home()].tokens.Add(n)
			b.keptAdd(n)
		}
		s.mu.Unlock()
		return max(n, 0)
	}
	if n := b.refund(hits); n >= 0 {
		return n
	}
	return tab.refund(b, hits) // striped meanwhile
}

// settle records lent, the Store's Grant.Lent, as the bound on b's tokens
// on hand (basis) and takes off what passes it; it returns the tokens on
// hand. The caller holds b's slot.
func (tab *stripeTable) settle(b *bucket, lent int64) int64 {
	if t := b.tokens.Load(); t < 0 {
		b.basis.Store(lent)
		s := tab.of(b, t)
		if s == nil {
			return 0
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		n := s.sum()
		if n > lent {
			n -= s.takeUpTo(n - lent)
		}
		return min(n, lent)
	}
	return b.settle(lent)
}

// quickTakeStriped is take's common case on a striped bucket, for
// Prefix.TakeLocal: hits from the goroutine's own stripe, one
// compare-and-swap (if it loses to another check, the homes are drawn
// again: see rehome). When it reports false it changed no tokens: call
// take.
func (tab *stripeTable) quickTakeStriped(b *bucket, hits int64) (left int64, ok bool) {
	s := tab.of(b, b.tokens.Load())
	if s == nil {
		return 0, false
	}
	st := &s.s[s.home()].tokens
	t := st.Load()
	if t < hits {
		return 0, false
	}
	if st.CompareAndSwap(t, t-hits) {
		return (t - hits) * int64(len(s.s)), true
	}
	if st.Load() < t {
		s.rehome(tab.clk.nanos())
	}
	return 0, false
}
