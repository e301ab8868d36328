package lease

import (
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stripedKey leases key under p (a frozen clock: nothing refills), the
// whole capacity at once, and stripes its bucket.
func stripedKey(t *testing.T, m *Manager, key string, p Policy) *bucket {
	t.Helper()
	if d := mustTake(t, m, key, p, 1); !d.Allowed {
		t.Fatalf("first check of %s denied: %+v", key, d)
	}
	b := m.buckets.load(key)
	held := m.onHand(b)
	m.stripe(b)
	if b.tokens.Load() >= 0 {
		t.Fatalf("%s not striped (basis %d)", key, b.basis.Load())
	}
	if got := m.onHand(b); got != held {
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
	if got := m.onHand(b); got != 999 {
		t.Fatalf("on hand %d, want 999", got)
	}
	for range 10 {
		mustTake(t, m, "k", p, 1)
	}
	m.Refund("k", p, 4)
	if got := m.onHand(b); got != 993 {
		t.Fatalf("after 10 checks and a refund of 4: %d on hand, want 993", got)
	}
	m.Refund("k", p, 100)
	if got, lent := m.onHand(b), b.basis.Load(); got != lent {
		t.Fatalf("after a refund past the loan: %d on hand, want %d (what the Store lends)", got, lent)
	}
	if got := m.settle(b, 500); got != 500 || m.onHand(b) != 500 {
		t.Fatalf("settle to 500: returned %d, %d on hand", got, m.onHand(b))
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
	if got := m.onHand(b); got != 0 {
		t.Fatalf("the old bucket holds %d, want 0", got)
	}
	if _, ok := m.take(b, 1); ok {
		t.Fatal("a take from the old bucket spent another key's tokens")
	}
}

// A key is striped when two goroutines' sampled takes of it come within
// sightWithinMs, never on one goroutine's alone, nor on sightings further
// apart, nor on one core.
func TestSightingsStripeContendedKeys(t *testing.T) {
	p := Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Hour}
	const a, b = 1 << 48, 2 << 48 // two goroutines' hints
	t.Run("two goroutines", func(t *testing.T) {
		m, _, clk := testManager(t, wholeLease)
		m.striped.n = 16
		mustTake(t, m, "k", p, 1)
		bk := m.buckets.load("k")
		m.sighted(bk, a)
		m.sighted(bk, a)
		m.sighted(bk, a)
		if bk.tokens.Load() < 0 {
			t.Fatal("striped by one goroutine's sightings")
		}
		clk.Advance(time.Duration(sightWithinMs+1) * time.Millisecond)
		m.sighted(bk, b)
		if bk.tokens.Load() < 0 {
			t.Fatal("striped by sightings more than sightWithinMs apart")
		}
		m.sighted(bk, a)
		if bk.tokens.Load() >= 0 {
			t.Fatal("not striped by two goroutines' sightings 0ms apart")
		}
	})
	t.Run("one core", func(t *testing.T) {
		m, _, _ := testManager(t, wholeLease)
		m.striped.n = 1
		mustTake(t, m, "k", p, 1)
		bk := m.buckets.load("k")
		// Sampled takes from two goroutines at once: not even sighted.
		var wg sync.WaitGroup
		for range 2 {
			wg.Go(func() {
				for range 4 {
					if _, ok := m.take(bk, 1<<sightEvery); !ok {
						t.Error("denied")
					}
				}
			})
		}
		wg.Wait()
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
		m.sighted(bk, a)
		m.sighted(bk, b)
		if bk.tokens.Load() < 0 {
			t.Fatalf("striped holding %d, under %d a stripe", bk.basis.Load(), minStripeBasis)
		}
	})
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

// One goroutine is sighted as one whatever the depth of the call that
// takes: its takes come from different call paths (the fast path, the
// slow way, a caller's own frames), and a saturated key checked from one
// goroutine was striped when two of them fell in different 2 KiB blocks.
func TestOneGoroutineOneRegion(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1)) // a collection may move the stack
	var deep func(n int) uint64
	deep = func(n int) uint64 {
		var pad [256]byte
		if n == 0 {
			return goroutineRegion() + uint64(pad[0])
		}
		return deep(n-1) + uint64(pad[n%len(pad)])
	}
	done := make(chan [2]uint64)
	go func() {
		deep(40) // grow the stack first: a growth moves it
		done <- [2]uint64{deep(0), deep(12)}
	}()
	r := <-done
	if r[0] != r[1] {
		t.Fatalf("one goroutine, two regions: %x at depth 0, %x some 3 KiB deeper", r[0], r[1])
	}
}
