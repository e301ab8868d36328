package lease

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

// refillView is the Manager's view of a kindRefill algorithm's answers
// (algoCode): the Store's Reset said when the bucket would be full, and
// it refills at Limit per Period until then.
type refillView struct{}

// expiry is half of ttl after now: the Store lends the tokens until ttl
// after it received the call.
func (refillView) expiry(_ Policy, now int64, _ Grant, ttl time.Duration) int64 {
	return now + int64(ttl/2)
}

// level is capacity − (time left to resetAt) × rate, rounded down.
func (refillView) level(b *bucket, now, resetAt int64) int64 {
	capacity := b.pol.Capacity()
	// In float64: the product can overflow int64. The epsilon keeps
	// float error from costing a whole token.
	missing := math.Ceil(float64(resetAt-now)*float64(b.pol.Limit)/float64(b.pol.Period) - 1e-9)
	if missing >= float64(capacity) {
		return 0
	}
	return capacity - int64(max(missing, 0))
}

// coverAt is the projection of level: full at resetAt, need tokens
// (C − need) × period/limit before; within the rounding of Reset.
func (refillView) coverAt(b *bucket, need, resetAt int64) (int64, int64) {
	p := b.pol
	back := float64(p.Capacity()-need) * float64(p.Period) / float64(p.Limit)
	return resetAt - int64(math.Min(back, float64(resetAt))), int64(time.Millisecond)
}

// projected is level, and the capacity from resetAt.
func (v refillView) projected(b *bucket, now, resetAt int64) int64 {
	if now >= resetAt {
		return b.pol.Capacity()
	}
	return v.level(b, now, resetAt)
}

// windowView is the part of the Manager's view that the kindWindow
// algorithms share: the Remaining of the last answer until its Reset (the
// end of the window, or of the next one while that window's count still
// weighs), then a whole capacity.
type windowView struct{}

func (windowView) level(b *bucket, _, _ int64) int64 {
	return min(max(b.remaining.Load(), 0), b.pol.Capacity())
}

func (v windowView) projected(b *bucket, now, resetAt int64) int64 {
	if now >= resetAt {
		return b.pol.Capacity()
	}
	return v.level(b, now, resetAt)
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
