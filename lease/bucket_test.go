package lease

import (
	"math"
	"testing"
	"time"
	"unsafe"
)

func TestBucketSize(t *testing.T) {
	if got := unsafe.Sizeof(bucket{}); got != bucketSize {
		t.Fatalf("bucket is %d bytes, want %d (the per-key memory budget)", got, bucketSize)
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
		if got := leaseWant(tt.rate, h, tt.need, tt.capacity); got != tt.want {
			t.Errorf("leaseWant(%v/s, need %d, cap %d) = %d, want %d", tt.rate, tt.need, tt.capacity, got, tt.want)
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
	var b bucket
	b.tokens.Store(3)
	b.basis.Store(5)
	if got := b.refund(1); got != 1 || b.tokens.Load() != 4 {
		t.Fatalf("refund 1: put back %d, tokens %d", got, b.tokens.Load())
	}
	if got := b.refund(10); got != 1 || b.tokens.Load() != 5 {
		t.Fatalf("refund 10 over basis 5: put back %d, tokens %d", got, b.tokens.Load())
	}
	if left, ok := b.tryTake(5); !ok || left != 0 {
		t.Fatalf("tryTake 5 of 5: %d %v", left, ok)
	}
	if _, ok := b.tryTake(1); ok {
		t.Fatal("tryTake from an empty bucket")
	}
}
