package api

import (
	"strconv"
	"unicode/utf8"
)

// The decoders of the small flat request objects (POST /v1/acquire,
// /v1/release), on the scanner of scan.go.

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
