package api

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// sameDecode checks that the view decoders answer exactly as the copying
// ones: the same error and, when there is none, the same values. dstV and
// scratch are reused across calls, as a server's pooled state is.
func sameDecode(t *testing.T, data []byte, dstV *ChecksRequest, one *CheckRequest, scratch *[]byte) {
	t.Helper()
	var c CheckRequest
	err, errV := DecodeCheck(data, &c), DecodeCheckView(data, one, scratch)
	if fmt.Sprint(err) != fmt.Sprint(errV) {
		t.Fatalf("DecodeCheck(%q) = %v, DecodeCheckView = %v", data, err, errV)
	}
	if err == nil && !reflect.DeepEqual(normalize(c), normalize(*one)) {
		t.Fatalf("DecodeCheck(%q) = %+v, DecodeCheckView = %+v", data, c, *one)
	}
	var b ChecksRequest
	err, errV = DecodeChecks(data, &b), DecodeChecksView(data, dstV, scratch)
	if fmt.Sprint(err) != fmt.Sprint(errV) {
		t.Fatalf("DecodeChecks(%q) = %v, DecodeChecksView = %v", data, err, errV)
	}
	if err != nil {
		return
	}
	if len(b.Checks) != len(dstV.Checks) {
		t.Fatalf("DecodeChecks(%q): %d checks, view %d", data, len(b.Checks), len(dstV.Checks))
	}
	for i := range b.Checks {
		x, y := b.Checks[i], dstV.Checks[i]
		if !reflect.DeepEqual(x.Err, y.Err) || x.Err == nil && !reflect.DeepEqual(normalize(x), normalize(y)) {
			t.Fatalf("DecodeChecks(%q) checks[%d] = %+v, view %+v", data, i, x, y)
		}
	}
}

func FuzzDecodeView(f *testing.F) {
	for _, s := range checkSeeds {
		f.Add([]byte(s))
		f.Add([]byte(`{"checks":[` + s + `,` + s + `]}`))
	}
	var dstV ChecksRequest
	var one CheckRequest
	var scratch []byte
	f.Fuzz(func(t *testing.T, data []byte) {
		sameDecode(t, data, &dstV, &one, &scratch)
	})
}

// TestDecodeViewEscapedGrowth: escaped keys go to the scratch buffer, which
// is replaced as it fills; every key decoded before stays intact.
func TestDecodeViewEscapedGrowth(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"rule":"r\u002d%d","key":"%03d\u00e9%s","descriptors":null}`, i%3, i, strings.Repeat(`\u0041`, 200))
		sb.WriteString(`,{"descriptors":{"n\u0061me":"v\u00e9` + fmt.Sprint(i) + `"}}`)
	}
	sb.WriteString(`]}`)
	var dstV ChecksRequest
	var one CheckRequest
	var scratch []byte
	for range 2 { // the second time on reused storage
		sameDecode(t, []byte(sb.String()), &dstV, &one, &scratch)
	}
	if len(dstV.Checks) != 200 || dstV.Checks[199].Err != nil || len(dstV.Checks[199].Descriptors) != 1 {
		t.Fatalf("%d checks, last %+v", len(dstV.Checks), dstV.Checks[len(dstV.Checks)-1])
	}
	if got := dstV.Checks[199].Descriptors[0]; got.Name != "name" || got.Value != "vé99" {
		t.Errorf("last descriptor = %+v", got)
	}
}

// TestDecodeViewAllocs: a server decoding a new key in every request
// allocates nothing (the copying decoders allocate each new key).
func TestDecodeViewAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	bodies := make([][]byte, 300)
	batches := make([][]byte, 300)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"rule":"per-key","key":"user-%d-\u00e9"}`, i)
		batches[i] = fmt.Appendf(nil, `{"checks":[{"rule":"per-key","key":"a-%d"},{"descriptors":{"api_key":"k-%d"}}]}`, i, i)
	}
	var req CheckRequest
	var batch ChecksRequest
	var scratch []byte
	i := 0
	one := func() {
		if err := DecodeCheckView(bodies[i%len(bodies)], &req, &scratch); err != nil {
			t.Fatal(err)
		}
		if err := DecodeChecksView(batches[i%len(batches)], &batch, &scratch); err != nil {
			t.Fatal(err)
		}
		i++
	}
	one()
	if n := testing.AllocsPerRun(200, one); n != 0 {
		t.Errorf("%v allocations per new key, want 0", n)
	}
	if req.Key != fmt.Sprintf("user-%d-é", (i-1)%len(bodies)) {
		t.Errorf("key = %q", req.Key)
	}
}

func FuzzParseCheckQueryView(f *testing.F) {
	for _, q := range []string{"rule=per-key&key=user-42&hits=1", "rule=r&key=a%2Fb+c", "rule=r&key=%zz", "key=k&rule=r"} {
		f.Add([]byte(q))
	}
	var v CheckRequest
	var scratch []byte
	f.Fuzz(func(t *testing.T, q []byte) {
		var c CheckRequest
		err, errV := ParseCheckQuery(q, &c), ParseCheckQueryView(q, &v, &scratch)
		if fmt.Sprint(err) != fmt.Sprint(errV) || err == nil && !reflect.DeepEqual(normalize(c), normalize(v)) {
			t.Fatalf("ParseCheckQuery(%q) = %+v %v, view %+v %v", q, c, err, v, errV)
		}
	})
}

func TestParseCheckQueryViewAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation count")
	}
	qs := make([][]byte, 100)
	for i := range qs {
		qs[i] = fmt.Appendf(nil, "rule=per-key&key=u%%C3%%A9-%d", i)
	}
	var req CheckRequest
	var scratch []byte
	i := 0
	if n := testing.AllocsPerRun(200, func() {
		if err := ParseCheckQueryView(qs[i%len(qs)], &req, &scratch); err != nil {
			t.Fatal(err)
		}
		i++
	}); n != 0 {
		t.Errorf("%v allocations per new key, want 0", n)
	}
	if want := fmt.Sprintf("ué-%d", (i-1)%len(qs)); req.Key != want || req.Rule != "per-key" {
		t.Errorf("got %q %q, want per-key %q", req.Rule, req.Key, want)
	}
}
