package lua

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestFixedWindowAheadMatchesGo runs random call sequences of fixed_window
// keys with shares ahead (several holders asking shares of up to many
// windows, capped by each other's; grants, peeks, returns, calls asking
// none; the clock moving within a window, to window boundaries, across
// many windows and now and then back) against Redis and against
// lease.FixedWindowState on one fake clock, and requires after every call
// every reply field equal, the stored state equal to the Go state (window,
// count, each loan's holder, lent, share and end, in order: the scripts
// write exactly when the Go state changes), and the key's expiry the Go
// state's (two windows after its start, or a window after the last share's
// end, with the period of the last change: a rule's period changes now and
// then); Redis must not expire a key before then.
func TestFixedWindowAheadMatchesGo(t *testing.T) {
	start := time.Date(2026, 7, 9, 10, 11, 12, 345678000, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	s := newUnbatchedStore(t, srv.Addr)
	ctx := context.Background()
	r := rand.New(rand.NewPCG(18, 4))
	pick := func(vals ...int64) int64 { return vals[r.IntN(len(vals))] }
	holders := []string{"", "h-1", "h-2", "h-3", "h-4"}
	get := func(k string) string {
		v, err := s.client.Do(ctx, s.client.B().Get().Key(k).Build()).ToString()
		if err != nil && !rueidis.IsRedisNil(err) {
			t.Fatal(err)
		}
		return v
	}
	var periods, calls, exact, returnsIn, shareCalls, capped, rolledIn, returns, noneAfter, expired int
	for i := 0; i < 300; i++ {
		randPeriod := func() time.Duration {
			return time.Duration(pick(1, 10, 300, 1000, 1000, 60_000, 3_600_000, 1+r.Int64N(86_400_000))) * time.Millisecond
		}
		p := lease.Policy{Algorithm: lease.FixedWindow, Limit: pick(1, 2, 5, 10, 10, 100, 1+r.Int64N(1_000_000), lease.MaxLimit), Period: randPeriod()}
		pu := p.Period.Microseconds()
		maxW := min(int64(lease.MaxAheadWindows), int64(lease.MaxLeaseTTL/p.Period))
		key := uniqueKey(t)
		k := s.Key(key, lease.FixedWindow)
		var g lease.FixedWindowState
		var goExp int64 // when the key of g expires: set at each change, with the period then
		lent := map[string]int64{}
		nh := 1 + int(pick(1, 1, 2, 4)) // anonymous and 1, 2 or 4 holders: the fast path's states and the general path's
		for step := 0; step < 30; step++ {
			if r.IntN(40) == 0 {
				// The rule's period changes: the stored window and shares'
				// ends need not fall on the new period's boundaries.
				p.Period = randPeriod()
				pu = p.Period.Microseconds()
				maxW = min(int64(lease.MaxAheadWindows), int64(lease.MaxLeaseTTL/p.Period))
				periods++
			}
			switch r.IntN(6) {
			case 0: // same instant
			case 1:
				clock.Advance(time.Duration(r.Int64N(int64(p.Period)/4 + 1)))
			case 2: // to a later window's start, exactly
				now := clock.Now().UnixMicro()
				clock.Advance(time.Duration(pu-now%pu+pick(0, 0, 1, 2, 5)*pu) * time.Microsecond)
			case 3:
				clock.Advance(time.Duration(r.Int64N(int64(4*p.Period) + 1)))
			case 4:
				// Back by up to a window (a clock step), only while the key
				// is stored: it then expires later still, as the Go state
				// keeps counting.
				if srv.Do("EXISTS", k) == "1" && r.IntN(3) == 0 {
					clock.Set(clock.Now().Add(-time.Duration(r.Int64N(int64(p.Period)) + 1)))
				}
			default:
				clock.Advance(time.Duration(r.Int64N(int64(10 * time.Millisecond))))
			}
			now := clock.Now()
			t0 := now.UnixMicro()
			if get(k) == "" && !reflect.DeepEqual(g, lease.FixedWindowState{}) {
				// Redis expired the key: not before the Go state's expiry
				// (set when it last changed), which both then forget.
				if t0 < goExp {
					t.Fatalf("%+v step %d: Redis expired the key %dµs before the Go state's expiry: %s", p, step, goExp-t0, show(g))
				}
				g, goExp = lease.FixedWindowState{}, 0
				expired++
			}
			before := g
			before.Loans = slices.Clone(g.Loans)
			stored0 := get(k)
			if covers(before, now.UnixMicro(), pu) {
				rolledIn++
			}
			h := holders[r.IntN(nh)]
			// Its loan's share covers now's window, which the key has not
			// started yet (the call starts it with the share lent).
			shareIn := h != "" && covers(before, t0, pu) && slices.ContainsFunc(rolled(before, t0, pu).Loans, func(l lease.Loan) bool { return l.Holder == h })
			if h != "" && r.IntN(6) == 0 || shareIn && r.IntN(3) == 0 {
				if shareIn {
					returnsIn++
				}
				n := min(pick(0, 1, lent[h], lent[h]+1, r.Int64N(p.Limit)+1), lease.MaxHits)
				if err := s.Return(ctx, key, p, n, h); err != nil {
					t.Fatal(err)
				}
				g.Return(p, now, n, h)
				returns++
				took := slices.ContainsFunc(rolled(before, t0, pu).Loans, func(l lease.Loan) bool { return l.Holder == h })
				switch wrote := get(k) != stored0; {
				case took != wrote:
					t.Fatalf("%+v step %d: Return(%d, %s) on %s: wrote %v, want %v (whether it ends a loan)", p, step, n, h, show(before), wrote, took)
				case took:
					exact++
					goExp = expiryOf(g, pu)
				case !reflect.DeepEqual(before, g):
					t.Fatalf("%+v step %d: Return(%d, %s) found no loan in %s but changed the Go state to %s", p, step, n, h, show(before), show(g))
				}
			} else {
				need := min(pick(0, 0, 1, 2, p.Limit/2, p.Limit, p.Limit+1, r.Int64N(p.Limit)+1), lease.MaxHits)
				want := min(lease.MaxHits, need+pick(0, 0, 1, 10, p.Limit, r.Int64N(p.Limit)+1))
				to := lease.Lessee{ID: h}
				if h != "" {
					to.Held = min(pick(lent[h], lent[h], 0, lent[h]+2, r.Int64N(p.Limit)+1), lease.MaxHits)
					to.TTL = time.Duration(pick(1, 1000, 60_000)) * time.Millisecond
					to.AheadWindows = min(pick(0, 1, 2, 2, 3, 5, maxW, 1+r.Int64N(maxW)), maxW)
					to.AheadTokens = min(pick(0, 1, 2, p.Limit/4, p.Limit/2, p.Limit, p.Limit+3, r.Int64N(p.Limit)+1), lease.MaxHits)
				}
				got, err := s.Lease(ctx, key, p, want, need, to)
				if err != nil {
					t.Fatal(err)
				}
				ref := g.Lease(p, now, want, need, to)
				if got != ref {
					t.Fatalf("%+v step %d at %v: Lease(want=%d, need=%d, %+v) on %s:\n  redis: %+v\n  go:    %+v",
						p, step, now.Format(time.RFC3339Nano), want, need, to, show(before), got, ref)
				}
				if got.AheadTokens > 0 {
					shareCalls++
					if got.AheadTokens < min(to.AheadTokens, p.Limit) {
						capped++
					}
				}
				if i := slices.IndexFunc(before.Loans, func(l lease.Loan) bool { return l.Holder == h }); h != "" && i >= 0 && before.Loans[i].Share > 0 && to.AheadWindows == 0 {
					noneAfter++
				}
				if h != "" {
					lent[h] = got.Lent
				}
				// The Go state changed exactly when the script wrote.
				if reflect.DeepEqual(before, g) {
					if v := get(k); v != stored0 {
						t.Fatalf("%+v step %d: Lease(want=%d, need=%d, %+v) changed nothing in the Go state %s, but wrote %x over %x", p, step, want, need, to, show(before), v, stored0)
					}
				} else {
					exact++
					goExp = expiryOf(g, pu)
				}
			}
			calls++
			// The stored state: after a write the Go state itself; else
			// what it means now (a Go return rolls its state to now's
			// window without a change of meaning, which the script does
			// not write).
			ref := digested(g)
			v := get(k)
			if v == "" {
				if !reflect.DeepEqual(g, lease.FixedWindowState{}) {
					t.Fatalf("%+v step %d: no key in Redis, the Go state %s", p, step, show(g))
				}
				continue
			}
			stored := decodeFixedWindow(t, v)
			if v != stored0 && show(stored) != show(ref) {
				t.Fatalf("%+v step %d at %v: stored state\n  redis: %s\n  go:    %s", p, step, now.Format(time.RFC3339Nano), show(stored), show(ref))
			}
			if a, b := show(rolled(stored, t0, pu)), show(rolled(ref, t0, pu)); a != b {
				t.Fatalf("%+v step %d at %v: stored state, rolled to now\n  redis: %s\n  go:    %s", p, step, now.Format(time.RFC3339Nano), a, b)
			}
			pttl, err := strconv.ParseInt(srv.Do("PTTL", k), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			if e := (goExp - t0) / 1000; pttl < e-1 || pttl > e+3 {
				t.Fatalf("%+v step %d: key %s expires in %dms, want %dms (within the rounding to ms)", p, step, show(stored), pttl, e)
			}
		}
	}
	t.Logf("%d calls with equal replies and states (%d writes equal to the Go state): %d lent shares ahead (%d capped by other holders' shares), %d in a window shares were lent into, %d returns (%d of a share lent into a window the key had not started), %d asking none after a share; %d times the key had expired; %d period changes",
		calls, exact, shareCalls, capped, rolledIn, returns, returnsIn, noneAfter, expired, periods)
	if exact < 2000 || shareCalls < 1000 || capped < 100 || rolledIn < 500 || returns < 500 || returnsIn < 100 || noneAfter < 100 || expired < 100 {
		t.Errorf("the random sequences exercised too few cases of each kind")
	}
}

// covers reports whether the window of t is later than s's and a share of
// s is lent into it.
func covers(s lease.FixedWindowState, t, pu int64) bool {
	ws := t - t%pu
	if s.Start >= ws {
		return false
	}
	for _, l := range s.Loans {
		if l.Share > 0 && l.Expires >= ws+pu {
			return true
		}
	}
	return false
}

// rolled is s as a call at t sees it (FixedWindowState's roll, restated):
// a later window starts with the shares lent into it.
func rolled(s lease.FixedWindowState, t, pu int64) lease.FixedWindowState {
	ws := t - t%pu
	if s.Start >= ws {
		return s
	}
	out := lease.FixedWindowState{Start: ws}
	for _, l := range s.Loans {
		if l.Share > 0 && l.Expires >= ws+pu {
			l.Lent = l.Share
			out.Count += l.Share
			out.Loans = append(out.Loans, l)
		}
	}
	return out
}

// expiryOf is when the key of state s stops mattering (unix µs), for
// windows of pu: two windows after its start, or a window after the last
// share's end.
func expiryOf(s lease.FixedWindowState, pu int64) int64 {
	e := s.Start + 2*pu
	for _, l := range s.Loans {
		if l.Share > 0 {
			e = max(e, l.Expires+pu)
		}
	}
	return e
}

// digested is s with its holders as the Store names them (holderOf).
func digested(s lease.FixedWindowState) lease.FixedWindowState {
	out := s
	out.Loans = slices.Clone(s.Loans)
	for i := range out.Loans {
		out.Loans[i].Holder = holderOf(out.Loans[i].Holder)
	}
	return out
}

// show prints a fixed_window state, its loans in order.
func show(s lease.FixedWindowState) string {
	out := fmt.Sprintf("start %d count %d", s.Start, s.Count)
	for _, l := range s.Loans {
		out += fmt.Sprintf(" [%x lent %d share %d end %d]", l.Holder, l.Lent, l.Share, l.Expires)
	}
	return out
}

// decodeFixedWindow reads a fixed_window key's value (see leased.lua): a
// header byte (bits 0-1: the count's width), the window start (7 bytes),
// the count, then per loan a kind byte (bits 0-1: lent's width; 128: a
// share, bits 2-3 its width, 4-5 its end's), the holder (8 bytes), lent,
// and with a share the share and its end as µs after the window start.
// Holders stay digests.
func decodeFixedWindow(t *testing.T, v string) lease.FixedWindowState {
	t.Helper()
	b := []byte(v)
	pos := 0
	num := func(code byte) int64 {
		w := [4]int{1, 2, 4, 7}[code%4]
		if pos+w > len(b) {
			t.Fatalf("state %x: truncated at %d", b, pos)
		}
		var x [8]byte
		copy(x[:], b[pos:pos+w])
		pos += w
		return int64(binary.LittleEndian.Uint64(x[:]))
	}
	if len(b) < 1 {
		t.Fatalf("empty state")
	}
	h := b[0]
	pos = 1
	var s lease.FixedWindowState
	s.Start = num(3)
	s.Count = num(h)
	for pos < len(b) {
		kind := b[pos]
		if kind&64 == 0 || pos+9 > len(b) {
			t.Fatalf("state %x: loan at %d without a holder", b, pos)
		}
		l := lease.Loan{Holder: string(b[pos+1 : pos+9])}
		pos += 9
		l.Lent = num(kind)
		if kind&128 != 0 {
			l.Share = num(kind / 4)
			l.Expires = s.Start + num(kind/16)
		}
		s.Loans = append(s.Loans, l)
	}
	return s
}
