package shard

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
)

func memberNames(n int) []string {
	ms := make([]string, n)
	for i := range ms {
		ms[i] = fmt.Sprintf("10.0.0.%d:7946", i+1)
	}
	return ms
}

// testKeys returns n distinct keys shaped like counter keys.
func testKeys(n int) []string {
	ks := make([]string, n)
	for i := range ks {
		ks[i] = "per-key:user-" + strconv.Itoa(i)
	}
	return ks
}

func TestRingBalance(t *testing.T) {
	if testing.Short() {
		t.Skip("1M keys")
	}
	keys := testKeys(1_000_000)
	for _, n := range []int{3, 5, 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			r := NewRing(memberNames(n), 0)
			count := map[string]int{}
			for _, k := range keys {
				count[r.Owner(k)]++
			}
			if len(count) != n {
				t.Fatalf("keys went to %d members, want %d", len(count), n)
			}
			lo, hi := len(keys), 0
			for _, c := range count {
				lo, hi = min(lo, c), max(hi, c)
			}
			spread := float64(hi)/float64(lo) - 1
			t.Logf("%d members × %d vnodes: max/min keys per member = %d/%d (spread %.2f%%)",
				n, r.Vnodes(), hi, lo, 100*spread)
			if spread > 0.05 {
				t.Errorf("max/min = %d/%d: spread %.2f%% > 5%%", hi, lo, 100*spread)
			}
		})
	}
}

// TestRingMovement checks minimal disruption: when a member joins, the only
// keys that move go to it; when one leaves, the only keys that move are its
// own; and about 1/N of the keys move either way.
func TestRingMovement(t *testing.T) {
	keys := testKeys(200_000)
	for _, n := range []int{3, 5, 10} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			ms := memberNames(n + 1)
			newcomer := ms[n]
			before := NewRing(ms[:n], 0)
			after := NewRing(ms, 0)
			moved := 0
			for _, k := range keys {
				a, b := before.Owner(k), after.Owner(k)
				if a == b {
					continue
				}
				moved++
				if b != newcomer {
					t.Fatalf("join: key %q moved %s → %s, not to the newcomer %s", k, a, b, newcomer)
				}
			}
			checkFraction(t, "join", moved, len(keys), 1/float64(n+1))

			// Leave: the member ms[1] leaves the n+1 ring.
			leaver := ms[1]
			rest := slices.Delete(slices.Clone(ms), 1, 2)
			left := NewRing(rest, 0)
			moved = 0
			for _, k := range keys {
				a, b := after.Owner(k), left.Owner(k)
				if (a != b) != (a == leaver) {
					t.Fatalf("leave of %s: key %q moved %s → %s", leaver, k, a, b)
				}
				if a != b {
					moved++
				}
			}
			checkFraction(t, "leave", moved, len(keys), 1/float64(n+1))
		})
	}
}

func checkFraction(t *testing.T, what string, moved, total int, want float64) {
	t.Helper()
	got := float64(moved) / float64(total)
	t.Logf("%s: %.2f%% of keys moved (1/N = %.2f%%)", what, 100*got, 100*want)
	if got < want*0.9 || got > want*1.1 {
		t.Errorf("%s: %.2f%% of keys moved, want %.2f%% ± 10%%", what, 100*got, 100*want)
	}
}

func TestRingDeterministic(t *testing.T) {
	ms := memberNames(7)
	shuffled := []string{ms[4], ms[0], ms[6], ms[2], ms[5], ms[1], ms[3], ms[2], "", ms[0]}
	a, b := NewRing(ms, 200), NewRing(shuffled, 200)
	if !slices.Equal(a.Members(), b.Members()) {
		t.Fatalf("members %v vs %v", a.Members(), b.Members())
	}
	var da, db []string
	for _, k := range testKeys(20_000) {
		if x, y := a.Owner(k), b.Owner(k); x != y {
			t.Fatalf("key %q: owner %s vs %s", k, x, y)
		}
		da, db = a.OwnerN(k, 3, da[:0]), b.OwnerN(k, 3, db[:0])
		if !slices.Equal(da, db) {
			t.Fatalf("key %q: OwnerN %v vs %v", k, da, db)
		}
	}
}

func TestRingOwnerN(t *testing.T) {
	ms := memberNames(6)
	r := NewRing(ms, MinVnodes)
	for _, k := range testKeys(2_000) {
		all := r.OwnerN(k, 100, nil)
		if len(all) != len(ms) {
			t.Fatalf("OwnerN(%q, 100) = %v: want all %d members", k, all, len(ms))
		}
		if all[0] != r.Owner(k) {
			t.Fatalf("OwnerN(%q)[0] = %s, Owner = %s", k, all[0], r.Owner(k))
		}
		sorted := slices.Sorted(slices.Values(all))
		if !slices.Equal(sorted, r.Members()) {
			t.Fatalf("OwnerN(%q) = %v: not the distinct members", k, all)
		}
		for n := 0; n <= len(ms); n++ {
			if got := r.OwnerN(k, n, nil); !slices.Equal(got, all[:n]) {
				t.Fatalf("OwnerN(%q, %d) = %v, want prefix %v", k, n, got, all[:n])
			}
		}
		// The successors are the owners after the members before them
		// leave: that is what makes split holders stable.
		without := NewRing(all[1:], MinVnodes)
		if got := without.OwnerN(k, 3, nil); !slices.Equal(got, all[1:4]) {
			t.Fatalf("after %s leaves, OwnerN(%q, 3) = %v, want %v", all[0], k, got, all[1:4])
		}
	}
	// dst is appended to, not overwritten.
	dst := r.OwnerN("k", 2, []string{"x"})
	if len(dst) != 3 || dst[0] != "x" {
		t.Fatalf("OwnerN did not append: %v", dst)
	}
}

func TestRingEdges(t *testing.T) {
	var null *Ring
	for _, empty := range []*Ring{NewRing(nil, 0), null} {
		if got := empty.Owner("k"); got != "" {
			t.Errorf("empty ring Owner = %q", got)
		}
		if got := empty.OwnerN("k", 3, nil); len(got) != 0 {
			t.Errorf("empty ring OwnerN = %v", got)
		}
		if empty.Len() != 0 || empty.Has("a") || len(empty.Members()) != 0 {
			t.Errorf("empty ring has members")
		}
	}
	onlyBlank := NewRing([]string{"", ""}, 0)
	if onlyBlank.Len() != 0 {
		t.Errorf("blank names kept: %v", onlyBlank.Members())
	}

	one := NewRing([]string{"solo"}, 0)
	for _, k := range []string{"", "a", "\xff\xff", "user-42"} {
		if got := one.Owner(k); got != "solo" {
			t.Errorf("one-member ring: Owner(%q) = %q", k, got)
		}
	}
	if got := one.OwnerN("k", 5, nil); !slices.Equal(got, []string{"solo"}) {
		t.Errorf("one-member ring OwnerN = %v", got)
	}

	for _, tc := range []struct{ in, want int }{
		{-1, DefaultVnodes}, {0, DefaultVnodes}, {1, MinVnodes}, {MinVnodes, MinVnodes},
		{1000, 1000}, {MaxVnodes + 1, MaxVnodes},
	} {
		if got := NewRing([]string{"a"}, tc.in).Vnodes(); got != tc.want {
			t.Errorf("NewRing(vnodes=%d).Vnodes() = %d, want %d", tc.in, got, tc.want)
		}
	}
	r := NewRing([]string{"b", "a"}, MinVnodes)
	if !r.Has("a") || !r.Has("b") || r.Has("c") {
		t.Errorf("Has is wrong for %v", r.Members())
	}
	if got := r.String(); got != "ring(2 members × 128 vnodes)" {
		t.Errorf("String = %q", got)
	}
}

// TestRingManyMembers covers the OwnerN bookkeeping for rings of more than
// 256 members and buckets holding many points.
func TestRingManyMembers(t *testing.T) {
	ms := make([]string, 300)
	for i := range ms {
		ms[i] = "m" + strconv.Itoa(i)
	}
	r := NewRing(ms, MinVnodes)
	got := r.OwnerN("key", 300, nil)
	if len(got) != 300 || got[0] != r.Owner("key") {
		t.Fatalf("OwnerN over 300 members: %d members, first %s, owner %s", len(got), got[0], r.Owner("key"))
	}
	if len(slices.Compact(slices.Sorted(slices.Values(got)))) != 300 {
		t.Fatalf("OwnerN returned duplicates")
	}
}

// TestRingOwnerMatchesLinearScan checks the bucket index against the
// definition: the first point at or after the key's hash, wrapping.
func TestRingOwnerMatchesLinearScan(t *testing.T) {
	r := NewRing(memberNames(4), MinVnodes)
	check := func(h uint64) {
		t.Helper()
		want := 0
		for want < len(r.points) && r.points[want]&^ownerMask < h {
			want++
		}
		if want == len(r.points) {
			want = 0
		}
		if got := r.successor(h); got != want {
			t.Fatalf("successor(%#x) = %d, want %d", h, got, want)
		}
	}
	for i, p := range r.points {
		pos := p &^ ownerMask
		check(pos)
		check(pos + 1)
		check(pos - 1)
		check(p)
		if i%7 == 0 {
			check(p ^ 0xdeadbeef)
		}
	}
	check(0)
	check(^uint64(0))
	check(^uint64(0) - ownerMask)
	check(r.points[len(r.points)-1]&^ownerMask + 1)
}

// BenchmarkRingOwner looks up 1Ki keys (cache-resident, like the hot keys
// of a Zipf workload) and 64Ki keys (mostly cache misses in a ring of
// ~1 MB).
func BenchmarkRingOwner(b *testing.B) {
	for _, n := range []int{3, 10} {
		for _, nkeys := range []int{1 << 10, 1 << 16} {
			b.Run(fmt.Sprintf("members=%d/keys=%d", n, nkeys), func(b *testing.B) {
				r := NewRing(memberNames(n), 0)
				keys := testKeys(nkeys)
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					var sink string
					for pb.Next() {
						sink = r.Owner(keys[i&(len(keys)-1)])
						i++
					}
					_ = sink
				})
			})
		}
	}
}

// BenchmarkHashKey is the floor under BenchmarkRingOwner: hashing the key
// alone, measured in the same run.
func BenchmarkHashKey(b *testing.B) {
	keys := testKeys(1 << 10)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		var sink uint64
		for pb.Next() {
			sink += HashKey(keys[i&(len(keys)-1)])
			i++
		}
		_ = sink
	})
}

func BenchmarkRingOwnerN(b *testing.B) {
	r := NewRing(memberNames(10), 0)
	keys := testKeys(1 << 16)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		dst := make([]string, 0, 10)
		i := 0
		for pb.Next() {
			dst = r.OwnerN(keys[i&(len(keys)-1)], 3, dst[:0])
			i++
		}
	})
}

func BenchmarkNewRing(b *testing.B) {
	for _, n := range []int{3, 10, 30} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			ms := memberNames(n)
			b.ReportAllocs()
			for b.Loop() {
				NewRing(ms, 0)
			}
		})
	}
}
