package api

import (
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

var checkSeeds = []string{
	`{"rule":"per-key","key":"user-42","hits":1}`,
	`{"rule":"per-key","key":"user-42"}`,
	`{"descriptors":{"api_key":"k1","path":"/a"},"hits":0}`,
	`{"rule":"r","key":"a\"b\\c\u00e9\ud83d\ude00"}`,
	`{"rule":"r","key":"k","hits":1099511627776,"x":[{}]}`,
	`{"rule":"r","key":"k","hits":1.5}`,
	`{"rule":null,"key":"k"}`,
	`{"descriptors":{"a":"1","a":"2"}}`,
	`{"rule":"r","key":"\u0000"}`,
	`{"rule":"r","key":"k\/"}`,
	`{"rule":"r","key":"k\x"}`,
	`[`, `{`, `""`, `nan`, `{"hits":-0}`,
}

// normalize makes a decoded request comparable after a round trip.
func normalize(r CheckRequest) CheckRequest {
	if len(r.Descriptors) == 0 {
		r.Descriptors = nil
	}
	return r
}

func FuzzDecodeCheck(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req CheckRequest
		if err := DecodeCheck(data, &req); err != nil {
			if _, ok := err.(*FieldError); !ok {
				t.Fatalf("error %v is not a *FieldError", err)
			}
			return
		}
		enc := AppendCheckRequest(nil, &req)
		var again CheckRequest
		if err := DecodeCheck(enc, &again); err != nil {
			t.Fatalf("re-encoded %s fails: %v (from %q)", enc, err, data)
		}
		if a, b := normalize(req), normalize(again); !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip of %q via %s:\n %+v\n %+v", data, enc, a, b)
		}
	})
}

func FuzzDecodeChecks(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add([]byte(`{"checks":[` + s + `]}`))
	}
	f.Add([]byte(`{"checks":[{"rule":"a","key":"b"},{"descriptors":{"x":"y"}},1,null]}`))
	f.Add([]byte(`{"checks":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var req ChecksRequest
		if err := DecodeChecks(data, &req); err != nil {
			return
		}
		if len(req.Checks) == 0 || len(req.Checks) > MaxBatch {
			t.Fatalf("accepted %d checks", len(req.Checks))
		}
		valid := ChecksRequest{}
		for _, c := range req.Checks {
			if c.Err == nil {
				valid.Checks = append(valid.Checks, c)
			} else if c.Err.Field == "" {
				t.Fatalf("item error without field: %v", c.Err)
			}
		}
		if len(valid.Checks) == 0 {
			return
		}
		enc := AppendChecksRequest(nil, &valid)
		var again ChecksRequest
		if err := DecodeChecks(enc, &again); err != nil {
			t.Fatalf("re-encoded %s fails: %v", enc, err)
		}
		for i := range valid.Checks {
			if a, b := normalize(valid.Checks[i]), normalize(again.Checks[i]); !reflect.DeepEqual(a, b) {
				t.Fatalf("round trip of checks[%d] via %s:\n %+v\n %+v", i, enc, a, b)
			}
		}
	})
}

func FuzzParseCheckQuery(f *testing.F) {
	for _, s := range []string{
		"rule=per-key&key=user-42&hits=1", "rule=r&key=a%2Fb+c", "rule=r&key=%zz", "rule=r&key=k&hits=-1",
		"rule=r&rule=r&key=k", "&&=&rule=r&key=%C3%A9", "rule=r&key=" + string(make([]byte, 300)),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, q []byte) {
		var req CheckRequest
		if err := ParseCheckQuery(q, &req); err != nil {
			return
		}
		// The client's encoder gives the same request back.
		var back CheckRequest
		qq := AppendCheckQuery(nil, req.Rule, req.Key, req.Hits)
		if err := ParseCheckQuery(qq, &back); err != nil || back.Rule != req.Rule || back.Key != req.Key || back.Hits != req.Hits {
			t.Fatalf("query %q → %q → %+v, %v; want %+v", q, qq, back, err, req)
		}
		// An accepted query is a valid JSON request too, with the same value.
		enc := AppendCheckRequest(nil, &req)
		var again CheckRequest
		if err := DecodeCheck(enc, &again); err != nil {
			t.Fatalf("query %q → %s fails: %v", q, enc, err)
		}
		if a, b := normalize(req), normalize(again); !reflect.DeepEqual(a, b) {
			t.Fatalf("round trip of %q via %s:\n %+v\n %+v", q, enc, a, b)
		}
	})
}

func FuzzDecodeResults(f *testing.F) {
	f.Add([]byte(`{"results":[{"allowed":true,"rule":"a","key":"k","limit":1,"remaining":0,"reset_ms":5,"retry_after_ms":0},{"error":"e","field":"f"}]}`))
	f.Add([]byte(`{"error":"x"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := DecodeResults(data, nil)
		if err != nil {
			return
		}
		// Results without an error re-encode to the same value (an error
		// item keeps only error and field).
		for i := range rs {
			if rs[i].Error != "" {
				rs[i] = CheckResult{Error: rs[i].Error, Field: rs[i].Field}
			} else {
				rs[i].Field = "" // only error items carry a field
			}
		}
		again, err := DecodeResults(AppendResults(nil, rs), nil)
		if err != nil {
			t.Fatalf("re-encoded results fail: %v", err)
		}
		if len(again) != len(rs) {
			t.Fatalf("got %d results, want %d", len(again), len(rs))
		}
		for i := range rs {
			want := rs[i]
			// The encoder replaces invalid UTF-8 with U+FFFD.
			if !reflect.DeepEqual(again[i], want) && validUTF8(want) {
				t.Fatalf("results[%d]: %+v, want %+v", i, again[i], want)
			}
		}
	})
}

func validUTF8(r CheckResult) bool {
	for _, s := range []string{r.Rule, r.Key, r.LeaseID, r.Error, r.Field} {
		if keyMsg([]byte(s)) == "must be valid UTF-8" {
			return false
		}
	}
	return true
}

// FuzzDecodeCheckOracle compares the scanner with the former fastjson
// decoder (oracle_test.go) and encoding/json's validator: the scanner is
// stricter (RFC 8259, no duplicate fields), and otherwise agrees.
func FuzzDecodeCheckOracle(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"r\u0075le":"r","key":"k\u00e9\ud83d\ude00"}`))
	f.Add([]byte(`{"descriptors":{"a\u0062":"x\/y"},"hits":-0}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want CheckRequest
		err := DecodeCheck(data, &got)
		oerr := fjDecodeCheck(data, &want)
		surrogates := surrogateEscape.Match(data)
		if err == nil {
			if !json.Valid(data) {
				t.Fatalf("scanner accepted invalid JSON %q", data)
			}
			if oerr != nil {
				t.Fatalf("scanner accepted %q, oracle: %v", data, oerr)
			}
			if a, b := normalize(got), normalize(want); !surrogates && !reflect.DeepEqual(a, b) {
				t.Fatalf("%q:\n scanner %+v\n oracle  %+v", data, a, b)
			}
			return
		}
		if oerr == nil && json.Valid(data) && !strings.Contains(err.Error(), "given twice") && !surrogates {
			t.Fatalf("scanner refused valid %q (%v); oracle accepted %+v", data, err, want)
		}
	})
}

func FuzzDecodeChecksOracle(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add([]byte(`{"checks":[` + s + `,{"rule":"a","key":"b"}]}`))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var got, want ChecksRequest
		err := DecodeChecks(data, &got)
		oerr := fjDecodeChecks(data, &want)
		if err != nil || oerr != nil || surrogateEscape.Match(data) {
			if err == nil && (oerr != nil || !json.Valid(data)) {
				t.Fatalf("scanner accepted %q; oracle: %v, valid %v", data, oerr, json.Valid(data))
			}
			return
		}
		if len(got.Checks) != len(want.Checks) {
			t.Fatalf("%q: %d checks, oracle %d", data, len(got.Checks), len(want.Checks))
		}
		for i := range got.Checks {
			g, w := got.Checks[i], want.Checks[i]
			if (g.Err == nil) != (w.Err == nil) {
				if g.Err != nil && strings.Contains(g.Err.Msg, "given twice") {
					continue
				}
				t.Fatalf("%q: checks[%d] err %v, oracle %v", data, i, g.Err, w.Err)
			}
			if g.Err == nil && !reflect.DeepEqual(normalize(g), normalize(w)) {
				t.Fatalf("%q: checks[%d]\n scanner %+v\n oracle  %+v", data, i, g, w)
			}
		}
	})
}

var surrogateEscape = regexp.MustCompile(`\\u[dD][89a-fA-F]`)

func FuzzDecodeResultsOracle(f *testing.F) {
	f.Add([]byte(`{"results":[{"allowed":true,"rule":"a","key":"k\n","limit":1,"remaining":0,"reset_ms":5,"retry_after_ms":0,"degraded":false,"lease_id":"x"},{"error":"e","field":"f"}]}`))
	f.Add([]byte(`{"error":"x","field":"checks"}`))
	f.Add([]byte(`{"results":[{"allowed":null,"limit":-3,"x":{"y":[1,2]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeResults(data, nil)
		want, oerr := fjDecodeResults(data, nil)
		if surrogateEscape.Match(data) {
			return
		}
		if err == nil {
			if !json.Valid(data) || oerr != nil {
				t.Fatalf("scanner accepted %q; oracle %v, valid %v", data, oerr, json.Valid(data))
			}
			if len(got) != len(want) {
				t.Fatalf("%q: %d results, oracle %d", data, len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("%q: results[%d]\n scanner %+v\n oracle  %+v", data, i, got[i], want[i])
				}
			}
			var one, oone CheckResult
			if len(got) > 0 {
				body := AppendCheckResult(nil, &got[0])
				if e1, e2 := DecodeCheckResult(body, &one), fjDecodeCheckResult(body, &oone); e1 != nil || e2 != nil || one != oone {
					t.Fatalf("DecodeCheckResult(%s) = %+v %v, oracle %+v %v", body, one, e1, oone, e2)
				}
			}
			return
		}
		if oerr == nil && json.Valid(data) && !strings.Contains(err.Error(), "given twice") {
			t.Fatalf("scanner refused valid %q (%v); oracle accepted %+v", data, err, want)
		}
	})
}

func FuzzDecodeAcquireReleaseOracle(f *testing.F) {
	f.Add([]byte(`{"rule":"uploads","key":"u\u00e9","hits":0,"lease_id":"abc"}`))
	f.Add([]byte(`{"rule":"uploads","key":"u","x":[{}],"lease_id":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if surrogateEscape.Match(data) {
			return
		}
		valid := json.Valid(data)
		var a, oa AcquireRequest
		err, oerr := DecodeAcquire(data, &a), fjDecodeAcquire(data, &oa)
		if err == nil && (!valid || oerr != nil || a != oa) {
			t.Fatalf("acquire %q: %+v; oracle %+v %v; valid %v", data, a, oa, oerr, valid)
		}
		if err != nil && oerr == nil && valid && !strings.Contains(err.Error(), "given twice") {
			t.Fatalf("acquire refused valid %q (%v); oracle %+v", data, err, oa)
		}
		var r, or ReleaseRequest
		err, oerr = DecodeRelease(data, &r), fjDecodeRelease(data, &or)
		if err == nil && (!valid || oerr != nil || r != or) {
			t.Fatalf("release %q: %+v; oracle %+v %v; valid %v", data, r, or, oerr, valid)
		}
		if err != nil && oerr == nil && valid && !strings.Contains(err.Error(), "given twice") {
			t.Fatalf("release refused valid %q (%v); oracle %+v", data, err, or)
		}
	})
}
