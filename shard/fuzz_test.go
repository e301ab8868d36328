package shard

import (
	"slices"
	"strings"
	"testing"
)

// FuzzRing checks the ring's invariants for arbitrary member names and
// keys: Owner is the member of the first point at or after the key's hash,
// OwnerN lists distinct members with the owner first, and removing a
// member moves only its keys.
func FuzzRing(f *testing.F) {
	f.Add("a,b,c", "user-42")
	f.Add("10.0.0.1:7946,10.0.0.2:7946", "")
	f.Add("x,,x,\x00,\xff", "\x00\x01")
	f.Add("solo", "k")
	f.Fuzz(func(t *testing.T, names, key string) {
		members := strings.Split(names, ",")
		if len(members) > 20 {
			members = members[:20]
		}
		r := NewRing(members, MinVnodes)
		owner := r.Owner(key)
		if r.Len() == 0 {
			if owner != "" {
				t.Fatalf("empty ring owner %q", owner)
			}
			return
		}
		h := HashKey(key)
		want := 0
		for want < len(r.points) && r.points[want]&^ownerMask < h {
			want++
		}
		if want == len(r.points) {
			want = 0
		}
		if w := r.members[r.points[want]&ownerMask]; owner != w {
			t.Fatalf("Owner(%q) = %q, want %q", key, owner, w)
		}
		all := r.OwnerN(key, r.Len()+1, nil)
		if len(all) != r.Len() || all[0] != owner {
			t.Fatalf("OwnerN = %v for members %v, owner %q", all, r.Members(), owner)
		}
		if !slices.Equal(slices.Sorted(slices.Values(all)), r.Members()) {
			t.Fatalf("OwnerN = %v: not the members %v", all, r.Members())
		}
		if r.Len() > 1 {
			without := NewRing(all[1:], MinVnodes)
			if got := without.Owner(key); got != all[1] {
				t.Fatalf("after %q leaves, owner %q, want %q", owner, got, all[1])
			}
			other := NewRing(slices.Delete(slices.Clone(all), 1, 2), MinVnodes)
			if got := other.Owner(key); got != owner {
				t.Fatalf("after %q leaves, owner moved from %q to %q", all[1], owner, got)
			}
		}
	})
}

// FuzzTopK checks Space-Saving's guarantees on arbitrary streams: each
// byte of data is one event of one of 64 keys, weighted by its top bits.
func FuzzTopK(f *testing.F) {
	f.Add(uint8(4), []byte("aaaabbbcdefgaaaahijk"))
	f.Add(uint8(1), []byte{0, 1, 2, 3, 0, 0, 0})
	f.Add(uint8(16), []byte{})
	f.Fuzz(func(t *testing.T, k uint8, data []byte) {
		tk := NewTopK(int(k%32) + 1)
		truth := map[string]uint64{}
		var total uint64
		for _, b := range data {
			key := string(rune('A' + b%64))
			n := uint64(b>>6) + 1
			tk.Observe(key, n)
			truth[key] += n
			total += n
		}
		es := tk.Top(nil)
		var sum uint64
		for i, e := range es {
			sum += e.Count
			if tr := truth[e.Key]; e.Count < tr || e.Count-e.Err > tr {
				t.Fatalf("%q: count %d err %d, true %d", e.Key, e.Count, e.Err, tr)
			}
			if i > 0 && es[i-1].Count < e.Count {
				t.Fatalf("Top not sorted: %v", es)
			}
		}
		if sum != total || tk.Total() != total {
			t.Fatalf("sum of counts %d, Total %d, want %d", sum, tk.Total(), total)
		}
		tracked := entriesByKey(es)
		for key, c := range truth {
			if _, ok := tracked[key]; !ok && c > total/uint64(tk.K()) {
				t.Fatalf("%q with %d of %d not tracked (k=%d)", key, c, total, tk.K())
			}
		}
	})
}
