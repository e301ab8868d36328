package api

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The check decoders are a strict, single-pass JSON scanner (RFC 8259)
// specialised for the check shapes: the hot path reads the body once,
// without copying it and without building a tree. Strings without escapes
// are used in place; escaped ones are unescaped into a small stack buffer.

// maxDepth bounds the nesting of ignored (unknown) fields.
const maxDepth = 64

// scanner reads JSON from data; a syntax error stops it (err is set and
// every later read fails).
type scanner struct {
	data []byte
	pos  int
	err  *FieldError
	// view: decoded strings are views of data, or of *arena for escaped
	// ones (DecodeCheckView, DecodeChecksView); otherwise copies.
	view  bool
	arena *[]byte
}

// set stores the decoded string v in *dst: a copy (allocating only when
// the value changed), or in view mode a view of v when v lies in s.data,
// else of a copy appended to s.arena. The arena is only appended to during
// one decode; when full it is replaced by a new array, so earlier views
// never change.
func (s *scanner) set(dst *string, v []byte) {
	if !s.view {
		setString(dst, v)
		return
	}
	if len(v) == 0 {
		*dst = ""
		return
	}
	// The view is made from s.data or the arena, never from v, so that v
	// (often a stack buffer of unescaped bytes) does not escape.
	p, base := uintptr(unsafe.Pointer(unsafe.SliceData(v))), uintptr(unsafe.Pointer(unsafe.SliceData(s.data)))
	if p >= base && p+uintptr(len(v)) <= base+uintptr(len(s.data)) {
		*dst = unsafe.String(&s.data[p-base], len(v))
		return
	}
	a := *s.arena
	if cap(a)-len(a) < len(v) {
		a = make([]byte, 0, max(2*cap(a), len(v), 1024))
	}
	start := len(a)
	a = append(a, v...)
	*s.arena = a
	*dst = unsafe.String(&a[start], len(v))
}

func (s *scanner) fail(msg string) {
	if s.err == nil {
		s.err = &FieldError{Msg: "invalid JSON at offset " + strconv.Itoa(s.pos) + ": " + msg}
	}
	s.pos = len(s.data)
}

func (s *scanner) ws() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

// peek skips whitespace and returns the next byte (0 at the end).
func (s *scanner) peek() byte {
	s.ws()
	if s.pos < len(s.data) {
		return s.data[s.pos]
	}
	return 0
}

// expect consumes c after optional whitespace.
func (s *scanner) expect(c byte) bool {
	if s.peek() != c {
		s.fail("expected " + strconv.QuoteRune(rune(c)))
		return false
	}
	s.pos++
	return true
}

// next reads ',' (true: another element follows) or the closing byte
// (false), failing on anything else.
func (s *scanner) next(closing byte) bool {
	switch s.peek() {
	case ',':
		s.pos++
		return true
	case closing:
		s.pos++
		return false
	}
	s.fail("expected ',' or " + strconv.QuoteRune(rune(closing)))
	return false
}

// str reads a string (s.pos at its opening quote). raw is its bytes between
// the quotes; escaped reports whether raw holds escapes. Strings are
// checked for control characters and valid escapes, not for UTF-8.
func (s *scanner) str() (raw []byte, escaped bool) {
	if s.peek() != '"' {
		s.fail("expected a string")
		return nil, false
	}
	s.pos++
	start := s.pos
	for s.pos < len(s.data) {
		c := s.data[s.pos]
		switch {
		case c == '"':
			raw = s.data[start:s.pos]
			s.pos++
			return raw, escaped
		case c == '\\':
			escaped = true
			if s.pos+1 >= len(s.data) {
				s.fail("unterminated string")
				return nil, false
			}
			switch s.data[s.pos+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.pos += 2
			case 'u':
				if s.pos+6 > len(s.data) || !isHex4(s.data[s.pos+2:s.pos+6]) {
					s.fail(`invalid \u escape`)
					return nil, false
				}
				s.pos += 6
			default:
				s.fail("invalid escape")
				return nil, false
			}
		case c < 0x20:
			s.fail("control character in string")
			return nil, false
		default:
			s.pos++
		}
	}
	s.fail("unterminated string")
	return nil, false
}

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if unhex(c) < 0 {
			return false
		}
	}
	return true
}

// unescapeJSON appends the unescaped form of the valid string body raw to
// dst, stopping (ok false) once it would exceed max bytes. Lone surrogates
// become U+FFFD.
func unescapeJSON(dst, raw []byte, max int) ([]byte, bool) {
	for i := 0; i < len(raw); {
		if len(dst) > max {
			return dst, false
		}
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch raw[i+1] {
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(raw[i+2:])
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := utf8.RuneError
				if i+6 <= len(raw) && raw[i] == '\\' && raw[i+1] == 'u' {
					if d := utf16.DecodeRune(r, hex4(raw[i+2:])); d != utf8.RuneError {
						r2 = d
						i += 6
					}
				}
				r = r2
			}
			dst = utf8.AppendRune(dst, r)
			continue
		default: // '"', '\\', '/'
			dst = append(dst, raw[i+1])
		}
		i += 2
	}
	return dst, len(dst) <= max
}

func hex4(b []byte) rune {
	return rune(unhex(b[0])<<12 | unhex(b[1])<<8 | unhex(b[2])<<4 | unhex(b[3]))
}

// number reads a number; isInt reports whether it has neither fraction
// nor exponent.
func (s *scanner) number() (raw []byte, isInt bool) {
	s.ws()
	start := s.pos
	d := s.data
	i := s.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && d[i] >= '1' && d[i] <= '9':
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	default:
		s.pos = i
		s.fail("invalid number")
		return nil, false
	}
	isInt = true
	if i < len(d) && d[i] == '.' {
		isInt = false
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			s.pos = i
			s.fail("invalid number")
			return nil, false
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		isInt = false
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			s.pos = i
			s.fail("invalid number")
			return nil, false
		}
		for i < len(d) && d[i] >= '0' && d[i] <= '9' {
			i++
		}
	}
	s.pos = i
	return d[start:i], isInt
}

// literal consumes lit ("true", "false", "null") if it is next.
func (s *scanner) literal(lit string) bool {
	s.ws()
	if len(s.data)-s.pos >= len(lit) && string(s.data[s.pos:s.pos+len(lit)]) == lit {
		s.pos += len(lit)
		return true
	}
	return false
}

// null consumes a null if it is next.
func (s *scanner) null() bool { return s.peek() == 'n' && s.literal("null") }

// skip reads and discards any value.
func (s *scanner) skip(depth int) {
	if depth > maxDepth {
		s.fail("nested too deeply")
		return
	}
	switch c := s.peek(); c {
	case '"':
		s.str()
	case '{':
		s.pos++
		if s.peek() == '}' {
			s.pos++
			return
		}
		for s.err == nil {
			s.str()
			s.expect(':')
			s.skip(depth + 1)
			if !s.next('}') {
				return
			}
		}
	case '[':
		s.pos++
		if s.peek() == ']' {
			s.pos++
			return
		}
		for s.err == nil {
			s.skip(depth + 1)
			if !s.next(']') {
				return
			}
		}
	case 't':
		if !s.literal("true") {
			s.fail("invalid literal")
		}
	case 'f':
		if !s.literal("false") {
			s.fail("invalid literal")
		}
	case 'n':
		if !s.literal("null") {
			s.fail("invalid literal")
		}
	case 0:
		s.fail("unexpected end of input")
	default:
		s.number()
	}
}

// end checks that only whitespace follows the top-level value.
func (s *scanner) end() {
	if s.err == nil && s.peek() != 0 || s.pos < len(s.data) {
		s.fail("unexpected data after the value")
	}
}

// fieldKey reads an object key into buf (unescaped); keys longer than buf
// come back truncated with ok false (they are never one of ours).
func (s *scanner) fieldKey(buf []byte) (key []byte, ok bool) {
	raw, esc := s.str()
	if s.err != nil {
		return nil, false
	}
	if !s.expect(':') {
		return nil, false
	}
	if !esc {
		return raw, true
	}
	return unescapeJSON(buf[:0], raw, cap(buf))
}

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

// flat is one scalar field of a small request object (acquire, release).
type flat struct {
	name         string
	set          bool // present and not null
	isStr, isNum bool
	tooLong      bool // an escaped string longer than limit
	str          []byte
	numRaw       []byte
	numInt       bool
	// limit bounds the unescaped length of an escaped string; zero means
	// MaxKeyLen.
	limit int
	buf   [maxFlatLen + utf8.UTFMax]byte
}

// maxFlatLen is the longest string a flat field holds: a key or a lease id.
const maxFlatLen = max(MaxKeyLen, MaxLeaseIDLen)

// decodeFlat reads a JSON object, filling the named fields; other fields are
// skipped. It reports syntax errors, a non-object body and repeated fields.
func decodeFlat(data []byte, fields []*flat) *FieldError {
	if len(data) > MaxBodyBytes {
		return &FieldError{Field: "body", Msg: "larger than 1048576 bytes"}
	}
	s := scanner{data: data}
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
		kb [16]byte
		fe *FieldError
	)
	if s.peek() == '}' {
		s.pos++
	} else {
		for s.err == nil {
			k, ok := s.fieldKey(kb[:])
			if s.err != nil {
				break
			}
			var f *flat
			for _, x := range fields {
				if ok && string(k) == x.name {
					f = x
				}
			}
			switch {
			case f == nil:
				s.skip(1)
			case s.null():
			default:
				if f.set && fe == nil {
					fe = &FieldError{Field: f.name, Msg: "given twice"}
				}
				f.set = true
				switch c := s.peek(); {
				case c == '"':
					f.isStr = true
					raw, esc := s.str()
					f.str = raw
					if esc {
						limit := f.limit
						if limit == 0 {
							limit = MaxKeyLen
						}
						f.str, ok = unescapeJSON(f.buf[:0], raw, limit)
						f.tooLong = !ok
					}
				case c == '-' || c >= '0' && c <= '9':
					f.isNum = true
					f.numRaw, f.numInt = s.number()
				default:
					s.skip(1)
				}
			}
			if !s.next('}') {
				break
			}
		}
	}
	s.end()
	if s.err != nil {
		return s.err
	}
	return fe
}

// text returns a required string field checked by valid; max is its bound,
// named when an escaped value overflows the buffer.
func (f *flat) text(max int, valid func([]byte) string) ([]byte, *FieldError) {
	switch {
	case !f.set:
		return nil, &FieldError{Field: f.name, Msg: "required"}
	case !f.isStr:
		return nil, &FieldError{Field: f.name, Msg: "must be a string"}
	case f.tooLong:
		return nil, &FieldError{Field: f.name, Msg: "longer than " + strconv.Itoa(max) + " bytes"}
	}
	if msg := valid(f.str); msg != "" {
		return nil, &FieldError{Field: f.name, Msg: msg}
	}
	return f.str, nil
}

// optText is text for an optional field: absent, null and "" give nil.
func (f *flat) optText(max int, valid func([]byte) string) ([]byte, *FieldError) {
	if !f.set || (f.isStr && len(f.str) == 0) {
		return nil, nil
	}
	return f.text(max, valid)
}

// hits returns the hits field (1 when absent).
func (f *flat) hits() (int64, *FieldError) {
	if !f.set {
		return 1, nil
	}
	if !f.isNum || !f.numInt {
		return 0, &FieldError{Field: f.name, Msg: "must be an integer"}
	}
	n, ok := parseInt(f.numRaw)
	if !ok || hitsMsg(n) != "" {
		return 0, &FieldError{Field: f.name, Msg: hitsMsg(-1)}
	}
	return n, nil
}

// DecodeAcquire decodes the body of POST /v1/acquire into dst.
func DecodeAcquire(data []byte, dst *AcquireRequest) error {
	rule, key, hits := flat{name: "rule"}, flat{name: "key"}, flat{name: "hits"}
	if fe := decodeFlat(data, []*flat{&rule, &key, &hits}); fe != nil {
		return fe
	}
	r, fe := rule.text(MaxRuleNameLen, nameMsg)
	if fe != nil {
		return fe
	}
	k, fe := key.text(MaxKeyLen, givenKeyMsg)
	if fe != nil {
		return fe
	}
	n, fe := hits.hits()
	if fe != nil {
		return fe
	}
	setString(&dst.Rule, r)
	setString(&dst.Key, k)
	dst.Hits, dst.HitsSet = n, hits.set
	return nil
}

// DecodeRelease decodes the body of POST /v1/release into dst. lease_id is
// required; rule and key are optional (absent, null or "" leave them empty
// in dst), and are checked like an acquire's when given.
func DecodeRelease(data []byte, dst *ReleaseRequest) error {
	rule, key, id := flat{name: "rule"}, flat{name: "key"}, flat{name: "lease_id", limit: MaxLeaseIDLen}
	if fe := decodeFlat(data, []*flat{&rule, &key, &id}); fe != nil {
		return fe
	}
	r, fe := rule.optText(MaxRuleNameLen, nameMsg)
	if fe != nil {
		return fe
	}
	k, fe := key.optText(MaxKeyLen, givenKeyMsg)
	if fe != nil {
		return fe
	}
	l, fe := id.text(MaxLeaseIDLen, leaseIDMsg)
	if fe != nil {
		return fe
	}
	setString(&dst.Rule, r)
	setString(&dst.Key, k)
	setString(&dst.LeaseID, l)
	return nil
}
