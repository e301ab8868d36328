package engine

import (
	"unicode/utf8"

	"github.com/sluicehq/sluice/lease"
)

// MaxKeyLen bounds a key, in bytes (the public API's and the forwarding
// wire's bound).
const MaxKeyLen = 256

// KeyProblem says what is wrong with key, or "" when it is valid: 1 to
// MaxKeyLen bytes of UTF-8 without control characters (TextProblem: C0,
// DEL and C1, U+0000 to U+001F and U+007F to U+009F), the public API's
// rule for keys (node/api's, which tests hold equal). It is the one key validation: Decide
// applies it to every item before routing (so a key a peer would refuse
// is never sent to it, nor decided here instead), and so do the owner
// side (DecideOwned) and the internal endpoint.
func KeyProblem(key string) string {
	switch {
	case len(key) == 0:
		return "required"
	case len(key) > MaxKeyLen:
		return "longer than 256 bytes"
	}
	return TextProblem(key)
}

// TextProblem says what is wrong with s, a key or a value a front end
// builds a key from (a forward-auth header's, an RLS descriptor's), or ""
// when it is valid UTF-8 without control characters. Front ends that
// shorten long keys to a digest check their values with it first, so that
// what the digest hides is checked too.
func TextProblem(s string) string {
	i := 0
	// Eight bytes at a time while they are printable ASCII (the common
	// key): no byte with its high bit set, none below 0x20, none 0x7f.
	for ; i+8 <= len(s); i += 8 {
		_ = s[i+7] // one bounds check for the eight
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		del := x ^ 0x7f7f7f7f7f7f7f7f // a 0x7f byte becomes 0
		if (x|((x-0x2020202020202020)&^x)|((del-0x0101010101010101)&^del))&0x8080808080808080 != 0 {
			break // a byte to look at one by one
		}
	}
	for ; i < len(s); i++ {
		if s[i]-0x20 >= 0x7f-0x20 { // not printable ASCII: one comparison
			break
		}
	}
	for i < len(s) {
		c := s[i]
		if c-0x20 < 0x7f-0x20 {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			return "must not hold control characters"
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 {
			return "must be valid UTF-8"
		}
		if r <= 0x9f { // C1 controls, U+0080 to U+009F
			return "must not hold control characters"
		}
		i += n
	}
	return ""
}

// fieldError is the error of a request's field: lease.FieldError, which
// front ends answer as a bad request naming the field.
func fieldError(field, msg string) error {
	return &lease.FieldError{Field: field, Msg: msg}
}
