package lease_test

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lease/clocktest"
	"github.com/sluicehq/sluice/lease/modeltest"
)

func memoryHarness() modeltest.Harness {
	clk := clocktest.New()
	return modeltest.Harness{
		NewStore: func(t testing.TB) lease.Store {
			// Every run from the same instant: a replay is exact.
			clk.Set(clocktest.Epoch)
			s := &bakingStore{bakes: make(map[string][]modeltest.Bake)}
			s.MemoryStore = lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clk.Now, SweepInterval: -1, OnBake: s.baked})
			return s
		},
		Now:     clk.Now,
		Advance: clk.Advance,
		Package: "./lease/",
	}
}

// bakingStore is a MemoryStore that reports its bakes to the model
// (modeltest.BakingStore).
type bakingStore struct {
	*lease.MemoryStore
	mu    sync.Mutex
	bakes map[string][]modeltest.Bake
}

func (s *bakingStore) baked(key string, end time.Time, lent int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bakes[key] = append(s.bakes[key], modeltest.Bake{End: end, Lent: lent})
}

// Baked implements modeltest.BakingStore.
func (s *bakingStore) Baked(key string) []modeltest.Bake {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.bakes[key]
	delete(s.bakes, key)
	return b
}

// envAll turns on the model runs and checks that wait for a fix: every
// run, and the under-admission side (denials justified) too; "safety"
// runs every run with the safety side only.
const envAll = "SLUICE_MODEL_ALL"

// TestModel runs the model-based harness (lease/modeltest) on the
// MemoryStore with a fake clock: every leased algorithm with one holder and
// with three sharing the Store, the exact ones, and all mixed; and each
// leased algorithm and all mixed with each key's holders bounded, up to
// twice as many Managers joining and leaving (Options.MaxHolders). The long
// form: SLUICE_MODEL_TIME=10m (make fuzz); a failing seed prints its
// replay command.
func TestModel(t *testing.T) {
	type run struct {
		name    string
		algs    []lease.Algorithm
		holders int
		// safety: only the inequalities are checked, not that denials
		// are justified; pending: skipped, why.
		safety  bool
		pending string
		// direct: the Managers that decide every check in the Store
		// (Config.Direct): "all", or "m0" beside Managers that lease
		// (a node on the memory store, gateways leasing from it).
		direct string
		// maxHolders bounds each key's holders (Options.MaxHolders):
		// up to twice as many Managers join and leave.
		maxHolders int
	}
	var runs []run
	for _, a := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		for _, holders := range []int{1, 3} {
			runs = append(runs, run{name: fmt.Sprintf("%s/holders=%d", a, holders), algs: []lease.Algorithm{a}, holders: holders})
		}
	}
	runs = append(runs,
		run{name: "exact", algs: []lease.Algorithm{lease.SlidingLog, lease.Concurrency}},
		run{name: "mixed"},
		run{name: "mixed/windows", algs: []lease.Algorithm{lease.FixedWindow, lease.SlidingWindow, lease.SlidingLog, lease.Concurrency}},
	)
	runs = append(runs, run{name: "direct", direct: "all"}, run{name: "direct/beside-leases", direct: "m0", holders: 3})
	for _, a := range []lease.Algorithm{lease.TokenBucket, lease.GCRA, lease.FixedWindow, lease.SlidingWindow} {
		runs = append(runs, run{name: fmt.Sprintf("%s/max_holders=2", a), algs: []lease.Algorithm{a}, maxHolders: 2})
	}
	runs = append(runs, run{name: "mixed/max_holders=3", maxHolders: 3})
	total := modeltest.Summary{}
	for i, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			if r.pending != "" && os.Getenv(envAll) == "" {
				t.Skip(r.pending + " (" + envAll + "=1 runs it)")
			}
			if v := os.Getenv(envAll); v != "" {
				r.safety = v == "safety"
			}
			o := modeltest.FromEnv(t, modeltest.Options{
				Seed: uint64(i) * 1_000_000, Seeds: 100, Steps: 250, Holders: r.holders, Algorithms: r.algs,
				SafetyOnly: r.safety, Ahead: true, MaxHolders: r.maxHolders,
			})
			h := memoryHarness()
			switch r.direct {
			case "all":
				h.Config = func(c *lease.Config) { c.Direct = true }
			case "m0":
				h.Config = func(c *lease.Config) { c.Direct = strings.HasPrefix(c.Holder, "m0.") }
			}
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
	t.Logf("model: %d seeds, %d steps, %d decisions checked, %d lease calls crowded out", total.Seeds, total.Steps, total.Checks, total.Crowded)
}

// TestModelFoundSeeds replays seeds whose failures the long form found,
// with the options of the run that found them, as regression cases.
func TestModelFoundSeeds(t *testing.T) {
	for _, c := range []struct {
		name string
		o    modeltest.Options
	}{
		// A check in the last millisecond of a window, where the holder no
		// longer spends its tokens (they are still lent to it: clause
		// (b)), was judged as if they covered it.
		{"sliding_window/last-ms", modeltest.Options{Seed: 1795696002211708853, Seeds: 1, Steps: 250, Holders: 3,
			Algorithms: []lease.Algorithm{lease.SlidingWindow}}},
		// A prefetch denied with a short Wait, right after a check for
		// many tokens denied with a long one: the model ended the batch
		// wait (clause (c)) at the prefetch's, where the Manager keeps
		// the first denial's (a kept idle bucket near its prefetch mark).
		{"gcra/batch-after-prefetch", modeltest.Options{Seed: 1795777366067154188, Seeds: 1, Steps: 250, Holders: 1,
			Algorithms: []lease.Algorithm{lease.GCRA}}},
		// A return that left a key more than 3 ended loans baked the
		// oldest's cap into the TAT, counting the tokens lent then as
		// spent then: a holder whose next call reported its loan spent
		// long before was denied what the model, crediting them from
		// then, found available (the Store reports its bakes now).
		{"gcra/bake", modeltest.Options{Seed: 1795776266556525308, Seeds: 1, Steps: 250, Holders: 3,
			Algorithms: []lease.Algorithm{lease.GCRA}}},
		// Shares ahead the harness asked for in the Manager's place (so
		// that the Manager cannot spend them) counted in the windows they
		// cover: the Store denied what the model, without them, found
		// available.
		{"fixed_window/ahead", modeltest.Options{Seed: 4000001, Seeds: 1, Steps: 250, Holders: 1,
			Algorithms: []lease.Algorithm{lease.FixedWindow}, Ahead: true}},
		{"windows/ahead", modeltest.Options{Seed: 10000004, Seeds: 1, Steps: 250,
			Algorithms: []lease.Algorithm{lease.FixedWindow, lease.SlidingWindow, lease.SlidingLog, lease.Concurrency}, Ahead: true}},
		// A Manager rolled into its share; a call of it in the share's
		// span that the Store denied (lending none ahead, so that the
		// Manager no longer knew where its shares fall) showed it the
		// Store's window, and it kept the share to the window's end: a
		// later call after the span reported it held, and the Manager
		// spent it with that call's grant. The model, which re-dated a
		// share only at a grant or at a call outside the span, took it as
		// left behind at the later call (admitted more than held).
		{"fixed_window/ahead-redated", modeltest.Options{Seed: 1795787243421199545, Seeds: 1, Steps: 250, Holders: 3,
			Algorithms: []lease.Algorithm{lease.FixedWindow}, Ahead: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if s := modeltest.Run(t, memoryHarness(), c.o); s.Seeds != 1 {
				t.Fatalf("ran %d seeds, want 1", s.Seeds)
			}
		})
	}
}
