package api

import "strconv"

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
		// The optional fields are left out when 0 (what a decoder reads
		// for a field left out): a first touch's op carries only what
		// it asks, half the fields for the node to read.
		dst = appendNonZero(dst, `,"need":`, op.Need)
		dst = appendNonZero(dst, `,"held":`, op.Held)
		dst = append(dst, `,"ttl_ms":`...)
		dst = strconv.AppendInt(dst, op.TTLMS, 10)
		dst = appendNonZero(dst, `,"spent_before":`, op.SpentBefore)
		dst = appendNonZero(dst, `,"idle_ms":`, op.IdleMS)
		dst = appendNonZero(dst, `,"call":`, int64(op.Call))
		dst = appendNonZero(dst, `,"unanswered":`, int64(op.Unanswered))
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
		dst = appendNonZero(dst, `,"wait_ms":`, r.WaitMS)
		dst = appendNonZero(dst, `,"reset_ms":`, r.ResetMS)
		dst = appendNonZero(dst, `,"lent":`, r.Lent)
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

// appendNonZero appends field (`,"name":`) and v, unless v is 0: an
// optional field left out reads as 0.
func appendNonZero(dst []byte, field string, v int64) []byte {
	if v == 0 {
		return dst
	}
	return strconv.AppendInt(append(dst, field...), v, 10)
}
