package lease

import (
	"math"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"
	"weak"
)

func TestBucketSize(t *testing.T) {
	if got := unsafe.Sizeof(bucket{}); got != bucketSize {
		t.Fatalf("bucket is %d bytes, want %d (the per-key memory budget)", got, bucketSize)
	}
}

// TestNewBucketKey checks that a bucket keeps its key's bytes, whatever
// their length, in one allocation of the size the budget counts on, and
// that the bytes survive collections (the collector must keep the
// allocation, and the policy it points to, alive through the bucket).
func TestNewBucketKey(t *testing.T) {
	p := &Policy{Algorithm: TokenBucket, Limit: 5, Period: time.Second}
	var bs []*bucket
	var keys []string
	for n := range 600 {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte('a' + (n+i)%26)
		}
		key := string(buf)
		b := newBucket(key, p)
		clear(buf) // the caller's bytes may be reused
		bs, keys = append(bs, b), append(keys, key)
	}
	runtime.GC()
	runtime.GC()
	for i, b := range bs {
		if b.key() != keys[i] || b.pol != p || b.tokens.Load() != 0 || b.resetAt.Load() != 0 {
			t.Fatalf("bucket of a %d-byte key: key %q, policy %p (want %p), tokens %d", i, b.key(), b.pol, p, b.tokens.Load())
		}
	}
	for _, tt := range []struct {
		key  string
		size int
	}{{"", 96}, {"mem:key-0000000", 96}, {"mem:key-00000000", 112}, {strings.Repeat("k", 31), 112}, {strings.Repeat("k", 32), 128}, {strings.Repeat("k", 254), 352}, {strings.Repeat("k", 255), 352}, {strings.Repeat("k", 479), 576}} {
		// The size class of the allocation: the bytes the budget counts.
		var before, after runtime.MemStats
		bs := make([]*bucket, 10_000)
		runtime.GC()
		runtime.ReadMemStats(&before)
		for i := range bs {
			bs[i] = newBucket(tt.key, p)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if got := float64(after.HeapAlloc-before.HeapAlloc) / float64(len(bs)); got <= float64(tt.size-8) || got >= float64(tt.size+8) {
			t.Errorf("a bucket with a %d-byte key takes %.1f bytes, want %d", len(tt.key), got, tt.size)
		}
		runtime.KeepAlive(bs)
		if n := testing.AllocsPerRun(10, func() { newBucket(tt.key, p) }); n != 1 {
			t.Errorf("a bucket with a %d-byte key takes %v allocations, want 1", len(tt.key), n)
		}
	}
}

// TestNewBucketKeepsPolicy checks that the collector finds a bucket's
// policy through the allocation newBucket makes (its type must say where
// the pointer is): a policy only the bucket points to stays until the
// bucket goes.
func TestNewBucketKeepsPolicy(t *testing.T) {
	p := &Policy{Algorithm: GCRA, Limit: 7, Period: time.Minute}
	wp := weak.Make(p)
	b := newBucket(strings.Repeat("x", 40), p)
	p = nil
	runtime.GC()
	runtime.GC()
	if got := wp.Value(); got == nil || got != b.pol || b.pol.Limit != 7 {
		t.Fatalf("the bucket's policy was collected while the bucket was live (weak pointer %p, bucket's %p)", got, b.pol)
	}
	if b.key() != strings.Repeat("x", 40) {
		t.Fatalf("key %q after collections", b.key())
	}
	runtime.KeepAlive(b)
	b = nil
	runtime.GC()
	runtime.GC()
	if wp.Value() != nil {
		t.Fatal("the policy outlived its only bucket: this test cannot see a lost pointer")
	}
}

func TestLeaseWant(t *testing.T) {
	h := 100 * time.Millisecond
	tests := []struct {
		rate           float64
		need, capacity int64
		want           int64
	}{
		{0, 1, 100, 1},               // nothing measured: just the check
		{0, 7, 100, 7},               // never below need
		{100, 1, 100, 10},            // 100/s × 100ms
		{99.5, 1, 100, 10},           // rounded up
		{10_000, 1, 100, 100},        // capped at capacity
		{10_000, 100, 100, 100},      // need = capacity
		{50, 20, 100, 20},            // need above rate × horizon
		{math.Inf(1), 1, 1000, 1000}, // no overflow
		{1e30, 1, MaxLimit, MaxLimit},
	}
	for _, tt := range tests {
		if got := leaseWant(tt.rate, h, 0, tt.need, tt.capacity); got != tt.want {
			t.Errorf("leaseWant(%v/s, need %d, cap %d) = %d, want %d", tt.rate, tt.need, tt.capacity, got, tt.want)
		}
	}
}

func TestLeaseWantMinShare(t *testing.T) {
	h := 100 * time.Millisecond
	tests := []struct {
		name           string
		rate, share    float64
		need, capacity int64
		want           int64
	}{
		{"cold key gets the floor", 0, 1.0 / 8, 1, 100, 13},
		{"floor rounds up", 0, 1.0 / 8, 1, 10, 2},
		{"tiny capacity: at least need", 0, 1.0 / 8, 1, 1, 1},
		{"need above the floor", 0, 1.0 / 8, 40, 100, 40},
		{"rate above the floor", 500, 1.0 / 8, 1, 100, 50},
		{"rate below the floor", 50, 1.0 / 8, 1, 100, 13},
		{"share 1 is the whole capacity", 0, 1, 1, 100, 100},
		{"no floor", 0, 0, 1, 100, 1},
		{"huge capacity", 0, 1.0 / 8, 1, MaxLimit, MaxLimit / 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := leaseWant(tt.rate, h, tt.share, tt.need, tt.capacity); got != tt.want {
				t.Fatalf("leaseWant(%v/s, share %v, need %d, cap %d) = %d, want %d", tt.rate, tt.share, tt.need, tt.capacity, got, tt.want)
			}
		})
	}
}

func TestBatchWait(t *testing.T) {
	h := 100 * time.Millisecond
	tb := func(limit int64, period time.Duration) Policy {
		return Policy{Algorithm: TokenBucket, Limit: limit, Period: period}
	}
	tests := []struct {
		name  string
		p     Policy
		share float64
		need  int64
		want  time.Duration
	}{
		{"a horizon of tokens", tb(10_000, time.Second), 1.0 / 8, 1, 100 * time.Millisecond},
		{"the batch is reached first", Policy{Algorithm: TokenBucket, Limit: 1000, Period: time.Second, Burst: 40}, 1.0 / 8, 1, 4 * time.Millisecond},
		{"slower than a token per horizon", tb(100, time.Minute), 1.0 / 8, 1, 0},
		{"need is the batch", tb(10_000, time.Second), 1.0 / 8, 1250, 0},
		{"no floor", tb(10_000, time.Second), 0, 1, 0},
		{"gcra too", Policy{Algorithm: GCRA, Limit: 10_000, Period: time.Second}, 1.0 / 8, 1, 100 * time.Millisecond},
		{"windows: no", Policy{Algorithm: FixedWindow, Limit: 10_000, Period: time.Second}, 1.0 / 8, 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := batchWait(tt.p, tt.share, tt.need, h); got != tt.want {
				t.Fatalf("batchWait = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMinLeaseShareConfig(t *testing.T) {
	tests := []struct {
		in, want float64
	}{
		{0, DefaultMinLeaseShare},
		{math.NaN(), DefaultMinLeaseShare},
		{-1, 0},
		{0.25, 0.25},
		{3, 1},
	}
	for _, tt := range tests {
		if got := (Config{MinLeaseShare: tt.in}).withDefaults().MinLeaseShare; got != tt.want {
			t.Errorf("MinLeaseShare %v → %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestObserveRate(t *testing.T) {
	h := 100 * time.Millisecond
	tests := []struct {
		name       string
		ewma       float64
		consumed   int64
		elapsed    time.Duration
		first      bool
		wantSizing float64
	}{
		{"first lease measures nothing", 0, 10, time.Second, true, 0},
		{"steady 1000/s", 1000, 100, 100 * time.Millisecond, false, 1000},
		{"burst in one instant is bounded by horizon/10", 0, 5, 0, false, 500},
		{"heating up: the measurement wins at once", 100, 1000, 100 * time.Millisecond, false, 10_000},
		{"negative consumption (refunds) counts as 0", 100, -5, 100 * time.Millisecond, false, 100 - 100*0.1/1.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, sizing := observeRate(tt.ewma, tt.consumed, tt.elapsed, h, tt.first)
			if math.Abs(sizing-tt.wantSizing) > 1e-6*max(1, tt.wantSizing) {
				t.Fatalf("sizing rate %v, want %v", sizing, tt.wantSizing)
			}
		})
	}
	// Cooling down: the EWMA shrinks towards the new rate, not at once.
	ewma, sizing := observeRate(10_000, 10, time.Second, h, false)
	if !(sizing > 10 && sizing < 10_000 && sizing == ewma) {
		t.Fatalf("cooling from 10000/s to 10/s: sizing %v, want between", sizing)
	}
}

func TestLowMark(t *testing.T) {
	if got := lowMark(0.25, 100); got != 25 {
		t.Errorf("lowMark(0.25, 100) = %d", got)
	}
	if got := lowMark(0.25, 3); got != 0 {
		t.Errorf("lowMark(0.25, 3) = %d, want 0 (no prefetch for tiny leases)", got)
	}
	if got := lowMark(0.5, MaxLimit); got != math.MaxInt32 {
		t.Errorf("lowMark saturates: got %d", got)
	}
}

func TestBucketRefundCap(t *testing.T) {
	var m Manager // an unstriped bucket's tokens need none of it
	b := newBucket("k", &Policy{Algorithm: TokenBucket, Limit: 5, Period: time.Second})
	b.tokens.Store(3)
	b.basis.Store(5)
	if got := m.striped.refund(b, 1); got != 1 || b.tokens.Load() != 4 {
		t.Fatalf("refund 1: put back %d, tokens %d", got, b.tokens.Load())
	}
	if got := m.striped.refund(b, 10); got != 1 || b.tokens.Load() != 5 {
		t.Fatalf("refund 10 over basis 5: put back %d, tokens %d", got, b.tokens.Load())
	}
	if got := b.aux.Load(); got != 2 {
		t.Fatalf("kept counts the refunds put back: %d, want 2", got)
	}
	if left, ok := m.striped.take(b, 5, -1); !ok || left != 0 {
		t.Fatalf("tryTake 5 of 5: %d %v", left, ok)
	}
	if _, ok := m.striped.take(b, 1, -1); ok {
		t.Fatal("tryTake from an empty bucket")
	}
}

// TestResetCountsLocalTokens: Reset agrees with Remaining. Tokens leased
// and still on hand are not spent, so a token bucket (or GCRA) is missing
// only the hits actually taken, each worth Period/Limit of refill; a
// window's Reset stays the end of the window.
func TestResetCountsLocalTokens(t *testing.T) {
	const limit, period = 5, 10 * time.Second
	perToken := period / limit
	for _, tt := range []struct {
		alg Algorithm
		// reset after spent hits, with elapsed time since the first check
		reset func(spent int64, elapsed time.Duration) time.Duration
	}{
		{TokenBucket, func(spent int64, el time.Duration) time.Duration { return time.Duration(spent)*perToken - el }},
		{GCRA, func(spent int64, el time.Duration) time.Duration { return time.Duration(spent)*perToken - el }},
		{FixedWindow, func(_ int64, el time.Duration) time.Duration { return period - el }},
	} {
		t.Run(tt.alg.String(), func(t *testing.T) {
			m, _, clk := testManager(t, nil)
			// The fake clock starts on a multiple of period: a window begins.
			p := Policy{Algorithm: tt.alg, Limit: limit, Period: period}
			var elapsed time.Duration
			for i := int64(1); i <= 4; i++ {
				d := mustTake(t, m, "k", p, 1)
				if !d.Allowed || d.Remaining != limit-i {
					t.Fatalf("check %d: allowed %v remaining %d, want true %d", i, d.Allowed, d.Remaining, limit-i)
				}
				if want := tt.reset(i, elapsed); d.Reset != want {
					t.Fatalf("check %d after %v: Reset %v, want %v", i, elapsed, d.Reset, want)
				}
				m.drain()
				if i == 2 {
					clk.Advance(300 * time.Millisecond) // less than a token's refill
					elapsed += 300 * time.Millisecond
				}
			}
			// A peek agrees with the last check.
			d := mustTake(t, m, "k", p, 0)
			if want := tt.reset(4, elapsed); d.Reset != want || d.Remaining != 1 {
				t.Fatalf("peek: Reset %v remaining %d, want %v 1", d.Reset, d.Remaining, want)
			}
		})
	}
}

func TestBucketResetBounds(t *testing.T) {
	p := &Policy{Algorithm: TokenBucket, Limit: 1, Period: MaxPeriod, Burst: MaxLimit}
	b := newBucket("k", p)
	b.resetAt.Store(int64(time.Hour))
	for _, tt := range []struct {
		local, now int64
		want       time.Duration
	}{
		{0, 0, time.Hour},
		{MaxLimit, 0, 0},                // local × Period overflows int64
		{0, int64(2 * time.Hour), 0},    // past
		{MaxLimit, int64(time.Hour), 0}, // now
	} {
		if got := b.reset(tt.local, tt.now); got != tt.want {
			t.Errorf("reset(%d, %d) = %v, want %v", tt.local, tt.now, got, tt.want)
		}
	}
}

// keyView returns a string that shares buf's bytes, as a caller building
// counter keys in a reused buffer would pass.
func keyView(buf []byte) string { return unsafe.String(unsafe.SliceData(buf), len(buf)) }

// TestKeyNeedNotOutliveCall: the Manager copies a key it keeps, so
// overwriting the caller's buffer after the call changes nothing it holds
// (lease/memstore's test of the same name: the MemoryStore's copies).
func TestKeyNeedNotOutliveCall(t *testing.T) {
	m, fs, _ := testManager(t, nil)
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Hour}
	buf := []byte("rule:key-a")
	mustTake(t, m, keyView(buf), p, 1)
	mustTake(t, m, keyView(buf), p, 0)
	m.drain()
	copy(buf, "rule:key-b")
	if m.buckets.load("rule:key-a") == nil || m.buckets.load("rule:key-b") != nil {
		t.Fatal("the bucket follows the caller's buffer")
	}
	if got := fs.available(t, "rule:key-a", p); got == 100 {
		t.Error("the Store lost key-a's lease")
	}
	if got := fs.available(t, "rule:key-b", p); got != 100 {
		t.Errorf("key-b has %d available in the Store, want 100 (untouched)", got)
	}

}

func TestTakeAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	m, _, _ := testManager(t, nil)
	p := Policy{Algorithm: TokenBucket, Limit: 1 << 40, Period: time.Second}
	buf := []byte("rule:hot")
	mustTake(t, m, keyView(buf), p, 1)
	m.drain()
	if n := testing.AllocsPerRun(100, func() { mustTake(t, m, keyView(buf), p, 1) }); n != 0 {
		t.Errorf("a check of a key with a bucket makes %v allocations, want 0", n)
	}
}

// TestDryStamp: a deny-until carries its dry-grant count, moving its time
// earlier by 1 to 31ns, never later, and never becomes evicted.
func TestDryStamp(t *testing.T) {
	for _, tt := range []int64{32, 47, 48, 49, 1_795_760_000_123_456_789} {
		for _, n := range []int{0, 1, 7, dryMax} {
			du := dryStamp(tt, n)
			if du >= tt || du < tt-31 || dryCount(du) != n {
				t.Errorf("dryStamp(%d, %d) = %d: want within [t-31, t-1] and count %d, got count %d", tt, n, du, n, dryCount(du))
			}
		}
	}
	if du := dryStamp(5, 3); du != 5 {
		t.Errorf("dryStamp(5, 3) = %d, want 5", du)
	}
	for _, tt := range []int64{evicted - 64, evicted - 1} {
		if du := dryStamp(tt, 3); du == evicted || du < evicted-64 {
			t.Errorf("dryStamp(%d, 3) = %d: want a far-future time, not evicted", tt, du)
		}
	}
}
