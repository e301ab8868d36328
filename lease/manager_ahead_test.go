package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/sluicehq/sluice/lease/clocktest"
)

// aheadStore is a Store on a fake clock that delays its answers: the clock
// moves req before the Store runs a lease call and resp after (the call's
// way there and back), and it records the lease calls' Lessees.
type aheadStore struct {
	Store
	clk       *clocktest.Clock
	req, resp time.Duration
	mu        sync.Mutex
	leases    []Lessee
	returns   int
}

func (s *aheadStore) Lease(ctx context.Context, key string, p Policy, want, need int64, to Lessee) (Grant, error) {
	s.clk.Advance(s.req)
	g, err := s.Store.Lease(ctx, key, p, want, need, to)
	s.clk.Advance(s.resp)
	if to.ID != "" {
		s.mu.Lock()
		s.leases = append(s.leases, to)
		s.mu.Unlock()
	}
	return g, err
}

func (s *aheadStore) Return(ctx context.Context, key string, p Policy, tokens int64, holder string) error {
	s.mu.Lock()
	s.returns++
	s.mu.Unlock()
	return s.Store.Return(ctx, key, p, tokens, holder)
}

func (s *aheadStore) calls() (leases, returns int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases), s.returns
}

// aheadManagers returns n Managers (holders) on one MemoryStore behind
// an aheadStore, on a fake clock at a window's start, with no sweeper and
// no prefetch (LowWater near 0: the background calls would move the clock
// from another goroutine). edit, if not nil, changes each one's Config.
func aheadManagers(t *testing.T, n int, edit func(i int, c *Config)) ([]*Manager, *aheadStore, *clocktest.Clock) {
	t.Helper()
	clk := clocktest.New()
	ms := NewMemoryStore(MemoryStoreConfig{Now: clk.Now, SweepInterval: -1})
	t.Cleanup(func() { _ = ms.Close() })
	st := &aheadStore{Store: ms, clk: clk}
	out := make([]*Manager, n)
	for i := range out {
		cfg := DefaultConfig()
		cfg.Now = clk.Now
		cfg.SweepInterval = -1
		cfg.StoreTimeout = time.Minute
		cfg.LowWater = 1e-9
		cfg.Holder = fmt.Sprintf("h%d", i)
		if edit != nil {
			edit(i, &cfg)
		}
		m := NewManager(st, cfg)
		t.Cleanup(func() { _ = m.Close() })
		out[i] = m
	}
	return out, st, clk
}

// perSecondWindow is a per-second fixed_window of limit: a cold lease
// (the floor, 1/8) is limit/8 tokens.
func perSecondWindow(limit int64) Policy {
	return Policy{Algorithm: FixedWindow, Limit: limit, Period: time.Second}
}

// TestAheadStoreCallsPerHorizon: a slow per-second key checked once every
// two windows leases shares of the windows of its horizon and rolls into
// them with no Store call: one lease call per horizon (20 windows here)
// instead of one per visit.
func TestAheadStoreCallsPerHorizon(t *testing.T) {
	p := perSecondWindow(100)
	for _, tt := range []struct {
		name    string
		horizon time.Duration
		max     int // lease calls over 100 visits
	}{
		{"horizon 20s", 20 * time.Second, 200/20 + 1},
		{"default horizon (150s)", 0, 2},
		{"off", -1, 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ms, st, clk := aheadManagers(t, 1, func(_ int, c *Config) { c.AheadHorizon, c.Metrics = tt.horizon, metrics.NewSet() })
			m := ms[0]
			clk.Advance(500 * time.Millisecond) // mid-window
			for range 100 {
				if d := mustTake(t, m, "k", p, 1); !d.Allowed || d.Remaining < 1 || d.Reset != 500*time.Millisecond {
					t.Fatalf("at %v: %+v, want allowed with 500ms to the window's end", clk.Now().Sub(clocktest.Epoch), d)
				}
				clk.Advance(2 * time.Second)
			}
			leases, _ := st.calls()
			rolls := m.Stats().AheadRolls
			t.Logf("%d lease calls and %d rolls for 100 visits over 200 windows", leases, rolls)
			if tt.horizon < 0 && leases != tt.max || leases > tt.max || leases < tt.max/2 {
				t.Errorf("%d lease calls for 100 visits over 200 windows, want about %d", leases, tt.max)
			}
			if int(rolls) != 100-leases {
				t.Errorf("%d rolls, want one per visit without a lease call (%d)", rolls, 100-leases)
			}
			if got := m.met.aheadRolls.Get(); got != uint64(rolls) {
				t.Errorf("sluice_lease_ahead_rolls_total %d, want the %d rolls", got, rolls)
			}
		})
	}
}

// TestAheadAsk: what a lease call asks ahead: the floor (MinLeaseShare of
// the capacity) in each window of the horizon; none for a period longer
// than the horizon, for other algorithms, or with the horizon off.
func TestAheadAsk(t *testing.T) {
	for _, tt := range []struct {
		p       Policy
		horizon time.Duration
		windows int64
		tokens  int64
	}{
		{perSecondWindow(100), 0, 150, 13},
		{perSecondWindow(100), 20 * time.Second, 20, 13},
		{perSecondWindow(100), -1, 0, 0},
		{Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Hour}, 0, 0, 0},
		{Policy{Algorithm: FixedWindow, Limit: 100, Period: time.Minute}, 0, 2, 13},
		{Policy{Algorithm: SlidingWindow, Limit: 100, Period: time.Second}, 0, 0, 0},
		// 10ms windows: at most as many as keep each window's span (less
		// its margins) half the window.
		{Policy{Algorithm: FixedWindow, Limit: 100, Period: 10 * time.Millisecond}, 0, 1499, 13},
	} {
		ms, st, _ := aheadManagers(t, 1, func(_ int, c *Config) { c.AheadHorizon = tt.horizon })
		mustTake(t, ms[0], "k", tt.p, 1)
		st.mu.Lock()
		to := st.leases[0]
		st.mu.Unlock()
		if to.AheadWindows != tt.windows || to.AheadTokens != tt.tokens {
			t.Errorf("%v, horizon %v: asked %d ahead in %d windows, want %d in %d", tt.p, tt.horizon,
				to.AheadTokens, to.AheadWindows, tt.tokens, tt.windows)
		}
	}
}

// TestAheadNoOverAdmission: four holders of one per-second key at mixed
// rates (one slow, one steady, one that wants the whole limit, one that
// checks once in even windows and in a burst in odd ones), on a Store
// whose answers take time: per window of the Store's clock, they admit at
// most the limit together, and each roll puts its bucket in the Store's
// window of now.
func TestAheadNoOverAdmission(t *testing.T) {
	const limit = 40
	p := perSecondWindow(limit)
	for _, lat := range []struct{ req, resp time.Duration }{{0, 0}, {7 * time.Millisecond, 0}, {0, 7 * time.Millisecond}, {3 * time.Millisecond, 4 * time.Millisecond}} {
		t.Run(fmt.Sprintf("req %v resp %v", lat.req, lat.resp), func(t *testing.T) {
			ms, st, clk := aheadManagers(t, 4, func(_ int, c *Config) { c.AheadHorizon = 30 * time.Second })
			st.req, st.resp = lat.req, lat.resp
			pu := int64(time.Second)
			admitted := map[int64]int64{}
			hits := []int64{1, 1, 3, 1}
			checks := func(i int, ms int64) bool {
				switch i {
				case 0:
					return ms%2300 == 0 // slow
				case 1:
					return ms%37 == 0 // steady
				case 2:
					return true // the whole limit
				}
				w, ph := ms/1000, ms%1000 // once, or a burst of 11
				return ph == 100 || w%2 == 1 && ph > 100 && ph <= 110
			}
			rolls := 0
			for ms0 := int64(0); ms0 < 200_000; ms0++ {
				for i, m := range ms {
					if !checks(i, ms0) {
						continue
					}
					b := m.buckets.load("k")
					var before int64
					if b != nil {
						before = b.resetAt.Load()
					}
					leases, _ := st.calls()
					now := clk.Now().UnixNano()
					d := mustTake(t, m, "k", p, hits[i])
					l, _ := st.calls()
					if d.Allowed {
						// Admitted at the Store's time of the check: when
						// its lease call, if any, reached the Store.
						at := now
						if l > leases {
							at += int64(lat.req)
						}
						admitted[startOf(at, pu)] += hits[i]
					}
					if l == leases && b != nil && b.resetAt.Load() != before {
						// Rolled into a share's window: it must be the
						// Store's window of now (its latest end less than
						// half a period after now's window's end).
						rolls++
						if end := startOf(now, pu) + pu; b.resetAt.Load()-end >= pu/2 || b.resetAt.Load() < end {
							t.Fatalf("m%d rolled at %v into a window ending at %v, want the window of now",
								i, time.Unix(0, now).Sub(clocktest.Epoch), time.Unix(0, b.resetAt.Load()).Sub(clocktest.Epoch))
						}
					}
				}
				if c := clk.Now(); c.Sub(clocktest.Epoch) < time.Duration(ms0+1)*time.Millisecond {
					clk.Set(clocktest.Epoch.Add(time.Duration(ms0+1) * time.Millisecond))
				}
			}
			for w, n := range admitted {
				if n > limit {
					t.Errorf("window at %v: %d admitted, want at most %d", time.Unix(0, w).Sub(clocktest.Epoch), n, limit)
				}
			}
			if rolls < 40 {
				t.Errorf("%d rolls onto shares, want the slow and the steady holders to roll in most windows", rolls)
			}
		})
	}
}

// TestAheadDropEndsShares: a bucket dropped with shares ahead (idle sweep,
// ReturnKeys, Close: a clean stop) returns, even when its window's tokens
// are gone (the window it leased in is over), and the return ends its
// shares and gives back the share of the window of now, which it never
// rolled into (the Store counts it there from the window's start): another
// holder gets the whole limit in that window and in the next.
func TestAheadDropEndsShares(t *testing.T) {
	p := perSecondWindow(80) // shares of 10
	for _, how := range []string{"idle sweep", "ReturnKeys", "Close"} {
		t.Run(how, func(t *testing.T) {
			ms, st, clk := aheadManagers(t, 2, func(i int, c *Config) {
				c.KeepIdle = -1
				if i == 1 {
					c.AheadHorizon = -1 // b asks none: its take is the whole limit
				}
			})
			a, b := ms[0], ms[1]
			clk.Advance(200 * time.Millisecond)
			mustTake(t, a, "k", p, 1)
			clk.Advance(11 * time.Second) // idle, mid-window 11: a share a never rolled into
			switch how {
			case "idle sweep":
				if n := a.sweep(clk.Now()); n != 1 {
					t.Fatalf("swept %d keys, want 1", n)
				}
			case "ReturnKeys":
				if err := a.ReturnKeys(func(string) bool { return false }); err != nil {
					t.Fatal(err)
				}
			default:
				if err := a.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if _, returns := st.calls(); returns != 1 {
				t.Fatalf("%d return calls, want 1 to end the shares", returns)
			}
			if d := mustTake(t, b, "k", p, 80); !d.Allowed {
				t.Errorf("the other holder's check of the whole limit in the window of the return: %+v, want allowed (a's share of it given back)", d)
			}
			clk.Advance(time.Second)
			if d := mustTake(t, b, "k", p, 80); !d.Allowed {
				t.Errorf("the other holder's check of the whole limit in the next window: %+v, want allowed (a's shares ended)", d)
			}
		})
	}
}

// TestAheadOff: with AheadHorizon negative, lease calls ask nothing ahead
// and a slow key leases once per visit, as before shares: no roll, no
// share left in the Store (another holder gets the whole limit in the
// next window, with no return).
func TestAheadOff(t *testing.T) {
	p := perSecondWindow(80)
	ms, st, clk := aheadManagers(t, 2, func(_ int, c *Config) { c.AheadHorizon = -1 })
	a, b := ms[0], ms[1]
	for range 5 {
		mustTake(t, a, "k", p, 1)
		clk.Advance(2 * time.Second)
	}
	st.mu.Lock()
	for _, to := range st.leases {
		if to.AheadWindows != 0 || to.AheadTokens != 0 {
			t.Errorf("a lease call asked %d ahead in %d windows, want none", to.AheadTokens, to.AheadWindows)
		}
	}
	st.mu.Unlock()
	if leases, returns := st.calls(); leases != 5 || returns != 0 {
		t.Errorf("%d lease and %d return calls for 5 visits, want 5 and 0", leases, returns)
	}
	if d := mustTake(t, b, "k", p, 80); !d.Allowed {
		t.Errorf("the other holder's check of the whole limit: %+v, want allowed", d)
	}
}

// TestAheadKeptIdle: a slow key idle past Idle with shares ahead is kept
// (its shares count as spendable until the last one's window ends): a
// check coming back rolls into its window with no Store call. The first
// sweep after its last share drops it, with no call (nothing is left to
// end). Past KeepIdle, the longest idle is dropped and returned, which
// ends its shares.
func TestAheadKeptIdle(t *testing.T) {
	p := perSecondWindow(80)
	ms, st, clk := aheadManagers(t, 2, func(i int, c *Config) {
		c.AheadHorizon = 30 * time.Second
		c.KeepIdle = 1
		if i == 1 {
			c.AheadHorizon = -1
		}
	})
	a, b := ms[0], ms[1]
	clk.Advance(300 * time.Millisecond)
	mustTake(t, a, "k", p, 1)
	clk.Advance(15 * time.Second)
	if n := a.sweep(clk.Now()); n != 0 || !a.Holds("k") {
		t.Fatalf("the sweep after 15s idle dropped %d keys, want the key with shares kept", n)
	}
	if d := mustTake(t, a, "k", p, 1); !d.Allowed {
		t.Fatalf("the check after the idle spell: %+v, want allowed", d)
	}
	if leases, returns := st.calls(); leases != 1 || returns != 0 {
		t.Fatalf("%d lease and %d return calls, want the check answered on a share", leases, returns)
	}
	clk.Advance(15 * time.Second) // 30.3s: in the last share's window
	if n := a.sweep(clk.Now()); n != 0 {
		t.Fatalf("the sweep in the last share's window dropped %d keys, want 0", n)
	}
	clk.Advance(time.Second)
	if n := a.sweep(clk.Now()); n != 1 || a.Holds("k") {
		t.Fatalf("the sweep after the last share dropped %d keys, want 1", n)
	}
	if leases, returns := st.calls(); leases != 1 || returns != 0 {
		t.Errorf("%d lease and %d return calls, want no call for shares that ended", leases, returns)
	}

	// Two kept keys, KeepIdle 1: the longest idle goes back, ending its
	// shares: the other holder gets its whole limit in the next window.
	mustTake(t, a, "old", p, 1)
	clk.Advance(time.Second)
	mustTake(t, a, "new", p, 1)
	clk.Advance(11 * time.Second)
	if n := a.sweep(clk.Now()); n != 1 || a.Holds("old") || !a.Holds("new") {
		t.Fatalf("swept %d keys (holds old %v, new %v), want the longest idle dropped", n, a.Holds("old"), a.Holds("new"))
	}
	if _, returns := st.calls(); returns != 1 {
		t.Fatalf("%d return calls, want 1: the dropped key's shares ended", returns)
	}
	clk.Advance(time.Second)
	if d := mustTake(t, b, "old", p, 80); !d.Allowed {
		t.Errorf("the other holder's check of the whole limit: %+v, want allowed", d)
	}
}

// TestAheadGapFindsShare: a check that falls between two windows' spans
// (here in the margin at a window's start) leases as any other; the
// Store's answer shows it in the window of a share the bucket did not
// roll into, which the check then spends with what the call granted.
func TestAheadGapFindsShare(t *testing.T) {
	p := perSecondWindow(16) // shares of 2
	ms, st, clk := aheadManagers(t, 2, func(i int, c *Config) {
		c.AheadHorizon = 30 * time.Second
		if i == 1 {
			c.AheadHorizon = -1
		}
	})
	a, b := ms[0], ms[1]
	clk.Advance(100 * time.Millisecond)
	mustTake(t, a, "k", p, 1)
	clk.Advance(5*time.Second - 100*time.Millisecond) // window 5's start: in its margin
	if d := mustTake(t, b, "k", p, 14); !d.Allowed {  // all but a's share
		t.Fatalf("b: %+v, want allowed", d)
	}
	leases, _ := st.calls()
	if d := mustTake(t, a, "k", p, 2); !d.Allowed {
		t.Fatalf("a's check of its share in the window's margin: %+v, want allowed", d)
	}
	if l, _ := st.calls(); l != leases+1 {
		t.Fatalf("%d lease calls, want one (the margin)", l-leases)
	}
}

// TestAheadGapAsksAgain: a check at a window's start (in its margin,
// where the Store may still be in the window before) counts on finding
// only what it surely finds there (its window's tokens on hand, fewer
// than its share), so its lease call asks for too much of the new window
// and is denied; the answer shows the Store in the share's window, and
// the check asks again for the rest, knowing it: its whole limit is
// admitted, the share with it.
func TestAheadGapAsksAgain(t *testing.T) {
	p := perSecondWindow(16) // shares of 2
	ms, st, clk := aheadManagers(t, 1, func(_ int, c *Config) { c.AheadHorizon = 30 * time.Second })
	a := ms[0]
	clk.Advance(500 * time.Millisecond)
	mustTake(t, a, "k", p, 1) // a lease of 2: 1 left
	clk.Advance(500 * time.Millisecond)
	if d := mustTake(t, a, "k", p, 16); !d.Allowed {
		t.Fatalf("the whole limit at the next window's start: %+v, want allowed (a's share and the rest)", d)
	}
	if leases, _ := st.calls(); leases != 3 {
		t.Errorf("%d lease calls, want 3: the first lease, the one denied for too much, the one asking again", leases)
	}
}

// TestAheadStripedAsksNone: a striped (contended) key neither rolls onto
// its shares (its tokens on hand are in stripes) nor asks for shares:
// its need is far above the floor, so they would save it no Store call.
func TestAheadStripedAsksNone(t *testing.T) {
	p := perSecondWindow(10_000) // the floor: 1250
	ms, st, clk := aheadManagers(t, 1, nil)
	m := ms[0]
	mustTake(t, m, "k", p, 1)
	b := m.buckets.load("k")
	m.striped.stripe(b)
	if b.tokens.Load() >= 0 {
		t.Fatal("not striped")
	}
	clk.Advance(1500 * time.Millisecond) // the next window: a share covers it
	mustTake(t, m, "k", p, 1)
	leases, _ := st.calls()
	st.mu.Lock()
	last := st.leases[len(st.leases)-1]
	st.mu.Unlock()
	if leases != 2 || last.AheadWindows != 0 || last.AheadTokens != 0 {
		t.Errorf("%d lease calls, the last asking %d ahead in %d windows; want 2 (no roll), the second asking none",
			leases, last.AheadTokens, last.AheadWindows)
	}
}

// TestAheadConcurrentRolls: checks racing into a window on a share from
// several goroutines roll the bucket once: per window, the key's only
// holder admits at most the limit, though it asks for far more (its
// share, then what its leases and prefetches get). A roll outside the
// inflight lock fails it under -race (make race).
func TestAheadConcurrentRolls(t *testing.T) {
	const limit = 40
	p := perSecondWindow(limit)
	ms, _, clk := aheadManagers(t, 1, func(_ int, c *Config) { c.LowWater = 0.5 })
	m := ms[0]
	perWindow := map[int]int{}
	for w := range 30 {
		for _, at := range []time.Duration{100, 400, 800} {
			clk.Set(clocktest.Epoch.Add(time.Duration(w)*time.Second + at*time.Millisecond))
			var admitted sync.WaitGroup
			var mu sync.Mutex
			n := 0
			start := make(chan struct{}) // all at once: they race into the roll
			for range 4 {
				admitted.Go(func() {
					<-start
					for range 20 {
						if d, err := m.Take("k", p, 1); err == nil && d.Allowed {
							mu.Lock()
							n++
							mu.Unlock()
						}
					}
				})
			}
			close(start)
			admitted.Wait()
			m.drain()
			if at == 100 && n < limit/8 {
				t.Fatalf("window %d: %d admitted at its first checks, want at least the share", w, n)
			}
			perWindow[w] += n
		}
		if perWindow[w] > limit {
			t.Fatalf("window %d: %d admitted, want at most %d", w, perWindow[w], limit)
		}
	}
}

// TestAheadStoreCallsManyKeys: 1000 per-second keys, each checked once
// every 2 s at its own phase of the window (so some checks fall in a
// window's margins, where they lease), for 300 s: with the default
// horizon (150 windows) about 2 lease calls per key, 1 per horizon, plus
// one per check in a margin; without shares, one per check.
func TestAheadStoreCallsManyKeys(t *testing.T) {
	const keys, seconds = 1000, 300
	p := perSecondWindow(100)
	for _, tt := range []struct {
		horizon  time.Duration
		min, max float64 // lease calls per check
	}{
		{0, 0.013, 0.025},
		{-1, 1, 1},
	} {
		ms, st, clk := aheadManagers(t, 1, func(_ int, c *Config) { c.AheadHorizon = tt.horizon })
		m := ms[0]
		r := rand.New(rand.NewPCG(1, 2))
		phase := make([]int, keys) // ms in the 2s cycle
		at := map[int][]int{}
		for k := range phase {
			phase[k] = r.IntN(2000)
			at[phase[k]] = append(at[phase[k]], k)
		}
		names := make([]string, keys)
		for k := range names {
			names[k] = "k" + strconv.Itoa(k)
		}
		checks := 0
		for ms := 0; ms < seconds*1000; ms++ {
			for _, k := range at[ms%2000] {
				if d := mustTake(t, m, names[k], p, 1); !d.Allowed {
					t.Fatalf("%s at %dms: %+v, want allowed", names[k], ms, d)
				}
				checks++
			}
			clk.Advance(time.Millisecond)
		}
		leases, _ := st.calls()
		perCheck := float64(leases) / float64(checks)
		t.Logf("horizon %v: %d checks, %d lease calls (%.2f%% per check), %d rolls", tt.horizon, checks, leases, 100*perCheck, m.Stats().AheadRolls)
		if perCheck < tt.min || perCheck > tt.max {
			t.Errorf("horizon %v: %.4f lease calls per check, want %.3f to %.3f", tt.horizon, perCheck, tt.min, tt.max)
		}
	}
}

// startOf is the start of the window of length pu containing t (Unix ns,
// windows aligned on multiples of pu since the epoch).
func startOf(t, pu int64) int64 { return t - t%pu }
