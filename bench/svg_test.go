package bench

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
)

// parseSVG checks well-formedness and counts elements by name.
func parseSVG(t *testing.T, b []byte) map[string]int {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(b))
	count := map[string]int{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return count
		}
		if err != nil {
			t.Fatalf("invalid XML: %v\n%s", err, b)
		}
		if se, ok := tok.(xml.StartElement); ok {
			count[se.Name.Local]++
		}
	}
}

func TestChartSVG(t *testing.T) {
	tests := []struct {
		name      string
		chart     Chart
		polylines int
	}{
		{"two series", Chart{Title: "Throughput <vs> load & more", XLabel: "offered", YLabel: "achieved",
			Series: []Series{{Name: "a", X: []float64{1, 2, 3}, Y: []float64{1, 4, 9}}, {Name: `b"c`, X: []float64{1, 3}, Y: []float64{2, 2}, Dashed: true}}}, 2},
		{"empty", Chart{Title: "nothing"}, 0},
		{"nan and inf skipped", Chart{Series: []Series{{Name: "x", X: []float64{1, math.NaN(), 3}, Y: []float64{math.Inf(1), 2, 3}}}}, 1},
		{"constant", Chart{Series: []Series{{Name: "flat", X: []float64{5, 5}, Y: []float64{7, 7}}}}, 1},
		{"mismatched lengths", Chart{Series: []Series{{Name: "m", X: []float64{1, 2, 3}, Y: []float64{1}}}}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := tt.chart.WriteSVG(&b); err != nil {
				t.Fatal(err)
			}
			n := parseSVG(t, b.Bytes())
			if n["svg"] != 1 || n["polyline"] != tt.polylines {
				t.Errorf("svg=%d polylines=%d, want 1 and %d", n["svg"], n["polyline"], tt.polylines)
			}
			if strings.Contains(b.String(), "NaN") || strings.Contains(b.String(), "Inf") {
				t.Errorf("non-finite number written")
			}
		})
	}
}

func TestNiceTicks(t *testing.T) {
	ticks := niceTicks(3, 97, 5)
	if ticks[0] > 3 || ticks[len(ticks)-1] < 97 || len(ticks) < 3 || len(ticks) > 12 {
		t.Fatalf("ticks %v do not cover [3,97] sensibly", ticks)
	}
	for _, tt := range []struct {
		v    float64
		want string
	}{{0, "0"}, {2500000, "2.5M"}, {20000, "20k"}, {0.25, "0.25"}, {1500, "1500"}} {
		if got := fmtTick(tt.v); got != tt.want {
			t.Errorf("fmtTick(%v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}
