package bench

import (
	"bytes"
	"errors"
	"fmt"
)

// ScanResults reads a /v1/checks answer, {"results":[{...},...]}, and sets
// out[i] from each result's "allowed" member (Failed for an item without
// one, such as a per-item error) and "degraded": true. It returns the number of results, which
// must equal len(out) for the answer to match the request. It does not
// allocate and reads only what it needs, so a batch driver stays cheap at a
// million decisions per second; it accepts every valid JSON answer (and, by
// design, some invalid ones: it is a reader, not a validator).
func ScanResults(body []byte, out []Outcome) (int, error) {
	s := jscan{b: body}
	if !s.eat('{') {
		return 0, s.fail("want object")
	}
	n := -1
	for first := true; ; first = false {
		if s.eat('}') {
			break
		}
		if !first && !s.eat(',') {
			return 0, s.fail("want , or }")
		}
		key, ok := s.str()
		if !ok || !s.eat(':') {
			return 0, s.fail("want member")
		}
		if string(key) != "results" {
			if !s.skip(0) {
				return 0, s.fail("bad value")
			}
			continue
		}
		c, err := s.results(out)
		if err != nil {
			return 0, err
		}
		n = c
	}
	if n < 0 {
		return 0, fmt.Errorf("%w: no results member", ErrBadResponse)
	}
	return n, nil
}

func (s *jscan) results(out []Outcome) (int, error) {
	if !s.eat('[') {
		return 0, s.fail("results: want array")
	}
	n := 0
	for first := true; ; first = false {
		if s.eat(']') {
			return n, nil
		}
		if !first && !s.eat(',') {
			return 0, s.fail("results: want , or ]")
		}
		if !s.eat('{') {
			return 0, s.fail("results: want object")
		}
		o, degraded := Failed, false
		for ifirst := true; ; ifirst = false {
			if s.eat('}') {
				break
			}
			if !ifirst && !s.eat(',') {
				return 0, s.fail("result: want , or }")
			}
			key, ok := s.str()
			if !ok || !s.eat(':') {
				return 0, s.fail("result: want member")
			}
			if string(key) == "allowed" {
				s.ws()
				switch {
				case bytes.HasPrefix(s.b[s.i:], []byte("true")):
					o, s.i = Allowed, s.i+4
				case bytes.HasPrefix(s.b[s.i:], []byte("false")):
					o, s.i = Denied, s.i+5
				default:
					return 0, s.fail("allowed: want true or false")
				}
				continue
			}
			if string(key) == "degraded" {
				s.ws()
				if bytes.HasPrefix(s.b[s.i:], []byte("true")) {
					degraded, s.i = true, s.i+4
					continue
				}
			}
			if !s.skip(0) {
				return 0, s.fail("result: bad value")
			}
		}
		if degraded {
			o = o.degrade()
		}
		if n < len(out) {
			out[n] = o
		}
		n++
	}
}

type jscan struct {
	b []byte
	i int
}

var errScan = errors.New("cannot read /v1/checks answer")

func (s *jscan) fail(what string) error {
	return fmt.Errorf("%w: %w: %s at byte %d", ErrBadResponse, errScan, what, s.i)
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *jscan) eat(c byte) bool {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string and returns its raw content (escapes not decoded:
// the member names compared against have none).
func (s *jscan) str() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	b := s.b
	for i := start; i < len(b); i++ {
		switch b[i] {
		case '"':
			s.i = i + 1
			return b[start:i], true
		case '\\':
			i++ // skip the escaped byte
		}
	}
	s.i = len(b)
	return nil, false
}

const maxScanDepth = 64

// skip passes over one value of any type.
func (s *jscan) skip(depth int) bool {
	if depth > maxScanDepth {
		return false
	}
	s.ws()
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; c {
	case '"':
		_, ok := s.str()
		return ok
	case '{':
		s.i++
		for first := true; ; first = false {
			if s.eat('}') {
				return true
			}
			if !first && !s.eat(',') {
				return false
			}
			if _, ok := s.str(); !ok || !s.eat(':') || !s.skip(depth+1) {
				return false
			}
		}
	case '[':
		s.i++
		for first := true; ; first = false {
			if s.eat(']') {
				return true
			}
			if !first && !s.eat(',') {
				return false
			}
			if !s.skip(depth + 1) {
				return false
			}
		}
	default: // number, true, false, null
		start := s.i
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return s.i > start
			}
			s.i++
		}
		return s.i > start
	}
}
