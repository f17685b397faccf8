package web

import (
	"math"
	"strings"
	"testing"
)

func TestNewChart(t *testing.T) {
	nan := math.NaN()
	c := NewChart([]ChartSeries{
		{Kind: "allowed", Label: "allowed", Values: []float64{nan, nan, 10, 20, 40}},
		{Kind: "rejected", Label: "rejected", Values: []float64{nan, nan, 0, 0, 5}},
		{Kind: "fail_open", Label: "fail-open", Values: []float64{0, 0, 0, 0, 0}}, // all zero: left out
	}, 300)
	if len(c.Lines) != 2 || c.Lines[0].Kind != "allowed" || c.Lines[1].Kind != "rejected" || c.Empty {
		t.Fatalf("lines %+v", c.Lines)
	}
	// Lines start at the first known point (x of index 2 of 5) and end at the right edge.
	pts := strings.Fields(c.Lines[0].Points)
	if len(pts) != 3 || !strings.HasPrefix(pts[0], ff(xOf(2, 5))+",") || !strings.HasPrefix(pts[2], ff(chartLeft+chartPlotW)+",") {
		t.Errorf("points %v", pts)
	}
	// The peak (40) rounds up to 40: the top of the plot; zero is the bottom.
	if pts[2] != ff(chartLeft+chartPlotW)+","+ff(chartTop) {
		t.Errorf("the peak is at %s", pts[2])
	}
	if got := c.YTicks[len(c.YTicks)-1].Label; got != "40/s" {
		t.Errorf("top label %q", got)
	}
	if !strings.HasPrefix(c.Area, ff(xOf(2, 5))+","+ff(chartTop+chartPlotH)) {
		t.Errorf("area %q", c.Area)
	}
	var labels []string
	for _, x := range c.XTicks {
		labels = append(labels, x.Label)
	}
	if strings.Join(labels, " ") != "-5m -4m -3m -2m -1m now" || c.XTicks[len(c.XTicks)-1].Class != "end" {
		t.Errorf("x ticks %v", labels)
	}
	if !strings.Contains(c.Title, "allowed 40/s") || !strings.Contains(c.Title, "last 5m") {
		t.Errorf("title %q", c.Title)
	}

	empty := NewChart([]ChartSeries{{Kind: "allowed", Values: make([]float64, 60)}}, 60)
	if !empty.Empty || len(empty.Lines) != 1 || empty.YTicks[2].Label != "1/s" {
		t.Errorf("empty chart %+v", empty)
	}
	if got := NewChart(nil, 60); len(got.Lines) != 0 || !got.Empty {
		t.Errorf("no series %+v", got)
	}
}

func TestChartHelpers(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.5: 1, 1: 1, 1.1: 1.2, 7: 8, 11: 12, 450: 500, 1100: 1200, 2600: 3000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
	for in, want := range map[float64]string{0: "0", 0.75: "0.8", 2: "2", 12.4: "12", 1500: "1.5k", 2e6: "2M"} {
		if got := compact(in); got != want {
			t.Errorf("compact(%v) = %q, want %q", in, got, want)
		}
	}
	for _, c := range []struct {
		n    int
		noun string
		want string
	}{{1, "node", "1 node"}, {2, "node", "2 nodes"}, {0, "match", "0 matches"}, {3, "bucket", "3 buckets"}} {
		if got := plural(c.n, c.noun); got != c.want {
			t.Errorf("plural(%d, %q) = %q", c.n, c.noun, got)
		}
	}
}
