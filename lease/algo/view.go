package algo

import "time"

// The holder's view of a leased algorithm's answers: what the lease
// Manager knows of a key's state in the Store between two lease calls, as
// pure functions of the policy, the Store's last answer and now (each
// algorithm's code in its row: view methods of its code type). Times are
// Unix nanoseconds on the holder's clock.

// Answer is the Store's last answer to a holder's lease call of a key, as
// the holder keeps it: Remaining, when its Reset falls (ResetAt: when the
// answer came plus Reset; 0: no answer yet), and when the answer came
// (At; read only by an algorithm whose view projects from it, see
// Algorithm.ViewsAnswerTime).
type Answer struct {
	Remaining, ResetAt, At int64
}

// ViewsAnswerTime reports whether the view of the algorithm's answers
// projects from when the last answer came (Answer.At: sliding_window's,
// whose previous window's weight falls at a rate from then), so that a
// holder must keep that time; the others' read only Remaining and
// ResetAt.
func (a Algorithm) ViewsAnswerTime() bool { return a.Leased() && algorithms[a].code.answerTimed() }

// LeaseExpiry is until when the tokens of grant g to a lease call sent at
// now (before the Store call, so at or before the Store's own now) may be
// spent on the fast path: for a window, the end of the grant's window,
// made early by 1ms so that the rounding up of Reset never lets a token
// into the next window; for token_bucket and gcra half of ttl (the
// holder's lease TTL) after now, the Store lending them until ttl after it
// received the call. p's algorithm is leased.
func (p Policy) LeaseExpiry(now int64, g Grant, ttl time.Duration) int64 {
	return algorithms[p.Algorithm].code.expiry(p, now, g, ttl)
}

// Level is the Store's whole tokens of the key at now by its last answer
// a: token_bucket and gcra refill, so capacity − (time left to ResetAt) ×
// rate (rounded down); a window's is the answer's Remaining until its
// Reset (the end of the window, or of the next one while that window's
// count still weighs). From ResetAt on, a whole capacity. p's algorithm
// is leased and a.ResetAt > 0.
func (p Policy) Level(a Answer, now int64) int64 {
	if now >= a.ResetAt {
		return p.Capacity()
	}
	return algorithms[p.Algorithm].code.level(p, a, now)
}

// CoverAt is when, by the last answer a, the key will have need tokens
// (need ≤ capacity; 0: now): the projection of Level for token_bucket and
// gcra; for fixed_window the window's end if the window has too few; for
// sliding_window the rate since the answer (the previous window's weight
// falls no faster than limit per period, so this is never later than the
// truth). slack is how much later than the Store's own time at may be: the
// Store rounds Reset up to a whole millisecond (0 for sliding_window's
// rate). p's algorithm is leased and a.ResetAt > 0.
func (p Policy) CoverAt(a Answer, need int64) (at, slack int64) {
	return algorithms[p.Algorithm].code.coverAt(p, a, need)
}

// Projected is the Store's whole tokens of the key at now by the last
// answer a, as CoverAt projects them: Level, but for sliding_window
// Remaining plus the rate since the answer (at most the capacity). p's
// algorithm is leased and a.ResetAt > 0.
func (p Policy) Projected(a Answer, now int64) int64 {
	return algorithms[p.Algorithm].code.projected(p, a, now)
}

// ResetPastWindow is, for a windowed algorithm (Algorithm.Windowed), how
// far a grant's Reset runs past the end of the window its tokens were
// granted in: 0 for fixed_window, whose Reset is that end; one Period for
// sliding_window, whose Reset after a grant is the end of the next window
// (the grant weighs there). 0 for the others.
func (p Policy) ResetPastWindow() time.Duration {
	if !p.Algorithm.Windowed() {
		return 0
	}
	return algorithms[p.Algorithm].code.resetPast(p)
}
