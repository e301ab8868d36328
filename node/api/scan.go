package api

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
	"unsafe"
)

// The request decoders (scan_checks.go, scan_flat.go, scan_results.go)
// run on this strict, single-pass JSON scanner (RFC 8259), specialised for
// their shapes: the hot path reads the body once, without copying it and
// without building a tree. Strings without escapes are used in place;
// escaped ones are unescaped into a small stack buffer.

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
