package web

import (
	"math"
	"strconv"
	"strings"
)

// Chart is a line chart drawn as inline SVG by the Chart component: every
// coordinate is computed here, in the chart's viewBox (ChartWidth x
// ChartHeight), so the template only places elements. No script, no
// inline style: the CSP allows neither.
type Chart struct {
	Lines   []ChartLine
	Area    string // polygon under the first line ("" if none)
	YTicks  []Tick
	XTicks  []Tick
	Empty   bool   // every value is zero (or unknown)
	Title   string // accessible summary
	Plot    Box
	YLabelX string // where the y labels end
	XLabelY string // the baseline of the x labels
	NoteX   string // the middle of the plot, for the "no requests" note
	NoteY   string
}

// Box is the plot area, as SVG attribute values.
type Box struct{ X, Y, W, H, Right, Bottom string }

// ChartLine is one polyline.
type ChartLine struct {
	Kind   string // CSS class: allowed, rejected, shadow_rejected, fail_open
	Label  string
	Points string // "x,y x,y ..."
}

// Tick is an axis label at a position (x or y in the viewBox).
type Tick struct {
	Pos   string
	Label string
	Class string // "end" for the label at the right edge (anchored at its end)
}

// ChartSeries is one line to draw: a value per point (requests per second).
type ChartSeries struct {
	Kind   string
	Label  string
	Values []float64
}

// The chart's geometry: the viewBox is about the size a rule card shows
// it at, so its text renders near its nominal size.
const (
	ChartWidth   = 520
	ChartHeight  = 150
	chartLeft    = 46.0
	chartRight   = 8.0
	chartTop     = 8.0
	chartBottom  = 20.0
	chartPlotW   = ChartWidth - chartLeft - chartRight
	chartPlotH   = ChartHeight - chartTop - chartBottom
	chartViewBox = "0 0 520 150"
)

// NewChart lays out series (all of the same length, oldest first) over a
// span of spanSeconds ending now. A NaN value is unknown (before the
// admin heard of the rule): lines start at the first known point. The
// first series is also filled as an area. Series that are zero
// throughout are left out, except the first.
func NewChart(series []ChartSeries, spanSeconds int) Chart {
	c := Chart{
		Plot: Box{
			X: ff(chartLeft), Y: ff(chartTop), W: ff(chartPlotW), H: ff(chartPlotH),
			Right: ff(chartLeft + chartPlotW), Bottom: ff(chartTop + chartPlotH),
		},
		YLabelX: ff(chartLeft - 5), XLabelY: ff(ChartHeight - 5),
		NoteX: ff(chartLeft + chartPlotW/2), NoteY: ff(chartTop + chartPlotH/2),
	}
	peak := 0.0
	n := 0
	for _, s := range series {
		n = max(n, len(s.Values))
		for _, v := range s.Values {
			if v > peak && !math.IsInf(v, 0) {
				peak = v
			}
		}
	}
	c.Empty = peak == 0
	top := niceCeil(peak)
	for i := 0; i <= 2; i++ {
		v := top * float64(i) / 2
		c.YTicks = append(c.YTicks, Tick{Pos: ff(yOf(v, top)), Label: compact(v) + "/s"})
	}
	c.XTicks = xTicks(spanSeconds)
	if n == 0 {
		return c
	}
	var title []string
	for i, s := range series {
		first := 0 // the first known point
		for first < len(s.Values) && math.IsNaN(s.Values[first]) {
			first++
		}
		nonzero := false
		for _, v := range s.Values[first:] {
			if v > 0 {
				nonzero = true
			}
		}
		if (!nonzero && i > 0) || first == len(s.Values) {
			continue
		}
		var b strings.Builder
		for j := first; j < len(s.Values); j++ {
			v := s.Values[j]
			if math.IsNaN(v) {
				v = 0
			}
			if j > first {
				b.WriteByte(' ')
			}
			b.WriteString(ff(xOf(j, n)))
			b.WriteByte(',')
			b.WriteString(ff(yOf(v, top)))
		}
		c.Lines = append(c.Lines, ChartLine{Kind: s.Kind, Label: s.Label, Points: b.String()})
		if i == 0 {
			c.Area = ff(xOf(first, n)) + "," + ff(yOf(0, top)) + " " + b.String() + " " + ff(xOf(n-1, n)) + "," + ff(yOf(0, top))
		}
		title = append(title, s.Label+" "+compact(s.Values[len(s.Values)-1])+"/s")
	}
	c.Title = "Requests per second, last " + spanText(spanSeconds) + "; now: " + strings.Join(title, ", ")
	return c
}

// ChartViewBox is the viewBox attribute of every chart.
func ChartViewBox() string { return chartViewBox }

func xOf(i, n int) float64 {
	if n <= 1 {
		return chartLeft + chartPlotW
	}
	return chartLeft + chartPlotW*float64(i)/float64(n-1)
}

func yOf(v, top float64) float64 {
	if top <= 0 || v < 0 || math.IsNaN(v) {
		v = 0
	}
	return chartTop + chartPlotH*(1-math.Min(v/top, 1))
}

// niceCeil rounds v up to a round number (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6
// or 8 times a power of ten), at least 1, so the chart uses its height.
func niceCeil(v float64) float64 {
	if !(v > 1) || math.IsInf(v, 0) {
		return 1
	}
	exp := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v <= m*exp*(1+1e-9) {
			return m * exp
		}
	}
	return 10 * exp
}

func xTicks(span int) []Tick {
	if span <= 0 {
		return nil
	}
	every := span
	for _, e := range []int{10, 15, 30, 60, 120, 300, 600, 1800, 3600} {
		if span/e <= 5 {
			every = e
			break
		}
	}
	var ts []Tick
	for ago := (span / every) * every; ago >= 0; ago -= every {
		label := "now"
		if ago > 0 {
			label = "-" + spanText(ago)
		}
		x := chartLeft + chartPlotW*float64(span-ago)/float64(span)
		t := Tick{Pos: ff(x), Label: label}
		if ago == 0 {
			t.Class = "end"
		}
		ts = append(ts, t)
	}
	return ts
}

func spanText(s int) string {
	switch {
	case s%3600 == 0:
		return strconv.Itoa(s/3600) + "h"
	case s%60 == 0:
		return strconv.Itoa(s/60) + "m"
	}
	return strconv.Itoa(s) + "s"
}

// ff formats a coordinate with one decimal.
func ff(f float64) string { return strconv.FormatFloat(f, 'f', 1, 64) }

// compact formats a number for an axis: 0, 0.5, 12, 1.5k, 2M.
func compact(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(strconv.FormatFloat(v/1e6, 'f', 1, 64)) + "M"
	case v >= 1e3:
		return trimZero(strconv.FormatFloat(v/1e3, 'f', 1, 64)) + "k"
	case v >= 10 || v == math.Trunc(v):
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return trimZero(strconv.FormatFloat(v, 'f', 1, 64))
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
