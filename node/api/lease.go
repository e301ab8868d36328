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
//	   "ttl_ms":10000,"spent_before":2,"idle_ms":0,"call":7,"unanswered":0},
//	  {"op":"return","rule":"per-key","key":"u2","tokens":5}]}
//
//	{"results":[{"granted":40,"remaining":12,"wait_ms":0,"reset_ms":900,"lent":43},
//	  {"granted":0,"remaining":0,"wait_ms":0,"reset_ms":0,"lent":0}]}
//
// A fixed_window lease op may add "ahead_windows" and "ahead_tokens"
// (lease.Lessee's AheadWindows and AheadTokens: shares of the next
// windows), and its result then carries the shares lent as
// "ahead_tokens" and "ahead_windows"; both are left out when 0, and a
// node that does not know them ignores them and lends none. A lease op
// may add "first":1 (lease.Lessee.First: the holder was never granted
// the key, a hint a node that does not know it ignores).
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

func leaseField(idx int, f string) string {
	s := "ops[" + strconv.Itoa(idx) + "]"
	if f != "" {
		s += "." + f
	}
	return s
}

// DecodeLease decodes and validates the body of POST /v1/lease into dst,
// reusing dst.Ops's storage. Any invalid op fails the whole request (the
// error is a [*FieldError] naming it, "ops[3].want"): nothing is applied.
func DecodeLease(data []byte, dst *LeaseRequest) error {
	s := scanner{data: data}
	if len(data) > MaxBodyBytes {
		return &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	dst.Holder = ""
	ops := dst.Ops[:0]
	dst.Region = ""
	var (
		fe                            *FieldError
		kb                            [16]byte
		holderSet, opsSeen, regionSet bool
	)
	bad := func(field, msg string) {
		if fe == nil {
			fe = &FieldError{Field: field, Msg: msg}
		}
	}
	if !s.expect('{') {
		return s.err
	}
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			switch {
			case !ok:
				s.skip(1)
			case string(k) == "holder":
				if holderSet {
					bad("holder", "given twice")
				}
				holderSet = true
				if v, ok := s.leaseStr(&fe, leaseName{name: "holder"}, HolderLen); ok {
					if msg := HolderMsg(v); msg != "" {
						bad("holder", msg)
					} else {
						setString(&dst.Holder, v)
					}
				}
			case string(k) == "region":
				if regionSet {
					bad("region", "given twice")
				}
				regionSet = true
				if v, ok := s.leaseStr(&fe, leaseName{name: "region"}, MaxRuleNameLen); ok {
					if msg := nameMsg(v); msg != "" {
						bad("region", msg)
					} else {
						setString(&dst.Region, v)
					}
				}
			case string(k) == "ops":
				if opsSeen {
					bad("ops", "given twice")
					s.skip(1)
					break
				}
				opsSeen = true
				if s.peek() != '[' {
					bad("ops", "must be an array")
					s.skip(1)
					break
				}
				ops = s.leaseOps(ops, &fe)
			default:
				s.skip(1)
			}
			if !s.next('}') {
				break
			}
		}
	}
	s.end()
	dst.Ops = ops
	switch {
	case s.err != nil:
		return s.err
	case fe != nil:
		return fe
	case !holderSet:
		return &FieldError{Field: "holder", Msg: "required"}
	case len(ops) == 0:
		return &FieldError{Field: "ops", Msg: "must hold 1 to 1000 ops"}
	}
	return nil
}

// leaseName names a field of a lease request or answer in an error: a
// top-level field (list ""), or the field name of item idx of list ("ops"
// or "results"). It becomes a string only for an error, so that reading a
// valid request or answer builds no names.
type leaseName struct {
	list string
	idx  int
	name string
}

func (n leaseName) String() string {
	switch n.list {
	case "":
		return n.name
	case "results":
		return resultField(n.idx, n.name)
	}
	return leaseField(n.idx, n.name)
}

// leaseStr reads a string of at most max bytes (no escapes are needed by
// any valid value: an escaped one is unescaped into a copy).
func (s *scanner) leaseStr(fe **FieldError, field leaseName, max int) ([]byte, bool) {
	bad := func(msg string) {
		if *fe == nil {
			*fe = &FieldError{Field: field.String(), Msg: msg}
		}
	}
	if s.peek() != '"' {
		s.skip(2)
		bad("must be a string")
		return nil, false
	}
	raw, esc := s.str()
	if s.err != nil {
		return nil, false
	}
	if esc {
		v, ok := unescapeJSON(make([]byte, 0, max), raw, max)
		if !ok {
			bad("longer than " + strconv.Itoa(max) + " bytes")
			return nil, false
		}
		return v, true
	}
	if len(raw) > max {
		bad("longer than " + strconv.Itoa(max) + " bytes")
		return nil, false
	}
	return raw, true
}

// leaseInt reads an integer between lo and hi.
func (s *scanner) leaseInt(fe **FieldError, field leaseName, lo, hi int64) (int64, bool) {
	bad := func() {
		if *fe == nil {
			*fe = &FieldError{Field: field.String(),
				Msg: "must be an integer between " + strconv.FormatInt(lo, 10) + " and " + strconv.FormatInt(hi, 10)}
		}
	}
	if c := s.peek(); c != '-' && (c < '0' || c > '9') {
		s.skip(2)
		bad()
		return 0, false
	}
	raw, isInt := s.number()
	if s.err != nil {
		return 0, false
	}
	n, ok := parseInt(raw)
	if !isInt || !ok || n < lo || n > hi {
		bad()
		return 0, false
	}
	return n, true
}

func (s *scanner) leaseOps(ops []LeaseOp, fe **FieldError) []LeaseOp {
	s.pos++
	if s.peek() == ']' {
		s.pos++
		return ops
	}
	for s.err == nil {
		i := len(ops)
		if i == MaxLeaseOps {
			if *fe == nil {
				*fe = &FieldError{Field: "ops", Msg: "must hold 1 to 1000 ops"}
			}
			s.skip(1)
		} else {
			ops = append(ops, LeaseOp{})
			if s.peek() == '{' {
				s.leaseOp(&ops[i], i, fe)
			} else {
				s.skip(1)
				if *fe == nil {
					*fe = &FieldError{Field: leaseField(i, ""), Msg: "must be a JSON object"}
				}
			}
		}
		if !s.next(']') {
			break
		}
	}
	return ops
}

// Lease op fields, as bits of what was seen.
const (
	lfOp = 1 << iota
	lfRule
	lfKey
	lfWant
	lfNeed
	lfHeld
	lfTTL
	lfSpent
	lfIdle
	lfCall
	lfUnanswered
	lfTokens
	lfDemand
	lfAheadWindows
	lfAheadTokens
	lfFirst
)

var leaseFieldNames = [...]string{"op", "rule", "key", "want", "need", "held", "ttl_ms", "spent_before", "idle_ms", "call", "unanswered", "tokens", "demand", "ahead_windows", "ahead_tokens", "first"}

func (s *scanner) leaseOp(dst *LeaseOp, idx int, fe **FieldError) {
	s.pos++
	var (
		kb   [16]byte
		seen int
	)
	bad := func(f, msg string) {
		if *fe == nil {
			*fe = &FieldError{Field: leaseField(idx, f), Msg: msg}
		}
	}
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			bit := -1
			if ok {
				for b, n := range leaseFieldNames {
					if string(k) == n {
						bit = b
						break
					}
				}
			}
			if bit < 0 {
				s.skip(2)
			} else {
				name := leaseFieldNames[bit]
				if seen&(1<<bit) != 0 {
					bad(name, "given twice")
				}
				seen |= 1 << bit
				field := leaseName{list: "ops", idx: idx, name: name}
				switch 1 << bit {
				case lfOp:
					if v, ok := s.leaseStr(fe, field, 8); ok {
						switch string(v) {
						case "lease":
							dst.Op = OpLease
						case "return":
							dst.Op = OpReturn
						case "peek":
							dst.Op = OpPeek
						default:
							bad(name, `must be "lease", "return" or "peek"`)
						}
					}
				case lfRule:
					if v, ok := s.leaseStr(fe, field, MaxRuleNameLen); ok {
						if msg := nameMsg(v); msg != "" {
							bad(name, msg)
						} else {
							setString(&dst.Rule, v)
						}
					}
				case lfKey:
					if v, ok := s.leaseStr(fe, field, MaxKeyLen); ok {
						if msg := givenKeyMsg(v); msg != "" {
							bad(name, msg)
						} else {
							setString(&dst.Key, v)
						}
					}
				case lfWant:
					dst.Want, _ = s.leaseInt(fe, field, 0, MaxHits)
				case lfNeed:
					dst.Need, _ = s.leaseInt(fe, field, 0, MaxHits)
				case lfHeld:
					dst.Held, _ = s.leaseInt(fe, field, 0, MaxHits)
				case lfTTL:
					dst.TTLMS, _ = s.leaseInt(fe, field, 1, MaxLeaseTTLMS)
				case lfSpent:
					dst.SpentBefore, _ = s.leaseInt(fe, field, 0, MaxHits)
				case lfIdle:
					dst.IdleMS, _ = s.leaseInt(fe, field, 0, MaxIdleMS)
				case lfCall:
					n, _ := s.leaseInt(fe, field, 0, 1<<32-1)
					dst.Call = uint32(n)
				case lfUnanswered:
					n, _ := s.leaseInt(fe, field, 0, 1<<32-1)
					dst.Unanswered = uint32(n)
				case lfTokens:
					dst.Tokens, _ = s.leaseInt(fe, field, 0, MaxHits)
				case lfDemand:
					dst.Demand, _ = s.leaseInt(fe, field, 0, MaxHits)
				case lfAheadWindows:
					dst.AheadWindows, _ = s.leaseInt(fe, field, 0, MaxAheadWindows)
				case lfAheadTokens:
					dst.AheadTokens, _ = s.leaseInt(fe, field, 0, MaxHits)
				case lfFirst:
					n, _ := s.leaseInt(fe, field, 0, 1)
					dst.First = n == 1
				}
			}
			if !s.next('}') {
				break
			}
		}
	}
	if *fe != nil || s.err != nil {
		return
	}
	switch {
	case seen&lfOp == 0:
		bad("op", "required")
	case seen&lfRule == 0:
		bad("rule", "required")
	case seen&lfKey == 0:
		bad("key", "required")
	case dst.Op == OpLease && seen&lfWant == 0:
		bad("want", "required")
	case dst.Op == OpLease && dst.Need > dst.Want:
		bad("need", "must be ≤ want")
	case dst.Op == OpLease && seen&lfTTL == 0:
		bad("ttl_ms", "required")
	case dst.Op == OpLease && seen&lfTokens != 0:
		bad("tokens", "belongs to a return op")
	case dst.Op == OpReturn && seen&^(lfOp|lfRule|lfKey|lfTokens) != 0:
		bad("op", "a return op takes only rule, key and tokens")
	case dst.Op == OpPeek && seen&^(lfOp|lfRule|lfKey) != 0:
		bad("op", "a peek op takes only rule and key")
	}
}

// AppendLeaseRequest appends r as the JSON body of POST /v1/lease.
func AppendLeaseRequest(dst []byte, r *LeaseRequest) []byte {
	dst = append(dst, `{"holder":`...)
	dst = AppendString(dst, r.Holder)
	if r.Region != "" {
		dst = append(dst, `,"region":`...)
		dst = AppendString(dst, r.Region)
	}
	dst = append(dst, `,"ops":[`...)
	for i := range r.Ops {
		op := &r.Ops[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		switch op.Op {
		case OpReturn:
			dst = append(dst, `{"op":"return","rule":`...)
		case OpPeek:
			dst = append(dst, `{"op":"peek","rule":`...)
		default:
			dst = append(dst, `{"op":"lease","rule":`...)
		}
		dst = AppendString(dst, op.Rule)
		dst = append(dst, `,"key":`...)
		dst = AppendString(dst, op.Key)
		if op.Op == OpPeek {
			dst = append(dst, '}')
			continue
		}
		if op.Op == OpReturn {
			dst = append(dst, `,"tokens":`...)
			dst = strconv.AppendInt(dst, op.Tokens, 10)
			dst = append(dst, '}')
			continue
		}
		dst = append(dst, `,"want":`...)
		dst = strconv.AppendInt(dst, op.Want, 10)
		dst = append(dst, `,"need":`...)
		dst = strconv.AppendInt(dst, op.Need, 10)
		dst = append(dst, `,"held":`...)
		dst = strconv.AppendInt(dst, op.Held, 10)
		dst = append(dst, `,"ttl_ms":`...)
		dst = strconv.AppendInt(dst, op.TTLMS, 10)
		dst = append(dst, `,"spent_before":`...)
		dst = strconv.AppendInt(dst, op.SpentBefore, 10)
		dst = append(dst, `,"idle_ms":`...)
		dst = strconv.AppendInt(dst, op.IdleMS, 10)
		dst = append(dst, `,"call":`...)
		dst = strconv.AppendUint(dst, uint64(op.Call), 10)
		dst = append(dst, `,"unanswered":`...)
		dst = strconv.AppendUint(dst, uint64(op.Unanswered), 10)
		if op.Demand > 0 {
			dst = append(dst, `,"demand":`...)
			dst = strconv.AppendInt(dst, op.Demand, 10)
		}
		if op.AheadWindows > 0 {
			dst = append(dst, `,"ahead_windows":`...)
			dst = strconv.AppendInt(dst, op.AheadWindows, 10)
			dst = append(dst, `,"ahead_tokens":`...)
			dst = strconv.AppendInt(dst, op.AheadTokens, 10)
		}
		if op.First {
			dst = append(dst, `,"first":1`...)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// AppendLeaseResults appends the JSON body answering a lease request.
func AppendLeaseResults(dst []byte, rs []LeaseResult) []byte {
	dst = append(dst, `{"results":[`...)
	for i := range rs {
		r := &rs[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"granted":`...)
		dst = strconv.AppendInt(dst, r.Granted, 10)
		dst = append(dst, `,"remaining":`...)
		dst = strconv.AppendInt(dst, r.Remaining, 10)
		dst = append(dst, `,"wait_ms":`...)
		dst = strconv.AppendInt(dst, r.WaitMS, 10)
		dst = append(dst, `,"reset_ms":`...)
		dst = strconv.AppendInt(dst, r.ResetMS, 10)
		dst = append(dst, `,"lent":`...)
		dst = strconv.AppendInt(dst, r.Lent, 10)
		if r.AheadWindows > 0 {
			dst = append(dst, `,"ahead_tokens":`...)
			dst = strconv.AppendInt(dst, r.AheadTokens, 10)
			dst = append(dst, `,"ahead_windows":`...)
			dst = strconv.AppendInt(dst, r.AheadWindows, 10)
		}
		if r.Checked {
			dst = append(dst, `,"checked":1`...)
		}
		if r.Crowded {
			dst = append(dst, `,"crowded":1`...)
		}
		if r.Error != "" {
			dst = append(dst, `,"error":`...)
			dst = AppendString(dst, r.Error)
		}
		dst = append(dst, '}')
	}
	return append(dst, "]}"...)
}

// Lease result fields.
var leaseResultNames = [...]string{"granted", "remaining", "wait_ms", "reset_ms", "lent", "error", "ahead_tokens", "ahead_windows", "checked", "crowded"}

// DecodeLeaseResults decodes the body answering a lease request into dst
// (reused), checking that it holds exactly n results.
func DecodeLeaseResults(data []byte, dst []LeaseResult, n int) ([]LeaseResult, error) {
	s := scanner{data: data}
	dst = dst[:0]
	var (
		kb [16]byte
		fe *FieldError
	)
	if !s.expect('{') {
		return dst, s.err
	}
	seen := false
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			if !ok || string(k) != "results" || seen || s.peek() != '[' {
				s.skip(1)
			} else {
				seen = true
				dst = s.leaseResults(dst, n, &fe)
			}
			if !s.next('}') {
				break
			}
		}
	}
	s.end()
	switch {
	case s.err != nil:
		return dst, s.err
	case fe != nil:
		return dst, fe
	case len(dst) != n:
		return dst, &FieldError{Field: "results", Msg: "want " + strconv.Itoa(n) + " results, got " + strconv.Itoa(len(dst))}
	}
	return dst, nil
}

func (s *scanner) leaseResults(dst []LeaseResult, n int, fe **FieldError) []LeaseResult {
	var kb [16]byte
	s.pos++
	if s.peek() == ']' {
		s.pos++
		return dst
	}
	for s.err == nil {
		i := len(dst)
		if i >= n || s.peek() != '{' {
			s.skip(1)
			if *fe == nil {
				*fe = &FieldError{Field: resultField(i, ""), Msg: "unexpected"}
			}
		} else {
			dst = append(dst, LeaseResult{})
			r := &dst[i]
			s.pos++
			if s.peek() == '}' {
				s.pos++
			} else {
				for s.err == nil {
					k, ok := s.fieldKey(kb[:])
					if s.err != nil {
						break
					}
					bit := -1
					if ok {
						for b, nm := range leaseResultNames {
							if string(k) == nm {
								bit = b
								break
							}
						}
					}
					switch bit {
					case -1:
						s.skip(2)
					case 5:
						if v, ok := s.leaseStr(fe, leaseName{list: "results", idx: i, name: "error"}, MaxLeaseErrorLen); ok {
							r.Error = string(v)
						}
					default:
						v, _ := s.leaseInt(fe, leaseName{list: "results", idx: i, name: leaseResultNames[bit]}, 0, 1<<62)
						switch bit {
						case 0:
							r.Granted = v
						case 1:
							r.Remaining = v
						case 2:
							r.WaitMS = v
						case 3:
							r.ResetMS = v
						case 4:
							r.Lent = v
						case 6:
							r.AheadTokens = v
						case 7:
							r.AheadWindows = v
						case 8:
							r.Checked = v != 0
						case 9:
							r.Crowded = v != 0
						}
					}
					if !s.next('}') {
						break
					}
				}
			}
		}
		if !s.next(']') {
			break
		}
	}
	return dst
}

// GivenKeyMsg says what is wrong with a key given as is (a check's or a
// lease op's "key"), or "" when it is valid.
func GivenKeyMsg(key string) string {
	return givenKeyMsg(unsafe.Slice(unsafe.StringData(key), len(key)))
}
