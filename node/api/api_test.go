package api

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeCheck(t *testing.T) {
	long := strings.Repeat("k", MaxKeyLen)
	tests := []struct {
		name string
		body string
		want CheckRequest
	}{
		{"rule and key", `{"rule":"per-key","key":"user-42","hits":3}`,
			CheckRequest{Rule: "per-key", Key: "user-42", Hits: 3, HitsSet: true}},
		{"hits absent means 1", `{"rule":"per-key","key":"user-42"}`,
			CheckRequest{Rule: "per-key", Key: "user-42", Hits: 1}},
		{"hits 0 peeks", `{"rule":"r","key":"k","hits":0}`,
			CheckRequest{Rule: "r", Key: "k", Hits: 0, HitsSet: true}},
		{"hits null is absent", `{"rule":"r","key":"k","hits":null}`,
			CheckRequest{Rule: "r", Key: "k", Hits: 1}},
		{"max hits", `{"rule":"r","key":"k","hits":1099511627776}`,
			CheckRequest{Rule: "r", Key: "k", Hits: MaxHits, HitsSet: true}},
		{"unknown fields ignored", `{"rule":"r","key":"k","future":{"a":[1,2]},"x":null}`,
			CheckRequest{Rule: "r", Key: "k", Hits: 1}},
		{"escapes", `{"rule":"r","key":"a\"b\\c\u00e9\/"}`,
			CheckRequest{Rule: "r", Key: "a\"b\\cé/", Hits: 1}},
		{"longest key", `{"rule":"r","key":"` + long + `"}`,
			CheckRequest{Rule: "r", Key: long, Hits: 1}},
		{"descriptors in order", `{"descriptors":{"api_key":"k1","path":"/a"},"hits":2}`,
			CheckRequest{Descriptors: []Descriptor{{"api_key", "k1"}, {"path", "/a"}}, Hits: 2, HitsSet: true}},
		{"whitespace", " {\n\t\"rule\" : \"r\" , \"key\" : \"k\" }\n",
			CheckRequest{Rule: "r", Key: "k", Hits: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got CheckRequest
			if err := DecodeCheck([]byte(tt.body), &got); err != nil {
				t.Fatalf("DecodeCheck(%s): %v", tt.body, err)
			}
			if got.Descriptors == nil {
				got.Descriptors = nil
			} else if len(got.Descriptors) == 0 {
				got.Descriptors = nil
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("DecodeCheck(%s) = %+v, want %+v", tt.body, got, tt.want)
			}
		})
	}
}

func TestDecodeCheckErrors(t *testing.T) {
	tests := []struct {
		body, field, msg string
	}{
		{`not json`, "", "invalid JSON"},
		{`[1]`, "", "must be a JSON object"},
		{`{}`, "rule", "required (or descriptors)"},
		{`{"rule":"r"}`, "key", "required with rule"},
		{`{"rule":"r","key":""}`, "key", "required"},
		{`{"rule":"","key":"k"}`, "rule", "required"},
		{`{"rule":"bad name","key":"k"}`, "rule", "A-Z"},
		{`{"rule":"` + strings.Repeat("r", 65) + `","key":"k"}`, "rule", "longer than 64"},
		{`{"rule":"r","key":"` + strings.Repeat("k", 257) + `"}`, "key", "longer than 256"},
		{`{"rule":"r","key":"a\u0000b"}`, "key", "control"},
		{`{"rule":"r","key":"a` + "\xff" + `"}`, "key", "UTF-8"},
		{`{"rule":1,"key":"k"}`, "rule", "must be a string"},
		{`{"rule":"r","key":7}`, "key", "must be a string"},
		{`{"rule":"r","key":"k","hits":-1}`, "hits", "between 0 and"},
		{`{"rule":"r","key":"k","hits":1099511627777}`, "hits", "between 0 and"},
		{`{"rule":"r","key":"k","hits":1.5}`, "hits", "integer"},
		{`{"rule":"r","key":"k","hits":1e3}`, "hits", "integer"},
		{`{"rule":"r","key":"k","hits":"1"}`, "hits", "integer"},
		{`{"rule":"r","key":"k","hits":99999999999999999999}`, "hits", "between 0 and"},
		{`{"rule":"r","key":"k","rule":"s"}`, "rule", "given twice"},
		{`{"rule":"r","key":"k","hits":1,"hits":2}`, "hits", "given twice"},
		{`{"rule":"r","key":"k\x"}`, "", "invalid escape"},
		{`{"rule":"r","key":"k\u12"}`, "", "invalid \\u escape"},
		{"{\"rule\":\"r\",\"key\":\"a\tb\"}", "", "control character"},
		{`{"rule":"r","key":"k"} x`, "", "after the value"},
		{`{"rule":"r","key":"k"`, "", "expected ','"},
		{`{"rule":"r","key":"k","hits":NaN}`, "", "invalid number"},
		{`{"rule":"r","key":"k","hits":1.}`, "", "invalid number"},
		{`{"rule":"r","key":"k","x":tru}`, "", "invalid literal"},
		{`{"rule":"r","key":"k","x":` + strings.Repeat("[", 100) + strings.Repeat("]", 100) + `}`, "", "nested too deeply"},
		{``, "", "end of input"},
		{`"s"`, "", "must be a JSON object"},
		{`{"rule":"r","key":"k","descriptors":{"a":"b"}}`, "descriptors", "not allowed with rule"},
		{`{"key":"k","descriptors":{"a":"b"}}`, "key", "only allowed with rule"},
		{`{"descriptors":{}}`, "rule", "required"},
		{`{"descriptors":["a"]}`, "descriptors", "must be an object"},
		{`{"descriptors":{"a":1}}`, "descriptors.a", "must be a string"},
		{`{"descriptors":{"a":""}}`, "descriptors.a", "required"},
		{`{"descriptors":{"a b":"x"}}`, "descriptors", `name "a b"`},
		{`{"descriptors":{"a":"x","a":"y"}}`, "descriptors.a", "duplicate"},
		{`{"descriptors":{` + manyDescriptors(17) + `}}`, "descriptors", "more than 16"},
	}
	for _, tt := range tests {
		var got CheckRequest
		err := DecodeCheck([]byte(tt.body), &got)
		var fe *FieldError
		if !errors.As(err, &fe) || !errors.Is(err, ErrInvalid) {
			t.Errorf("DecodeCheck(%s) = %v, want a *FieldError", tt.body, err)
			continue
		}
		if fe.Field != tt.field || !strings.Contains(fe.Msg, tt.msg) {
			t.Errorf("DecodeCheck(%s) = field %q msg %q, want field %q msg containing %q", tt.body, fe.Field, fe.Msg, tt.field, tt.msg)
		}
	}
}

func manyDescriptors(n int) string {
	var parts []string
	for i := range n {
		parts = append(parts, `"d`+string(rune('a'+i))+`":"v"`)
	}
	return strings.Join(parts, ",")
}

func TestDecodeCheckBodyTooLarge(t *testing.T) {
	body := `{"rule":"r","key":"k","pad":"` + strings.Repeat(" ", MaxBodyBytes) + `"}`
	var got CheckRequest
	err := DecodeCheck([]byte(body), &got)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "body" {
		t.Fatalf("DecodeCheck(2 MiB) = %v, want a body error", err)
	}
}

func TestDecodeCheckReusesDestination(t *testing.T) {
	var req CheckRequest
	if err := DecodeCheck([]byte(`{"descriptors":{"a":"1","b":"2","c":"3"}}`), &req); err != nil {
		t.Fatal(err)
	}
	before := &req.Descriptors[0]
	if err := DecodeCheck([]byte(`{"descriptors":{"x":"9"}}`), &req); err != nil {
		t.Fatal(err)
	}
	if &req.Descriptors[0] != before || len(req.Descriptors) != 1 || req.Descriptors[0] != (Descriptor{"x", "9"}) {
		t.Fatalf("descriptors not reused: %+v", req.Descriptors)
	}
	if req.Rule != "" || req.Key != "" {
		t.Fatalf("rule/key not cleared: %+v", req)
	}
	// Decoded strings must not alias the input: mutate it and check.
	body := []byte(`{"rule":"r","key":"abc"}`)
	if err := DecodeCheck(body, &req); err != nil {
		t.Fatal(err)
	}
	copy(body, strings.Repeat("x", len(body)))
	if req.Key != "abc" || req.Rule != "r" {
		t.Fatalf("strings alias the body: %+v", req)
	}
}

func TestDecodeChecks(t *testing.T) {
	body := `{"checks":[{"rule":"a","key":"k1"},{"rule":"a"},{"descriptors":{"ip":"1.2.3.4"},"hits":0},5]}`
	var req ChecksRequest
	if err := DecodeChecks([]byte(body), &req); err != nil {
		t.Fatal(err)
	}
	if len(req.Checks) != 4 {
		t.Fatalf("got %d checks", len(req.Checks))
	}
	c := req.Checks
	if c[0].Err != nil || c[0].Rule != "a" || c[0].Key != "k1" || c[0].Hits != 1 {
		t.Errorf("checks[0] = %+v", c[0])
	}
	if c[1].Err == nil || c[1].Err.Field != "checks[1].key" {
		t.Errorf("checks[1].Err = %v, want checks[1].key", c[1].Err)
	}
	if c[2].Err != nil || len(c[2].Descriptors) != 1 || c[2].Hits != 0 || !c[2].HitsSet {
		t.Errorf("checks[2] = %+v", c[2])
	}
	if c[3].Err == nil || c[3].Err.Field != "checks[3]" {
		t.Errorf("checks[3].Err = %v, want checks[3]", c[3].Err)
	}
	// Reuse: a shorter batch keeps the backing array and clears old errors.
	first := &req.Checks[0]
	if err := DecodeChecks([]byte(`{"checks":[{"rule":"b","key":"k"},{"rule":"b","key":"k2"}]}`), &req); err != nil {
		t.Fatal(err)
	}
	if &req.Checks[0] != first || len(req.Checks) != 2 || req.Checks[1].Err != nil || req.Checks[1].Key != "k2" {
		t.Fatalf("reuse: %+v", req.Checks)
	}

	for _, tt := range []struct{ body, field string }{
		{`{}`, "checks"},
		{`{"checks":{}}`, "checks"},
		{`{"checks":[]}`, "checks"},
		{`{"checks":[` + strings.Repeat(`{},`, MaxBatch) + `{}]}`, "checks"},
		{`[]`, ""},
		{`{"checks":[}`, ""},
	} {
		err := DecodeChecks([]byte(tt.body), &req)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("DecodeChecks(%.40s) = %v, want field %q", tt.body, err, tt.field)
		}
	}
}

func TestParseCheckQuery(t *testing.T) {
	tests := []struct {
		q    string
		want CheckRequest
	}{
		{"rule=per-key&key=user-42&hits=3", CheckRequest{Rule: "per-key", Key: "user-42", Hits: 3, HitsSet: true}},
		{"key=a%2Fb+c&rule=r", CheckRequest{Rule: "r", Key: "a/b c", Hits: 1}},
		{"rule=r&&key=%C3%A9&other=%zz&x", CheckRequest{Rule: "r", Key: "é", Hits: 1}},
		{"rule=r&key=k&hits=0", CheckRequest{Rule: "r", Key: "k", Hits: 0, HitsSet: true}},
		{"r%75le=r&key=k", CheckRequest{Rule: "r", Key: "k", Hits: 1}},
	}
	for _, tt := range tests {
		var got CheckRequest
		if err := ParseCheckQuery([]byte(tt.q), &got); err != nil {
			t.Errorf("ParseCheckQuery(%q): %v", tt.q, err)
			continue
		}
		got.Descriptors = nil
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ParseCheckQuery(%q) = %+v, want %+v", tt.q, got, tt.want)
		}
	}
	errs := []struct{ q, field string }{
		{"", "rule"},
		{"rule=r", "key"},
		{"key=k", "rule"},
		{"rule=r&key=k&hits=x", "hits"},
		{"rule=r&key=k&hits=-2", "hits"},
		{"rule=r&key=k&hits=1099511627777", "hits"},
		{"rule=r&key=%4", "key"},
		{"rule=r&key=%00", "key"},
		{"rule=r&key=" + strings.Repeat("k", 257), "key"},
		{"rule=r&rule=s&key=k", "rule"},
		{"rule=r&key=k&key=j", "key"},
		{"rule=r&key=k&hits=1&hits=2", "hits"},
		{"rule=a%20b&key=k", "rule"},
	}
	for _, tt := range errs {
		var got CheckRequest
		err := ParseCheckQuery([]byte(tt.q), &got)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("ParseCheckQuery(%q) = %v, want field %q", tt.q, err, tt.field)
		}
	}
}

func TestAcquireRelease(t *testing.T) {
	var a AcquireRequest
	if err := DecodeAcquire([]byte(`{"rule":"uploads","key":"u1"}`), &a); err != nil {
		t.Fatal(err)
	}
	if a != (AcquireRequest{Rule: "uploads", Key: "u1", Hits: 1}) {
		t.Fatalf("acquire = %+v", a)
	}
	if got := string(AppendAcquireRequest(nil, &a)); got != `{"rule":"uploads","key":"u1"}` {
		t.Fatalf("AppendAcquireRequest = %s", got)
	}
	var r ReleaseRequest
	if err := DecodeRelease([]byte(`{"rule":"uploads","key":"u1","lease_id":"abc-1"}`), &r); err != nil {
		t.Fatal(err)
	}
	if r != (ReleaseRequest{"uploads", "u1", "abc-1"}) {
		t.Fatalf("release = %+v", r)
	}
	var r2 ReleaseRequest
	if err := DecodeRelease(AppendReleaseRequest(nil, &r), &r2); err != nil || r2 != r {
		t.Fatalf("release round trip = %+v, %v", r2, err)
	}
	// lease_id alone is enough; rule and key are optional ("" and null
	// mean absent), and the longest lease id fits, escaped or not.
	longID := strings.Repeat("i", MaxLeaseIDLen)
	for _, tt := range []struct {
		body string
		want ReleaseRequest
	}{
		{`{"lease_id":"abc-1"}`, ReleaseRequest{LeaseID: "abc-1"}},
		{`{"rule":"","key":null,"lease_id":"abc-1"}`, ReleaseRequest{LeaseID: "abc-1"}},
		{`{"key":"u1","lease_id":"abc-1"}`, ReleaseRequest{Key: "u1", LeaseID: "abc-1"}},
		{`{"lease_id":"` + longID + `"}`, ReleaseRequest{LeaseID: longID}},
		{`{"lease_id":"` + strings.Repeat(`\u0069`, MaxLeaseIDLen) + `"}`, ReleaseRequest{LeaseID: longID}},
	} {
		var got ReleaseRequest
		if err := DecodeRelease([]byte(tt.body), &got); err != nil || got != tt.want {
			t.Errorf("DecodeRelease(%.60s) = %+v, %v; want %+v", tt.body, got, err, tt.want)
		}
		if err := DecodeRelease(AppendReleaseRequest(nil, &tt.want), &got); err != nil || got != tt.want {
			t.Errorf("release round trip of %+v = %+v, %v", tt.want, got, err)
		}
	}
	if got := string(AppendReleaseRequest(nil, &ReleaseRequest{LeaseID: "x"})); got != `{"lease_id":"x"}` {
		t.Errorf("AppendReleaseRequest = %s", got)
	}
	for _, tt := range []struct {
		body, field string
		acquire     bool
	}{
		{`{"key":"k"}`, "rule", true},
		{`{"rule":"r"}`, "key", true},
		{`{"rule":"r","key":"k","hits":-1}`, "hits", true},
		{`{"rule":"r","key":"k"}`, "lease_id", false},
		{`{"rule":"r","key":"k","lease_id":"a b"}`, "lease_id", false},
		{`{"rule":"r","key":"k","lease_id":"` + strings.Repeat("i", MaxLeaseIDLen+1) + `"}`, "lease_id", false},
		{`{"lease_id":"` + strings.Repeat(`\u0069`, MaxLeaseIDLen+1) + `"}`, "lease_id", false},
		{`{"rule":"a b","lease_id":"x"}`, "rule", false},
		{`{"rule":1,"lease_id":"x"}`, "rule", false},
		{`{"key":"\u0001","lease_id":"x"}`, "key", false},
		{`{"key":"` + strings.Repeat("k", MaxKeyLen+1) + `","lease_id":"x"}`, "key", false},
	} {
		var err error
		if tt.acquire {
			err = DecodeAcquire([]byte(tt.body), &a)
		} else {
			err = DecodeRelease([]byte(tt.body), &r)
		}
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("decode(%s) = %v, want field %q", tt.body, err, tt.field)
		}
	}
}

func TestAppendCheckResult(t *testing.T) {
	r := CheckResult{Allowed: true, Rule: "per-key", Key: "user-42", Limit: 100, Remaining: 41, ResetMS: 600}
	want := `{"allowed":true,"rule":"per-key","key":"user-42","limit":100,"remaining":41,"reset_ms":600,"retry_after_ms":0}`
	if got := string(AppendCheckResult(nil, &r)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	r.Degraded, r.LeaseID = true, "L1"
	want = `{"allowed":true,"rule":"per-key","key":"user-42","limit":100,"remaining":41,"reset_ms":600,"retry_after_ms":0,"degraded":true,"lease_id":"L1"}`
	if got := string(AppendCheckResult(nil, &r)); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	e := CheckResult{Error: "unknown rule", Field: "checks[3].rule", Allowed: true}
	if got := string(AppendResults(nil, []CheckResult{r, e})); got != `{"results":[`+want+`,{"error":"unknown rule","field":"checks[3].rule"}]}` {
		t.Fatalf("AppendResults = %s", got)
	}
	if got := string(AppendError(nil, "bad", "")); got != `{"error":"bad"}` {
		t.Fatalf("AppendError = %s", got)
	}
	if got := string(AppendFieldError(nil, &FieldError{Field: "key", Msg: "required"})); got != `{"error":"required","field":"key"}` {
		t.Fatalf("AppendFieldError = %s", got)
	}
}

func TestResultsRoundTrip(t *testing.T) {
	in := []CheckResult{
		{Allowed: true, Rule: "a", Key: "k\"1\n", Limit: 10, Remaining: 9, ResetMS: 100},
		{Allowed: false, Rule: "b", Key: "é", Limit: 5, Remaining: 0, ResetMS: 2000, RetryAfterMS: 1500, Degraded: true, LeaseID: "x"},
		{Error: "unknown rule", Field: "checks[2].rule"},
	}
	out, err := DecodeResults(AppendResults(nil, in), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	var one CheckResult
	if err := DecodeCheckResult(AppendCheckResult(nil, &in[1]), &one); err != nil || one != in[1] {
		t.Fatalf("DecodeCheckResult = %+v, %v", one, err)
	}
	// An error body instead of results is returned as the error.
	_, err = DecodeResults([]byte(`{"error":"checks: required","field":"checks"}`), nil)
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "checks" {
		t.Fatalf("DecodeResults(error body) = %v", err)
	}
	if _, err := DecodeResults([]byte(`{"results":[{"allowed":"yes"}]}`), nil); err == nil {
		t.Fatal("DecodeResults accepted allowed:\"yes\"")
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", "q\"b\\s/", "\x00\x01\x1f\t\n\r", "é€😀", "\u2028\u2029", "bad\xffutf8\xc3"} {
		b := AppendString(nil, s)
		if !json.Valid(b) {
			t.Errorf("AppendString(%q) = %s is not valid JSON", s, b)
			continue
		}
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		want := strings.ToValidUTF8(s, "\ufffd")
		if s == "bad\xffutf8\xc3" {
			want = "bad\ufffdutf8\ufffd"
		}
		if got != want {
			t.Errorf("AppendString(%q) decodes to %q, want %q", s, got, want)
		}
	}
}

func TestRequestRoundTrip(t *testing.T) {
	reqs := []CheckRequest{
		{Rule: "r", Key: "k"},
		{Rule: "r", Key: "k", Hits: 0, HitsSet: true},
		{Rule: "r", Key: "k\"\\", Hits: 7},
		{Descriptors: []Descriptor{{"b", "2"}, {"a", "1"}}, Hits: 1, HitsSet: true},
	}
	var batch ChecksRequest
	batch.Checks = reqs
	var got ChecksRequest
	if err := DecodeChecks(AppendChecksRequest(nil, &batch), &got); err != nil {
		t.Fatal(err)
	}
	for i := range reqs {
		want := reqs[i]
		if want.Hits == 0 && !want.HitsSet {
			want.Hits = 1
		}
		if want.Hits > 1 {
			want.HitsSet = true
		}
		g := got.Checks[i]
		if len(g.Descriptors) == 0 {
			g.Descriptors = nil
		}
		if !reflect.DeepEqual(g, want) {
			t.Errorf("checks[%d] = %+v, want %+v", i, g, want)
		}
	}
}

func TestHelpers(t *testing.T) {
	if got := (&FieldError{Field: "key", Msg: "required"}).Error(); got != "key: required" {
		t.Errorf("Error() = %q", got)
	}
	if got := (&FieldError{Msg: "invalid JSON"}).Error(); got != "invalid JSON" {
		t.Errorf("Error() = %q", got)
	}
	for name, want := range map[string]bool{"per-key": true, "a.b_c-9": true, "": false, "a b": false, "é": false, strings.Repeat("n", 64): true, strings.Repeat("n", 65): false} {
		if ValidName(name) != want {
			t.Errorf("ValidName(%q) = %v", name, !want)
		}
	}
	for key, want := range map[string]bool{"user-42": true, "a b/é|x": true, "": false, "a\x00": false, "a\x7f": false, "\xff": false, "a\u0085": false, "\u009f": false, "a\u00a0": true, strings.Repeat("k", 257): false} {
		if ValidKey(key) != want {
			t.Errorf("ValidKey(%q) = %v", key, !want)
		}
	}
	if got := string(AppendCheckQuery(nil, "per-key", "a b/é&", 3)); got != "rule=per-key&key=a%20b%2F%C3%A9%26&hits=3" {
		t.Errorf("AppendCheckQuery = %s", got)
	}
	var req CheckRequest
	if err := ParseCheckQuery(AppendCheckQuery(nil, "r", "a+b%", 1), &req); err != nil || req.Key != "a+b%" || req.Hits != 1 {
		t.Errorf("query round trip = %+v, %v", req, err)
	}
}

func TestParseInt(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "-0": 0, "42": 42, "9223372036854775807": 1<<63 - 1, "-9223372036854775808": -1 << 63} {
		if got, ok := parseInt([]byte(in)); !ok || got != want {
			t.Errorf("parseInt(%s) = %d, %v", in, got, ok)
		}
	}
	for _, in := range []string{"", "-", "01", "9223372036854775808", "-9223372036854775809", "12345678901234567890", "1a", "+1"} {
		if _, ok := parseInt([]byte(in)); ok {
			t.Errorf("parseInt(%s) accepted", in)
		}
	}
}
