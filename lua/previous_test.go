package lua

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestPreviousReleaseSameKeys: nodes of the previous release (its scripts
// kept in testdata/previous-tb3) and of this one on the same Redis keys
// during a rolling upgrade: the format is the same (the keys :tb3, :gc3,
// :fw4, :sw3), but this release keeps a token_bucket's or gcra's loans by
// expiry and removes a loan keeping the others' order, where the previous
// one appended loans and moved the last one into a removed one's place.
// Random calls of three holders and anonymous callers, each through the
// previous release's scripts or this one's at random, on one frozen clock,
// must answer as lease.MemoryStore does, call for call: each release reads
// what the other wrote, whatever the order of its loans.
func TestPreviousReleaseSameKeys(t *testing.T) {
	start := time.Date(2026, 5, 17, 3, 4, 5, 678901000, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	s := newUnbatchedStore(t, srv.Addr)
	ms := lease.NewMemoryStore(lease.MemoryStoreConfig{Now: clock.Now, SweepInterval: -1})
	defer ms.Close()
	ctx := context.Background()
	prev := func(name string) *rueidis.Lua {
		var src []byte
		for _, f := range []string{"prelude", "leased", name} {
			b, err := os.ReadFile(filepath.Join("testdata", "previous-tb3", f+".lua"))
			if err != nil {
				t.Fatal(err)
			}
			src = append(src, b...)
		}
		return rueidis.NewLuaScript(string(src))
	}
	type scripts struct{ lease, ret *rueidis.Lua }
	old := map[lease.Algorithm]scripts{}
	for a, f := range algorithms {
		if f.lease != "" {
			old[lease.Algorithm(a)] = scripts{prev(f.lease[:len(f.lease)-4]), prev(f.ret[:len(f.ret)-4])}
		}
	}
	r := rand.New(rand.NewPCG(5, 8))
	pick := func(vals ...int64) int64 { return vals[r.IntN(len(vals))] }
	holders := []string{"", "node-a", "node-b", "gw-c"}
	var byOld, byNew, shared int
	for i := 0; i < 300; i++ {
		a := leasedAlgorithms[r.IntN(len(leasedAlgorithms))]
		p := lease.Policy{Algorithm: a, Limit: pick(3, 10, 100, 1000), Period: time.Duration(pick(10, 1000, 60_000)) * time.Millisecond}
		key := uniqueKey(t)
		lent := map[string]int64{}
		for step := 0; step < 30; step++ {
			clock.Advance(time.Duration(r.Int64N(int64(p.Period) / 4)))
			h := holders[r.IntN(len(holders))]
			viaOld := r.IntN(2) == 0
			if viaOld {
				byOld++
			} else {
				byNew++
			}
			if v, _ := stored(t, s, key, a); len(v) > 0 && holdersIn(v, a) > 1 {
				shared++
			}
			if h != "" && r.IntN(8) == 0 {
				n := pick(0, 1, lent[h], lent[h]+1)
				e2 := ms.Return(ctx, key, p, n, h)
				var e1 error
				if viaOld {
					e1 = old[a].ret.Exec(ctx, s.client, []string{s.Key(key, a)},
						[]string{itoa(p.Limit), itoa(micros(p.Period)), itoa(p.Capacity()), holderOf(h), itoa(n)}).Error()
				} else {
					e1 = s.Return(ctx, key, p, n, h)
				}
				if e1 != nil || e2 != nil {
					t.Fatalf("Return: redis %v, memory %v", e1, e2)
				}
				lent[h] = 0
				continue
			}
			need := pick(0, 1, 1, 2, p.Capacity()/2)
			want := need + pick(0, 1, 5, p.Capacity()/4)
			to := lease.Lessee{ID: h}
			if h != "" {
				to.Held = pick(lent[h], lent[h], max(lent[h]-1, 0), 0)
				to.TTL = time.Duration(pick(50, 1000, 60_000)) * time.Millisecond
				to.Idle = time.Duration(pick(0, 0, 1000)) * time.Microsecond
				to.SpentBefore = pick(0, 0, 1)
				to.Call = uint32(r.Uint64()) | 1
			}
			g2, e2 := ms.Lease(ctx, key, p, want, need, to)
			var g1 lease.Grant
			var e1 error
			if viaOld {
				g1, e1 = previousLease(ctx, s, old[a].lease, key, p, want, need, to)
			} else {
				g1, e1 = s.Lease(ctx, key, p, want, need, to)
			}
			if e1 != nil || e2 != nil || g1 != g2 {
				t.Fatalf("%+v step %d, by the previous release %v: Lease(want=%d, need=%d, %+v):\n  redis:  %+v %v\n  memory: %+v %v",
					p, step, viaOld, want, need, to, g1, e1, g2, e2)
			}
			if h != "" {
				lent[h] = g1.Lent
			}
		}
	}
	t.Logf("identical answers: %d calls by the previous release's scripts, %d by this one's, %d of them on keys several holders lease", byOld, byNew, shared)
	if byOld < 1000 || byNew < 1000 || shared < 1000 {
		t.Errorf("too few calls of each release, or on keys several holders lease")
	}
}

// previousLease is a lease call through the previous release's script: its
// arguments (no max_holders, the shares ahead at 13 and 14) and its reply
// (no crowded).
func previousLease(ctx context.Context, s *Store, script *rueidis.Lua, key string, p lease.Policy, want, need int64, to lease.Lessee) (lease.Grant, error) {
	args := []string{itoa(p.Limit), itoa(micros(p.Period)), itoa(p.Capacity()), holderOf(to.ID),
		itoa(want), itoa(need), itoa(to.Held), itoa(micros(to.TTL)), itoa(micros(to.Idle)), itoa(to.SpentBefore),
		strconv.FormatUint(uint64(to.Call), 10), strconv.FormatUint(uint64(to.Unanswered), 10)}
	if p.Algorithm.LeasesAhead() {
		args = append(args, itoa(to.AheadWindows), itoa(to.AheadTokens))
	}
	v, err := script.Exec(ctx, s.client, []string{s.Key(key, p.Algorithm)}, args).AsIntSlice()
	if err != nil {
		return lease.Grant{}, err
	}
	g := lease.Grant{Granted: v[0], Remaining: v[1], Wait: millis(v[2]), Reset: millis(v[3]), Lent: v[4]}
	if len(v) == 7 {
		g.AheadTokens, g.AheadWindows = v[5], v[6]
	}
	return g, nil
}

// holdersIn is how many holders' loans v (a key's state of algorithm a,
// see leased.lua) has.
func holdersIn(v string, a lease.Algorithm) int {
	n := 0
	for _, l := range decodeLoans(v, a) {
		if l.Holder != "" {
			n++
		}
	}
	return n
}
