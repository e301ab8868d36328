package algo

import "time"

// slidingLog is sliding_log's code in the algorithm table: kindLog, whose
// Store state is a SlidingLogState.
type slidingLog struct{ exactCode }

func (slidingLog) validate(Policy) error { return nil }
func (slidingLog) newState() State       { return new(SlidingLogState) }

// The pure math of an exact algorithm (see algo.go): each method expects a
// valid policy and valid arguments (see CheckLog, CheckAcquire).

// LogStamp is a run of N requests recorded at At (unix µs). The Redis store
// records N distinct members scored At; the memory store keeps one run.
type LogStamp struct {
	At int64
	N  int64
}

// SlidingLogState is the Store state of one sliding_log key: the stamps of
// the admitted requests, oldest first. The zero value is a key without
// state. Not safe for concurrent use.
type SlidingLogState struct {
	Stamps []LogStamp
}

// trim removes the stamps that left the window at t: those with
// At ≤ t - P (a stamp lives exactly one Period; in Redis,
// ZREMRANGEBYSCORE key -inf t-P).
func (s *SlidingLogState) trim(t, pu int64) {
	i := 0
	for i < len(s.Stamps) && s.Stamps[i].At <= t-pu {
		i++
	}
	if i > 0 {
		n := copy(s.Stamps, s.Stamps[i:])
		clear(s.Stamps[n:])
		s.Stamps = s.Stamps[:n]
	}
}

func (s *SlidingLogState) count() int64 {
	var n int64
	for _, st := range s.Stamps {
		n += st.N
	}
	return n
}

// Check runs one sliding_log check of hits at now (see the lease package doc).
// Choices the doc leaves open:
//   - hits > Limit can never be admitted: denied, RetryAfter one Period.
//   - On a count denial, RetryAfter is the time until the k-th oldest
//     stamp leaves the window (k = count + hits - Limit), and at least the
//     min_interval wait when MinInterval > 0: the longer of the two, so a
//     client that waits it is not denied again by min_interval.
//   - hits = 0 runs the same checks (so a peek can be denied by
//     min_interval, or by a count above a lowered limit) and records
//     nothing.
//   - Remaining = max(0, Limit - count after the check).
func (s *SlidingLogState) Check(p Policy, now time.Time, hits int64) Result {
	t, pu := unixMicros(now), periodMicros(p)
	mi := p.MinInterval.Microseconds()
	s.trim(t, pu)
	count := s.count()
	var newest int64
	if len(s.Stamps) > 0 {
		newest = s.Stamps[len(s.Stamps)-1].At
	}
	var r Result
	switch {
	case hits == 0:
		r.Allowed = true // a peek is never denied
	case hits > p.Limit:
		r.RetryAfter = ceilMillis(float64(pu))
	case count+hits > p.Limit:
		k, at := count+hits-p.Limit, int64(0)
		for _, st := range s.Stamps {
			at = st.At
			if k -= st.N; k <= 0 {
				break
			}
		}
		wait := at + pu - t
		if mi > 0 && count > 0 {
			wait = max(wait, newest+mi-t)
		}
		r.RetryAfter = ceilMillis(float64(wait))
	case mi > 0 && count > 0 && t-newest < mi:
		r.RetryAfter = ceilMillis(float64(newest + mi - t))
	default:
		r.Allowed = true
		if hits > 0 {
			// Stored times never move back: a clock that went back
			// records at the newest stamp.
			at := max(t, newest)
			if n := len(s.Stamps); n > 0 && s.Stamps[n-1].At == at {
				s.Stamps[n-1].N += hits
			} else {
				s.Stamps = append(s.Stamps, LogStamp{At: at, N: hits})
			}
			count += hits
			newest = at
		}
	}
	r.Remaining = max(0, p.Limit-count)
	if count > 0 {
		r.Reset = ceilMillis(float64(newest + pu - t))
	}
	return r
}

// Expiry is when the newest stamp leaves the window.
func (s *SlidingLogState) Expiry(p Policy) int64 {
	if len(s.Stamps) == 0 {
		return 0
	}
	return s.Stamps[len(s.Stamps)-1].At + periodMicros(p)
}
