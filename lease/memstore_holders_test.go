package lease_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
)

// holdersPolicy is the key the holder benchmarks lease: a token_bucket of
// 100,000 a second, whose burst no number of holders leasing a token each
// runs out of.
var holdersPolicy = lease.Policy{Algorithm: lease.TokenBucket, Limit: 100_000, Period: time.Second}

// renewer is one holder renewing its loan of a key as a Manager does: each
// call reports the token it was lent spent (Held one less than its Lent)
// and asks for one more.
type renewer struct {
	to   lease.Lessee
	lent int64
}

// holderID is the i-th holder's ID, random-looking as a Manager's (an
// ID of zeros but the last digits would cost the Store's comparisons more
// than real ones).
func holderID(i int) string {
	x := uint64(i+1) * 0x9e3779b97f4a7c15
	return fmt.Sprintf("h-%016x%016x", x, x^0xbf58476d1ce4e5b9)
}

func newRenewers(n, maxHolders int) []renewer {
	rs := make([]renewer, n)
	for i := range rs {
		rs[i].to = lease.Lessee{ID: holderID(i), TTL: 5 * time.Minute, MaxHolders: maxHolders}
	}
	return rs
}

func (r *renewer) lease(ctx context.Context, s lease.Leaser, key string) (lease.Grant, error) {
	r.to.Held = max(r.lent-1, 0)
	r.to.Call++
	g, err := s.Lease(ctx, key, holdersPolicy, 1, 1, r.to)
	if err == nil {
		r.lent = g.Lent
	}
	return g, err
}

// BenchmarkLeaseHolders is one lease call on the MemoryStore, as a
// Manager renews its loan, on a token_bucket key that N holders lease
// (each holder in turn), the clock moving 10µs a call: what a key's
// holders cost a call. Against holders=1, it chose
// lease.DefaultMaxHolders (with lua's, see docs/performance.md):
//
//	go test ./lease/ -run '^$' -bench LeaseHolders -count 6
func BenchmarkLeaseHolders(b *testing.B) {
	ctx := context.Background()
	for _, n := range []int{1, 16, 20, 24, 32, 64, 128, 600} {
		b.Run(fmt.Sprintf("holders=%d", n), func(b *testing.B) {
			clk := clocktest.New()
			s := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
			defer s.Close()
			rs := newRenewers(n, 0)
			for i := range rs { // every holder's first lease, and one renewal
				for range 2 {
					clk.Advance(10 * time.Microsecond)
					if _, err := rs[i].lease(ctx, s, "k"); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportAllocs()
			cpu := processCPU(b)
			i := 0
			for b.Loop() {
				clk.Advance(10 * time.Microsecond)
				if _, err := rs[i%n].lease(ctx, s, "k"); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time the process has used (user and system): on a
// shared machine, what a call costs is its CPU time, which others' load
// swings much less than its wall time (ns/op).
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
