package lua

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lease"
	"github.com/sluicehq/sluice/lua/redistest"
)

// TestFastPathMatchesGeneral drives every leased key through the harness
// of TestGoLuaParity (parity_test.go): the scripts as they run (fast paths
// on), the same scripts with their fast paths off (every call on the
// general path), the Go definition and the MemoryStore, with the same
// random calls on one frozen Redis clock, and requires the same replies,
// the same stored bytes and the same expiry after every call: a fast path
// must answer and write exactly what the general path and the Go
// definition do for every state it accepts. Its calls aim at the fast
// paths' states. It also requires that the fast paths' states
// came up often: keys without state, keys whose only loan is the
// caller's, and a holder renewing its key (its loan first, only ended
// loans after it) reporting tokens spent, with and without ended loans;
// and for fixed_window, the caller's loan with a share ahead, in its
// window and in a later one the share covers.
func TestFastPathMatchesGeneral(t *testing.T) {
	start := time.Date(2026, 6, 1, 12, 0, 0, 123456000, time.UTC)
	srv, clock := redistest.StartWithClock(t, start)
	fast := newTestStore(t, srv.Addr)
	// The general paths' store: MaxBatch 1, so that every call runs the
	// store's own scripts (a batch would run the batch script, built with
	// the fast paths on); its keys: the same counters under another prefix.
	hp := newParity(t, fast, fast, generalStore(t, srv.Addr), clock)
	holders := []string{"", "m-a", "m-a", "m-a", "m-b", "m-c"}
	var calls, empty, ownOnly, spent, spentEnded, returned, returnedEnded, other, withShare, shareRolled, crowded int
	all := byAlgorithm(t, func(t *testing.T, ai int, a lease.Algorithm) {
		if !a.Leased() {
			return
		}
		hp.t = t
		r := rand.New(rand.NewPCG(3, 5+uint64(ai)))
		pick := func(vals ...int64) int64 { return vals[r.IntN(len(vals))] }
		keys := 50
		if a.Refills() {
			keys = 150
		}
		for i := 0; i < keys; i++ {
			// Two thirds of a refilling algorithm's keys: one holder
			// renewing its key, mostly reporting tokens spent (the steady
			// state of a key one node checks), now and then another
			// caller; token_bucket or gcra, whose loans end.
			renewing := a.Refills() && r.IntN(3) != 0
			// Most fixed_window keys: one holder leasing shares ahead, of
			// windows short enough to roll.
			sharing := a.LeasesAhead() && r.IntN(3) != 0
			p := lease.Policy{Algorithm: a, Limit: pick(1, 3, 10, 100, 1000, 1+r.Int64N(1_000_000), lease.MaxLimit), Period: time.Duration(pick(1, 1000, 60_000, 3_600_000, 1+r.Int64N(365*86_400_000))) * time.Millisecond}
			if sharing {
				p.Period = time.Duration(pick(1, 10, 1000, 1000, 60_000)) * time.Millisecond
			}
			if a.HasBurst() {
				p.Burst = pick(0, 0, 1, p.Limit, 1+r.Int64N(lease.MaxLimit))
				if p.Validate() != nil {
					p.Burst = 0 // a burst that would take too long to refill
				}
			}
			if err := p.Validate(); err != nil {
				continue
			}
			capacity := p.Capacity()
			key := uniqueKey(t)
			k := &goKey{p: p}
			lent := map[string]int64{}      // what each holder was last told it is lent
			lastCall := map[string]uint32{} // each holder's last Lessee.Call
			two := len(holders)
			if r.IntN(2) == 0 {
				two = 4 // most keys: anonymous callers and one holder
			}
			for step := 0; step < 25; step++ {
				switch c := r.IntN(5); {
				case c == 0: // same instant
				case renewing && r.IntN(4) != 0: // ended loans still capping the level
					clock.Advance(time.Duration(r.Int64N(int64(p.Period)/50 + 1)))
				case c == 1:
					clock.Advance(time.Duration(r.Int64N(int64(p.Period)/8 + 1)))
				case c == 2:
					clock.Advance(time.Duration(r.Int64N(int64(2 * p.Period))))
				default:
					clock.Advance(time.Duration(r.Int64N(int64(10 * time.Millisecond))))
				}
				h := holders[r.IntN(two)]
				if (renewing || sharing) && r.IntN(10) != 0 {
					h = "m-a"
				}
				fv, _ := stored(t, fast, key, a)
				first, ended := loansOf(fv, a, holderOf(h))
				if first && a.LeasesAhead() {
					if start, end, ok := shareOf(fv); ok {
						withShare++
						if now := clock.Now().UnixMicro(); start < now-now%p.Period.Microseconds() && end >= now-now%p.Period.Microseconds()+p.Period.Microseconds() {
							shareRolled++
						}
					}
				}
				switch {
				case fv == "":
					empty++
				case !first:
					other++
				}
				if h != "" && r.IntN(6) == 0 && (!renewing || r.IntN(2) == 0) {
					n := min(pick(0, 1, lent[h], lent[h]+1, r.Int64N(capacity)+1), lease.MaxHits)
					if first {
						returned++
						if ended > 0 {
							returnedEnded++
						}
					}
					hp.ret(key, k, n, h)
				} else {
					need := min(pick(0, 1, 1, 2, capacity/2, capacity, capacity+1, r.Int64N(capacity)+1), lease.MaxHits)
					if renewing && r.IntN(4) != 0 {
						need = min(pick(1, 1, 2, r.Int64N(capacity/8+1)+1), lease.MaxHits) // mostly granted
					}
					want := min(lease.MaxHits, need+pick(0, 0, 1, 10, capacity, r.Int64N(capacity)+1))
					to := lease.Lessee{ID: h}
					if h != "" {
						// Mostly the holder holds all it was lent, sometimes less
						// (spent tokens); a renewing holder mostly less.
						to.Held = min(pick(lent[h], lent[h], lent[h], lent[h]+3, 0, r.Int64N(capacity)+1), lease.MaxHits)
						if renewing && r.IntN(4) != 0 {
							to.Held = pick(lent[h]/2, max(0, lent[h]-1), r.Int64N(lent[h]+1))
						}
						to.SpentBefore = min(pick(0, 0, 0, 1, lent[h], r.Int64N(capacity)+1), lease.MaxHits)
						to.TTL = time.Duration(pick(1, 100, 60_000, 300_000, 3_600_000)) * time.Millisecond
						to.Idle = time.Duration(pick(0, 0, 1000, r.Int64N(int64(p.Period)/1000+1))) * time.Microsecond
						to.MaxHolders = int(pick(0, 0, 0, 1, 2))
						to.Call = uint32(r.Uint64())
						if r.IntN(8) == 0 {
							to.Call = 0
						}
						if r.IntN(5) == 0 {
							to.Unanswered = uint32(pick(0, 1, 2, 3))
						}
						if c := lastCall[h]; c != 0 && r.IntN(4) == 0 {
							to.Unanswered = c // its previous call, unanswered
						}
						if a.LeasesAhead() && (!sharing || r.IntN(5) != 0) {
							maxW := min(int64(lease.MaxAheadWindows), int64(lease.MaxLeaseTTL/p.Period))
							to.AheadWindows = min(pick(0, 1, 2, 3, 3, maxW), maxW)
							to.AheadTokens = min(pick(0, 1, 3, capacity/4+1, capacity, r.Int64N(capacity)+1), lease.MaxHits)
							if sharing { // mostly asking some
								to.AheadWindows = min(pick(1, 2, 3, 3, maxW), maxW)
								to.AheadTokens = min(pick(1, 3, capacity/4+1, capacity, r.Int64N(capacity)+1), lease.MaxHits)
							}
						}
					}
					switch {
					case !first:
					case to.Held < lent[h]:
						spent++
						if ended > 0 {
							spentEnded++
						}
					case ended == 0:
						ownOnly++
					default:
						other++
					}
					g1 := hp.lease(key, k, want, need, to)
					if g1.Crowded {
						crowded++
					}
					if h != "" {
						lent[h], lastCall[h] = g1.Lent, to.Call
					}
				}
				calls++
			}
		}
	})
	if !all {
		return
	}
	t.Logf("%d calls with identical replies, bytes and expiry on the fast and the general paths and in the Go definition; before them: %d keys without state, %d whose only loan was the caller's, %d leases reporting spent tokens and %d returns with the caller's loan first and only ended loans after it (%d and %d of them with ended loans), %d others; %d fixed_window calls on the caller's loan with a share ahead, %d of them in a later window it covers; %d crowded out; %d naming the key's last call unanswered", calls, empty, ownOnly, spent, returned, spentEnded, returnedEnded, other, withShare, shareRolled, crowded, hp.backs)
	if empty < 500 || ownOnly < 700 || spent < 800 || spentEnded < 300 || returned < 200 || returnedEnded < 40 || other < 500 || withShare < 300 || shareRolled < 70 || crowded < 100 || hp.backs < 100 {
		t.Errorf("too few calls in each kind of state to compare the paths")
	}
}

// loansOf reports whether v (a key's state of algorithm a, see
// leased.lua) has a loan, holder id's first, followed by ended loans
// only (first), and how many of those (ended).
func loansOf(v string, a lease.Algorithm, id string) (first bool, ended int) {
	if id == "" || v == "" {
		return false, 0
	}
	b := []byte(v)
	width := func(code byte) int { return [4]int{1, 2, 4, 7}[code%4] }
	var pos int
	switch a {
	case lease.TokenBucket, lease.GCRA:
		pos = 1 + 7
		if a == lease.TokenBucket {
			pos += 8
		}
		if b[0]%2 == 1 {
			pos += 4 + width(b[0]/2)
		}
	case lease.FixedWindow:
		pos = 1 + 7 + width(b[0])
	default:
		pos = 1 + 7 + width(b[0]) + width(b[0]/4)
	}
	i := 0
	for ; pos < len(b); i++ {
		kind := b[pos]
		n := 1 + width(kind)
		if kind >= 64 {
			if i > 0 || string(b[pos+1:pos+9]) != id {
				return false, 0
			}
			n += 8
		} else if i == 0 {
			return false, 0
		} else {
			ended++
		}
		if a.Refills() || kind >= 128 {
			n += width(kind / 4)
			if kind >= 128 {
				n += width(kind / 16)
			}
		}
		pos += n
	}
	return i > 0 && pos == len(b), ended
}

// shareOf reads a fixed_window key's first loan (see leased.lua): ok if it
// has a share ahead, with the key's window start and the share's end.
func shareOf(v string) (start, end int64, ok bool) {
	b := []byte(v)
	width := func(code byte) int { return [4]int{1, 2, 4, 7}[code%4] }
	le := func(p []byte) int64 {
		var x [8]byte
		copy(x[:], p)
		return int64(binary.LittleEndian.Uint64(x[:]))
	}
	start = le(b[1:8])
	pos := 1 + 7 + width(b[0])
	if pos >= len(b) || b[pos] < 128 {
		return 0, 0, false
	}
	kind := b[pos]
	pos += 9 + width(kind) + width(kind/4)
	return start, start + le(b[pos:pos+width(kind/16)]), true
}
