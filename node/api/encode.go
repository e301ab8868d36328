package api

import (
	"strconv"
	"unicode/utf8"
)

// AppendCheckResult appends the JSON of r to dst. An r with Error set is
// encoded as an error item (see [AppendError]).
func AppendCheckResult(dst []byte, r *CheckResult) []byte {
	if r.Error != "" {
		return AppendError(dst, r.Error, r.Field)
	}
	dst = append(dst, `{"allowed":`...)
	dst = strconv.AppendBool(dst, r.Allowed)
	dst = append(dst, `,"rule":`...)
	dst = AppendString(dst, r.Rule)
	dst = append(dst, `,"key":`...)
	dst = AppendString(dst, r.Key)
	dst = append(dst, `,"limit":`...)
	dst = strconv.AppendInt(dst, r.Limit, 10)
	dst = append(dst, `,"remaining":`...)
	dst = strconv.AppendInt(dst, r.Remaining, 10)
	dst = append(dst, `,"reset_ms":`...)
	dst = strconv.AppendInt(dst, r.ResetMS, 10)
	dst = append(dst, `,"retry_after_ms":`...)
	dst = strconv.AppendInt(dst, r.RetryAfterMS, 10)
	if r.Degraded {
		dst = append(dst, `,"degraded":true`...)
	}
	if r.LeaseID != "" {
		dst = append(dst, `,"lease_id":`...)
		dst = AppendString(dst, r.LeaseID)
	}
	return append(dst, '}')
}

// AppendResults appends {"results":[...]} holding rs in order.
func AppendResults(dst []byte, rs []CheckResult) []byte {
	dst = append(dst, `{"results":[`...)
	for i := range rs {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendCheckResult(dst, &rs[i])
	}
	return append(dst, "]}"...)
}

// AppendError appends {"error":msg,"field":field}; "field" is left out
// when field is empty.
func AppendError(dst []byte, msg, field string) []byte {
	dst = append(dst, `{"error":`...)
	dst = AppendString(dst, msg)
	if field != "" {
		dst = append(dst, `,"field":`...)
		dst = AppendString(dst, field)
	}
	return append(dst, '}')
}

// AppendFieldError appends the error body of err: a *FieldError gives its
// field and message; any other error its text.
func AppendFieldError(dst []byte, err error) []byte {
	if fe, ok := err.(*FieldError); ok {
		return AppendError(dst, fe.Msg, fe.Field)
	}
	return AppendError(dst, err.Error(), "")
}

// AppendCheckRequest appends the JSON body of POST /v1/check for r.
func AppendCheckRequest(dst []byte, r *CheckRequest) []byte {
	dst = append(dst, '{')
	sep := false
	if r.Rule != "" {
		dst = append(dst, `"rule":`...)
		dst = AppendString(dst, r.Rule)
		dst = append(dst, `,"key":`...)
		dst = AppendString(dst, r.Key)
		sep = true
	}
	if len(r.Descriptors) > 0 {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"descriptors":{`...)
		for i, d := range r.Descriptors {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = AppendString(dst, d.Name)
			dst = append(dst, ':')
			dst = AppendString(dst, d.Value)
		}
		dst = append(dst, '}')
		sep = true
	}
	if r.HitsSet || r.Hits > 1 {
		if sep {
			dst = append(dst, ',')
		}
		dst = append(dst, `"hits":`...)
		dst = strconv.AppendInt(dst, r.Hits, 10)
	}
	return append(dst, '}')
}

// AppendChecksRequest appends the JSON body of POST /v1/checks for r.
func AppendChecksRequest(dst []byte, r *ChecksRequest) []byte {
	dst = append(dst, `{"checks":[`...)
	for i := range r.Checks {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendCheckRequest(dst, &r.Checks[i])
	}
	return append(dst, "]}"...)
}

// AppendAcquireRequest appends the JSON body of POST /v1/acquire for r;
// like [CheckRequest], hits is written when HitsSet or Hits > 1.
func AppendAcquireRequest(dst []byte, r *AcquireRequest) []byte {
	dst = append(dst, `{"rule":`...)
	dst = AppendString(dst, r.Rule)
	dst = append(dst, `,"key":`...)
	dst = AppendString(dst, r.Key)
	if r.HitsSet || r.Hits > 1 {
		dst = append(dst, `,"hits":`...)
		dst = strconv.AppendInt(dst, r.Hits, 10)
	}
	return append(dst, '}')
}

// AppendReleaseRequest appends the JSON body of POST /v1/release for r;
// an empty Rule or Key is left out.
func AppendReleaseRequest(dst []byte, r *ReleaseRequest) []byte {
	dst = append(dst, `{"lease_id":`...)
	dst = AppendString(dst, r.LeaseID)
	if r.Rule != "" {
		dst = append(dst, `,"rule":`...)
		dst = AppendString(dst, r.Rule)
	}
	if r.Key != "" {
		dst = append(dst, `,"key":`...)
		dst = AppendString(dst, r.Key)
	}
	return append(dst, '}')
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string. Quotes, backslashes and control
// characters are escaped; invalid UTF-8 becomes U+FFFD, so the output is
// always valid JSON. U+2028 and U+2029 are escaped for JavaScript readers.
func AppendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += n
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\u202`...)
			dst = append(dst, hexDigits[r&0xf])
			i += n
			start = i
			continue
		}
		i += n
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
