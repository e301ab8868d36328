package lease

import (
	"context"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// TestMemoryStoreSharesHolderIDs: the loans of keys leased by one holder
// share one copy of its ID (per shard), and the copy is the store's own:
// the caller's buffer may change after the call.
func TestMemoryStoreSharesHolderIDs(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewMemoryStore(MemoryStoreConfig{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Second}
	// Three keys of one shard.
	var keys []string
	for i := 0; len(keys) < 3; i++ {
		k := "k" + strconv.Itoa(i)
		if s.shard(k) == s.shard("k0") {
			keys = append(keys, k)
		}
	}
	buf := []byte("holder-a")
	for _, k := range keys {
		id := unsafe.String(&buf[0], len(buf)) // a reused request buffer, say
		if g, err := s.Lease(context.Background(), k, p, 10, 1, Lessee{ID: id, TTL: time.Minute, Idle: 10 * time.Second}); err != nil || g.Granted != 10 {
			t.Fatalf("Lease(%s) = %+v, %v", k, g, err)
		}
	}
	copy(buf, "XXXXXXXX")
	sh := s.shard(keys[0])
	var first *byte
	for _, k := range keys {
		ls := sh.m[k].state.(*TokenBucketState).Loans
		if len(ls) != 1 || ls[0].Holder != "holder-a" || ls[0].Lent != 10 {
			t.Fatalf("%s: loans %+v, want one of 10 to holder-a", k, ls)
		}
		if first == nil {
			first = unsafe.StringData(ls[0].Holder)
		} else if unsafe.StringData(ls[0].Holder) != first {
			t.Errorf("%s: its loan has a copy of the holder ID of its own", k)
		}
	}
}
