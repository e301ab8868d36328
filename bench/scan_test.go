package bench

import (
	"errors"
	"testing"

	"github.com/valyala/fastjson"
)

func TestScanResults(t *testing.T) {
	tests := []struct {
		name string
		body string
		want []Outcome
		err  bool
	}{
		{"two", `{"results":[{"allowed":true,"rule":"r","key":"k","limit":5},{"rule":"r","allowed":false}]}`, []Outcome{Allowed, Denied}, false},
		{"item error", `{"results":[{"allowed":true},{"error":"bad key","field":"checks[1].key"}]}`, []Outcome{Allowed, Failed}, false},
		{"spaces and other members", " { \"x\" : [1,{\"a\":\"}\"}] , \"results\" : [ { \"k\":\"a\\\"b\", \"allowed\" : true } ] } ", []Outcome{Allowed}, false},
		{"empty", `{"results":[]}`, []Outcome{}, false},
		{"nested value", `{"results":[{"meta":{"allowed":false},"allowed":true}]}`, []Outcome{Allowed}, false},
		{"degraded", `{"results":[{"degraded":true,"allowed":true},{"allowed":false,"degraded":true},{"allowed":true,"degraded":false}]}`, []Outcome{AllowedDegraded, DeniedDegraded, Allowed}, false},
		{"no results", `{"error":"x"}`, nil, true},
		{"truncated", `{"results":[{"allowed":true}`, nil, true},
		{"bad allowed", `{"results":[{"allowed":1}]}`, nil, true},
		{"not json", `<html>`, nil, true},
		{"empty body", ``, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := make([]Outcome, 4)
			n, err := ScanResults([]byte(tt.body), out)
			if tt.err {
				if err == nil || !errors.Is(err, ErrBadResponse) {
					t.Fatalf("err = %v, want ErrBadResponse", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n != len(tt.want) {
				t.Fatalf("n = %d, want %d", n, len(tt.want))
			}
			for i, w := range tt.want {
				if out[i] != w {
					t.Errorf("result %d = %v, want %v", i, out[i], w)
				}
			}
		})
	}
}

func TestScanResultsAllocs(t *testing.T) {
	body := []byte(`{"results":[{"allowed":true,"rule":"bench","key":"k1","limit":100,"remaining":41,"reset_ms":600,"retry_after_ms":0},{"allowed":false,"rule":"bench","key":"k2","limit":100,"remaining":0,"reset_ms":600,"retry_after_ms":10}]}`)
	out := make([]Outcome, 2)
	if a := testing.AllocsPerRun(100, func() { _, _ = ScanResults(body, out) }); a != 0 {
		t.Fatalf("ScanResults allocates %v per call", a)
	}
}

// FuzzScanResults: never panics, and whenever fastjson accepts the input,
// ScanResults agrees with it on the count and every outcome.
func FuzzScanResults(f *testing.F) {
	for _, s := range []string{
		`{"results":[{"allowed":true},{"allowed":false},{"error":"e"}]}`,
		`{"results":[]}`,
		`{"a":{"b":[1,2,{"c":null}]},"results":[{"allowed":true,"x":"\"}"}]}`,
		`{"results":[{"allowed":true}`,
		`[]`, `{}`, `"x"`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		out := make([]Outcome, 8)
		n, err := ScanResults(body, out)
		var p fastjson.Parser
		v, perr := p.ParseBytes(body)
		if perr != nil || v.Type() != fastjson.TypeObject {
			return
		}
		// fastjson keeps the last duplicate? Skip inputs with duplicate
		// "results" or "allowed" members: JSON leaves them undefined.
		obj := v.GetObject()
		res := 0
		obj.Visit(func(k []byte, _ *fastjson.Value) {
			if string(k) == "results" {
				res++
			}
		})
		if res != 1 || v.Get("results").Type() != fastjson.TypeArray {
			if res == 0 && err == nil {
				t.Fatalf("no results member but ScanResults succeeded")
			}
			return
		}
		arr := v.GetArray("results")
		want := make([]Outcome, len(arr))
		for i, it := range arr {
			if it.Type() != fastjson.TypeObject {
				if err == nil {
					t.Fatalf("result %d is not an object but ScanResults succeeded", i)
				}
				return
			}
			c, dg := 0, 0
			it.GetObject().Visit(func(k []byte, _ *fastjson.Value) {
				switch string(k) {
				case "allowed":
					c++
				case "degraded":
					dg++
				}
			})
			if c > 1 || dg > 1 {
				return
			}
			switch a := it.Get("allowed"); {
			case a == nil:
				want[i] = Failed
			case a.Type() == fastjson.TypeTrue:
				want[i] = Allowed
			case a.Type() == fastjson.TypeFalse:
				want[i] = Denied
			default:
				if err == nil {
					t.Fatalf("allowed of result %d is %s but ScanResults succeeded", i, a.Type())
				}
				return
			}
			if dv := it.Get("degraded"); dv != nil && dv.Type() == fastjson.TypeTrue {
				want[i] = want[i].degrade()
			}
		}
		if err != nil {
			t.Fatalf("fastjson accepts %q but ScanResults: %v", body, err)
		}
		if n != len(want) {
			t.Fatalf("n = %d, fastjson says %d", n, len(want))
		}
		for i := 0; i < n && i < len(out); i++ {
			if out[i] != want[i] {
				t.Fatalf("result %d: %v, fastjson says %v", i, out[i], want[i])
			}
		}
	})
}
