package algo

import "time"

// concurrency is concurrency's code in the algorithm table: kindSlots,
// whose Store state is a ConcurrencyState.
type concurrency struct{ exactCode }

func (concurrency) validate(Policy) error { return nil }
func (concurrency) newState() State       { return new(ConcurrencyState) }

// The pure math of an exact algorithm (see algo.go): each method expects a
// valid policy and valid arguments (see CheckLog, CheckAcquire).

// ConcurrencyState is the Store state of one concurrency key: the held ids
// and their expiry (unix µs). The zero value is a key without state. Not
// safe for concurrent use.
type ConcurrencyState struct {
	Held map[string]int64
}

// reap removes the ids whose expiry is not after t (in Redis,
// ZREMRANGEBYSCORE key -inf t).
func (s *ConcurrencyState) reap(t int64) {
	for id, exp := range s.Held {
		if exp <= t {
			delete(s.Held, id)
		}
	}
}

// Acquire runs one acquire of id at now (hits 1), or a peek (hits 0).
// Choices the doc leaves open:
//   - Acquiring an id that is already held renews its expiry to now +
//     Period and is allowed even at the limit (a retried acquire is not
//     denied by its own slot).
//   - A peek is allowed if an acquire would be: fewer than Limit held, or
//     id already held.
//   - RetryAfter on denial is the time until the earliest held id expires;
//     Reset is the time until the latest one expires (0 when none held).
func (s *ConcurrencyState) Acquire(p Policy, now time.Time, id string, hits int64) Result {
	t := unixMicros(now)
	s.reap(t)
	_, mine := s.Held[id]
	var r Result
	switch {
	case mine || int64(len(s.Held)) < p.Limit:
		r.Allowed = true
		if hits > 0 {
			if s.Held == nil {
				s.Held = make(map[string]int64)
			}
			s.Held[id] = t + periodMicros(p)
		}
	default:
		earliest := int64(-1)
		for _, exp := range s.Held {
			if earliest < 0 || exp < earliest {
				earliest = exp
			}
		}
		r.RetryAfter = ceilMillis(float64(earliest - t))
	}
	r.Remaining = max(0, p.Limit-int64(len(s.Held)))
	r.Reset = ceilMillis(float64(s.Expiry(p) - t))
	return r
}

// Release frees id's slot and reaps the expired ones; held reports
// whether id held a slot (a Store answers ErrNoSlot when it did not).
func (s *ConcurrencyState) Release(now time.Time, id string) (held bool) {
	_, held = s.Held[id]
	delete(s.Held, id)
	s.reap(unixMicros(now))
	return held
}

// Expiry is when the last held id expires.
func (s *ConcurrencyState) Expiry(Policy) int64 {
	var last int64
	for _, exp := range s.Held {
		last = max(last, exp)
	}
	return last
}
