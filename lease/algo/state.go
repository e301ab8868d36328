package algo

import (
	"math"
	"time"
)

// State is one key's state in a Store (Algorithm.NewState), which the
// Store's calls on the key change through the algorithm's math: a
// LeasedState, a LogState or a SlotState. Not safe for concurrent use.
type State interface {
	// Expiry is when the state equals no state (unix µs), as the Redis
	// store's PEXPIRE.
	Expiry(Policy) int64
}

// LeasedState is the state of a leased algorithm: Lease expects a valid
// policy and 0 ≤ need ≤ want (see CheckLease), Return 0 ≤ n.
type LeasedState interface {
	State
	Lease(p Policy, now time.Time, want, need int64, to Lessee) Grant
	Return(p Policy, now time.Time, n int64, holder string)
	// Refund gives back n tokens that calls without a Lessee ID were
	// granted (the MemoryStore's Refund).
	Refund(p Policy, now time.Time, n int64)

	// Fields is the state's numbers and Lent its loans, and SetFields
	// makes the state the one of numbers f and loans ls (a zero f and no
	// loans: no state): how a Store that keeps each key in a record of a
	// fixed size (the MemoryStore) holds it.
	Fields() Fields
	Lent() Loans
	SetFields(f Fields, ls Loans)
}

// Fields is a leased state's numbers without its loans: three words and
// a call's id.
type Fields struct {
	Num  [3]int64
	Call uint32
}

// LogState is the state of an algorithm checked by Store.Log
// (Algorithm.Logged): Check expects a valid policy and valid arguments
// (see CheckLog).
type LogState interface {
	State
	Check(p Policy, now time.Time, hits int64) Result
}

// SlotState is the state of an algorithm whose slots are acquired
// (Algorithm.Acquired): each method expects a valid policy and valid
// arguments (see CheckAcquire, CheckRelease).
type SlotState interface {
	State
	Acquire(p Policy, now time.Time, id string, hits int64) Result
	// Release frees id's slot; held reports whether id held one.
	Release(now time.Time, id string) (held bool)
}

// The leased states as Fields: Num holds their numbers, Call the Call of
// their lastCall.

func (s *TokenBucketState) Fields() Fields {
	return Fields{Num: [3]int64{int64(math.Float64bits(s.Tokens)), s.Updated, s.Last.Grant}, Call: s.Last.Call}
}

func (s *TokenBucketState) SetFields(f Fields, ls Loans) {
	*s = TokenBucketState{Tokens: math.Float64frombits(uint64(f.Num[0])), Updated: f.Num[1], Loans: ls, Last: lastCall{Call: f.Call, Grant: f.Num[2]}}
}

func (s *TokenBucketState) Lent() Loans { return s.Loans }

func (s *GCRAState) Fields() Fields {
	return Fields{Num: [3]int64{s.TAT, 0, s.Last.Grant}, Call: s.Last.Call}
}

func (s *GCRAState) SetFields(f Fields, ls Loans) {
	*s = GCRAState{TAT: f.Num[0], Loans: ls, Last: lastCall{Call: f.Call, Grant: f.Num[2]}}
}

func (s *GCRAState) Lent() Loans { return s.Loans }

func (s *FixedWindowState) Fields() Fields { return Fields{Num: [3]int64{s.Start, s.Count, 0}} }

func (s *FixedWindowState) SetFields(f Fields, ls Loans) {
	*s = FixedWindowState{Start: f.Num[0], Count: f.Num[1], Loans: ls}
}

func (s *FixedWindowState) Lent() Loans { return s.Loans }

func (s *SlidingWindowState) Fields() Fields { return Fields{Num: [3]int64{s.Start, s.Prev, s.Cur}} }

func (s *SlidingWindowState) SetFields(f Fields, ls Loans) {
	*s = SlidingWindowState{Start: f.Num[0], Prev: f.Num[1], Cur: f.Num[2], Loans: ls}
}

func (s *SlidingWindowState) Lent() Loans { return s.Loans }

// OnBake has the state tell f of each ended loan a call bakes into its
// stored level (see "Lent tokens" in the lease package doc): the loan
// ended at end (unix µs), with lent tokens lent at its time. nil: no one
// is told. The MemoryStore's OnBake, for tests.
func (s *TokenBucketState) OnBake(f func(end, lent int64)) { s.bake = f }

// OnBake: see TokenBucketState.OnBake.
func (s *GCRAState) OnBake(f func(end, lent int64)) { s.bake = f }
