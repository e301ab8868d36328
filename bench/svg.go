package bench

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Series is one line of a Chart.
type Series struct {
	Name string
	X, Y []float64
	// Dashed draws the line dashed (for reference lines such as a limit).
	Dashed bool
}

// Chart is a simple line chart with axes, ticks, labels and a legend,
// written as standalone SVG with no dependencies.
type Chart struct {
	Title, XLabel, YLabel string
	Series                []Series
	// YMin0 starts the Y axis at zero.
	YMin0 bool
}

const (
	svgW, svgH             = 720, 420
	padL, padR, padT, padB = 80, 170, 40, 55
	plotW, plotH           = svgW - padL - padR, svgH - padT - padB
	svgFont                = `font-family="sans-serif" font-size="12"`
	maxSeriesPoints        = 100_000
	defaultTicks           = 5
)

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// WriteSVG writes the chart. Series with mismatched X/Y lengths, NaN or
// infinite points are skipped point by point; an empty chart still renders
// its axes.
func (c *Chart) WriteSVG(w io.Writer) error {
	bw := bufio.NewWriter(w)
	xmin, xmax, ymin, ymax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, s := range c.Series {
		for i := 0; i < len(s.X) && i < len(s.Y) && i < maxSeriesPoints; i++ {
			x, y := s.X[i], s.Y[i]
			if !finite(x) || !finite(y) {
				continue
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	if xmin > xmax { // no points
		xmin, xmax, ymin, ymax = 0, 1, 0, 1
	}
	if c.YMin0 && ymin > 0 {
		ymin = 0
	}
	xt := niceTicks(xmin, xmax, defaultTicks)
	yt := niceTicks(ymin, ymax, defaultTicks)
	xmin, xmax = xt[0], xt[len(xt)-1]
	ymin, ymax = yt[0], yt[len(yt)-1]
	px := func(x float64) float64 { return padL + (x-xmin)/(xmax-xmin)*plotW }
	py := func(y float64) float64 { return padT + plotH - (y-ymin)/(ymax-ymin)*plotH }

	fmt.Fprintf(bw, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", svgW, svgH, svgW, svgH, svgFont)
	fmt.Fprintf(bw, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(bw, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", 10, esc(c.Title))
	// grid and ticks
	for _, v := range yt {
		y := py(v)
		fmt.Fprintf(bw, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", padL, y, padL+plotW, y)
		fmt.Fprintf(bw, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", padL-6, y+4, esc(fmtTick(v)))
	}
	for _, v := range xt {
		x := px(v)
		fmt.Fprintf(bw, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, padT, x, padT+plotH)
		fmt.Fprintf(bw, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, padT+plotH+16, esc(fmtTick(v)))
	}
	fmt.Fprintf(bw, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", padL, padT, plotW, plotH)
	fmt.Fprintf(bw, `<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", padL+plotW/2, svgH-12, esc(c.XLabel))
	fmt.Fprintf(bw, `<text x="18" y="%d" text-anchor="middle" transform="rotate(-90 18 %d)">%s</text>`+"\n", padT+plotH/2, padT+plotH/2, esc(c.YLabel))
	// series
	for si, s := range c.Series {
		color := palette[si%len(palette)]
		var pts strings.Builder
		for i := 0; i < len(s.X) && i < len(s.Y) && i < maxSeriesPoints; i++ {
			if !finite(s.X[i]) || !finite(s.Y[i]) {
				continue
			}
			fmt.Fprintf(&pts, "%.1f,%.1f ", px(s.X[i]), py(s.Y[i]))
		}
		dash, width := "", 3 // solid lines under dashed reference lines stay visible
		if s.Dashed {
			dash, width = ` stroke-dasharray="6 4"`, 2
		}
		fmt.Fprintf(bw, `<polyline fill="none" stroke="%s" stroke-width="%d"%s points="%s"/>`+"\n", color, width, dash, strings.TrimSpace(pts.String()))
		if !s.Dashed {
			for i := 0; i < len(s.X) && i < len(s.Y) && len(s.X) <= 50; i++ {
				if finite(s.X[i]) && finite(s.Y[i]) {
					fmt.Fprintf(bw, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(s.X[i]), py(s.Y[i]), color)
				}
			}
		}
		ly := padT + 10 + si*18
		fmt.Fprintf(bw, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", padL+plotW+12, ly, padL+plotW+32, ly, color, dash)
		fmt.Fprintf(bw, `<text x="%d" y="%d">%s</text>`+"\n", padL+plotW+38, ly+4, esc(s.Name))
	}
	fmt.Fprintf(bw, "</svg>\n")
	return bw.Flush()
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// niceTicks returns about n evenly spaced round values covering [lo, hi].
func niceTicks(lo, hi float64, n int) []float64 {
	if hi <= lo {
		if lo == 0 {
			hi = 1
		} else {
			lo, hi = lo-math.Abs(lo)*0.5, hi+math.Abs(hi)*0.5
		}
	}
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	start := math.Floor(lo/step) * step
	end := math.Ceil(hi/step) * step
	var out []float64
	for v := start; v <= end+step/2 && len(out) < 50; v += step {
		out = append(out, v)
	}
	if len(out) < 2 {
		out = append(out, start+step)
	}
	return out
}

func fmtTick(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case a == 0:
		return "0"
	}
	return strconv.FormatFloat(math.Round(v*1000)/1000, 'f', -1, 64)
}
