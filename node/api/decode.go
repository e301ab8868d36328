package api

import (
	"math"
	"strconv"
)

// fieldName names field f of batch item idx (idx < 0: not a batch).
func fieldName(idx int, f string) string {
	if idx < 0 {
		return f
	}
	s := "checks[" + strconv.Itoa(idx) + "]"
	if f != "" {
		s += "." + f
	}
	return s
}

// parseInt parses a JSON integer: an optional '-' and digits without a
// leading zero, within int64.
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	if len(b) == 0 || len(b) > 19 || (b[0] == '0' && len(b) > 1) {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0') // 19 digits cannot overflow uint64
	}
	switch {
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	case neg && n <= math.MaxInt64+1:
		return int64(-n), true
	}
	return 0, false
}

// hitsMsg says what is wrong with a hits value, or "".
func hitsMsg(n int64) string {
	if n < 0 || n > MaxHits {
		return "must be between 0 and 1099511627776"
	}
	return ""
}

func leaseIDMsg(b []byte) string {
	switch {
	case len(b) == 0:
		return "required"
	case len(b) > MaxLeaseIDLen:
		return "longer than 512 bytes"
	}
	for _, c := range b {
		if c <= 0x20 || c >= 0x7f {
			return "must be printable ASCII without spaces"
		}
	}
	return ""
}

func resultField(idx int, f string) string {
	if idx < 0 {
		return f
	}
	return "results[" + strconv.Itoa(idx) + "]." + f
}
