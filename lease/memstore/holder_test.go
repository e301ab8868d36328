package memstore

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/lease/algo"
)

// shardOf is key's shard.
func (m *Store) shardOf(key string) *memShard {
	sh, _ := m.shard(key)
	return sh
}

// sameShardKeys returns n keys of s's shard of "k0".
func sameShardKeys(s *Store, n int) []string {
	var keys []string
	for i := 0; len(keys) < n; i++ {
		k := "k" + strconv.Itoa(i)
		if sh, _ := s.shard(k); sh == s.shardOf("k0") {
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
	s := New(Config{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second}
	keys := sameShardKeys(s, 3)
	buf := []byte("holder-a")
	for _, k := range keys {
		id := unsafe.String(&buf[0], len(buf)) // a reused request buffer, say
		if g, err := s.Lease(context.Background(), k, p, 10, 1, algo.Lessee{ID: id, TTL: time.Minute, Idle: 10 * time.Second}); err != nil || g.Granted != 10 {
			t.Fatalf("Lease(%s) = %+v, %v", k, g, err)
		}
	}
	copy(buf, "XXXXXXXX")
	sh := s.shardOf(keys[0])
	var first *byte
	for _, k := range keys {
		slot, ok := sh.find(k, sh.hash(k))
		st := sh.state(algo.TokenBucket, slot, ok).(*algo.TokenBucketState)
		ls := append(algo.Loans(nil), st.Loans...)
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
	s := New(Config{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second}
	keys := sameShardKeys(s, 2)
	sh := s.shardOf(keys[0])
	to := func(id string) algo.Lessee { return algo.Lessee{ID: id, TTL: time.Minute, Idle: time.Second} }
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
	s := New(Config{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 1 << 20, Period: time.Second}
	key := sameShardKeys(s, 1)[0]
	sh := s.shardOf(key)
	to := func(id string) algo.Lessee { return algo.Lessee{ID: id, TTL: time.Minute, Idle: time.Second} }
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
	slot, _ := sh.find(key, sh.hash(key))
	st := sh.state(algo.TokenBucket, slot, true).(*algo.TokenBucketState)
	defer sh.done(st)
	if len(st.Loans) != 1 || st.Loans[0].Holder != "h1" || st.Loans[0].Lent != 10 || st.Tokens != 1<<20-10 {
		t.Fatalf("after the refusal the key has %+v, want h1's loan of 10 alone", *st)
	}
}

// TestMemoryStoreSweepCompacts: a shard left with more free slots than
// keys is rebuilt by Sweep to its keys' size, and the keys that stay keep
// their state: the numbers, the first loan, the loans beside it, the
// lists of the exact algorithms.
func TestMemoryStoreSweepCompacts(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New(Config{Now: func() time.Time { return now }, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	keys := sameShardKeys(s, 600)
	sh := s.shardOf(keys[0])
	short := algo.Policy{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Second}
	long := algo.Policy{Algorithm: algo.TokenBucket, Limit: 10, Period: time.Hour}
	logp := algo.Policy{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Hour}
	to := func(id string) algo.Lessee { return algo.Lessee{ID: id, TTL: 30 * time.Minute, Idle: time.Second} }
	for i, k := range keys {
		var err error
		switch {
		case i%100 == 0: // stays: two holders' loans, one inline, one beside
			_, err = s.Lease(ctx, k, long, 1, 1, to("gw-a"))
			if err == nil {
				_, err = s.Lease(ctx, k, long, 2, 2, to("gw-b"))
			}
		case i%100 == 1: // stays: a log
			_, err = s.Log(ctx, k, logp, 3)
		default: // full again in 50ms
			_, err = s.Lease(ctx, k, short, 5, 5, algo.Lessee{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(sh.recs) != 600 {
		t.Fatalf("%d slots, want 600", len(sh.recs))
	}
	now = now.Add(time.Minute)
	if n := s.Sweep(now); n != 588 {
		t.Fatalf("Sweep removed %d keys, want 588", n)
	}
	if len(sh.recs) != 12 || sh.live != 12 || len(sh.free) != 0 || len(sh.tab) != 32 || sh.used != 12 {
		t.Fatalf("after Sweep: %d slots, %d keys, %d free, table of %d with %d used; want 12, 12, 0, 32, 12",
			len(sh.recs), sh.live, len(sh.free), len(sh.tab), sh.used)
	}
	for i, k := range keys {
		switch i % 100 {
		case 0:
			slot, ok := sh.find(k, sh.hash(k))
			st := sh.state(algo.TokenBucket, slot, ok).(*algo.TokenBucketState)
			ls := append(algo.Loans(nil), st.Loans...)
			sh.done(st)
			for i := range ls {
				ls[i].Ref = 0 // the record's holder index
			}
			if len(ls) != 2 || ls[0] != (algo.Loan{Holder: "gw-a", Lent: 1, Expires: ls[0].Expires, LastSpend: ls[0].LastSpend}) ||
				ls[1] != (algo.Loan{Holder: "gw-b", Lent: 2, Expires: ls[1].Expires, LastSpend: ls[1].LastSpend}) {
				t.Fatalf("%s: loans %+v, want gw-a's 1 and gw-b's 2", k, ls)
			}
			// 7 tokens left, refilled by 10 an hour for a minute.
			if g, err := s.Lease(ctx, k, long, 10, 0, to("gw-c")); err != nil || g.Granted != 7 {
				t.Fatalf("%s: Lease = %+v, %v; want 7 granted", k, g, err)
			}
		case 1:
			if r, err := s.Log(ctx, k, logp, 0); err != nil || r.Remaining != 7 {
				t.Fatalf("%s: Log = %+v, %v; want 7 remaining", k, r, err)
			}
		}
	}
}

// TestMemoryStoreIndex drives one shard's table of slots through inserts
// and removals (growth, tombstones, their reuse, rehashes, compaction)
// against a Go map, and checks every key it ever held after each round.
func TestMemoryStoreIndex(t *testing.T) {
	s := New(Config{SweepInterval: -1})
	defer s.Close()
	sh := &s.shards[0]
	want := map[string]uint32{}
	var all []string
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 40 {
		for range r.IntN(400) {
			k := "key-" + strconv.Itoa(r.IntN(3000))
			if _, ok := want[k]; ok {
				continue
			}
			if len(all) < 3000 {
				all = append(all, k)
			}
			want[k] = sh.insert(k, sh.hash(k), algo.TokenBucket)
		}
		for k, slot := range want {
			if r.IntN(3) == 0 {
				sh.remove(sh.hash(k), slot)
				delete(want, k)
			}
		}
		if round%10 == 9 {
			sh.compact()
			for k := range want {
				want[k], _ = sh.find(k, sh.hash(k))
			}
		}
		for _, k := range all {
			slot, ok := sh.find(k, sh.hash(k))
			if w, in := want[k]; ok != in || ok && (slot != w || sh.keys[slot] != k) {
				t.Fatalf("round %d: find(%s) = %d, %v; want %d, %v", round, k, slot, ok, w, in)
			}
		}
		if sh.live != len(want) || sh.used*4 > len(sh.tab)*3 {
			t.Fatalf("round %d: %d live (want %d), %d of %d used", round, sh.live, len(want), sh.used, len(sh.tab))
		}
	}
}

// TestMemoryStoreReportsBakes: OnBake hears of each ended loan a call
// applies to the stored level for good (the fifth ended loan still capping
// a key bakes the oldest), with its end and the tokens lent then, and of
// nothing else.
func TestMemoryStoreReportsBakes(t *testing.T) {
	for _, alg := range []algo.Algorithm{algo.TokenBucket, algo.GCRA} {
		t.Run(alg.String(), func(t *testing.T) {
			clk := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
			type bake struct {
				key  string
				end  time.Time
				lent int64
			}
			var bakes []bake
			s := New(Config{Now: func() time.Time { return clk }, SweepInterval: -1,
				OnBake: func(key string, end time.Time, lent int64) { bakes = append(bakes, bake{key, end, lent}) }})
			defer s.Close()
			// A slow refill: every ended loan keeps capping the key.
			p := algo.Policy{Algorithm: alg, Limit: 1, Period: time.Hour, Burst: 100}
			ctx := context.Background()
			var ends []time.Time
			for i := range 5 {
				to := algo.Lessee{ID: "h" + strconv.Itoa(i), TTL: time.Minute}
				if g, err := s.Lease(ctx, "k", p, 10, 10, to); err != nil || g.Granted != 10 {
					t.Fatalf("lease %d: %+v, %v", i, g, err)
				}
			}
			for i := range 5 {
				clk = clk.Add(time.Second)
				ends = append(ends, clk)
				// A return of nothing ends the loan: its 10 tokens count as
				// spent now, an ended loan.
				if err := s.Return(ctx, "k", p, 0, "h"+strconv.Itoa(i)); err != nil {
					t.Fatal(err)
				}
				if i < 3 && len(bakes) > 0 {
					t.Fatalf("after %d ended loans: bakes %+v, want none", i+1, bakes)
				}
			}
			// The fourth ended loan is one more than a key keeps: the
			// oldest bakes (its end, and the 50 tokens lent then: its 10,
			// the three other ended ones' and the running one's); the
			// fifth bakes the next (40).
			want := []bake{{"k", ends[0], 50}, {"k", ends[1], 40}}
			if len(bakes) != len(want) {
				t.Fatalf("bakes %+v, want %+v", bakes, want)
			}
			for i, b := range bakes {
				if b.key != want[i].key || !b.end.Equal(want[i].end) || b.lent != want[i].lent {
					t.Errorf("bake %d: %+v, want %+v", i, b, want[i])
				}
			}
		})
	}
}

// keyView returns a string that shares buf's bytes, as a caller building
// counter keys in a reused buffer would pass.
func keyView(buf []byte) string { return unsafe.String(unsafe.SliceData(buf), len(buf)) }

// TestKeyNeedNotOutliveCall: the Store copies a key it keeps, so
// overwriting the caller's buffer after the call changes nothing it holds,
// for every kind of state (lease's test of the same name: the Manager's
// copies).
func TestKeyNeedNotOutliveCall(t *testing.T) {
	p := algo.Policy{Algorithm: algo.TokenBucket, Limit: 100, Period: time.Hour}
	buf := []byte("rule:key-a")
	ms := New(Config{SweepInterval: -1})
	ctx := context.Background()
	for _, q := range []algo.Policy{
		p,
		{Algorithm: algo.SlidingLog, Limit: 10, Period: time.Hour},
		{Algorithm: algo.Concurrency, Limit: 10, Period: time.Hour},
	} {
		copy(buf, "rule:key-c")
		var err error
		switch q.Algorithm {
		case algo.SlidingLog:
			_, err = ms.Log(ctx, keyView(buf), q, 1)
		case algo.Concurrency:
			_, err = ms.Acquire(ctx, keyView(buf), q, "id1", 1)
		default:
			_, err = ms.Lease(ctx, keyView(buf), q, 3, 1, algo.Lessee{})
		}
		if err != nil {
			t.Fatalf("%s: %v", q.Algorithm, err)
		}
		copy(buf, "rule:key-d")
		sh, h := ms.shard("rule:key-c")
		sh.mu.Lock()
		_, okC := sh.find("rule:key-c", h)
		sh.mu.Unlock()
		if !okC || ms.Len() != 1 {
			t.Errorf("%s: state of key-c lost after the caller's buffer changed (%d keys)", q.Algorithm, ms.Len())
		}
		ms.Sweep(time.Now().Add(3 * time.Hour))
	}
}
