package limiter

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/state"
)

// The parser's bound on periods is what the state can hold.
func TestMaxPeriodsFitState(t *testing.T) {
	if policy.MaxPeriods != state.MaxCounts {
		t.Fatalf("policy.MaxPeriods %d != state.MaxCounts %d", policy.MaxPeriods, state.MaxCounts)
	}
}

const hour = 3600.0

// day0 is a Unix time at an hour boundary (and a day boundary).
const day0 = 1736899200.0

// nominetBucket is the Nominet rolling window transcribed literally: a bucket refilled every P
// to min(Q - (total of the previous W - P), M), one token per request. It
// is the reference the rolling window must agree with.
type nominetBucket struct {
	q, m    float64
	periods int
	tokens  float64
	history []float64 // use per period, oldest first
}

func (s *nominetBucket) startPeriod() {
	prev := 0.0
	for i := max(len(s.history)-(s.periods-1), 0); i < len(s.history); i++ {
		prev += s.history[i]
	}
	s.tokens = min(s.q-prev, s.m)
	s.history = append(s.history, 0)
}

func (s *nominetBucket) take() bool {
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	s.history[len(s.history)-1]++
	return true
}

// TestRollingWindowNominetExample reproduces the Nominet rolling window's combined example (10,000
// per rolling 24 hours, at most 1,000 per hour, recalculated hourly) hour
// by hour for a client sending 1,500 requests every hour: 1,000 a hour for
// 10 hours, then nothing until the first hour leaves the window, and so on.
func TestRollingWindowNominetExample(t *testing.T) {
	rw := RollingWindow{Limit: 10000, Period: hour, Periods: 24, MaxPerPeriod: 1000}
	var w state.Window
	exists := false
	for h := 0; h < 72; h++ {
		now := day0 + float64(h)*hour + 17 // within the hour
		admitted := 0
		for i := 0; i < 1500; i++ {
			d := rw.Take(&w, exists, now, 1)
			exists = true
			if d.Allowed {
				admitted++
			}
		}
		want := 0
		if h%24 < 10 {
			want = 1000
		}
		if admitted != want {
			t.Fatalf("hour %d: admitted %d, want %d", h, admitted, want)
		}
	}
}

// TestRollingWindowMatchesNominetBucket: random hourly demand, with and
// without the per-period cap, admitted exactly as the Nominet rolling window's refilled
// bucket admits.
func TestRollingWindowMatchesNominetBucket(t *testing.T) {
	for _, m := range []float64{0, 1000, 400} {
		rng := rand.New(rand.NewPCG(1, uint64(m)))
		rw := RollingWindow{Limit: 10000, Period: hour, Periods: 24, MaxPerPeriod: m}
		ref := &nominetBucket{q: 10000, m: m, periods: 24}
		if m == 0 {
			ref.m = math.Inf(1)
		}
		var w state.Window
		exists := false
		for h := 0; h < 24*5; h++ {
			ref.startPeriod()
			demand := rng.IntN(2500)
			if rng.IntN(4) == 0 {
				demand = 0
			}
			got, want := 0, 0
			for i := 0; i < demand; i++ {
				d := rw.Take(&w, exists, day0+float64(h)*hour+float64(i)*0.5, 1)
				exists = true
				if d.Allowed {
					got++
				}
				if ref.take() {
					want++
				}
			}
			if got != want {
				t.Fatalf("cap %v hour %d demand %d: admitted %d, the Nominet rolling window's bucket admits %d", m, h, demand, got, want)
			}
		}
	}
}

func TestRollingWindowWaitAndReset(t *testing.T) {
	rw := RollingWindow{Limit: 10, Period: 60, Periods: 5, MaxPerPeriod: 4}
	var w state.Window
	now := day0 + 10
	for i := 0; i < 4; i++ {
		if d := rw.Take(&w, i > 0, now, 1); !d.Allowed || d.Remaining != float64(3-i) {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	d := rw.Take(&w, true, now, 1)
	// Capped for this period: more quota at the next boundary, 50 s away.
	if d.Allowed || !near(d.Wait, 50) || !near(d.Reset, 290) {
		t.Fatalf("capped: %+v, want wait 50, reset 290 (the use leaves the 5-minute window)", d)
	}
	// Periods 1 and 2: 4 + 2 more reach the limit of 10.
	for p, n := range []int{4, 2} {
		for i := 0; i < n; i++ {
			if d := rw.Take(&w, true, day0+float64(p+1)*60, 1); !d.Allowed {
				t.Fatalf("period %d request %d: %+v", p+1, i, d)
			}
		}
	}
	d = rw.Take(&w, true, day0+120, 1)
	// 10 used: the first 4 leave the window at day0+300.
	if d.Allowed || d.Remaining != 0 || !near(d.Wait, 180) {
		t.Fatalf("at the limit: %+v, want wait 180", d)
	}
	if d := rw.Take(&w, true, day0+300, 4); !d.Allowed {
		t.Fatalf("after the first period left the window: %+v", d)
	}
	// A cost above the per-period cap can never pass: wait a whole window.
	if d := rw.Take(&w, true, day0+300, 5); d.Allowed || !near(d.Wait, 300) {
		t.Fatalf("cost 5 > cap 4: %+v", d)
	}
}

func TestWindowBackwardsClockMintsNothing(t *testing.T) {
	for name, alg := range map[string]Window{
		"fixed":   FixedWindow{Limit: 5, Window: 60},
		"sliding": SlidingWindow{Limit: 5, Window: 60},
		"rolling": RollingWindow{Limit: 5, Period: 60, Periods: 3},
	} {
		var w state.Window
		for i := 0; i < 5; i++ {
			if d := alg.Take(&w, i > 0, day0+130, 1); !d.Allowed {
				t.Fatalf("%s: request %d refused", name, i)
			}
		}
		start := w.Start
		for _, back := range []float64{day0 + 125, day0 - 3600, 0, math.NaN(), math.Inf(-1)} {
			if d := alg.Take(&w, true, back, 1); d.Allowed {
				t.Fatalf("%s: admitted at %v after the clock went back", name, back)
			}
			if w.Start != start {
				t.Fatalf("%s: the stored period moved to %v", name, w.Start)
			}
		}
	}
}

// TestFixedWindowBoundaryBurst shows the documented boundary burst: Limit
// just before an aligned boundary, Limit again just after it.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	fw := FixedWindow{Limit: 10, Window: 60}
	var w state.Window
	admitted := 0
	for _, at := range []float64{day0 + 59.5, day0 + 60.5} { // one second apart, across the boundary
		for i := 0; i < 15; i++ {
			if d := fw.Take(&w, admitted > 0, at, 1); d.Allowed {
				admitted++
			} else if at == day0+59.5 && !near(d.Wait, 0.5) {
				t.Fatalf("wait %v, want 0.5 (until the boundary)", d.Wait)
			}
		}
	}
	if admitted != 20 {
		t.Fatalf("admitted %d across the boundary, want 2*limit = 20", admitted)
	}
}

// TestSlidingWindowEstimate checks the weighted estimate: 10 per minute, 8
// used in the previous minute, 15 s into the current one the estimate is
// 8*0.75 = 6, so 4 more pass; at 45 s it is 8*0.25 + 4 = 6: 4 more.
func TestSlidingWindowEstimate(t *testing.T) {
	sw := SlidingWindow{Limit: 10, Window: 60}
	w := state.Window{Start: day0, N: 1, Counts: [state.MaxCounts]float64{8}}
	count := func(at float64) int {
		n := 0
		for i := 0; i < 20; i++ {
			if d := sw.Take(&w, true, at, 1); d.Allowed {
				n++
			} else if n > 0 && i == n {
				return n
			}
		}
		return n
	}
	if n := count(day0 + 60 + 15); n != 4 {
		t.Fatalf("at 15 s admitted %d, want 4", n)
	}
	d := sw.Take(&w, true, day0+75, 1)
	// estimate 10; one request fits once 8*(1-f) <= 10-4-1 = 5: f = 3/8, at 22.5 s.
	if d.Allowed || !near(d.Wait, 7.5) {
		t.Fatalf("wait %+v, want 7.5 s", d)
	}
	if n := count(day0 + 60 + 45); n != 4 {
		t.Fatalf("at 45 s admitted %d, want 4", n)
	}
	// Next window: the 8 of the minute before weigh fully at its start.
	if d := sw.Take(&w, true, day0+120, 3); d.Allowed || !near(d.Wait, 7.5) {
		t.Fatalf("cost 3 at the boundary: %+v, want a wait of 7.5 s (8*(1-f) <= 7)", d)
	}
	if d := sw.Take(&w, true, day0+120, 2); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("cost 2 at the boundary: %+v", d)
	}
}

func TestWindowRefund(t *testing.T) {
	rw := RollingWindow{Limit: 3, Period: 60, Periods: 2}
	var w state.Window
	rw.Take(&w, false, day0+1, 2)
	start := w.Start
	rw.Take(&w, true, day0+61, 1) // rotated: the refunded period is now c1
	if !RefundWindow(&w, start, 60, 2) || w.Counts[1] != 0 {
		t.Fatalf("refund: %+v", w.Counts[:w.N])
	}
	if RefundWindow(&w, start-600, 60, 1) {
		t.Fatal("refunded a period that left the state")
	}
}

// FuzzWindowTake: no input makes a window admit more than its capacity in
// one period, return NaN/Inf or a negative wait, or decode-break the state.
func FuzzWindowTake(f *testing.F) {
	f.Add(uint8(0), 10.0, 60.0, 3, 0.0, day0, 1.0, 5.0)
	f.Add(uint8(1), 1e12, 1.0, 60, 5.0, -1.0, math.NaN(), 0.5)
	f.Add(uint8(2), 0.5, 86400.0, 24, 0.1, math.Inf(1), 1.0, 1e9)
	f.Fuzz(func(t *testing.T, kind uint8, limit, period float64, periods int, cap, now, cost, count float64) {
		var alg Window
		switch kind % 3 {
		case 0:
			alg = FixedWindow{Limit: limit, Window: period}
		case 1:
			alg = SlidingWindow{Limit: limit, Window: period}
		default:
			alg = RollingWindow{Limit: limit, Period: period, Periods: periods, MaxPerPeriod: cap}
		}
		w := state.Window{Start: math.Abs(now), N: 2, Counts: [state.MaxCounts]float64{count, count}}
		d := alg.Take(&w, true, now, cost)
		for _, x := range []float64{d.Remaining, d.Wait, d.Reset, w.Start} {
			if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				t.Fatalf("non-finite or negative output %+v %+v", d, w.Start)
			}
		}
		if d.Allowed == (d.Wait > 0) {
			t.Fatalf("allowed %v with wait %v", d.Allowed, d.Wait)
		}
		if err := state.DecodeWindow(state.EncodeWindow(nil, &w), new(state.Window)); err != nil && w.Counts[0] < 1e300 {
			t.Fatalf("state does not round-trip: %v", err)
		}
	})
}
