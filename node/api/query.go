package api

import (
	"bytes"
	"strconv"
	"unsafe"
)

// ParseCheckQuery parses the raw query string of GET /v1/check
// ("rule=per-key&key=user-42&hits=1", without the '?'; with fasthttp pass
// ctx.URI().QueryString()) into dst. rule and key are required; hits is
// optional (default 1). Values are percent-decoded, '+' meaning a space.
// A parameter given twice is an error; unknown parameters are ignored.
// Descriptor checks need the POST form.
func ParseCheckQuery(query []byte, dst *CheckRequest) error {
	return parseCheckQuery(query, dst, nil)
}

// ParseCheckQueryView is ParseCheckQuery without allocation: rule and key
// are views of *scratch (reset and reused by every call), valid until the
// next call with the same scratch. See DecodeCheckView.
func ParseCheckQueryView(query []byte, dst *CheckRequest, scratch *[]byte) error {
	return parseCheckQuery(query, dst, scratch)
}

func parseCheckQuery(query []byte, dst *CheckRequest, scratch *[]byte) error {
	if len(query) > MaxBodyBytes {
		return &FieldError{Field: "query", Msg: "longer than 1048576 bytes"}
	}
	var (
		buf                    [MaxKeyLen + 1]byte
		rule, key              []byte
		ruleBuf                [MaxRuleNameLen + 1]byte
		hits                   int64 = 1
		ruleSet, keySet, hitsS bool
	)
	for len(query) > 0 {
		var pair []byte
		if i := bytes.IndexByte(query, '&'); i >= 0 {
			pair, query = query[:i], query[i+1:]
		} else {
			pair, query = query, nil
		}
		if len(pair) == 0 {
			continue
		}
		name, val := pair, []byte(nil)
		if i := bytes.IndexByte(pair, '='); i >= 0 {
			name, val = pair[:i], pair[i+1:]
		}
		var nameBuf [8]byte
		n, ok := unescape(nameBuf[:0], name, len(nameBuf))
		if !ok {
			continue // not one of ours (or malformed): ignored like any unknown parameter
		}
		switch string(n) {
		case "rule":
			if ruleSet {
				return &FieldError{Field: "rule", Msg: "given twice"}
			}
			ruleSet = true
			if rule, ok = unescape(ruleBuf[:0], val, len(ruleBuf)); !ok {
				return &FieldError{Field: "rule", Msg: "invalid percent-encoding or longer than 64 bytes"}
			}
		case "key":
			if keySet {
				return &FieldError{Field: "key", Msg: "given twice"}
			}
			keySet = true
			if key, ok = unescape(buf[:0], val, len(buf)); !ok {
				return &FieldError{Field: "key", Msg: "invalid percent-encoding or longer than 256 bytes"}
			}
		case "hits":
			if hitsS {
				return &FieldError{Field: "hits", Msg: "given twice"}
			}
			hitsS = true
			var hb [24]byte
			h, ok := unescape(hb[:0], val, len(hb))
			if ok {
				hits, ok = parseInt(h)
			}
			if !ok {
				return &FieldError{Field: "hits", Msg: "must be an integer"}
			}
			if msg := hitsMsg(hits); msg != "" {
				return &FieldError{Field: "hits", Msg: msg}
			}
		}
	}
	if msg := nameMsg(rule); msg != "" {
		return &FieldError{Field: "rule", Msg: msg}
	}
	if msg := givenKeyMsg(key); msg != "" {
		return &FieldError{Field: "key", Msg: msg}
	}
	if scratch == nil {
		setString(&dst.Rule, rule)
		setString(&dst.Key, key)
	} else {
		a := (*scratch)[:0]
		if cap(a) < len(rule)+len(key) {
			a = make([]byte, 0, 1024)
		}
		a = append(append(a, rule...), key...)
		*scratch = a
		dst.Rule = unsafe.String(&a[0], len(rule))
		dst.Key = unsafe.String(&a[len(rule)], len(key))
	}
	dst.Descriptors = dst.Descriptors[:0]
	dst.Hits, dst.HitsSet = hits, hitsS
	dst.Err = nil
	return nil
}

// unescape appends the percent-decoding of s to dst ('+' is a space). ok
// is false on a malformed escape or when the result would exceed max bytes.
func unescape(dst, s []byte, max int) ([]byte, bool) {
	for i := 0; i < len(s); i++ {
		if len(dst) >= max {
			return dst, false
		}
		c := s[i]
		switch c {
		case '+':
			c = ' '
		case '%':
			if i+2 >= len(s) {
				return dst, false
			}
			h, l := unhex(s[i+1]), unhex(s[i+2])
			if h < 0 || l < 0 {
				return dst, false
			}
			c = byte(h<<4 | l)
			i += 2
		}
		dst = append(dst, c)
	}
	return dst, true
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// AppendCheckQuery appends the query string of GET /v1/check for rule, key
// and hits (without the '?'); hits is left out when it is 1.
func AppendCheckQuery(dst []byte, rule, key string, hits int64) []byte {
	dst = append(dst, "rule="...)
	dst = appendEscaped(dst, rule)
	dst = append(dst, "&key="...)
	dst = appendEscaped(dst, key)
	if hits != 1 {
		dst = append(dst, "&hits="...)
		dst = strconv.AppendInt(dst, hits, 10)
	}
	return dst
}

// appendEscaped percent-encodes every byte of s but unreserved ones
// (RFC 3986: A-Z a-z 0-9 - . _ ~).
func appendEscaped(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~' {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, '%', "0123456789ABCDEF"[c>>4], "0123456789ABCDEF"[c&0xf])
	}
	return dst
}
