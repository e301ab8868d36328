package api

import (
	"errors"
	"testing"
)

// TestGivenKeyLongKeyMark: every way a client gives a key as is refuses
// the escape pair that marks a long key's digest form, naming "key", and
// accepts a '\' and a '#' that do not form it.
func TestGivenKeyLongKeyMark(t *testing.T) {
	decoders := map[string]func(key string) error{
		"check": func(k string) error {
			return DecodeCheck([]byte(`{"rule":"r","key":"`+k+`"}`), &CheckRequest{})
		},
		"checks": func(k string) error {
			var req ChecksRequest
			if err := DecodeChecks([]byte(`{"checks":[{"rule":"r","key":"`+k+`"}]}`), &req); err != nil {
				return err
			}
			if fe := req.Checks[0].Err; fe != nil && fe.Field == "checks[0].key" {
				return &FieldError{Field: "key", Msg: fe.Msg}
			} else if fe != nil {
				return fe
			}
			return nil
		},
		"query": func(k string) error { return ParseCheckQuery([]byte("rule=r&key="+k), &CheckRequest{}) },
		"acquire": func(k string) error {
			return DecodeAcquire([]byte(`{"rule":"r","key":"`+k+`"}`), &AcquireRequest{})
		},
		"release": func(k string) error {
			return DecodeRelease([]byte(`{"rule":"r","key":"`+k+`","lease_id":"r~x"}`), &ReleaseRequest{})
		},
	}
	// JSON-escaped and percent-encoded forms of a\#b, \#, a\\#b and a#b\.
	for name, dec := range decoders {
		refused, ok := []string{`a\\#b`, `\\#`}, []string{`a\\\\#b`, `a#b\\`}
		if name == "query" {
			refused, ok = []string{`a%5C%23b`, `%5C%23`}, []string{`a%5C%5C%23b`, `a%23b%5C`}
		}
		for _, k := range refused {
			var fe *FieldError
			if err := dec(k); !errors.As(err, &fe) || fe.Field != "key" {
				t.Errorf("%s: key %s: %v, want a FieldError on key", name, k, err)
			}
		}
		for _, k := range ok {
			var fe *FieldError
			if err := dec(k); errors.As(err, &fe) && fe.Field == "key" {
				t.Errorf("%s: key %s refused: %v", name, k, err)
			}
		}
	}
	if !ValidKey(`a\#b`) {
		t.Error(`ValidKey refuses a\#b: internal keys (digest forms) need it`)
	}
}
