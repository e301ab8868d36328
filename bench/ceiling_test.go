package bench

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/valyala/fasthttp"
)

func TestCannedRoundTripAndCeiling(t *testing.T) {
	set := SyntheticCanned(3)
	path := filepath.Join(t.TempDir(), "c.json")
	if err := SaveCanned(path, set); err != nil {
		t.Fatal(err)
	}
	got, err := LoadCanned(path)
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, CeilingHandler(got))
	for path, want := range set {
		code, body, err := fasthttp.Get(nil, "http://"+addr+path)
		if err != nil || code != want.Status || string(body) != want.Body {
			t.Errorf("%s: %d %q %v", path, code, body, err)
		}
	}
	if code, _, _ := fasthttp.Get(nil, "http://"+addr+"/v1/auth/deeper/path"); code != 200 {
		t.Errorf("/v1/auth/* answered %d", code)
	}
	if code, _, _ := fasthttp.Get(nil, "http://"+addr+"/nope"); code != 404 {
		t.Errorf("unknown path answered %d", code)
	}
	out := make([]Outcome, 3)
	if n, err := ScanResults([]byte(set["/v1/checks"].Body), out); err != nil || n != 3 {
		t.Errorf("synthetic batch answer does not scan: %d %v", n, err)
	}
}

func TestParseCannedErrors(t *testing.T) {
	for _, tt := range []struct{ in, field string }{
		{`{"/v1/check":{"status":42}}`, "status"},
		{`{"v1":{"status":200}}`, "path"},
		{`{"/a":{"status":200,"headers":[["X","a\nb"]]}}`, "headers"},
		{`{}`, "no answers"},
		{`[`, "cannot parse"},
	} {
		if _, err := ParseCanned([]byte(tt.in)); err == nil || !strings.Contains(err.Error(), tt.field) {
			t.Errorf("%s: err %v, want %q", tt.in, err, tt.field)
		}
	}
}

func FuzzParseCanned(f *testing.F) {
	f.Add([]byte(`{"/v1/check":{"status":200,"headers":[["X-A","1"]],"body":"{}"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		set, err := ParseCanned(b)
		if err != nil {
			return
		}
		_ = CeilingHandler(set) // must build from anything accepted
		for p, c := range set {
			if c.Status < 100 || c.Status > 599 || !strings.HasPrefix(p, "/") {
				t.Fatalf("accepted %q: %+v", p, c)
			}
		}
	})
}
