package algo

import (
	"fmt"
	"math"
	"time"
)

// The code the algorithms of a kind share (see the algorithm table).

// validateRefill checks the bound of every kindRefill policy.
func validateRefill(p Policy) error {
	if float64(p.Capacity())*float64(p.Period.Microseconds())/float64(p.Limit) > MaxRefill {
		// The time to refill a whole burst: gcra's TAT runs up to that
		// far ahead of now and must stay an exact integer in float64
		// (Lua) and int64, with no cap that would under-charge.
		return &FieldError{Field: "burst", Msg: fmt.Sprintf("burst × period / limit (the time to refill a whole burst) must be at most 2^52µs (about 142 years), got %.3g years",
			float64(p.Capacity())*p.Period.Hours()/float64(p.Limit)/(365*24))}
	}
	return nil
}

// refillView is the holder's view of a kindRefill algorithm's answers
// (code): the Store's Reset said when the bucket would be full, and it
// refills at Limit per Period until then.
type refillView struct{}

// expiry is half of ttl after now: the Store lends the tokens until ttl
// after it received the call.
func (refillView) expiry(_ Policy, now int64, _ Grant, ttl time.Duration) int64 {
	return now + int64(ttl/2)
}

// level is capacity − (time left to ResetAt) × rate, rounded down.
func (refillView) level(p Policy, a Answer, now int64) int64 {
	capacity := p.Capacity()
	// In float64: the product can overflow int64. The epsilon keeps
	// float error from costing a whole token.
	missing := math.Ceil(float64(a.ResetAt-now)*float64(p.Limit)/float64(p.Period) - 1e-9)
	if missing >= float64(capacity) {
		return 0
	}
	return capacity - int64(max(missing, 0))
}

// coverAt is the projection of level: full at ResetAt, need tokens
// (C − need) × period/limit before; within the rounding of Reset.
func (refillView) coverAt(p Policy, a Answer, need int64) (int64, int64) {
	back := float64(p.Capacity()-need) * float64(p.Period) / float64(p.Limit)
	return a.ResetAt - int64(math.Min(back, float64(a.ResetAt))), int64(time.Millisecond)
}

// projected is level, and the capacity from ResetAt.
func (v refillView) projected(p Policy, a Answer, now int64) int64 {
	if now >= a.ResetAt {
		return p.Capacity()
	}
	return v.level(p, a, now)
}

func (refillView) answerTimed() bool { return false }

// resetPast: a refilling bucket has no windows.
func (refillView) resetPast(Policy) time.Duration { return 0 }

// windowView is the part of the holder's view that the kindWindow
// algorithms share: the Remaining of the last answer until its Reset (the
// end of the window, or of the next one while that window's count still
// weighs), then a whole capacity.
type windowView struct{}

func (windowView) level(p Policy, a Answer, _ int64) int64 {
	return min(max(a.Remaining, 0), p.Capacity())
}

func (v windowView) projected(p Policy, a Answer, now int64) int64 {
	if now >= a.ResetAt {
		return p.Capacity()
	}
	return v.level(p, a, now)
}

func (windowView) answerTimed() bool { return false }

// windowExpiry is the expiry of a window's grant g asked for at now: the
// end of the window its tokens were granted in (its Reset less past,
// resetPast), made early by 1ms so that the rounding up of Reset never
// lets a token into the next window.
func windowExpiry(now int64, g Grant, past time.Duration) int64 {
	return now + int64(g.Reset) - int64(past) - int64(time.Millisecond)
}

// windowStart is the start of the window of length pu containing t:
// t - t mod pu (windows are aligned on multiples of Period since the epoch).
func windowStart(t, pu int64) int64 {
	m := t % pu
	if m < 0 {
		m += pu
	}
	return t - m
}

// addNanos is t + d for a time t in Unix ns, saturating below
// MaxInt64 (a Store's Wait or Reset can exceed what int64 nanoseconds
// hold), as the lease Manager's times do.
func addNanos(t int64, d time.Duration) int64 {
	if int64(d) >= math.MaxInt64-1-t {
		return math.MaxInt64 - 1
	}
	return t + int64(d)
}
