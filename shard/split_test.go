package shard

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// splitFixture is a 4-member ring, a key, and the splitter of its owner.
type splitFixture struct {
	ring  *Ring
	key   string
	owner string
	s     *Splitter
}

func newSplitFixture(t *testing.T, members int) splitFixture {
	t.Helper()
	ring := NewRing(memberNames(members), MinVnodes)
	key := "per-key:user-42"
	owner := ring.Owner(key)
	s, err := NewSplitter(owner, DefaultSplitConfig())
	if err != nil {
		t.Fatal(err)
	}
	return splitFixture{ring: ring, key: key, owner: owner, s: s}
}

// decide runs one Decide with a single load of f.key.
func (f splitFixture) decide(now time.Time, rate float64, split int) (start, end []Plan) {
	return f.s.Decide(now, []Load{{Key: f.key, Rate: rate, Threshold: 1000, Split: split}}, f.ring)
}

func sec(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func TestSplitterSplitAndUnsplit(t *testing.T) {
	f := newSplitFixture(t, 4)
	if start, end := f.decide(sec(0), 1000, 0); len(start)+len(end) != 0 {
		t.Fatalf("rate at the threshold split: %v %v", start, end)
	}
	start, end := f.decide(sec(1), 1001, 0)
	if len(start) != 1 || len(end) != 0 {
		t.Fatalf("rate above the threshold: start %v end %v, want one start", start, end)
	}
	p := start[0]
	if want := f.ring.OwnerN(f.key, 4, nil); p.Key != f.key || !slices.Equal(p.Holders, want) {
		t.Fatalf("plan %+v, want holders %v (split 0 = all members)", p, want)
	}
	if p.Holders[0] != f.owner || p.Epoch < uint64(sec(1).UnixNano()) {
		t.Fatalf("plan %+v: want the owner %s first and an epoch from the clock", p, f.owner)
	}
	if got := f.s.Plans(nil); len(got) != 1 || got[0].Epoch != p.Epoch {
		t.Fatalf("Plans = %v", got)
	}

	// Split over 4 holders, the owner serves a quarter: 300/s locally is
	// 1200/s in total, still hot.
	if start, end := f.decide(sec(2), 300, 0); len(start)+len(end) != 0 {
		t.Fatalf("share of a hot key: %v %v", start, end)
	}
	// 120/s locally = 480/s < threshold/2: cooling starts, and the split
	// ends after the 10s cooling period, not before.
	for i := 3; i < 13; i++ {
		if start, end := f.decide(sec(i), 120, 0); len(start)+len(end) != 0 {
			t.Fatalf("t=%ds: ended before cooling: %v %v", i, start, end)
		}
	}
	start, end = f.decide(sec(13), 120, 0)
	if len(start) != 0 || len(end) != 1 {
		t.Fatalf("after cooling: start %v end %v, want one end", start, end)
	}
	if e := end[0]; e.Key != f.key || e.Split() || e.Epoch <= p.Epoch {
		t.Fatalf("end plan %+v: want no holders and an epoch above %d", e, p.Epoch)
	}
	if got := f.s.Plans(nil); len(got) != 0 {
		t.Fatalf("Plans after the end = %v", got)
	}
	// Unsplit, the owner sees all the traffic again: 900/s is not hot.
	if start, end := f.decide(sec(14), 900, 0); len(start)+len(end) != 0 {
		t.Fatalf("900/s after unsplit: %v %v", start, end)
	}
	start, _ = f.decide(sec(15), 5000, 0)
	if len(start) != 1 || start[0].Epoch <= end[0].Epoch {
		t.Fatalf("re-split: %v, want a plan with an epoch above the end's", start)
	}
}

// TestSplitterNoFlapping drives rates that hover around the thresholds:
// nothing changes while the rate stays between half the threshold and the
// threshold, and dips below half that last less than the cooling period
// do not end a split.
func TestSplitterNoFlapping(t *testing.T) {
	f := newSplitFixture(t, 4)
	for i := range 30 {
		rate := []float64{990, 1000, 600, 510}[i%4]
		if start, end := f.decide(sec(i), rate, 0); len(start)+len(end) != 0 {
			t.Fatalf("t=%ds rate %v: %v %v", i, rate, start, end)
		}
	}
	if start, _ := f.decide(sec(30), 1100, 0); len(start) != 1 {
		t.Fatal("no split above the threshold")
	}
	// Total rate (local × 4) alternating 9s below half the threshold and
	// 1s above, for two minutes: the split holds.
	for i := 31; i < 150; i++ {
		local := 100.0 // 400 in total
		if i%10 == 0 {
			local = 130 // 520 in total
		}
		if start, end := f.decide(sec(i), local, 0); len(start)+len(end) != 0 {
			t.Fatalf("t=%ds local %v: %v %v", i, local, start, end)
		}
	}
	if len(f.s.Plans(nil)) != 1 {
		t.Fatal("split lost")
	}
}

func TestSplitterMissingKeyCools(t *testing.T) {
	f := newSplitFixture(t, 3)
	if start, _ := f.decide(sec(0), 2000, 0); len(start) != 1 {
		t.Fatal("no split")
	}
	for i := 1; i <= 10; i++ {
		if start, end := f.s.Decide(sec(i), nil, f.ring); len(start)+len(end) != 0 {
			t.Fatalf("t=%ds: %v %v", i, start, end)
		}
	}
	if _, end := f.s.Decide(sec(11), nil, f.ring); len(end) != 1 || end[0].Key != f.key {
		t.Fatalf("a split key missing from loads did not end after cooling: %v", end)
	}
}

func TestSplitterThresholdRemoved(t *testing.T) {
	f := newSplitFixture(t, 3)
	f.decide(sec(0), 2000, 0)
	_, end := f.s.Decide(sec(1), []Load{{Key: f.key, Rate: 2000, Threshold: 0}}, f.ring)
	if len(end) != 1 {
		t.Fatalf("a split whose rule lost its threshold did not end: %v", end)
	}
}

func TestSplitterOnlyOwnedKeys(t *testing.T) {
	f := newSplitFixture(t, 4)
	other := f.ring.OwnerN(f.key, 2, nil)[1]
	s, err := NewSplitter(other, SplitConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if start, _ := s.Decide(sec(0), []Load{{Key: f.key, Rate: 1e6, Threshold: 1000}}, f.ring); len(start) != 0 {
		t.Fatalf("%s split a key owned by %s: %v", other, f.owner, start)
	}
	// One member: nothing to spread over.
	solo := NewRing([]string{f.owner}, MinVnodes)
	if start, _ := f.s.Decide(sec(0), []Load{{Key: f.key, Rate: 1e6, Threshold: 1000}}, solo); len(start) != 0 {
		t.Fatalf("split on a one-member ring: %v", start)
	}
	// Split 1 means one holder: no split either.
	if start, _ := f.decide(sec(0), 1e6, 1); len(start) != 0 {
		t.Fatalf("split over one holder: %v", start)
	}
}

func TestSplitterRehold(t *testing.T) {
	f := newSplitFixture(t, 5)
	start, _ := f.decide(sec(0), 5000, 3)
	if len(start) != 1 || len(start[0].Holders) != 3 {
		t.Fatalf("split 3: %v", start)
	}
	p := start[0]

	// A member that is not a holder leaves: nothing to announce.
	all := f.ring.OwnerN(f.key, 5, nil)
	bystander := all[4]
	ring := NewRing(slices.DeleteFunc(slices.Clone(all), func(m string) bool { return m == bystander }), MinVnodes)
	if changed, end := f.s.Rehold(sec(1), ring); len(changed)+len(end) != 0 {
		t.Fatalf("bystander left: %v %v", changed, end)
	}

	// A holder leaves: the next member in ring order replaces it, and the
	// plan's epoch is bumped.
	leaver := p.Holders[1]
	ring = NewRing(slices.DeleteFunc(slices.Clone(ring.Members()), func(m string) bool { return m == leaver }), MinVnodes)
	changed, end := f.s.Rehold(sec(2), ring)
	if len(changed) != 1 || len(end) != 0 {
		t.Fatalf("holder left: changed %v end %v", changed, end)
	}
	want := []string{p.Holders[0], p.Holders[2], all[3]}
	if q := changed[0]; !slices.Equal(q.Holders, want) || q.Epoch <= p.Epoch {
		t.Fatalf("after %s left: %+v, want holders %v and an epoch above %d", leaver, q, want, p.Epoch)
	}

	// The rule's split count changes: holders follow.
	start, _ = f.s.Decide(sec(3), []Load{{Key: f.key, Rate: 5000, Threshold: 1000, Split: 2}}, ring)
	if len(start) != 1 || !slices.Equal(start[0].Holders, want[:2]) {
		t.Fatalf("split 3 → 2: %v, want holders %v", start, want[:2])
	}

	// A newcomer takes the key over: the old owner ends its split.
	var newcomer string
	for i := 0; ; i++ {
		newcomer = "newcomer-" + strconv.Itoa(i)
		if NewRing(append(slices.Clone(ring.Members()), newcomer), MinVnodes).Owner(f.key) == newcomer {
			break
		}
	}
	ring = NewRing(append(slices.Clone(ring.Members()), newcomer), MinVnodes)
	changed, end = f.s.Rehold(sec(4), ring)
	if len(changed) != 0 || len(end) != 1 || end[0].Split() {
		t.Fatalf("ownership moved to %s: changed %v end %v, want one end", newcomer, changed, end)
	}
	if len(f.s.Plans(nil)) != 0 {
		t.Fatal("split kept after ownership moved")
	}
}

func TestSplitterEpochsIncrease(t *testing.T) {
	s, err := NewSplitter("", SplitConfig{Cooling: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ring := NewRing(memberNames(3), MinVnodes)
	var last uint64
	check := func(ps []Plan) {
		t.Helper()
		for _, p := range ps {
			if p.Epoch <= last {
				t.Fatalf("epoch %d after %d", p.Epoch, last)
			}
			last = p.Epoch
		}
	}
	// The same instant, and a clock that steps back, still give
	// increasing epochs.
	for i, now := range []time.Time{sec(5), sec(5), sec(1), {}, sec(2)} {
		loads := []Load{{Key: "k" + strconv.Itoa(i), Rate: 10, Threshold: 1}, {Key: "k" + strconv.Itoa(i), Rate: 10, Threshold: 1}}
		start, end := s.Decide(now, loads, ring)
		if len(start) != 1 {
			t.Fatalf("Decide at %v: %d starts, want 1 (duplicate loads ignored)", now, len(start))
		}
		check(start)
		check(end)
	}
}

func TestSplitterConfig(t *testing.T) {
	if _, err := NewSplitter("a", SplitConfig{Cooling: -time.Second}); err == nil || !strings.Contains(err.Error(), "cooling") {
		t.Fatalf("negative cooling: %v", err)
	}
	s, err := NewSplitter("a", SplitConfig{})
	if err != nil || s.cooling != 10*time.Second {
		t.Fatalf("zero config: %v, cooling %v", err, s.cooling)
	}
}

func TestTableApply(t *testing.T) {
	tb := NewTable()
	if _, ok := tb.Lookup("k"); ok {
		t.Fatal("empty table found a split")
	}
	holders := []string{"a", "b"}
	steps := []struct {
		name    string
		plan    Plan
		applied bool
		want    []string // holders after, nil = not split
	}{
		{"start", Plan{Key: "k", Holders: holders, Epoch: 10}, true, []string{"a", "b"}},
		{"repeat", Plan{Key: "k", Holders: []string{"x"}, Epoch: 10}, false, []string{"a", "b"}},
		{"stale", Plan{Key: "k", Holders: []string{"x"}, Epoch: 9}, false, []string{"a", "b"}},
		{"rehold", Plan{Key: "k", Holders: []string{"a", "c"}, Epoch: 11}, true, []string{"a", "c"}},
		{"stale end", Plan{Key: "k", Epoch: 10}, false, []string{"a", "c"}},
		{"end", Plan{Key: "k", Epoch: 12}, true, nil},
		{"stale start after end", Plan{Key: "k", Holders: []string{"a"}, Epoch: 11}, false, nil},
		{"end of unknown key", Plan{Key: "other", Epoch: 5}, true, nil},
		{"stale start of ended unknown key", Plan{Key: "other", Holders: []string{"a"}, Epoch: 4}, false, nil},
		{"empty key", Plan{Holders: []string{"a"}, Epoch: 100}, false, nil},
		{"restart", Plan{Key: "k", Holders: []string{"b", "c"}, Epoch: 20}, true, []string{"b", "c"}},
	}
	for _, s := range steps {
		if got := tb.Apply(s.plan); got != s.applied {
			t.Fatalf("%s: Apply(%+v) = %v, want %v", s.name, s.plan, got, s.applied)
		}
		p, ok := tb.Lookup("k")
		if ok != (s.want != nil) || !slices.Equal(p.Holders, s.want) {
			t.Fatalf("%s: Lookup = %+v, %v; want holders %v", s.name, p, ok, s.want)
		}
		if s.name == "start" {
			holders[0] = "mutated" // the table keeps its own copy
		}
	}
	if !tb.Apply(Plan{Key: "a", Holders: []string{"x", "y"}, Epoch: 1}) || tb.Len() != 2 {
		t.Fatalf("second key: Len = %d", tb.Len())
	}
	if got := tb.Plans(nil); len(got) != 2 || got[0].Key != "a" || got[1].Key != "k" {
		t.Fatalf("Plans = %v", got)
	}
	if p, _ := tb.Lookup("a"); !p.Has("y") || p.Has("z") {
		t.Fatalf("Has: %+v", p)
	}
}

func TestTableForget(t *testing.T) {
	tb := NewTable()
	e := func(s int) uint64 { return uint64(sec(s).UnixNano()) }
	tb.Apply(Plan{Key: "ended", Holders: []string{"a", "b"}, Epoch: e(0)})
	tb.Apply(Plan{Key: "ended", Epoch: e(1)})
	tb.Apply(Plan{Key: "active", Holders: []string{"a", "b"}, Epoch: e(2)})
	tb.Forget(sec(1)) // keeps the end at epoch e(1)
	if tb.Apply(Plan{Key: "ended", Holders: []string{"a"}, Epoch: e(0)}) {
		t.Fatal("Forget dropped an end that was not older than the cut")
	}
	tb.Forget(sec(60))
	if _, ok := tb.Lookup("active"); !ok {
		t.Fatal("Forget dropped an active split")
	}
	if tb.Apply(Plan{Key: "active", Holders: []string{"a"}, Epoch: e(1)}) {
		t.Fatal("Forget dropped the epoch of an active split")
	}
	if !tb.Apply(Plan{Key: "ended", Holders: []string{"a"}, Epoch: e(0)}) {
		t.Fatal("forgotten key: a start was not applied")
	}
}

// TestSplitterToTable runs the owner side into receiver tables, with plans
// delivered out of order.
func TestSplitterToTable(t *testing.T) {
	f := newSplitFixture(t, 3)
	var plans []Plan
	for i, rate := range []float64{2000, 2000, 100} {
		start, end := f.decide(sec(i*20), rate, 0)
		plans = append(plans, start...)
		plans = append(plans, end...)
	}
	if len(plans) != 1 {
		t.Fatalf("plans %v", plans)
	}
	for i := 3; i < 20; i++ {
		_, end := f.decide(sec(40+i), 10, 0)
		plans = append(plans, end...)
	}
	if len(plans) != 2 {
		t.Fatalf("plans %v, want a start and an end", plans)
	}
	inOrder, reversed := NewTable(), NewTable()
	for i := range plans {
		inOrder.Apply(plans[i])
		reversed.Apply(plans[len(plans)-1-i])
	}
	for _, tb := range []*Table{inOrder, reversed} {
		if _, ok := tb.Lookup(f.key); ok {
			t.Fatal("key still split after its end, whatever the delivery order")
		}
	}
}

func TestTableConcurrent(t *testing.T) {
	tb := NewTable()
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range 2000 {
			tb.Apply(Plan{Key: "k" + strconv.Itoa(i%10), Holders: []string{"a", "b"}, Epoch: uint64(i + 1)})
			if i%3 == 0 {
				tb.Apply(Plan{Key: "k" + strconv.Itoa(i%10), Epoch: uint64(i + 2)})
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for i := range 5000 {
				if p, ok := tb.Lookup("k" + strconv.Itoa(i%10)); ok && len(p.Holders) != 2 {
					t.Errorf("torn plan %+v", p)
					return
				}
				tb.Plans(nil)
			}
		})
	}
	wg.Wait()
}

func BenchmarkTableLookup(b *testing.B) {
	for _, splits := range []int{0, 10} {
		b.Run("splits="+strconv.Itoa(splits), func(b *testing.B) {
			tb := NewTable()
			for i := range splits {
				tb.Apply(Plan{Key: "hot-" + strconv.Itoa(i), Holders: []string{"a", "b"}, Epoch: 1})
			}
			keys := []string{"hot-3", "per-key:user-1", "per-key:user-2", "per-key:user-3"}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					tb.Lookup(keys[i&3])
					i++
				}
			})
		})
	}
}

func BenchmarkSplitterDecide(b *testing.B) {
	ring := NewRing(memberNames(5), 0)
	s, _ := NewSplitter("", DefaultSplitConfig())
	loads := make([]Load, 128)
	for i := range loads {
		loads[i] = Load{Key: "k" + strconv.Itoa(i), Rate: float64(i * 10), Threshold: 1000}
	}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		s.Decide(now, loads, ring)
	}
}

// TestSplitterAdopt: the owner of a split key dies; the next owner adopts
// the split from its table, re-announces it without the dead member, and
// ends it once the key cools.
func TestSplitterAdopt(t *testing.T) {
	f := newSplitFixture(t, 4)
	start, _ := f.decide(sec(0), 5000, 0)
	if len(start) != 1 {
		t.Fatal("no split")
	}
	old := start[0]
	table := NewTable()
	table.Apply(old)
	table.Apply(Plan{Key: "ended", Epoch: 1})

	all := f.ring.OwnerN(f.key, 4, nil)
	heir := all[1]
	ring := NewRing(all[1:], MinVnodes)
	if ring.Owner(f.key) != heir {
		t.Fatalf("heir %s is not the new owner %s", heir, ring.Owner(f.key))
	}
	s, err := NewSplitter(heir, DefaultSplitConfig())
	if err != nil {
		t.Fatal(err)
	}
	// A split the heir does not own is not adopted.
	foreign := Plan{Key: "foreign", Holders: []string{"x", "y"}, Epoch: 3}
	for i := 0; ring.Owner(foreign.Key) == heir; i++ {
		foreign.Key = "foreign-" + strconv.Itoa(i)
	}
	changed, end := s.Adopt(sec(5), append(table.Plans(nil), foreign), ring)
	if len(changed) != 1 || len(end) != 0 {
		t.Fatalf("Adopt: changed %v end %v, want one plan", changed, end)
	}
	p := changed[0]
	if !slices.Equal(p.Holders, all[1:]) || p.Epoch <= old.Epoch {
		t.Fatalf("adopted plan %+v, want holders %v and an epoch above %d", p, all[1:], old.Epoch)
	}
	if !table.Apply(p) {
		t.Fatal("table refused the adopted plan")
	}
	if again, _ := s.Adopt(sec(6), table.Plans(nil), ring); len(again) != 0 {
		t.Fatalf("adopted twice: %v", again)
	}
	// The heir now manages the split: it cools and ends.
	var ended []Plan
	for i := 6; i < 30 && len(ended) == 0; i++ {
		_, ended = s.Decide(sec(i), []Load{{Key: f.key, Rate: 10, Threshold: 1000}}, ring)
	}
	if len(ended) != 1 || !table.Apply(ended[0]) {
		t.Fatalf("adopted split did not end: %v", ended)
	}
	if _, ok := table.Lookup(f.key); ok {
		t.Fatal("still split")
	}

	// With a single member left, an adopted split can only end.
	solo := NewRing([]string{heir}, MinVnodes)
	s2, _ := NewSplitter(heir, SplitConfig{})
	if changed, end := s2.Adopt(sec(40), []Plan{p}, solo); len(changed) != 0 || len(end) != 1 || end[0].Split() {
		t.Fatalf("Adopt on one member: changed %v end %v", changed, end)
	}
}

// TestHotKeyPipeline runs the owner side as a node would, once a second:
// a sampled sketch counts the checks the owner serves, Tick rates them,
// and the splitter decides. A key at 30,000 checks/s (threshold 20,000)
// splits within two ticks and stays split while the owner serves only its
// third; when the key's traffic falls to 5,000/s, the split ends after the
// cooling period and does not come back.
func TestHotKeyPipeline(t *testing.T) {
	f := newSplitFixture(t, 3)
	sketch, err := NewTopKConfig(DefaultTopKConfig())
	if err != nil {
		t.Fatal(err)
	}
	const threshold = 20000
	holders := 1 // how many nodes share the key's traffic
	var loads []Load
	var entries []Entry
	second := func(i, total int) (start, end []Plan) {
		for j := range total / holders {
			sketch.Observe(f.key, 1)
			if j%4 == 0 {
				sketch.Observe("cold-"+strconv.Itoa(j%3000), 1)
			}
		}
		sketch.Tick(sec(i))
		loads = loads[:0]
		for _, e := range sketch.Top(entries[:0]) {
			loads = append(loads, Load{Key: e.Key, Rate: e.Rate, Threshold: threshold})
		}
		return f.s.Decide(sec(i), loads, f.ring)
	}
	sketch.Tick(sec(0))
	splitAt := 0
	for i := 1; i <= 2 && splitAt == 0; i++ {
		if start, _ := second(i, 30000); len(start) == 1 {
			splitAt, holders = i, len(start[0].Holders)
		}
	}
	if splitAt == 0 || holders != 3 {
		t.Fatalf("hot key not split within 2 s (holders %d)", holders)
	}
	for i := splitAt + 1; i < 30; i++ {
		if start, end := second(i, 30000); len(start)+len(end) != 0 {
			t.Fatalf("t=%ds, owner serving a third of a hot key: %v %v", i, start, end)
		}
	}
	endAt := 0
	for i := 30; i < 60 && endAt == 0; i++ {
		start, end := second(i, 5000)
		if len(start) != 0 {
			t.Fatalf("t=%ds: %v", i, start)
		}
		if len(end) == 1 {
			endAt, holders = i, 1
		}
	}
	t.Logf("split at t=%ds, ended at t=%ds", splitAt, endAt)
	// Cooling is 10 s; the rate estimate (half-life 2 s) needs about five
	// ticks to fall below half the threshold, give or take sampling noise.
	if endAt < 40 || endAt > 48 {
		t.Fatalf("split ended at t=%ds, want 10 to 18 s after the traffic fell at t=30s", endAt)
	}
	for i := endAt + 1; i < endAt+20; i++ {
		if start, end := second(i, 5000); len(start)+len(end) != 0 {
			t.Fatalf("t=%ds after the end: %v %v", i, start, end)
		}
	}
}
