package hot

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/shard"
)

// tick advances c by one second and ticks every h at the new time.
func tick(c *clocktest.Clock, hs ...*Hot) time.Time {
	now := advance(c, time.Second)
	for _, h := range hs {
		h.Tick(now)
	}
	return now
}

// heat makes the owner h see key at rate checks/s for one tick (the first
// tick of h only opens the window).
func heat(c *clocktest.Clock, h *Hot, key string, rate int) {
	observe(h, key, rate)
	tick(c, h)
}

func TestNewRefusesBadConfig(t *testing.T) {
	base := func() Config { c := DefaultConfig(); c.Self = "n1"; return c }
	tests := []struct {
		field string
		edit  func(*Config)
	}{
		{"self", func(c *Config) { c.Self = "" }},
		{"tick", func(c *Config) { c.Tick = -time.Second }},
		{"capacity_share", func(c *Config) { c.CapacityShare = 1.5 }},
		{"capacity_share", func(c *Config) { c.CapacityShare = -0.1 }},
		{"default_threshold", func(c *Config) { c.DefaultThreshold = -1 }},
		{"min_rate", func(c *Config) { c.MinRate = -1 }},
		{"recent", func(c *Config) { c.Recent = -time.Second }},
		{"topk: k", func(c *Config) { c.TopK.K = -1 }},
		{"topk: sample", func(c *Config) { c.TopK.Sample = 1 << 20 }},
		{"cooling", func(c *Config) { c.Split.Cooling = -time.Second }},
	}
	for _, tt := range tests {
		cfg := base()
		tt.edit(&cfg)
		_, err := New(cfg, nil)
		if err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: got error %v, want one naming %q", tt.field, err, tt.field)
		}
	}
	if _, err := New(base(), nil); err != nil {
		t.Fatalf("DefaultConfig with Self: %v", err)
	}
}

func TestSplitAnnouncedAboveThreshold(t *testing.T) {
	r := ring(members4...)
	key := keyOwnedBy(t, r, "n1")
	for _, tt := range []struct {
		name    string
		split   int
		holders int
	}{
		{"split 0: every member", 0, 4},
		{"split 2", 2, 2},
		{"split above members", 9, 4},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := clocktest.New()
			a := &capture{}
			h := newHot(t, testConfig("n1", c, 1000, tt.split), a)
			h.SetRing(r)
			h.Tick(c.Now())
			heat(c, h, key, 900) // below the threshold
			if ps := a.take(t); len(ps) != 0 {
				t.Fatalf("below threshold: announced %+v", ps)
			}
			heat(c, h, key, 3000)
			ps := a.take(t)
			if len(ps) != 1 || ps[0].Key != key {
				t.Fatalf("announced %+v, want one plan of %q", ps, key)
			}
			if want := r.OwnerN(key, tt.holders, nil); !slices.Equal(ps[0].Holders, want) {
				t.Fatalf("holders %v, want %v", ps[0].Holders, want)
			}
			if p, ok := h.Lookup(key); !ok || p.Epoch != ps[0].Epoch {
				t.Fatalf("owner's table has %+v, %v; want the announced plan", p, ok)
			}
			if holder, split, self := h.Route(key, 7); !split || !self || holder != "n1" {
				t.Fatalf("Route on the owner = %q, %v, %v; want n1, split, self", holder, split, self)
			}
			if s := h.Stats(); s.Started != 1 || s.Active != 1 || s.Sent != 1 {
				t.Fatalf("stats %+v, want 1 started, 1 active, 1 sent", s)
			}
		})
	}
}

func TestNoSplitOfKeysNotOwned(t *testing.T) {
	r := ring(members4...)
	key := keyOwnedBy(t, r, "n2")
	c := clocktest.New()
	a := &capture{}
	h := newHot(t, testConfig("n1", c, 1000, 0), a)
	h.SetRing(r)
	h.Tick(c.Now())
	heat(c, h, key, 5000)
	if ps := a.take(t); len(ps) != 0 {
		t.Fatalf("a non-owner announced %+v", ps)
	}
}

func TestNoSplitWithoutRuleOrOnSingleNode(t *testing.T) {
	c := clocktest.New()
	a := &capture{}
	cfg := testConfig("n1", c, 1000, 0)
	cfg.Threshold = func(string) (float64, int, bool) { return 0, 0, false } // no rule
	h := newHot(t, cfg, a)
	r := ring(members4...)
	h.SetRing(r)
	h.Tick(c.Now())
	heat(c, h, keyOwnedBy(t, r, "n1"), 50000)

	single := newHot(t, testConfig("n1", c, 1000, 0), a)
	single.SetRing(ring("n1"))
	single.Tick(c.Now())
	heat(c, single, "per-key:x", 50000)
	if ps := a.take(t); len(ps) != 0 {
		t.Fatalf("announced %+v", ps)
	}
}

func TestRouteOnHoldersAndNonHolders(t *testing.T) {
	c := clocktest.New()
	plan := shard.Plan{Key: "r:hot", Holders: []string{"n1", "n2"}, Epoch: 10}
	holder := newHot(t, testConfig("n2", c, 1000, 0), nil)
	other := newHot(t, testConfig("n3", c, 1000, 0), nil)
	for _, h := range []*Hot{holder, other} {
		h.SetRing(ring(members4...))
		h.ApplyPlans([]shard.Plan{plan})
	}
	if to, split, self := holder.Route("r:hot", 12345); !split || !self || to != "n2" {
		t.Fatalf("holder: Route = %q, %v, %v; want n2, split, self", to, split, self)
	}
	seen := map[string]int{}
	for pick := range uint64(1000) {
		to, split, self := other.Route("r:hot", pick*2654435761)
		if !split || self || !plan.Has(to) {
			t.Fatalf("non-holder: Route = %q, %v, %v; want a holder of %v", to, split, self, plan.Holders)
		}
		seen[to]++
	}
	if seen["n1"] < 400 || seen["n2"] < 400 {
		t.Fatalf("picks spread %v, want about 500 each", seen)
	}
	if to, split, self := other.Route("r:cold", 1); split || self || to != "" {
		t.Fatalf("unsplit key: Route = %q, %v, %v; want nothing", to, split, self)
	}
}

// owner and holder n2 of a split of key over n1, n2, wired by a bus.
type pair struct {
	c             *clocktest.Clock
	b             *bus
	owner, holder *Hot
	key           string
	ownerEnds     []string
	holderEnds    []string
	mu            sync.Mutex
}

func newPair(t *testing.T, threshold float64) *pair {
	t.Helper()
	r := ring(members4...)
	p := &pair{c: clocktest.New(), b: newBus()}
	p.key = keyOwnedBy(t, r, "n1", "n2")
	p.owner = newHot(t, testConfig("n1", p.c, threshold, 2), port{p.b, "n1"})
	p.holder = newHot(t, testConfig("n2", p.c, threshold, 2), port{p.b, "n2"})
	p.b.members["n1"], p.b.members["n2"] = p.owner, p.holder
	p.owner.OnEnd(func(k string) { p.mu.Lock(); p.ownerEnds = append(p.ownerEnds, k); p.mu.Unlock() })
	p.holder.OnEnd(func(k string) { p.mu.Lock(); p.holderEnds = append(p.holderEnds, k); p.mu.Unlock() })
	for _, h := range []*Hot{p.owner, p.holder} {
		h.SetRing(r)
		h.Tick(p.c.Now())
	}
	return p
}

func TestSplitEndsAfterCoolingAndHoldersReturnTokens(t *testing.T) {
	p := newPair(t, 1000)
	heat(p.c, p.owner, p.key, 3000)
	p.b.flush()
	if _, ok := p.holder.Lookup(p.key); !ok {
		t.Fatal("the holder did not learn the split")
	}
	if _, _, self := p.holder.Route(p.key, 1); !self {
		t.Fatal("the holder does not serve the split key itself")
	}
	// The key's total rate falls to 200/s: the owner serves 100/s.
	var endAt time.Time
	var quietSince time.Time
	for i := 0; i < 60 && endAt.IsZero(); i++ {
		heat(p.c, p.owner, p.key, 100)
		if quietSince.IsZero() && p.owner.sketch.Rate(p.key)*2 < 500 {
			quietSince = p.c.Now()
		}
		p.b.flush()
		if _, ok := p.holder.Lookup(p.key); !ok {
			endAt = p.c.Now()
		}
	}
	if endAt.IsZero() {
		t.Fatal("the split never ended")
	}
	if cooled := endAt.Sub(quietSince); cooled < 5*time.Second {
		t.Fatalf("ended %s after the rate fell below half the threshold, want ≥ the 5s cooling", cooled)
	}
	if _, ok := p.owner.Lookup(p.key); ok {
		t.Fatal("the owner still has the split")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !slices.Equal(p.holderEnds, []string{p.key}) || len(p.ownerEnds) != 0 {
		t.Fatalf("OnEnd: holder %v, owner %v; want the key on the holder only", p.holderEnds, p.ownerEnds)
	}
	if s := p.owner.Stats(); s.Started != 1 || s.Ended != 1 || s.Active != 0 {
		t.Fatalf("owner stats %+v", s)
	}
}

func TestNoFlappingAroundThreshold(t *testing.T) {
	p := newPair(t, 1000)
	// Below the threshold (900-1000/s) a key never splits.
	for i := range 20 {
		heat(p.c, p.owner, p.key, 900+5*i)
	}
	if s := p.owner.Stats(); s.Started != 0 {
		t.Fatalf("split below the threshold: %+v", s)
	}
	heat(p.c, p.owner, p.key, 1500)
	// The total oscillates between 0.6 and 1.4 times the threshold, with
	// dips below half the threshold shorter than the cooling period: the
	// owner serves half of it.
	totals := []int{600, 1400, 700, 1300, 400, 400, 1200, 600, 1000, 300, 300, 300, 1400}
	for i := range 60 {
		heat(p.c, p.owner, p.key, totals[i%len(totals)]/2)
		p.b.flush()
		if _, ok := p.holder.Lookup(p.key); !ok {
			t.Fatalf("tick %d: the split ended", i)
		}
	}
	if s := p.owner.Stats(); s.Started != 1 || s.Ended != 0 || s.Sent > 8 {
		t.Fatalf("owner stats %+v: want one split, no end, only re-announcements", s)
	}
}

func TestSetRingRecomputesHolders(t *testing.T) {
	c := clocktest.New()
	a := &capture{}
	r := ring(members4...)
	key := keyOwnedBy(t, r, "n1", "n2")
	h := newHot(t, testConfig("n1", c, 1000, 0), a)
	h.SetRing(r)
	h.Tick(c.Now())
	heat(c, h, key, 5000)
	first := a.take(t)
	if len(first) != 1 || len(first[0].Holders) != 4 {
		t.Fatalf("announced %+v, want a split over 4", first)
	}
	advance(c, time.Millisecond)
	h.SetRing(ring("n1", "n2", "n3")) // n4 left
	ps := a.take(t)
	if len(ps) != 1 || ps[0].Key != key || ps[0].Epoch <= first[0].Epoch {
		t.Fatalf("after n4 left: announced %+v, want a new epoch of %q", ps, key)
	}
	if want := ring("n1", "n2", "n3").OwnerN(key, 3, nil); !slices.Equal(ps[0].Holders, want) {
		t.Fatalf("holders %v, want %v", ps[0].Holders, want)
	}
	// Down to one member: the split ends.
	h.SetRing(ring("n1"))
	if ps := a.take(t); len(ps) != 1 || ps[0].Split() {
		t.Fatalf("alone: announced %+v, want the end", ps)
	}
}

func TestNewOwnerAdoptsSplitOfDepartedOwner(t *testing.T) {
	p := newPair(t, 1000)
	heat(p.c, p.owner, p.key, 3000)
	p.b.flush()
	old, _ := p.holder.Lookup(p.key)
	advance(p.c, time.Millisecond)
	delete(p.b.members, "n1") // the owner dies
	p.holder.SetRing(ring("n2", "n3", "n4"))
	p.b.flush()
	now, ok := p.holder.Lookup(p.key)
	if !ok || now.Epoch <= old.Epoch || now.Holders[0] != "n2" || len(now.Holders) != 2 {
		t.Fatalf("after the owner left: %+v (was %+v), want n2 first, 2 holders, a new epoch", now, old)
	}
	// n2 now owns the split: when the key cools, it ends it.
	for range 30 {
		tick(p.c, p.holder)
	}
	if _, ok := p.holder.Lookup(p.key); ok {
		t.Fatal("the adopted split never ended")
	}
}

func TestHolderLeftOutCallsOnEnd(t *testing.T) {
	c := clocktest.New()
	h := newHot(t, testConfig("n3", c, 1000, 0), nil)
	var got []string
	h.OnEnd(func(k string) { got = append(got, k) })
	h.SetRing(ring(members4...))
	h.ApplyPlans([]shard.Plan{{Key: "r:k", Holders: []string{"n1", "n2", "n3"}, Epoch: 5}})
	h.ApplyPlans([]shard.Plan{{Key: "r:k", Holders: []string{"n1", "n2", "n3", "n4"}, Epoch: 6}}) // still a holder
	if len(got) != 0 {
		t.Fatalf("OnEnd fired while still a holder: %v", got)
	}
	h.ApplyPlans([]shard.Plan{{Key: "r:k", Holders: []string{"n1", "n2"}, Epoch: 7}})
	if !slices.Equal(got, []string{"r:k"}) {
		t.Fatalf("OnEnd got %v, want r:k once", got)
	}
	h.ApplyPlans([]shard.Plan{{Key: "r:k", Epoch: 8}}) // ended; no longer a holder anyway
	if len(got) != 1 {
		t.Fatalf("OnEnd fired again: %v", got)
	}
}

func TestStaleEpochsIgnored(t *testing.T) {
	c := clocktest.New()
	h := newHot(t, testConfig("n3", c, 1000, 0), nil)
	h.SetRing(ring(members4...))
	msg := func(ps ...shard.Plan) []byte {
		m, err := AppendPlans(nil, ps)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	h.Receive(msg(shard.Plan{Key: "r:k", Holders: []string{"n1", "n2"}, Epoch: 10}))
	h.Receive(msg(shard.Plan{Key: "r:k", Holders: []string{"n1", "n3"}, Epoch: 9}))
	h.Receive(msg(shard.Plan{Key: "r:k", Epoch: 10}))
	p, ok := h.Lookup("r:k")
	if !ok || p.Epoch != 10 || !slices.Equal(p.Holders, []string{"n1", "n2"}) {
		t.Fatalf("after stale plans: %+v, %v; want epoch 10 over n1, n2", p, ok)
	}
	h.Receive(msg(shard.Plan{Key: "r:k", Epoch: 11}))
	if _, ok := h.Lookup("r:k"); ok {
		t.Fatal("the end with epoch 11 was not applied")
	}
	// A start delayed in gossip, older than the end, stays ignored.
	h.Receive(msg(shard.Plan{Key: "r:k", Holders: []string{"n1", "n2"}, Epoch: 10}))
	if _, ok := h.Lookup("r:k"); ok {
		t.Fatal("a stale start revived an ended split")
	}
	// Malformed messages are counted; other kinds ignored.
	h.Receive([]byte{MsgKind, Version, 5})
	h.Receive([]byte("x-other-kind"))
	if s := h.Stats(); s.Received != 5 || s.Rejected != 1 {
		t.Fatalf("stats %+v, want 5 received, 1 rejected", s)
	}
}

func TestApplyPlansAndPlansFor(t *testing.T) {
	c := clocktest.New()
	h := newHot(t, testConfig("n3", c, 1000, 0), nil)
	h.SetRing(ring(members4...))
	split := shard.Plan{Key: "r:a", Holders: []string{"n1", "n2"}, Epoch: 3}
	h.ApplyPlans([]shard.Plan{split, {Key: "r:b", Holders: []string{"n2", "n4"}, Epoch: 4}})
	if h.Stats().Active != 2 {
		t.Fatalf("active %d, want 2", h.Stats().Active)
	}
	dst := make([]shard.Plan, 0, 8)
	dst = h.PlansFor(dst, "r:a")
	dst = h.PlansFor(dst, "r:a") // deduplicated
	dst = h.PlansFor(dst, "r:cold")
	if len(dst) != 1 || dst[0].Key != "r:a" || dst[0].Epoch != 3 {
		t.Fatalf("PlansFor = %+v, want the split of r:a once", dst)
	}
	if n := testing.AllocsPerRun(100, func() { dst = h.PlansFor(dst[:0], "r:a") }); n != 0 {
		t.Fatalf("PlansFor allocates %v times", n)
	}
	// An end is news for Recent (30s), then forgotten.
	h.ApplyPlans([]shard.Plan{{Key: "r:a", Epoch: 5}})
	if got := h.PlansFor(nil, "r:a"); len(got) != 1 || got[0].Split() || got[0].Epoch != 5 {
		t.Fatalf("PlansFor after the end = %+v, want the end", got)
	}
	if got := h.RecentPlans(nil); !slices.Equal(planKeys(got), []string{"r:b", "r:a"}) {
		t.Fatalf("RecentPlans = %+v, want the split of r:b and the end of r:a", got)
	}
	h.Tick(c.Now())
	h.Tick(advance(c, 31*time.Second))
	if got := h.PlansFor(nil, "r:a"); len(got) != 0 {
		t.Fatalf("PlansFor after Recent = %+v, want nothing", got)
	}
}

func TestInstancesConvergeThroughGossip(t *testing.T) {
	names := []string{"n1", "n2", "n3"}
	r := ring(names...)
	c := clocktest.New()
	b := newBus()
	var hs []*Hot
	for _, n := range names {
		h := newHot(t, testConfig(n, c, 1000, 0), port{b, n})
		b.members[n] = h
		h.SetRing(r)
		h.Tick(c.Now())
		hs = append(hs, h)
	}
	// Each node owns a hot key.
	keys := []string{keyOwnedBy(t, r, "n1"), keyOwnedBy(t, r, "n2"), keyOwnedBy(t, r, "n3")}
	for i, h := range hs {
		observe(h, keys[i], 5000)
	}
	tick(c, hs...)
	b.flush()
	want := hs[0].RecentPlans(nil)
	if len(want) != 3 {
		t.Fatalf("n1 knows %+v, want 3 splits", want)
	}
	for _, h := range hs[1:] {
		if got := h.RecentPlans(nil); !equalPlans(got, want) {
			t.Fatalf("%s knows %+v, n1 %+v", h.cfg.Self, got, want)
		}
	}
	// A member that missed the gossip learns the splits from the next
	// re-announcement; then the keys cool and every table empties.
	late := newHot(t, testConfig("n9", c, 1000, 0), port{b, "n9"})
	late.SetRing(r)
	b.members["n9"] = late
	for range 12 {
		for i, h := range hs {
			observe(h, keys[i], 2000)
		}
		tick(c, hs...)
		b.flush()
	}
	if got := late.RecentPlans(nil); !equalPlans(got, hs[0].RecentPlans(nil)) {
		t.Fatalf("late member knows %+v, want %+v", got, hs[0].RecentPlans(nil))
	}
	for range 40 {
		tick(c, hs...)
		b.flush()
	}
	for _, h := range append(hs, late) {
		if n := h.Stats().Active; n != 0 {
			t.Fatalf("%s still has %d splits", h.cfg.Self, n)
		}
	}
}

func equalPlans(a, b []shard.Plan) bool {
	return slices.EqualFunc(a, b, func(x, y shard.Plan) bool {
		return x.Key == y.Key && x.Epoch == y.Epoch && slices.Equal(x.Holders, y.Holders)
	})
}

func TestCapacityShareMakesKeyHot(t *testing.T) {
	c := clocktest.New()
	a := &capture{}
	cfg := testConfig("n1", c, 0, 0) // rules set no threshold
	cfg.DefaultThreshold = 0
	cfg.CapacityShare = 0.5
	cfg.MinRate = 100
	h := newHot(t, cfg, a)
	r := ring(members4...)
	h.SetRing(r)
	h.Tick(c.Now())
	big, small := keyOwnedBy(t, r, "n1"), keyOwnedBy(t, r, "n1", "n2")
	observe(h, big, 800)
	observe(h, small, 200)
	tick(c, h)
	if ps := a.take(t); len(ps) != 1 || ps[0].Key != big {
		t.Fatalf("announced %+v, want a split of the key with 80%% of the node", ps)
	}
	// Below MinRate nothing splits, whatever the share.
	c2 := clocktest.New()
	cfg.Now = c2.Now
	h2 := newHot(t, cfg, a)
	h2.SetRing(r)
	h2.Tick(c2.Now())
	observe(h2, big, 90)
	tick(c2, h2)
	if ps := a.take(t); len(ps) != 0 {
		t.Fatalf("below MinRate: announced %+v", ps)
	}
}

func TestBroadcastFailuresAreCounted(t *testing.T) {
	c := clocktest.New()
	a := &capture{err: errors.New("closed")}
	h := newHot(t, testConfig("n1", c, 1000, 0), a)
	r := ring(members4...)
	h.SetRing(r)
	h.Tick(c.Now())
	heat(c, h, keyOwnedBy(t, r, "n1"), 5000)
	if s := h.Stats(); s.Failed != 1 || s.Started != 1 {
		t.Fatalf("stats %+v, want the split started and 1 failed broadcast", s)
	}
}

func TestAppendJSON(t *testing.T) {
	c := clocktest.New()
	h := newHot(t, testConfig("n1", c, 1000, 0), nil)
	h.SetRing(ring(members4...))
	h.Tick(c.Now())
	weird := "r:\"quoted\"\n\xff"
	observe(h, "r:a", 30)
	observe(h, weird, 10)
	tick(c, h)
	h.ApplyPlans([]shard.Plan{{Key: "r:a", Holders: []string{"n2", "n1"}, Epoch: 42}})
	body := h.AppendJSON([]byte("prefix"))
	if !strings.HasPrefix(string(body), "prefix{") {
		t.Fatalf("AppendJSON did not append: %q", body)
	}
	var got struct {
		Self     string  `json:"self"`
		NodeRate float64 `json:"node_rate"`
		Top      []struct {
			Key     string   `json:"key"`
			Count   uint64   `json:"count"`
			Err     uint64   `json:"err"`
			Rate    float64  `json:"rate"`
			Split   bool     `json:"split"`
			Holders []string `json:"holders"`
		} `json:"top"`
		Splits []struct {
			Key     string   `json:"key"`
			Holders []string `json:"holders"`
			Epoch   uint64   `json:"epoch"`
			Owner   string   `json:"owner"`
		} `json:"splits"`
	}
	if err := json.Unmarshal(body[len("prefix"):], &got); err != nil {
		t.Fatalf("invalid JSON %s: %v", body, err)
	}
	if got.Self != "n1" || got.NodeRate != 40 || len(got.Top) != 2 || len(got.Splits) != 1 {
		t.Fatalf("got %+v", got)
	}
	if top := got.Top[0]; top.Key != "r:a" || top.Count != 30 || top.Rate != 30 || !top.Split || !slices.Equal(top.Holders, []string{"n2", "n1"}) {
		t.Fatalf("top[0] = %+v", top)
	}
	if top := got.Top[1]; top.Key != "r:\"quoted\"\n\ufffd" || top.Split || len(top.Holders) != 0 {
		t.Fatalf("top[1] = %+v", top)
	}
	if s := got.Splits[0]; s.Key != "r:a" || s.Epoch != 42 || s.Owner != "n2" || len(s.Holders) != 2 {
		t.Fatalf("splits[0] = %+v", s)
	}
}

func TestObserveSamples(t *testing.T) {
	c := clocktest.New()
	cfg := testConfig("n1", c, 1000, 0)
	cfg.TopK.Sample = 8
	h := newHot(t, cfg, nil)
	h.Tick(c.Now())
	observe(h, "r:k", 80000)
	tick(c, h)
	// 10,000 draws of probability 1/8: within 5 standard deviations.
	if r := h.Stats().NodeRate; r < 80000-5*750 || r > 80000+5*750 {
		t.Fatalf("node rate %v, want about 80000", r)
	}
	if r := h.sketch.Rate("r:k"); r != h.Stats().NodeRate {
		t.Fatalf("key rate %v, node rate %v: want equal for a single key", r, h.Stats().NodeRate)
	}
}

func TestRunAndCloseAreIdempotent(t *testing.T) {
	c := clocktest.New()
	h, err := New(testConfig("n1", c, 1000, 0), nil)
	if err != nil {
		t.Fatal(err)
	}
	h.Run()
	h.Run()
	h.Close()
	h.Close()
	h.Run() // after Close: nothing
	h.Close()

	never, _ := New(testConfig("n2", c, 1000, 0), nil)
	never.Close() // without Run
	never.Close()
}
