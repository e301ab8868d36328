package main

import (
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/node/hot"
	"github.com/sluicehq/sluice/shard"
)

// hotRules: one key with a year's quota of 2000 that is hot at 20
// checks/s. Low, so that a split cannot end mid-test because a loaded
// machine (-race, other processes) slows the spray: the owner, which then
// sees a third of the checks, ends it below 10/s for the cooling period.
// A year, not a day: the bucket refills one token every 4.4 hours, so the
// contract (admitted ≤ burst + rate × T) is "admitted ≤ 2000" for any run.
// With a day's period it refilled one token every 43.2s, and a run that
// slow (-race at load ~20-29: the test took 39-75s) was allowed 2001.
const hotRules = `rules:
  - name: per-key
    algorithm: token_bucket
    limit: 2000
    period: 8760h
    hot: {threshold: 20}
`

// fastHot makes the hot-key loop quick enough for tests: a 100ms tick,
// an exact sketch and a 4s cooling period. The loop runs on the real
// clock; the cooling period is what a stalled test process (a loaded
// machine, -race) must not reach while the test sprays the key, or the
// split ends mid-test and checks are forwarded again (seen with 1s).
func fastHot(c *hot.Config) {
	c.Tick = 100 * time.Millisecond
	c.TopK = shard.TopKConfig{RateHalfLife: 200 * time.Millisecond}
	c.Split = shard.SplitConfig{Cooling: 4 * time.Second}
}

// hotClock drives the nodes' hot-key loops by hand: their own loop never
// ticks (Tick 1h) and their clock is a fake one that tick advances by a
// second, so that a split starts and ends on the test's events, never
// because a loaded machine (-race, other processes) slowed the spray below
// the key's threshold for the cooling period (seen with a 100ms tick on
// the real clock: the split ended and restarted mid-test, Started 3, and
// the holders forwarded the split key again).
type hotClock struct{ *clocktest.Clock }

func newHotClock() hotClock { return hotClock{clocktest.New()} }

// config is a tc.hot: an exact sketch, a 4s cooling period, the clock c,
// and a re-announcement of the active splits at every tick (gossip is best
// effort: a holder that missed the start learns it from the next tick).
func (c hotClock) config(h *hot.Config) {
	h.Tick = time.Hour
	h.TopK = shard.TopKConfig{RateHalfLife: 200 * time.Millisecond}
	h.Split = shard.SplitConfig{Cooling: 4 * time.Second}
	h.Reannounce = time.Second
	h.Now = c.Now
}

// tick advances c by a second and runs one step of every node's loop.
func (c hotClock) tick(nodes ...*testNode) {
	c.Advance(time.Second)
	now := c.Now()
	for _, n := range nodes {
		n.d.node.Hot().Tick(now)
	}
}

// TestClusterHotKey: three sluiced nodes with real gossip and Redis. A key
// sprayed over all nodes gets hot at its owner, which splits it over the
// three; every node learns the split and serves the key itself (nothing
// forwarded), and the cluster still admits between 97% and 100% of the
// key's limit. When the traffic stops the split ends everywhere. The
// hot-key loops run on a fake clock that the test ticks (hotClock).
func TestClusterHotKey(t *testing.T) {
	tc := newTestCluster(t, hotRules)
	clock := newHotClock()
	tc.hot = clock.config
	tc.member = steadyMembership
	a, b, c := tc.startThree()
	all := []*testNode{a, b, c}
	owner := tc.byName(a.d.node.Owner("per-key:k"))
	clock.tick(all...) // opens the sketches' windows

	var out tally
	// Warm up: 100 checks in one (fake) second is 100/s against a
	// threshold of 20. Then wait for the event: every node routes by the
	// split (gossip), ticking again only if the owner did not split.
	for i := 0; ; i++ {
		tc.spray(100, 8, func() []*testNode { return all }, func(int) string { return "k" }, &out)
		clock.tick(all...)
		if _, ok := owner.d.node.Hot().Lookup("per-key:k"); ok {
			break
		}
		if i == 5 {
			t.Fatalf("no split of a key sprayed at 100 checks a second after %d checks: %s", out.get(200)+out.get(429), owner.d.node.Hot().AppendJSON(nil))
		}
	}
	clocktest.Eventually(t, waitBound, "every node to route by the split", func() bool {
		for _, x := range all {
			if p, ok := x.d.node.Hot().Lookup("per-key:k"); !ok || len(p.Holders) != 3 {
				return false
			}
		}
		return true
	})
	fwd := map[string]uint64{}
	epochs := func() (e []uint64) {
		for _, x := range all {
			p, _ := x.d.node.Hot().Lookup("per-key:k")
			e = append(e, p.Epoch)
		}
		return e
	}
	before := epochs()
	for _, x := range all {
		fwd[x.name] = x.d.node.ForwardStats().Items
	}
	const limit, total = 2000, 5000
	tc.spray(total-out.get(200)-out.get(429), 12, func() []*testNode { return all }, func(int) string { return "k" }, &out)
	if o := out.others(); len(o) > 0 {
		t.Fatalf("answers other than 200/429: %v", o)
	}
	if st := owner.d.node.Hot().Stats(); st.Started != 1 {
		t.Errorf("owner %s stats %+v, want 1 split started", owner.name, st)
	}
	admitted := out.get(200)
	t.Logf("admitted %d of %d checks, limit %d", admitted, total, limit)
	tc.healthyStore()
	if admitted > limit || admitted < limit*97/100 {
		t.Errorf("admitted %d, want within [%d, %d]", admitted, limit*97/100, limit)
	}
	// Every admission spent a token the Store granted and no node gave
	// back (no refunds here: one rule per check; no degraded answers):
	// had the Store kept the limit but the nodes admitted more than they
	// were granted, this says so, and which node.
	var net int64
	for _, x := range all {
		st := x.d.mgr.Stats()
		net += st.TokensLeased - st.TokensReturned
		t.Logf("%s: %+v", x.name, st)
	}
	if int64(admitted) > net {
		t.Errorf("admitted %d, but the nodes were granted %d tokens net of returns: a node admitted past its tokens", admitted, net)
	}
	// The plan stays the same throughout (no membership change: no node
	// fails and steadyMembership does not probe; no tick: the split can
	// neither end nor be re-planned), so no holder forwards.
	if after := epochs(); !slices.Equal(before, after) {
		t.Errorf("the split's plan changed during the spray (epochs %v -> %v)", before, after)
	}
	for _, x := range all {
		if got := x.d.node.ForwardStats().Items - fwd[x.name]; got != 0 {
			t.Errorf("%s forwarded %d checks of the split key, want 0", x.name, got)
		}
		// A holder asks the Store at least once; it may be granted
		// nothing (the others may hold the rest of the day's quota when
		// the warm-up was long), so tokens are not the measure.
		if st := x.d.mgr.Stats(); st.Leases == 0 {
			t.Errorf("%s made no lease call: it did not serve the split key", x.name)
		}
	}
	// /v1/hotkeys shows the split everywhere.
	for _, x := range all {
		res, err := tc.http.Get(x.base + "/v1/hotkeys")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || !strings.Contains(string(body), `"splits":[{"key":"per-key:k"`) {
			t.Errorf("%s /v1/hotkeys: %d %s", x.name, res.StatusCode, body)
		}
	}
	// Idle: one tick closes the window of the spray (the holders' own
	// checks: the split goes on); then the rate falls below 10/s within
	// two ticks (half-life 200ms) and stays there for the 4s cooling
	// period: the owner ends the split (bounded: 20 ticks), once, and
	// every node learns it.
	for i := 0; owner.d.node.Hot().Stats().Ended == 0 && i < 20; i++ {
		clock.tick(all...)
	}
	if st := owner.d.node.Hot().Stats(); st.Started != 1 || st.Ended != 1 {
		t.Errorf("owner %s stats %+v after idle ticks, want 1 split started and ended", owner.name, st)
	}
	clocktest.Eventually(t, waitBound, "the split to end everywhere", func() bool {
		for _, x := range all {
			if _, ok := x.d.node.Hot().Lookup("per-key:k"); ok {
				return false
			}
		}
		return true
	})
}

// TestClusterHotKeyLeave: when a holder leaves gracefully, the owner
// announces the remaining two as holders, with a newer epoch.
func TestClusterHotKeyLeave(t *testing.T) {
	tc := newTestCluster(t, hotRules)
	tc.hot = fastHot
	a, b, c := tc.startThree()
	all := []*testNode{a, b, c}
	owner := tc.byName(a.d.node.Owner("per-key:k"))
	var out tally
	var p shard.Plan
	clocktest.Eventually(t, waitBound, "a split", func() bool {
		tc.spray(100, 8, func() []*testNode { return all }, func(int) string { return "k" }, &out)
		var ok bool
		p, ok = owner.d.node.Hot().Lookup("per-key:k")
		return ok
	})
	var gone *testNode
	var rest []*testNode
	for _, x := range all {
		if x != owner && gone == nil {
			gone = x
			continue
		}
		rest = append(rest, x)
	}
	tc.leave(gone)
	names := []string{rest[0].name, rest[1].name}
	slices.Sort(names)
	tc.converge(strings.Join(names, ","), rest...)
	clocktest.Eventually(t, waitBound, "new holders", func() bool {
		tc.spray(20, 4, func() []*testNode { return rest }, func(int) string { return "k" }, &out)
		for _, x := range rest {
			q, ok := x.d.node.Hot().Lookup("per-key:k")
			if !ok || q.Epoch <= p.Epoch || len(q.Holders) != 2 || q.Has(gone.name) {
				return false
			}
		}
		return true
	})
}
