package api

import "strconv"

func leaseField(idx int, f string) string {
	s := "ops[" + strconv.Itoa(idx) + "]"
	if f != "" {
		s += "." + f
	}
	return s
}

// DecodeLease decodes and validates the body of POST /v1/lease into dst,
// reusing dst.Ops's storage, and dst.Holder's and dst.Region's when they
// are unchanged (a pooled dst allocates no holder per request). Any
// invalid op fails the whole request (the error is a [*FieldError]
// naming it, "ops[3].want"): nothing is applied.
func DecodeLease(data []byte, dst *LeaseRequest) error {
	s := scanner{data: data}
	if len(data) > MaxBodyBytes {
		return &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	ops := dst.Ops[:0]
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
	if !holderSet {
		dst.Holder = ""
	}
	if !regionSet {
		dst.Region = ""
	}
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

// leaseFieldBit is the index in leaseFieldNames of k, or -1: a switch,
// which the compiler turns into a search by length and bytes, not a
// comparison with each name in turn.
func leaseFieldBit(k []byte) int {
	switch string(k) {
	case "op":
		return 0
	case "rule":
		return 1
	case "key":
		return 2
	case "want":
		return 3
	case "need":
		return 4
	case "held":
		return 5
	case "ttl_ms":
		return 6
	case "spent_before":
		return 7
	case "idle_ms":
		return 8
	case "call":
		return 9
	case "unanswered":
		return 10
	case "tokens":
		return 11
	case "demand":
		return 12
	case "ahead_windows":
		return 13
	case "ahead_tokens":
		return 14
	case "first":
		return 15
	}
	return -1
}

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
				bit = leaseFieldBit(k)
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

// Lease result fields.
var leaseResultNames = [...]string{"granted", "remaining", "wait_ms", "reset_ms", "lent", "error", "ahead_tokens", "ahead_windows", "checked", "crowded"}

// leaseResultBit is the index in leaseResultNames of k, or -1 (see
// leaseFieldBit).
func leaseResultBit(k []byte) int {
	switch string(k) {
	case "granted":
		return 0
	case "remaining":
		return 1
	case "wait_ms":
		return 2
	case "reset_ms":
		return 3
	case "lent":
		return 4
	case "error":
		return 5
	case "ahead_tokens":
		return 6
	case "ahead_windows":
		return 7
	case "checked":
		return 8
	case "crowded":
		return 9
	}
	return -1
}

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
						bit = leaseResultBit(k)
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
