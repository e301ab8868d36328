package algo

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestViews checks the holder's view of every leased algorithm's answers
// on random policies, answers and times: an algorithm whose view does not
// read when the answer came (ViewsAnswerTime false) answers the same
// whatever Answer.At; the Store's level by the answer stays within
// [0, capacity], is the capacity from the answer's Reset on, and until
// then never exceeds the projection; a window's tokens are spendable until the end
// of the window they were granted in (the grant's Reset less
// ResetPastWindow), 1ms early, a refilling bucket's for half the TTL.
func TestViews(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 9))
	now := int64(1_780_000_000) * int64(time.Second)
	for _, a := range Only(Algorithm.Leased) {
		for range 2000 {
			p := Policy{Algorithm: a, Limit: 1 + r.Int64N(1000), Period: time.Duration(1+r.Int64N(3_600_000)) * time.Millisecond}
			if a.HasBurst() && r.IntN(2) == 0 {
				p.Burst = 1 + r.Int64N(2000)
			}
			c := p.Capacity()
			ans := Answer{Remaining: r.Int64N(c+2) - 1, ResetAt: now + r.Int64N(int64(2*p.Period)+1), At: now - r.Int64N(int64(p.Period))}
			at := now + r.Int64N(int64(3*p.Period)) - int64(p.Period)
			need := 1 + r.Int64N(c)
			level, proj := p.Level(ans, at), p.Projected(ans, at)
			if level < 0 || level > c || proj < 0 || proj > c || at < ans.ResetAt && proj < level || at >= ans.ResetAt && level != c {
				t.Fatalf("%+v %+v at %d: level %d, projected %d (capacity %d)", p, ans, at, level, proj, c)
			}
			if !a.ViewsAnswerTime() {
				other := ans
				other.At = ans.At - 1 - r.Int64N(int64(time.Hour))
				c1, s1 := p.CoverAt(ans, need)
				c2, s2 := p.CoverAt(other, need)
				if p.Level(other, at) != level || p.Projected(other, at) != proj || c1 != c2 || s1 != s2 {
					t.Fatalf("%v's view reads Answer.At, but ViewsAnswerTime is false", a)
				}
			}
			g := Grant{Granted: 1, Reset: time.Duration(1+r.Int64N(int64(2*p.Period)/1e6)) * time.Millisecond}
			ttl := time.Duration(1+r.Int64N(600)) * time.Second
			want := now + int64(ttl/2)
			if a.Windowed() {
				want = now + int64(g.Reset) - int64(p.ResetPastWindow()) - int64(time.Millisecond)
			}
			if got := p.LeaseExpiry(now, g, ttl); got != want {
				t.Fatalf("%+v: LeaseExpiry(%+v, %v) = %d, want %d", p, g, ttl, got-now, want-now)
			}
		}
	}
}
