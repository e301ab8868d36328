// Package api owns Sluice's wire types and their JSON codec: the bodies of
// POST /v1/check, /v1/checks, /v1/acquire and /v1/release, the query of
// GET /v1/check, the lease protocol's POST /v1/lease (lease.go, its codec
// lease_decode.go and lease_encode.go; its GET /v1/lease/rules answers the
// rules as node/rules' specs), and the answers. The node's HTTP server and the Go client (node/client) share
// it, so both ends agree byte for byte.
//
// There is no reflection on the hot path. Bodies are read by a strict
// single-pass JSON scanner (RFC 8259; no copy of the body, no tree) and
// checked against the bounds below; answers are encoded by appending to a
// caller-owned []byte. A known field given twice is an error. Decoders reuse
// their destination: a destination decoded into again keeps its slices'
// capacity, and each string field keeps its old value (no allocation) when
// the new one is byte-for-byte equal. Decoded strings never alias the input
// or any internal buffer, so callers may retain them; the exception is
// [DecodeCheckView] and [DecodeChecksView], for servers, whose strings are
// views of the body (no allocation even when every request names a new
// key) valid only while the request is being handled.
//
// Unknown JSON fields and query parameters are ignored, so that newer clients
// can talk to older nodes. A JSON null is treated as an absent field.
//
// # Errors
//
// Every validation failure is a [*FieldError] naming the offending field in
// the request's own terms ("key", "hits", "checks[3].key",
// "descriptors.api_key"); errors.Is(err, [ErrInvalid]) holds for all of
// them. In a batch, a malformed body fails as a whole, but a malformed item
// only marks that item (see [CheckRequest.Err]); the server answers the
// other items and reports the bad one as {"error":"...","field":"..."}.
//
// # Concurrency
//
// All functions are safe for concurrent use. A destination value must not be
// decoded into by two goroutines at once. The package has no package-level
// mutable state.
package api

import (
	"bytes"
	"errors"
	"unicode/utf8"
)

// Bounds on requests. A request that exceeds one is refused with a
// [*FieldError] naming the field.
const (
	// MaxBodyBytes bounds a request body (the server should also set its
	// fasthttp MaxRequestBodySize to this).
	MaxBodyBytes = 1 << 20
	// MaxKeyLen bounds a counter key and a descriptor value, in bytes.
	MaxKeyLen = 256
	// MaxRuleNameLen bounds a rule name and a descriptor name, in bytes.
	MaxRuleNameLen = 64
	// MaxBatch bounds the checks of one POST /v1/checks.
	MaxBatch = 1000
	// MaxDescriptors bounds the descriptors of one check.
	MaxDescriptors = 16
	// MaxHits bounds the hits of one check. It equals lease.MaxHits, so
	// that all Store arithmetic stays exact in float64.
	MaxHits = 1 << 40
	// MaxLeaseIDLen bounds a concurrency lease id, in bytes: enough for a
	// lease id that carries its rule and key, so that a release needs
	// nothing else (a rule name of MaxRuleNameLen, the key in unpadded
	// base64url, at most 342 bytes for MaxKeyLen, two separators, and an
	// id of up to 104 bytes).
	MaxLeaseIDLen = 512
)

// ErrInvalid means a request is malformed or out of bounds; the error is a
// [*FieldError] naming the field, and the HTTP status is 400.
var ErrInvalid = errors.New("invalid request")

// FieldError is a request validation error that names the field at fault.
// Field is empty when the body as a whole is at fault (not JSON, say).
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Msg
	}
	return e.Field + ": " + e.Msg
}

// Is makes errors.Is(err, ErrInvalid) true for every *FieldError.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

// Descriptor is one name/value pair of a descriptor-based check. Rules name
// the descriptors that form their counter key.
type Descriptor struct {
	Name  string
	Value string
}

// CheckRequest is one check: either a rule and a counter key, or a list of
// descriptors from which the node finds the matching rules and their keys.
//
// JSON: {"rule":"per-key","key":"user-42","hits":1} or
// {"descriptors":{"api_key":"k1","path":"/a"},"hits":1}.
type CheckRequest struct {
	// Rule names the rule to check. When set, Key is required and
	// Descriptors must be empty.
	Rule string
	// Key is the counter key within Rule.
	Key string
	// Descriptors, in request order, with distinct names. Required when
	// Rule is empty.
	Descriptors []Descriptor
	// Hits to charge, 0..MaxHits; 0 peeks without charging. Decoders set 1
	// when the field is absent.
	Hits int64
	// HitsSet reports whether the request carried hits. Encoders write
	// hits when HitsSet is true or Hits > 1, so a zero CheckRequest built
	// in Go means one hit; set HitsSet with Hits = 0 to peek.
	HitsSet bool
	// Err is set by DecodeChecks when this item of a batch is invalid (its
	// Field names the item, "checks[3].key"); the other fields are then
	// unspecified. DecodeCheck and ParseCheckQuery return the error
	// instead and leave Err nil.
	Err *FieldError
}

// ChecksRequest is a batch: JSON {"checks":[{...},...]} with 1..MaxBatch
// checks, answered in order by a [Results] body.
type ChecksRequest struct {
	Checks []CheckRequest
}

// AcquireRequest takes a slot of a concurrency rule:
// {"rule":"uploads","key":"user-42"} (hits optional, default 1; 0 peeks).
type AcquireRequest struct {
	Rule    string
	Key     string
	Hits    int64
	HitsSet bool
}

// ReleaseRequest frees a slot taken by an acquire: {"lease_id":"..."},
// optionally with "rule" and "key". A node's lease ids carry their rule
// and key, so LeaseID alone is enough; when Rule or Key is given too, the
// server checks that it agrees with the lease id.
type ReleaseRequest struct {
	// Rule and Key are optional: empty means not given.
	Rule string
	Key  string
	// LeaseID is required: the lease_id answered by the acquire.
	LeaseID string
}

// CheckResult is the answer to one check (and to an acquire):
//
//	{"allowed":true,"rule":"per-key","key":"user-42","limit":100,"remaining":41,"reset_ms":600,"retry_after_ms":0}
//
// plus "degraded":true only when Degraded, and "lease_id" only when set.
// When Error is set the result is an error item instead:
// {"error":"...","field":"checks[3].key"} and the other fields are not
// encoded.
type CheckResult struct {
	Allowed      bool
	Rule         string
	Key          string
	Limit        int64
	Remaining    int64
	ResetMS      int64
	RetryAfterMS int64
	Degraded     bool
	LeaseID      string
	Error        string
	Field        string
}

// ValidName reports whether s is a valid rule or descriptor name:
// 1..MaxRuleNameLen bytes of [A-Za-z0-9_.-].
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxRuleNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !nameByte(s[i]) {
			return false
		}
	}
	return true
}

func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// nameMsg says what is wrong with a name, or "" when it is valid.
func nameMsg(b []byte) string {
	switch {
	case len(b) == 0:
		return "required"
	case len(b) > MaxRuleNameLen:
		return "longer than 64 bytes"
	}
	for _, c := range b {
		if !nameByte(c) {
			return "may hold only A-Z a-z 0-9 _ . -"
		}
	}
	return ""
}

// ValidKey reports whether s is a valid counter key or descriptor value:
// 1..MaxKeyLen bytes of UTF-8 without control characters (C0, DEL and
// C1: U+0000 to U+001F, U+007F to U+009F). node/engine's KeyProblem is
// the same rule.
func ValidKey(s string) bool { return keyMsg([]byte(s)) == "" }

// LongKeyMark marks the digest form of a counter key longer than MaxKeyLen
// (node/rules, "Counter keys"): its first bytes, LongKeyMark, and the
// digest of the whole key. Counter keys escape '\' as "\\", so the mark
// is an escape pair no key built from values holds, and a key given as is
// (a check's, an acquire's or a release's "key") may not hold it either:
// no key a client names can be a long key's counter.
const LongKeyMark = `\#`

// givenKeyMsg says what is wrong with a key given as is, or "" when it is
// valid: keyMsg, and no LongKeyMark escape pair (scanning pairs from the
// start, so that "\\#" is '\' then '#').
func givenKeyMsg(b []byte) string {
	if msg := keyMsg(b); msg != "" {
		return msg
	}
	for i := bytes.IndexByte(b, '\\'); i >= 0 && i < len(b); i++ {
		if b[i] == '\\' {
			if i+1 < len(b) && b[i+1] == LongKeyMark[1] {
				return `must not hold the escape \# (it marks the digest of a long key)`
			}
			i++
		}
	}
	return ""
}

// keyMsg says what is wrong with a key, or "" when it is valid.
func keyMsg(b []byte) string {
	switch {
	case len(b) == 0:
		return "required"
	case len(b) > MaxKeyLen:
		return "longer than 256 bytes"
	}
	_, msg := TextFault(b)
	return msg
}

// TextFault finds the first thing in b that a key may not hold: a control
// character (C0, DEL or C1: U+0000 to U+001F, U+007F to U+009F) or a byte
// that is not UTF-8. It returns its offset and what is wrong, or -1 and
// "" when b is valid text for a key, whatever its length (node/rules
// checks the values a long key's digest would hide with it).
func TextFault(b []byte) (int, string) {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i, "must not hold control characters"
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 {
			return i, "must be valid UTF-8"
		}
		if r <= 0x9f { // C1 controls, U+0080 to U+009F
			return i, "must not hold control characters"
		}
		i += n
	}
	return -1, ""
}

// setString stores b in *dst, allocating only when the value changed.
func setString(dst *string, b []byte) {
	if string(b) != *dst {
		*dst = string(b)
	}
}
