package lease

import (
	"context"
	"errors"
	"math"
	"strconv"
	"testing"
	"time"
	"unsafe"
)

// sameShardKeys returns n keys of s's shard of "k0".
func sameShardKeys(s *MemoryStore, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := "k" + strconv.Itoa(i)
		if s.shard(k) == s.shard("k0") {
			keys = append(keys, k)
		}
	}
	return keys
}

// TestMemoryStoreSharesHolderIDs: the loans of keys leased by one holder
// name one copy of its ID (per shard), and the copy is the store's own:
// the caller's buffer may change after the call.
func TestMemoryStoreSharesHolderIDs(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewMemoryStore(MemoryStoreConfig{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Second}
	keys := sameShardKeys(s, 3)
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
		slot, ok := sh.m[k]
		st := sh.state(TokenBucket, slot, ok).(*TokenBucketState)
		ls := append(loans(nil), st.Loans...)
		sh.done(st)
		if len(ls) != 1 || ls[0].Holder != "holder-a" || ls[0].Lent != 10 {
			t.Fatalf("%s: loans %+v, want one of 10 to holder-a", k, ls)
		}
		if first == nil {
			first = unsafe.StringData(ls[0].Holder)
		} else if unsafe.StringData(ls[0].Holder) != first {
			t.Errorf("%s: its loan has a copy of the holder ID of its own", k)
		}
	}
	if n := len(sh.holders.ids); n != 1 {
		t.Errorf("the shard's table has %d holder IDs, want 1", n)
	}
}

// TestMemoryStoreDropsGoneHolders: a holder's ID leaves its shard's table
// with the last loan that names it (a return, or its key's expiry), and
// its index serves the next new holder.
func TestMemoryStoreDropsGoneHolders(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewMemoryStore(MemoryStoreConfig{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	p := Policy{Algorithm: TokenBucket, Limit: 100, Period: time.Second}
	keys := sameShardKeys(s, 2)
	sh := s.shard(keys[0])
	to := func(id string) Lessee { return Lessee{ID: id, TTL: time.Minute, Idle: time.Second} }
	for _, k := range keys {
		if _, err := s.Lease(ctx, k, p, 10, 1, to("gw-1")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Lease(ctx, keys[0], p, 10, 1, to("gw-2")); err != nil {
		t.Fatal(err)
	}
	if n := len(sh.holders.ids); n != 2 {
		t.Fatalf("%d holder IDs, want 2", n)
	}
	// gw-2 returns its whole loan: its ID goes; gw-1's stays.
	if err := s.Return(ctx, keys[0], p, 10, "gw-2"); err != nil {
		t.Fatal(err)
	}
	if _, ok := sh.holders.ids["gw-2"]; ok || len(sh.holders.ids) != 1 {
		t.Fatalf("after gw-2's return the table holds %v, want gw-1 alone", sh.holders.ids)
	}
	// Both keys expire (their loans end, the buckets refill): gw-1 goes.
	now = now.Add(time.Hour)
	if n := s.Sweep(now); n != 2 {
		t.Fatalf("Sweep removed %d keys, want 2", n)
	}
	if len(sh.holders.ids) != 0 {
		t.Fatalf("after the keys expired the table holds %v", sh.holders.ids)
	}
	if _, err := s.Lease(ctx, keys[1], p, 10, 1, to("gw-3")); err != nil {
		t.Fatal(err)
	}
	if i := sh.holders.ids["gw-3"]; i != 1 && i != 2 || len(sh.holders.names) != 3 {
		t.Errorf("gw-3 has index %d of %d: a freed index was not reused", i, len(sh.holders.names))
	}
}

// TestMemoryStoreFullHolderTable: with 65535 holders' loans in a shard, a
// loan to one more holder is refused and changes nothing; the holders it
// has go on leasing.
func TestMemoryStoreFullHolderTable(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewMemoryStore(MemoryStoreConfig{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	p := Policy{Algorithm: TokenBucket, Limit: 1 << 20, Period: time.Second}
	key := sameShardKeys(s, 1)[0]
	sh := s.shard(key)
	to := func(id string) Lessee { return Lessee{ID: id, TTL: time.Minute, Idle: time.Second} }
	// Fill the table directly: 65535 leases of one key would take long.
	for i := 1; i <= math.MaxUint16; i++ {
		if _, ok := sh.holders.acquire("h" + strconv.Itoa(i)); !ok {
			t.Fatalf("table full at %d", i)
		}
	}
	if _, err := s.Lease(ctx, key, p, 10, 1, to("h1")); err != nil {
		t.Fatalf("a holder in the table: %v", err)
	}
	g, err := s.Lease(ctx, key, p, 10, 1, to("newcomer"))
	if !errors.Is(err, errHolders) {
		t.Fatalf("Lease by a new holder = %+v, %v; want errHolders", g, err)
	}
	slot := sh.m[key]
	st := sh.state(TokenBucket, slot, true).(*TokenBucketState)
	defer sh.done(st)
	if len(st.Loans) != 1 || st.Loans[0].Holder != "h1" || st.Loans[0].Lent != 10 || st.Tokens != 1<<20-10 {
		t.Fatalf("after the refusal the key has %+v, want h1's loan of 10 alone", *st)
	}
}
