// Package algo defines each of Sluice's rate-limit algorithms once, in Go:
// the algorithm table (which algorithms there are, and for each its name,
// how it is checked, which policy fields apply and its code), the policies
// and the arguments and answers of a Store's calls, and every algorithm's
// math as pure functions of its state, the policy and the time, in the
// shape of golang.org/x/time/rate (one type, time passed in):
//
//   - a key's state in a Store, a type per algorithm whose methods take
//     now and the call's arguments and return the answer, changing the
//     state in place (Lease, Return and Refund of a leased algorithm;
//     Check; Acquire and Release; Expiry);
//   - a holder's view of the Store's answers (Policy.Level, CoverAt,
//     Projected, LeaseExpiry, ResetPastWindow), which takes the last
//     answer as values (Answer): what the lease Manager decides from
//     between two Store calls.
//
// The package does no I/O, reads no clock and starts no goroutine. Its
// users: package lease, whose MemoryStore runs the states' math under its
// locks and whose Manager consults the table and the views (lease
// re-exports the types, so that its users need not import this package);
// and package lua, whose scripts are the same math in Lua, operation for
// operation, and whose first touches run this math and pack the state as
// the scripts do (lua's tests hold every script to this package's math,
// answer by answer and state by state). What the math implements, the
// semantics of each algorithm and of lent tokens and the accuracy
// contract, is the lease package doc; the numeric choices it leaves open
// are below, and the checklist of a new algorithm is there too ("Adding an
// algorithm").
//
// # Numeric choices
//
// The lease package doc leaves these open (the Lua scripts mirror them):
//
//   - Time is integer microseconds since the Unix epoch (Redis TIME gives
//     seconds and microseconds: now = sec*1e6 + usec). A Policy's Period is
//     truncated to whole microseconds (P = Period.Microseconds()), as is
//     MinInterval.
//   - Arithmetic is float64 (Lua's number type), in the operation order
//     written in each algorithm's comment, so that both stores compute
//     bit-identical values.
//   - Durations are reported as ceil(us/1000) milliseconds: a client that
//     waits them is never early. Zero or negative is 0.
//   - need > capacity: nothing is granted, Wait is one Period (P rounded up
//     to ms), and the state is not modified.
//   - A leased algorithm's state is written only when tokens are granted (or
//     returned). Denials and peeks change nothing, so the Redis scripts need
//     no write on those paths.
//   - A clock that goes backwards (now earlier than the stored time) is
//     treated as no time having passed; stored times never move back.
//   - Invalid calls (see CheckLease, CheckReturn, CheckLog, CheckAcquire,
//     CheckRelease) are refused before any state is read, with a
//     *FieldError naming the field or an error wrapping ErrWrongAlgorithm.
//   - A key whose policy changes algorithm starts with no state (the Redis
//     store can get this by keeping each algorithm's state under its own
//     key, e.g. with an algorithm suffix).
//
// When state expires (from then on it equals no state; the memory store
// deletes it, the Redis store sets PEXPIRE to it, rounded up to ms):
// token_bucket when full again, Updated + (C - Tokens)*P/L; gcra at TAT;
// fixed_window and sliding_window two periods after the stored window's
// start; sliding_log when the newest stamp leaves, newest + P;
// concurrency when the last held id expires.
//
// # Concurrency
//
// Algorithm, Policy and the call types are values, safe for concurrent
// use. A state is not: its Store serializes the calls on its key.
package algo

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrWrongAlgorithm means a call was made for a policy whose algorithm
// does not support it (a lease for sliding_log, say).
var ErrWrongAlgorithm = errors.New("operation not supported by the policy's algorithm")

// ErrNoSlot means a release named an id that holds no slot of the key (a
// caller's error: the Store answered).
var ErrNoSlot = errors.New("no such slot: never acquired, released already, or expired")

// maxReportMillis caps reported durations so that extreme policies cannot
// overflow time.Duration (about 292 years).
const maxReportMillis = float64(math.MaxInt64 / int64(time.Millisecond))

// ceilMillis converts a time in microseconds to a Duration rounded up to a
// whole millisecond.
func ceilMillis(us float64) time.Duration {
	if !(us > 0) {
		return 0
	}
	ms := math.Ceil(us / 1000)
	if ms > maxReportMillis {
		ms = maxReportMillis
	}
	return time.Duration(ms) * time.Millisecond
}

// periodMicros is the policy's Period in whole microseconds (≥ 1000 for a
// valid policy).
func periodMicros(p Policy) int64 { return p.Period.Microseconds() }

// unixMicros is t in microseconds since the Unix epoch.
func unixMicros(t time.Time) int64 { return t.UnixMicro() }

// CheckLease reports whether a Lease call with these arguments is valid:
// the policy validates, its algorithm is leased, and 0 ≤ need ≤ want ≤
// MaxHits. Errors name the field at fault; a wrong algorithm wraps
// ErrWrongAlgorithm. Both Stores call it before any state is touched.
func CheckLease(p Policy, want, need int64, to Lessee) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !p.Algorithm.Leased() {
		return fmt.Errorf("cannot lease tokens of a %s policy: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	switch {
	case want < 0 || want > MaxHits:
		return &FieldError{Field: "want", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), want)}
	case need < 0 || need > want:
		return &FieldError{Field: "need", Msg: fmt.Sprintf("must be between 0 and want (%d), got %d", want, need)}
	case len(to.ID) > MaxHolderLen:
		return &FieldError{Field: "holder", Msg: fmt.Sprintf("must be at most %d bytes", MaxHolderLen)}
	case to.Held < 0 || to.Held > MaxHits:
		return &FieldError{Field: "held", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), to.Held)}
	case to.SpentBefore < 0 || to.SpentBefore > MaxHits:
		return &FieldError{Field: "spent_before", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), to.SpentBefore)}
	case to.Idle < 0 || to.Idle > MaxPeriod:
		return &FieldError{Field: "idle", Msg: fmt.Sprintf("must be between 0 and %v, got %v", MaxPeriod, to.Idle)}
	case to.ID != "" && (to.TTL < time.Millisecond || to.TTL > MaxLeaseTTL):
		return &FieldError{Field: "ttl", Msg: fmt.Sprintf("must be between 1ms and %v, got %v", MaxLeaseTTL, to.TTL)}
	case to.AheadWindows < 0 || to.AheadWindows > MaxAheadWindows:
		return &FieldError{Field: "ahead_windows", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxAheadWindows), to.AheadWindows)}
	case to.AheadWindows > 0 && time.Duration(to.AheadWindows) > MaxLeaseTTL/p.Period:
		return &FieldError{Field: "ahead_windows", Msg: fmt.Sprintf("must span at most %v (%d periods of %v), got %d", MaxLeaseTTL, int64(MaxLeaseTTL/p.Period), p.Period, to.AheadWindows)}
	case to.AheadTokens < 0 || to.AheadTokens > MaxHits:
		return &FieldError{Field: "ahead_tokens", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), to.AheadTokens)}
	case to.MaxHolders < 0 || to.MaxHolders > MaxKeyHolders:
		return &FieldError{Field: "max_holders", Msg: fmt.Sprintf("must be between 0 and %d, got %d", MaxKeyHolders, to.MaxHolders)}
	}
	return nil
}

// CheckReturn reports whether a Return call with these arguments is valid
// (a leased algorithm and 0 ≤ tokens ≤ MaxHits).
func CheckReturn(p Policy, tokens int64, holder string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !p.Algorithm.Leased() {
		return fmt.Errorf("cannot return tokens to a %s policy: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	if tokens < 0 || tokens > MaxHits {
		return &FieldError{Field: "tokens", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), tokens)}
	}
	if len(holder) > MaxHolderLen {
		return &FieldError{Field: "holder", Msg: fmt.Sprintf("must be at most %d bytes", MaxHolderLen)}
	}
	return nil
}

// CheckLog reports whether a Log call with these arguments is valid
// (a sliding_log policy and 0 ≤ hits ≤ MaxHits).
func CheckLog(p Policy, hits int64) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Algorithm.kind() != kindLog {
		return fmt.Errorf("cannot run a sliding_log check for a %s policy: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	if hits < 0 || hits > MaxHits {
		return &FieldError{Field: "hits", Msg: fmt.Sprintf("must be between 0 and %d, got %d", int64(MaxHits), hits)}
	}
	return nil
}

// CheckAcquire reports whether an Acquire call with these arguments is
// valid: a concurrency policy, hits 0 (peek) or 1, and a non-empty id when
// hits is 1.
func CheckAcquire(p Policy, id string, hits int64) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !p.Algorithm.Acquired() {
		return fmt.Errorf("cannot acquire a slot of a %s policy: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	if hits != 0 && hits != 1 {
		return &FieldError{Field: "hits", Msg: fmt.Sprintf("must be 0 (peek) or 1 for concurrency, got %d", hits)}
	}
	if hits == 1 && id == "" {
		return &FieldError{Field: "id", Msg: "must not be empty"}
	}
	return nil
}

// CheckRelease reports whether a Release call with these arguments is valid
// (a concurrency policy and a non-empty id).
func CheckRelease(p Policy, id string) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !p.Algorithm.Acquired() {
		return fmt.Errorf("cannot release a slot of a %s policy: %w", p.Algorithm, ErrWrongAlgorithm)
	}
	if id == "" {
		return &FieldError{Field: "id", Msg: "must not be empty"}
	}
	return nil
}
