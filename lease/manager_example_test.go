package lease_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/lease"
)

func ExampleManager() {
	// A stopped clock keeps the output exact on a slow machine; leave Now
	// nil in production.
	now := func() time.Time { return time.Unix(1_700_000_000, 0) }
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: now})
	defer store.Close()
	cfg := lease.DefaultConfig()
	cfg.Now = now
	m := lease.NewManager(store, cfg)
	defer m.Close() // returns every unspent token to the store

	p := lease.Policy{Algorithm: lease.TokenBucket, Limit: 3, Period: time.Minute}
	for range 4 {
		d, err := m.Take("user-42", p, 1)
		if err != nil {
			panic(err) // only for a bad call: wrong algorithm, hits out of range
		}
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter.Round(time.Second))
	}
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 20s
}

func ExampleManager_Acquire() {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	m := lease.NewManager(store, lease.DefaultConfig())
	defer m.Close()

	uploads := lease.Policy{Algorithm: lease.Concurrency, Limit: 1, Period: time.Minute}
	d, id, _ := m.Acquire("tenant-7", uploads, 1)
	fmt.Println(d.Allowed, len(id))
	d, _, _ = m.Acquire("tenant-7", uploads, 1)
	fmt.Println(d.Allowed)
	_ = m.Release("tenant-7", uploads, id)
	d, _, _ = m.Acquire("tenant-7", uploads, 1)
	fmt.Println(d.Allowed)
	// Output:
	// true 32
	// false
	// true
}

func ExampleBreaker() {
	store := lease.NewMemoryStore(lease.MemoryStoreConfig{})
	defer store.Close()
	// The Manager wraps its Store in a Breaker itself; a Breaker can also
	// guard a Store used directly.
	b := lease.NewBreaker(store, lease.BreakerConfig{Timeout: 50 * time.Millisecond, Failures: 5, Cooldown: time.Second})
	fmt.Println(b.State())
	// Output: closed
}
