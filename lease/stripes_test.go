package lease

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// stripedKey leases key under p (a frozen clock: nothing refills), the
// whole capacity at once, and stripes its bucket.
func stripedKey(t *testing.T, m *Manager, key string, p Policy) *bucket {
	t.Helper()
	if d := mustTake(t, m, key, p, 1); !d.Allowed {
		t.Fatalf("first check of %s denied: %+v", key, d)
	}
	b := m.buckets.load(key)
	held := m.striped.onHand(b)
	m.striped.stripe(b)
	if b.tokens.Load() >= 0 {
		t.Fatalf("%s not striped (basis %d)", key, b.basis.Load())
	}
	if got := m.striped.onHand(b); got != held {
		t.Fatalf("%s holds %d once striped, %d before", key, got, held)
	}
	return b
}

// wholeLease: every lease asks for the whole capacity, so the first check
// holds all of a key's tokens.
func wholeLease(c *Config) { c.MinLeaseShare = 1 }

// The accuracy contract on a striped key: checks from many goroutines at
// once admit exactly what the Store grants, never more (a stripe spends
// with compare-and-swap, never below zero, and a token is in one stripe
// only), and no token is lost (the checks that find their stripes empty
// take from the others, then drain them all through the slow path).
func TestStripedKeyAdmitsExactlyWhatItHolds(t *testing.T) {
	for _, hits := range []int64{1, 3} {
		m, fs, _ := testManager(t, wholeLease)
		const limit = 3000
		p := Policy{Algorithm: TokenBucket, Limit: limit, Period: time.Hour}
		stripedKey(t, m, "k", p)
		var admitted atomic.Int64
		admitted.Add(1)
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				for {
					d, err := m.Take("k", p, hits)
					if err != nil {
						t.Error(err)
						return
					}
					if !d.Allowed {
						return
					}
					admitted.Add(hits)
				}
			})
		}
		wg.Wait()
		// hits 3 from 2999 on hand: 2 tokens can never make a check.
		want := int64(limit - (limit-1)%hits)
		if got := admitted.Load(); got != want {
			t.Fatalf("hits %d: admitted %d, want %d (the limit: exactly what was granted)", hits, got, want)
		}
		if got := fs.available(t, "k", p); got != 0 {
			t.Fatalf("hits %d: the Store has %d left, want 0", hits, got)
		}
	}
}

// The same with refunds: checks that another rule denied give their hits
// back while the others spend (Refund adds to a stripe under the
// stripes' lock, bounded by what the Store lends): the hits kept never
// pass the limit, and none is lost.
func TestStripedKeyRefundsConcurrently(t *testing.T) {
	m, fs, _ := testManager(t, wholeLease)
	const limit = 3000
	p := Policy{Algorithm: TokenBucket, Limit: limit, Period: time.Hour}
	stripedKey(t, m, "k", p)
	var kept atomic.Int64
	kept.Add(1)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			for i := 0; ; i++ {
				d, err := m.Take("k", p, 1)
				if err != nil {
					t.Error(err)
					return
				}
				if !d.Allowed {
					return
				}
				if (g+i)%3 == 0 {
					m.Refund("k", p, 1)
					continue
				}
				kept.Add(1)
			}
		})
	}
	wg.Wait()
	if got := kept.Load(); got != limit {
		t.Fatalf("kept %d hits, want %d (the limit)", got, limit)
	}
	if got := fs.available(t, "k", p); got != 0 {
		t.Fatalf("the Store has %d left, want 0", got)
	}
}

// What adds tokens to a striped key keeps its bounds: Refund never puts
// on hand more than the Store lends, settle takes off what passes a
// smaller loan, and the tokens go back to the Store when the key leaves
// (the stripes' sum), freeing its place for another key.
func TestStripedKeyBounds(t *testing.T) {
	m, fs, _ := testManager(t, wholeLease)
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Hour}
	b := stripedKey(t, m, "k", p)
	if got := m.striped.onHand(b); got != 999 {
		t.Fatalf("on hand %d, want 999", got)
	}
	for range 10 {
		mustTake(t, m, "k", p, 1)
	}
	m.Refund("k", p, 4)
	if got := m.striped.onHand(b); got != 993 {
		t.Fatalf("after 10 checks and a refund of 4: %d on hand, want 993", got)
	}
	m.Refund("k", p, 100)
	if got, lent := m.striped.onHand(b), b.basis.Load(); got != lent {
		t.Fatalf("after a refund past the loan: %d on hand, want %d (what the Store lends)", got, lent)
	}
	if got := m.striped.settle(b, 500); got != 500 || m.striped.onHand(b) != 500 {
		t.Fatalf("settle to 500: returned %d, %d on hand", got, m.striped.onHand(b))
	}
	if err := m.ReturnKeys(func(string) bool { return false }); err != nil {
		t.Fatal(err)
	}
	if got := fs.available(t, "k", p); got != 500 {
		t.Fatalf("the Store has %d after the key's return, want 500 (what was on hand)", got)
	}
	if got := m.striped.used.Load(); got != 0 {
		t.Fatalf("%d places used after the striped key left, want 0", got)
	}
	// A check still holding the old bucket finds no stripes, even once
	// its place belongs to another key.
	stripedKey(t, m, "other", p)
	if got := m.striped.onHand(b); got != 0 {
		t.Fatalf("the old bucket holds %d, want 0", got)
	}
	if _, ok := m.striped.take(b, 1, -1); ok {
		t.Fatal("a take from the old bucket spent another key's tokens")
	}
}

// A key is striped at the racesToStripe-th race lost by its checks
// within raceWithinMs of the first, never on fewer, nor on races further
// apart, nor on one core, nor holding too few tokens to spread.
func TestRacesStripeContendedKeys(t *testing.T) {
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Hour}
	t.Run("races close together", func(t *testing.T) {
		m, _, clk := testManager(t, wholeLease)
		m.striped.n = 16
		mustTake(t, m, "k", p, 1)
		bk := m.buckets.load("k")
		for range racesToStripe - 1 {
			m.striped.raced(bk)
		}
		if bk.tokens.Load() < 0 {
			t.Fatalf("striped after %d races", racesToStripe-1)
		}
		clk.Advance(time.Duration(raceWithinMs+1) * time.Millisecond)
		m.striped.raced(bk) // the first of a new count
		if bk.tokens.Load() < 0 {
			t.Fatal("striped by races more than raceWithinMs apart")
		}
		for range racesToStripe - 2 {
			m.striped.raced(bk)
		}
		if bk.tokens.Load() < 0 {
			t.Fatalf("striped after %d races within raceWithinMs", racesToStripe-1)
		}
		clk.Advance(time.Duration(raceWithinMs) * time.Millisecond)
		m.striped.raced(bk)
		if bk.tokens.Load() >= 0 {
			t.Fatalf("not striped by %d races within raceWithinMs", racesToStripe)
		}
	})
	t.Run("one core", func(t *testing.T) {
		m, _, _ := testManager(t, wholeLease)
		m.striped.n = 1
		mustTake(t, m, "k", p, 1)
		bk := m.buckets.load("k")
		for range 2 * racesToStripe {
			m.striped.raced(bk)
		}
		if bk.tokens.Load() < 0 {
			t.Fatal("striped with one core")
		}
	})
	t.Run("too few tokens", func(t *testing.T) {
		m, _, _ := testManager(t, nil)
		m.striped.n = 16
		small := Policy{Algorithm: TokenBucket, Limit: minStripeBasis * 16, Period: time.Hour}
		mustTake(t, m, "k", small, 1)
		bk := m.buckets.load("k")
		for range 2 * racesToStripe {
			m.striped.raced(bk)
		}
		if bk.tokens.Load() < 0 {
			t.Fatalf("striped holding %d, under %d a stripe", bk.basis.Load(), minStripeBasis)
		}
	})
}

// racesOf is the races counted for b (0 if its word holds another
// bucket's).
func racesOf(m *Manager, b *bucket) uint64 {
	k := uint64(uintptr(unsafe.Pointer(b))) * 0x9e3779b97f4a7c15 >> 32 << 32
	if w := m.striped.races[k>>(64-raceBits)].Load(); w&^0xffffffff == k {
		return w >> 16 & 0xffff
	}
	return 0
}

// hotKey leases a key of many tokens (the whole lease at once, a frozen
// clock: no check runs out) on a Manager that stripes as on many cores.
func hotKey(t *testing.T) (*Manager, Policy, *bucket, *clocktest.Clock) {
	t.Helper()
	m, _, clk := testManager(t, wholeLease)
	m.striped.n = 16
	p := Policy{Algorithm: TokenBucket, Limit: MaxLimit, Period: time.Hour}
	mustTake(t, m, "k", p, 1)
	return m, p, m.buckets.load("k"), clk
}

// Checks that never overlap never race: one goroutine's, from any depth
// of its stack, and those of goroutines that take turns at the key.
func TestChecksInTurnNeverRace(t *testing.T) {
	t.Run("one goroutine", func(t *testing.T) {
		m, p, bk, _ := hotKey(t)
		var deep func(n int)
		deep = func(n int) {
			var pad [256]byte
			if n > 0 {
				deep(n - 1)
				pad[n%len(pad)]++
				return
			}
			mustTake(t, m, "k", p, 1)
		}
		for i := range 1 << 16 {
			deep(i % 16)
		}
		if got := racesOf(m, bk); got != 0 || bk.tokens.Load() < 0 {
			t.Fatalf("one goroutine's checks: %d races counted, striped %v", got, bk.tokens.Load() < 0)
		}
	})
	t.Run("goroutines in turn", func(t *testing.T) {
		m, p, bk, _ := hotKey(t)
		turn := make(chan struct{}, 1)
		turn <- struct{}{}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 64 {
					<-turn
					for range 256 {
						mustTake(t, m, "k", p, 1)
					}
					turn <- struct{}{}
				}
			})
		}
		wg.Wait()
		if got := racesOf(m, bk); got != 0 || bk.tokens.Load() < 0 {
			t.Fatalf("goroutines taking turns: %d races counted, striped %v", got, bk.tokens.Load() < 0)
		}
	})
}

// Two goroutines checking one key at once, each on a core of its own,
// lose races to each other and get the key striped. The test ends when
// they have: it needs two cores that run at once, at some point.
func TestOverlappingChecksStripe(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two cores: checks on one core take turns")
	}
	m, p, bk, _ := hotKey(t)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			<-start
			for bk.tokens.Load() >= 0 {
				if d, err := m.Take("k", p, 1); err != nil || !d.Allowed {
					t.Errorf("%+v %v", d, err)
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
}

// A goroutine keeps its home while no other check races it there; two
// goroutines that share one lose races on it and get new homes drawn.
// Homes are drawn at most once a millisecond.
func TestSharedHomesAreDrawnAgain(t *testing.T) {
	m, p, bk, clk := hotKey(t)
	m.striped.stripe(bk)
	s := m.striped.of(bk, bk.tokens.Load())
	if s == nil {
		t.Fatal("not striped")
	}
	if s.mult.Load()&1 == 0 {
		t.Fatalf("even multiplier %x: two hints could share every home", s.mult.Load())
	}
	// A multiplier of 1 gives every goroutine the home 0 (a hint, a
	// stack address / 2 KiB, is far below 2^60).
	s.mult.Store(1)
	for range 1 << 16 {
		mustTake(t, m, "k", p, 1)
	}
	if got := s.mult.Load(); got != 1 {
		t.Fatalf("one goroutine's checks drew new homes (%x)", got)
	}
	if got := s.home(); got != 0 {
		t.Fatalf("home %d with the multiplier 1, want 0", got)
	}
	// rehome: once in a millisecond.
	now := m.clk.nanos()
	s.rehome(now)
	drawn := s.mult.Load()
	if drawn == 1 || drawn&1 == 0 {
		t.Fatalf("rehome drew %x", drawn)
	}
	s.rehome(now)
	if s.mult.Load() != drawn {
		t.Fatal("homes drawn twice in one millisecond")
	}
	s.mult.Store(1)
	if runtime.GOMAXPROCS(0) < 2 {
		return // checks on one core take turns: they never race
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			<-start
			for s.mult.Load() == 1 {
				if d, err := m.Take("k", p, 1); err != nil || !d.Allowed {
					t.Errorf("%+v %v", d, err)
					return
				}
			}
		})
	}
	// The clock is frozen at the millisecond of the draw above: move it
	// on so that the races can draw again.
	clk.Advance(time.Millisecond)
	close(start)
	wg.Wait()
}

// Two goroutines alive at once have different hints (their stacks are
// apart, and the hint is a bijection of the stack block), so they start
// from different stripes unless the hints collide in the stripes' bits.
func TestGoroutineHintsDiffer(t *testing.T) {
	hints := make(chan uint64)
	release := make(chan struct{})
	for range 2 {
		go func() {
			hints <- goroutineHint()
			<-release // alive until both hints are read
		}()
	}
	h1, h2 := <-hints, <-hints
	close(release)
	if h1 == h2 {
		t.Fatalf("two live goroutines share the hint %x", h1)
	}
}
