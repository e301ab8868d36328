package api

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"unsafe"
)

// The lease protocol (POST /v1/lease): a gateway process (node/client's
// Limiter) is one more holder of the Store's leases. One request carries
// many keys' operations of one holder; the node answers each in order.
//
//	{"holder":"<32 hex>","ops":[
//	  {"op":"lease","rule":"per-key","key":"u1","want":40,"need":1,"held":3,
//	   "ttl_ms":10000,"spent_before":2,"call":7},
//	  {"op":"return","rule":"per-key","key":"u2","tokens":5}]}
//
//	{"results":[{"granted":40,"remaining":12,"wait_ms":0,"reset_ms":900,"lent":43},
//	  {"granted":0,"remaining":0}]}
//
// A fixed_window lease op may add "ahead_windows" and "ahead_tokens"
// (lease.Lessee's AheadWindows and AheadTokens: shares of the next
// windows), and its result then carries the shares lent as
// "ahead_tokens" and "ahead_windows"; both are left out when 0, and a
// node that does not know them ignores them and lends none. A lease op
// may add "first":1 (lease.Lessee.First: the holder was never granted
// the key, a hint a node that does not know it ignores).
//
// An op's fields other than op, rule, key and a lease's want and ttl_ms
// (a result's, other than granted and remaining) may be left out, and
// are then 0; the encoders here leave out those that are 0.
//
// The fields of a lease op are lease.Lessee's and the Store's Lease
// arguments; a result's are lease.Grant's (durations in whole
// milliseconds, rounded up). A result with "error" was not applied (the
// owner could not be reached, the Store failed): the holder treats it as
// a failed Store call.

// Bounds of a lease request.
const (
	// MaxLeaseOps bounds the operations of one lease request.
	MaxLeaseOps = 1000
	// HolderLen is the length of a gateway holder id: 32 lowercase hex
	// digits (128 random bits, drawn anew by each gateway process).
	HolderLen = 32
	// MaxLeaseTTLMS bounds ttl_ms (one minute: a gateway that crashes
	// strands its tokens for at most that long).
	MaxLeaseTTLMS = 60_000
	// MaxIdleMS bounds idle_ms (one year, the longest period).
	MaxIdleMS = 365 * 24 * 3600 * 1000
	// MaxLeaseErrorLen bounds a result's error message.
	MaxLeaseErrorLen = 512
)

// LeaseOpKind is what a lease op asks.
type LeaseOpKind uint8

// The lease op kinds. The zero kind is invalid.
const (
	// OpLease leases tokens (lease.Store's Lease).
	OpLease LeaseOpKind = 1
	// OpReturn returns tokens and ends the holder's loan (lease.Store's
	// Return).
	OpReturn LeaseOpKind = 2
	// OpPeek reads what is left of a key, lending nothing and changing no
	// loan (lease.Store's Lease of 0 tokens with no Lessee).
	OpPeek LeaseOpKind = 3
)

func (k LeaseOpKind) String() string {
	switch k {
	case OpLease:
		return "lease"
	case OpReturn:
		return "return"
	case OpPeek:
		return "peek"
	}
	return "op(" + strconv.Itoa(int(k)) + ")"
}

// LeaseOp is one operation of a lease request.
type LeaseOp struct {
	Op   LeaseOpKind
	Rule string
	Key  string
	// Lease: 0 ≤ need ≤ want, and the lease.Lessee fields (want 0
	// renews the holder's loan: it says what it holds and spent).
	Want        int64
	Need        int64
	Held        int64
	TTLMS       int64
	SpentBefore int64
	IdleMS      int64
	Call        uint32
	Unanswered  uint32
	// Return: the unspent tokens given back (0 ends the loan).
	Tokens int64
	// Demand (lease, optional) is the checks per second the holder sees
	// of the key, denied ones included, rounded up: a regional holder's
	// demand, by which the global tier splits a saturated key (0:
	// unknown).
	Demand int64
	// AheadWindows and AheadTokens (lease, optional) ask shares of the
	// next windows of a fixed_window key (lease.Lessee's fields).
	AheadWindows int64
	AheadTokens  int64
	// First (lease, optional: "first":1) is lease.Lessee.First: the
	// holder was never granted the key.
	First bool
}

// MaxAheadWindows bounds ahead_windows (lease.MaxAheadWindows).
const MaxAheadWindows = 1 << 16

// LeaseRequest is the body of POST /v1/lease.
type LeaseRequest struct {
	Holder string
	// Region (optional) makes the holder a region's node leasing from the
	// global tier (sluiced -upstream), named by it: a regional holder is
	// not bound by gateway_share; a saturated key is split among the
	// regional holders in proportion to their demand. A rule name's
	// characters, at most MaxRuleNameLen bytes.
	Region string
	Ops    []LeaseOp
}

// LeaseResult answers one LeaseOp (lease.Grant's fields; a return's are
// zero). Error, when not empty, means the op was not applied.
type LeaseResult struct {
	Granted   int64
	Remaining int64
	WaitMS    int64
	ResetMS   int64
	Lent      int64
	// AheadTokens and AheadWindows are the shares ahead lent (lease.Grant's
	// fields).
	AheadTokens  int64
	AheadWindows int64
	// Checked ("checked":1) says the op needed more than the holder may
	// hold of the key (its rule's gateway_share): the owner decided the
	// need as a check, and Granted (if any) is spent at once, nothing
	// more lent. Crowded ("crowded":1) says the key had as many holders
	// as its rule's max_holders: the need was decided as a check too.
	// Both are left out when false; a holder that does not know them
	// spends the grant on the check that asked, which is right.
	Checked bool
	Crowded bool
	Error   string
}

// HolderPublicIDLen is the length of a holder's public id (HolderPublicID).
const HolderPublicIDLen = 16

// HolderPublicID is the public id of the holder whose secret is secret
// (the "holder" a lease request sends: 32 hex digits a gateway process
// draws at random and keeps to itself): 16 hex digits of a SHA-256 of
// it. Everything that names a holder to others (logs, metrics,
// /v1/stats, the dashboard, Limiter.Holder) shows this id, and the
// Store counts the holder's loans under it; the secret cannot be
// derived from it, so knowing it (and the client token) does not let
// anyone renew, return or report for the holder.
func HolderPublicID(secret string) string {
	h := sha256.New()
	h.Write([]byte("sluice-holder-v1\x00"))
	h.Write([]byte(secret))
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0])[:HolderPublicIDLen/2])
}

// HolderMsg says what is wrong with a gateway holder id, or "".
func HolderMsg(b []byte) string {
	if len(b) != HolderLen {
		return "must be 32 lowercase hex digits"
	}
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return "must be 32 lowercase hex digits"
		}
	}
	return ""
}

// GivenKeyMsg says what is wrong with a key given as is (a check's or a
// lease op's "key"), or "" when it is valid.
func GivenKeyMsg(key string) string {
	return givenKeyMsg(unsafe.Slice(unsafe.StringData(key), len(key)))
}
