package lua

import (
	"os"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/modeltest"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestModel runs the model-based harness (lease/modeltest) on the Redis
// Store, against a redis-server whose clock is frozen and moved only by
// the harness: the Lua scripts under the same random sequences and checks
// as the MemoryStore (lease TestModel), in a smaller run, with each key's
// holders bounded in some runs (Options.MaxHolders). The long form:
// SLUICE_MODEL_TIME=10m (make fuzz).
func TestModel(t *testing.T) {
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	store := newTestStore(t, srv.Addr)
	h := modeltest.Harness{
		// One client for every run (a run's keys are its own): a long
		// run must not open a connection per seed. Every run from the
		// same instant, as on the MemoryStore: a replay is exact, and a
		// long run (each run moves the clock a day or two) does not drift
		// past 2262, where time.Time's nanoseconds overflow (the long
		// form's "denials" with a RetryAfter of −3324h that did not
		// replay).
		NewStore: func(testing.TB) lease.Store {
			clock.Set(start)
			return store
		},
		Now:     clock.Now,
		Advance: clock.Advance,
		Package: "./lua/",
	}
	runs := []struct {
		name    string
		algs    []lease.Algorithm
		holders int
		safety  bool
		// maxHolders bounds each key's holders (Options.MaxHolders): up
		// to twice as many Managers join and leave.
		maxHolders int
	}{
		{"token_bucket/holders=3", []lease.Algorithm{lease.TokenBucket}, 3, false, 0},
		{"gcra/holders=1", []lease.Algorithm{lease.GCRA}, 1, false, 0},
		{"token_bucket/holders=1", []lease.Algorithm{lease.TokenBucket}, 1, false, 0},
		{"fixed_window/holders=3", []lease.Algorithm{lease.FixedWindow}, 3, false, 0},
		{"sliding_window/holders=3", []lease.Algorithm{lease.SlidingWindow}, 3, false, 0},
		{"exact", []lease.Algorithm{lease.SlidingLog, lease.Concurrency}, 0, false, 0},
		{"gcra/holders=3", []lease.Algorithm{lease.GCRA}, 3, false, 0},
		{"token_bucket/max_holders=2", []lease.Algorithm{lease.TokenBucket}, 0, false, 2},
		{"gcra/max_holders=3", []lease.Algorithm{lease.GCRA}, 0, false, 3},
		{"fixed_window/max_holders=2", []lease.Algorithm{lease.FixedWindow}, 0, false, 2},
		{"sliding_window/max_holders=2", []lease.Algorithm{lease.SlidingWindow}, 0, false, 2},
	}
	total := modeltest.Summary{}
	for i, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			all := os.Getenv("SLUICE_MODEL_ALL") != ""
			if all {
				r.safety = os.Getenv("SLUICE_MODEL_ALL") == "safety"
			}
			o := modeltest.FromEnv(t, modeltest.Options{
				Seed: uint64(i) * 1_000_000, Seeds: 20, Steps: 150, Holders: r.holders, Algorithms: r.algs,
				SafetyOnly: r.safety, Ahead: true, MaxHolders: r.maxHolders,
			})
			s := modeltest.Run(t, h, o)
			total.Seeds += s.Seeds
			total.Steps += s.Steps
			total.Checks += s.Checks
			total.Crowded += s.Crowded
			if r.maxHolders > 0 && s.Crowded < s.Seeds {
				t.Errorf("%d calls crowded out in %d seeds: too few to check the bound on a key's holders", s.Crowded, s.Seeds)
			}
		})
	}
	t.Logf("model on Redis: %d seeds, %d steps, %d decisions checked, %d lease calls crowded out", total.Seeds, total.Steps, total.Checks, total.Crowded)
	// A run starts at most two days and a half after start and its time
	// jumps stay under a day: a later clock is a drift across runs.
	if d := clock.Now().Sub(start); d > 4*24*time.Hour {
		t.Errorf("the Redis clock ends %v after the start: runs do not start from one instant", d)
	}
}
