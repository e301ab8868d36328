package api

import (
	"strconv"
	"unicode/utf8"
)

// The decoders of check requests (POST /v1/check, /v1/checks), on the
// scanner of scan.go.

// checkFields is what one check object held.
type checkFields struct {
	ruleSet, keySet, hitsSet, descSet bool
	hits                              int64
}

// DecodeCheck decodes the body of POST /v1/check into dst, reusing dst's
// storage, and validates it. The error, if any, is a [*FieldError]. The
// JSON must be valid (RFC 8259); a field given twice is an error.
func DecodeCheck(data []byte, dst *CheckRequest) error {
	return decodeCheck(scanner{data: data}, dst)
}

// DecodeCheckView is DecodeCheck without copies, for a server's hot path:
// the decoded strings are views of data, or, for strings with escapes, of
// *scratch (reset and reused by every call). They are valid only while
// data and *scratch are unchanged, and until dst is decoded into again;
// copy any string that must outlive the request. Do not mix DecodeCheck
// and DecodeCheckView on one dst. It allocates nothing after warm-up.
func DecodeCheckView(data []byte, dst *CheckRequest, scratch *[]byte) error {
	*scratch = (*scratch)[:0]
	return decodeCheck(scanner{data: data, view: true, arena: scratch}, dst)
}

func decodeCheck(s scanner, dst *CheckRequest) error {
	if len(s.data) > MaxBodyBytes {
		return &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	dst.Err = nil
	if s.peek() != '{' {
		s.skip(0)
		s.end()
		if s.err != nil {
			return s.err
		}
		return &FieldError{Msg: "body must be a JSON object"}
	}
	fe := s.check(dst, -1, "")
	s.end()
	if s.err != nil {
		return s.err
	}
	if fe != nil {
		return fe
	}
	return nil
}

// DecodeChecks decodes the body of POST /v1/checks into dst, reusing the
// capacity of dst.Checks. It fails only when the body as a whole is bad
// (not JSON, no "checks" array, more than MaxBatch checks); an invalid item
// sets that item's Err, whose Field names it ("checks[3].key"), and the
// other items are decoded normally.
func DecodeChecks(data []byte, dst *ChecksRequest) error {
	return decodeChecks(scanner{data: data}, dst)
}

// DecodeChecksView is DecodeChecks without copies: see DecodeCheckView for
// the life of the decoded strings.
func DecodeChecksView(data []byte, dst *ChecksRequest, scratch *[]byte) error {
	*scratch = (*scratch)[:0]
	return decodeChecks(scanner{data: data, view: true, arena: scratch}, dst)
}

func decodeChecks(s scanner, dst *ChecksRequest) error {
	if len(s.data) > MaxBodyBytes {
		return &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	if s.peek() != '{' {
		s.skip(0)
		s.end()
		if s.err != nil {
			return s.err
		}
		return &FieldError{Msg: "body must be a JSON object"}
	}
	s.pos++
	var (
		kb     [16]byte
		seen   bool
		fe     *FieldError
		checks = dst.Checks[:0]
	)
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			if !ok || string(k) != "checks" {
				s.skip(1)
			} else if seen {
				fe = &FieldError{Field: "checks", Msg: "given twice"}
				s.skip(1)
			} else {
				seen = true
				if s.null() {
					seen = false
				} else if s.peek() != '[' {
					if fe == nil {
						fe = &FieldError{Field: "checks", Msg: "must be an array"}
					}
					s.skip(1)
				} else {
					checks = s.checkList(checks, &fe)
				}
			}
			if !s.next('}') {
				break
			}
		}
	}
	s.end()
	dst.Checks = checks
	switch {
	case s.err != nil:
		return s.err
	case fe != nil:
		return fe
	case !seen:
		return &FieldError{Field: "checks", Msg: "required"}
	case len(checks) == 0:
		return &FieldError{Field: "checks", Msg: "must hold 1 to 1000 checks"}
	}
	return nil
}

// checkList reads the checks array (s.pos at '['), appending to checks.
func (s *scanner) checkList(checks []CheckRequest, fe **FieldError) []CheckRequest {
	s.pos++
	if s.peek() == ']' {
		s.pos++
		return checks
	}
	for s.err == nil {
		i := len(checks)
		if i == MaxBatch {
			if *fe == nil {
				*fe = &FieldError{Field: "checks", Msg: "must hold 1 to 1000 checks"}
			}
			s.skip(1)
		} else {
			if i < cap(checks) {
				checks = checks[:i+1]
			} else {
				checks = append(checks, CheckRequest{})
			}
			c := &checks[i]
			hint := ""
			if i > 0 {
				hint = checks[i-1].Rule // batches usually name one rule many times
			}
			if s.peek() == '{' {
				c.Err = s.check(c, i, hint)
			} else {
				s.skip(1)
				c.Err = &FieldError{Field: fieldName(i, ""), Msg: "must be a JSON object"}
			}
		}
		if !s.next(']') {
			break
		}
	}
	return checks
}

// check reads one check object (s.pos at '{') into dst. It always reads the
// whole object; a syntax error is left in s.err, the first validation error
// is returned.
func (s *scanner) check(dst *CheckRequest, idx int, hint string) *FieldError {
	s.pos++
	var (
		f   checkFields
		fe  *FieldError
		kb  [16]byte
		buf [MaxKeyLen + utf8.UTFMax]byte
	)
	bad := func(field, msg string) {
		if fe == nil {
			fe = &FieldError{Field: fieldName(idx, field), Msg: msg}
		}
	}
	// str reads a string field into buf: value, or ok false after bad().
	str := func(field string, max int) ([]byte, bool) {
		if s.peek() != '"' {
			s.skip(2)
			bad(field, "must be a string")
			return nil, false
		}
		raw, esc := s.str()
		if !esc {
			if len(raw) > max {
				bad(field, "longer than "+strconv.Itoa(max)+" bytes")
				return nil, false
			}
			return raw, true
		}
		v, ok := unescapeJSON(buf[:0], raw, max)
		if !ok {
			bad(field, "longer than "+strconv.Itoa(max)+" bytes")
		}
		return v, ok
	}
	dst.Descriptors = dst.Descriptors[:0]
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			name := ""
			if ok {
				switch string(k) {
				case "rule":
					name = "rule"
				case "key":
					name = "key"
				case "hits":
					name = "hits"
				case "descriptors":
					name = "descriptors"
				}
			}
			switch {
			case name == "":
				s.skip(2)
			case s.null():
			case name == "rule":
				if f.ruleSet {
					bad(name, "given twice")
				}
				f.ruleSet = true
				if v, ok := str(name, MaxRuleNameLen); ok {
					if msg := nameMsg(v); msg != "" {
						bad(name, msg)
					} else if string(v) == hint {
						dst.Rule = hint
					} else {
						s.set(&dst.Rule, v)
					}
				}
			case name == "key":
				if f.keySet {
					bad(name, "given twice")
				}
				f.keySet = true
				if v, ok := str(name, MaxKeyLen); ok {
					if msg := givenKeyMsg(v); msg != "" {
						bad(name, msg)
					} else {
						s.set(&dst.Key, v)
					}
				}
			case name == "hits":
				if f.hitsSet {
					bad(name, "given twice")
				}
				f.hitsSet = true
				if s.peek() == '-' || s.peek() >= '0' && s.peek() <= '9' {
					raw, isInt := s.number()
					n, ok := parseInt(raw)
					switch {
					case s.err != nil:
					case !isInt:
						bad(name, "must be an integer")
					case !ok || hitsMsg(n) != "":
						bad(name, hitsMsg(-1))
					default:
						f.hits = n
					}
				} else {
					s.skip(2)
					bad(name, "must be an integer")
				}
			case name == "descriptors":
				if f.descSet {
					bad(name, "given twice")
				}
				f.descSet = true
				s.descriptors(dst, idx, &fe, &buf)
			}
			if !s.next('}') {
				break
			}
		}
	}
	if fe != nil || s.err != nil {
		return fe
	}
	dst.Hits, dst.HitsSet = 1, f.hitsSet
	if f.hitsSet {
		dst.Hits = f.hits
	}
	if f.ruleSet {
		switch {
		case !f.keySet:
			return &FieldError{Field: fieldName(idx, "key"), Msg: "required with rule"}
		case len(dst.Descriptors) > 0:
			return &FieldError{Field: fieldName(idx, "descriptors"), Msg: "not allowed with rule"}
		}
		return nil
	}
	switch {
	case f.keySet:
		return &FieldError{Field: fieldName(idx, "key"), Msg: "only allowed with rule"}
	case len(dst.Descriptors) == 0:
		return &FieldError{Field: fieldName(idx, "rule"), Msg: "required (or descriptors)"}
	}
	dst.Rule, dst.Key = "", ""
	return nil
}

// descriptors reads the descriptors object into dst.Descriptors.
func (s *scanner) descriptors(dst *CheckRequest, idx int, fe **FieldError, buf *[MaxKeyLen + utf8.UTFMax]byte) {
	bad := func(field, msg string) {
		if *fe == nil {
			*fe = &FieldError{Field: fieldName(idx, field), Msg: msg}
		}
	}
	if s.peek() != '{' {
		s.skip(2)
		bad("descriptors", "must be an object of name: value")
		return
	}
	s.pos++
	if s.peek() == '}' {
		s.pos++
		return
	}
	ds := dst.Descriptors[:0]
	var nb [MaxRuleNameLen + utf8.UTFMax]byte
	for s.err == nil {
		raw, esc := s.str()
		if s.err != nil || !s.expect(':') {
			return
		}
		name, ok := raw, true
		if esc {
			name, ok = unescapeJSON(nb[:0], raw, MaxRuleNameLen)
		}
		switch {
		case *fe != nil:
			s.skip(3) // only the first error counts; keep scanning
		case len(ds) == MaxDescriptors:
			bad("descriptors", "more than 16 descriptors")
			s.skip(3)
		case !ok || nameMsg(name) != "":
			msg := "longer than 64 bytes"
			if ok {
				msg = nameMsg(name)
			}
			bad("descriptors", "name "+strconv.Quote(string(name))+": "+msg)
			s.skip(3)
		case hasDescriptor(ds, name):
			bad("descriptors."+string(name), "duplicate descriptor")
			s.skip(3)
		case s.peek() != '"':
			bad("descriptors."+string(name), "must be a string")
			s.skip(3)
		default:
			n := len(ds)
			if n < cap(ds) {
				ds = ds[:n+1]
			} else {
				ds = append(ds, Descriptor{})
			}
			s.set(&ds[n].Name, name) // before buf is reused for the value
			vraw, vesc := s.str()
			val, ok := vraw, len(vraw) <= MaxKeyLen
			if vesc && ok {
				val, ok = unescapeJSON(buf[:0], vraw, MaxKeyLen)
			}
			msg := "longer than 256 bytes"
			if ok {
				msg = keyMsg(val)
			}
			if msg != "" {
				bad("descriptors."+ds[n].Name, msg)
				ds = ds[:n]
			} else {
				s.set(&ds[n].Value, val)
			}
		}
		if !s.next('}') {
			break
		}
	}
	dst.Descriptors = ds
}

func hasDescriptor(ds []Descriptor, name []byte) bool {
	for i := range ds {
		if ds[i].Name == string(name) {
			return true
		}
	}
	return false
}
