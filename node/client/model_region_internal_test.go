package client

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lease/modeltest"
)

// TestModelRegionTier runs the model-based harness (lease/modeltest) on
// the region tier: each of the harness's holders is a region's node, a
// lease.Manager over a region Limiter's remote Store (as node/upstream
// wires it: Config.Region, the region's demand, leases sized for the
// round trip to the global tier), which leases the keys of global rules
// through a real global-tier node's lease protocol from the Store below
// it (a MemoryStore on the fake clock). The global tier splits a
// saturated key among the regions by their demand, on the same clock.
// What the regions admit together is checked against the reference model:
// never over the global allowance, and every denial justified by what
// the global tier lends and was not reported, or by a region's share of
// a saturated key (the global tier's wait, without a Store call).
//
// The regions report their demand as node/upstream does (checks per
// second; 0 when unknown, then the global tier goes by the lease size):
// "demand=unknown" leaves it to the lease sizes, "demand=saturated"
// reports 60/30/10% of 10000 checks/s, past every key's rate, so that
// every key shared by two regions is split.
//
// The long form: SLUICE_MODEL_TIME=10m (or SLUICE_MODEL_SEEDS,
// SLUICE_MODEL_STEPS); a failing seed prints its replay.
func TestModelRegionTier(t *testing.T) {
	leased := []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow}
	for i, c := range []struct {
		name       string
		demand     []int64 // per region, checks per second (0: unknown)
		maxHolders int
	}{
		{"demand=unknown", []int64{0, 0, 0}, 0},
		{"demand=saturated", []int64{6000, 3000, 1000}, 0},
		// More regions' nodes than a key may have holders (max_holders
		// 2), coming and going.
		{"demand=saturated/max_holders=2", []int64{6000, 3000, 1000, 500, 200, 100}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := modeltest.FromEnv(t, modeltest.Options{
				Seed: 20_000_000 + uint64(i)*1_000_000, Seeds: 30, Steps: 200, Algorithms: leased,
				MaxHolders: c.maxHolders,
			})
			s := modeltest.Run(t, regionHarness(t, c.demand, c.maxHolders), o)
			t.Logf("model: %d seeds, %d steps, %d decisions checked", s.Seeds, s.Steps, s.Checks)
		})
	}
}

// regionRTT is the round trip to the global tier the regions' leases are
// sized for (node/upstream's -upstream-rtt): a lease covers 8 of them.
const regionRTT = 50 * time.Millisecond

// regionHarness gives each replay a fresh global-tier node on a fresh
// MemoryStore; the harness's Manager i is the node of region r<i>.
func regionHarness(t *testing.T, demand []int64, maxHolders int) modeltest.Harness {
	clk := clocktest.New()
	var cur *tierStore
	t.Cleanup(func() {
		if cur != nil {
			cur.close()
		}
	})
	region := func(holder string) (string, func(string) int64) {
		if holder == "" {
			return "peeks", nil // a peek names no holder: it lends nothing
		}
		// The harness names Manager i's holders "m<i>.<slot>" (a crashed
		// node's replacement is the same region's).
		i, err := strconv.Atoi(strings.TrimPrefix(strings.SplitN(holder, ".", 2)[0], "m"))
		if err != nil || i < 0 || i >= len(demand) {
			t.Fatalf("holder %q: not a harness Manager's", holder)
		}
		d := demand[i]
		var f func(string) int64
		if d > 0 {
			f = func(string) int64 { return d }
		}
		return "r" + strconv.Itoa(i), f
	}
	return modeltest.Harness{
		NewStore: func(tb testing.TB) lease.Store {
			if cur != nil {
				cur.close()
			}
			clk.Set(clocktest.Epoch)
			rs := &regionStore{calls: map[string]int{}, all: map[string]int{}, share: map[string]bool{}}
			cur = newTierStoreWith(tb, clk, 0, region, func(mem lease.Store) lease.Store {
				return &countingStore{Store: mem, rs: rs}
			})
			cur.maxHolders = maxHolders
			rs.tierStore = cur
			return rs
		},
		Now: clk.Now, Advance: clk.Advance, Package: "./node/client/",
		// A region's Manager, as node/upstream configures it: leases
		// cover max(the node's horizon, 8 round trips), no longer than
		// the global tier grants.
		Config: func(c *lease.Config) {
			c.Horizon = max(c.Horizon, 8*regionRTT)
			c.LeaseTTL = 30 * time.Second
		},
	}
}

// regionStore is the regions' view of the global tier (tierStore, each
// harness holder a region's Limiter), which also tells the harness which
// denials came from a region's share of a saturated key
// (modeltest.SharedStore): those the global tier answered without asking
// its Store for tokens (it only renewed the region's loan).
type regionStore struct {
	*tierStore
	mu    sync.Mutex
	calls map[string]int  // counter key → the global tier's Store's lease calls of it asking for tokens
	all   map[string]int  // counter key → all its lease calls (renewals too)
	share map[string]bool // holder + " " + key → its last denial was a share's wait
}

var _ modeltest.SharedStore = (*regionStore)(nil)

func (s *regionStore) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	ckey := s.ruleFor(p) + ":" + key
	s.mu.Lock()
	before, all := s.calls[ckey], s.all[ckey]
	s.mu.Unlock()
	g, err := s.tierStore.Lease(ctx, key, p, want, need, to)
	s.mu.Lock()
	defer s.mu.Unlock()
	// The harness runs one holder's call of a key at a time: no other
	// call of ckey reached the Store meanwhile.
	shared := err == nil && g.Granted == 0 && want > 0 && s.calls[ckey] == before
	s.share[to.ID+" "+key] = shared
	if shared && to.ID != "" && s.all[ckey] == all {
		// The region takes the answer's Lent and its loan's renewal for
		// the Store's: the Store must have made them.
		s.tb.Errorf("%s: the global tier answered a share's wait without renewing the region's loan at its Store (Lent %d)", ckey, g.Lent)
	}
	return g, err
}

func (s *regionStore) ShareWait(key, holder string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.share[holder+" "+key]
}

func (s *regionStore) counted(ckey string, asks bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all[ckey]++
	if asks {
		s.calls[ckey]++
	}
}

// countingStore counts the global tier's Store's lease calls that ask
// for tokens, by key.
type countingStore struct {
	lease.Store
	rs *regionStore
}

func (c *countingStore) Lease(ctx context.Context, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	c.rs.counted(key, want > 0) // want 0: a renewal (the split's wait renews the loan only)
	return c.Store.Lease(ctx, key, p, want, need, to)
}

// TestModelRegionTierFoundSeeds replays seeds whose failures the model
// found at this tier, as regression cases.
func TestModelRegionTierFoundSeeds(t *testing.T) {
	leased := []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow}
	saturated := []int64{6000, 3000, 1000}
	for _, c := range []struct {
		name string
		seed uint64
	}{
		// A share's wait answered a period as the key's reset: the region
		// took the key for empty until then and denied without asking.
		{"share-wait-resets-after-it", 21_000_019},
		// A share's wait answered without the Store: the region's loan
		// was neither settled nor renewed there, and the answer's Lent
		// (what the region said it held) refused its refunds.
		{"share-wait-renews-the-loan", 21_000_015},
		// A sliding_window region denied a check its share, answered for
		// a prefetch of 1, could not cover for seconds: justified (clause
		// (d) by the share's Remaining), not only until the answer's wait.
		{"share-covers-by-its-rate", 21_000_275},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := modeltest.Options{Seed: c.seed, Seeds: 1, Steps: 200, Algorithms: leased}
			if s := modeltest.Run(t, regionHarness(t, saturated, 0), o); s.Seeds != 1 {
				t.Fatalf("ran %d seeds, want 1", s.Seeds)
			}
		})
	}
}
