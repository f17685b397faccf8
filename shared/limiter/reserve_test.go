package limiter

import (
	"math"
	"testing"

	"github.com/sluice-rl/sluice/shared/state"
)

// A burst of simultaneous requests against a full bucket (burst 10, 5/s,
// max delay 1 s): 10 pass at once, the next 5 are reservations waiting
// 0.2 s, 0.4 s, ... 1.0 s (first come, first served), and the 16th, which
// would wait 1.2 s, is rejected with that wait and consumes nothing. So
// exactly Burst + Rate*MaxDelay = 15 are admitted or scheduled.
func TestReserveBurstThenDelayThenReject(t *testing.T) {
	tb := TokenBucket{Rate: 5, Burst: 10, MaxDelay: 1}
	var s state.Bucket
	exists := false
	var d Decision
	for i := 1; i <= 10; i++ {
		s, d = tb.Take(s, exists, t0, 1)
		exists = true
		if !d.Allowed || d.Delay != 0 {
			t.Fatalf("request %d: %+v", i, d)
		}
	}
	for k := 1; k <= 5; k++ {
		s, d = tb.Take(s, true, t0, 1)
		if !d.Allowed || d.Wait != 0 || !near(d.Delay, float64(k)*0.2) {
			t.Fatalf("reservation %d: %+v, want delay %v", k, d, float64(k)*0.2)
		}
		if s.Tokens != -float64(k) || d.Remaining != 0 {
			t.Fatalf("reservation %d: tokens %v remaining %v", k, s.Tokens, d.Remaining)
		}
		if !near(d.Reset, (10+float64(k))/5) {
			t.Fatalf("reservation %d: reset %v", k, d.Reset)
		}
	}
	before := s
	s, d = tb.Take(s, true, t0, 1)
	if d.Allowed || d.Delay != 0 || !near(d.Wait, 1.2) || s != before {
		t.Fatalf("16th: %+v %+v, want rejected with wait 1.2 and nothing taken", s, d)
	}
	// The debt is paid back by the refill: 0.2 s later the first
	// reservation's time has come and the bucket holds -4.
	s, d = tb.Take(s, true, t0+0.2, 1)
	if !d.Allowed || !near(d.Delay, 1.0) || !near(s.Tokens, -5) {
		t.Fatalf("after 0.2 s: %+v %+v", s, d)
	}
}

// MaxDelay 0 is exactly the old behaviour: a negative bucket (left by
// reservations before delays were turned off) rejects until it refills.
func TestReserveOffAndNegativeBucket(t *testing.T) {
	tb := TokenBucket{Rate: 2, Burst: 4}
	s, d := tb.Take(state.Bucket{Tokens: -3, LastRefill: t0}, true, t0+1, 1)
	if d.Allowed || d.Delay != 0 || !near(d.Wait, 1) || !near(s.Tokens, -1) || d.Remaining != 0 {
		t.Fatalf("%+v %+v", s, d)
	}
	s, d = tb.Take(s, true, t0+2, 1)
	if !d.Allowed || d.Delay != 0 || !near(s.Tokens, 0) {
		t.Fatalf("after refill: %+v %+v", s, d)
	}
}

func TestReserveEdges(t *testing.T) {
	full := state.Bucket{Tokens: 4, LastRefill: t0}
	empty := state.Bucket{Tokens: 0, LastRefill: t0}
	cases := []struct {
		name    string
		tb      TokenBucket
		b       state.Bucket
		cost    float64
		allowed bool
		delay   float64
	}{
		{"cost above burst is never reserved", TokenBucket{Rate: 100, Burst: 4, MaxDelay: 60}, full, 5, false, 0},
		{"exactly at the bound", TokenBucket{Rate: 2, Burst: 4, MaxDelay: 0.5}, empty, 1, true, 0.5},
		{"just beyond the bound", TokenBucket{Rate: 2, Burst: 4, MaxDelay: 0.499}, empty, 1, false, 0},
		{"NaN max delay delays nothing", TokenBucket{Rate: 2, Burst: 4, MaxDelay: math.NaN()}, empty, 1, false, 0},
		{"negative max delay delays nothing", TokenBucket{Rate: 2, Burst: 4, MaxDelay: -1}, empty, 1, false, 0},
		{"enough tokens: no delay", TokenBucket{Rate: 2, Burst: 4, MaxDelay: 10}, full, 4, true, 0},
		{"partial tokens", TokenBucket{Rate: 2, Burst: 4, MaxDelay: 10}, state.Bucket{Tokens: 1.5, LastRefill: t0}, 2, true, 0.25},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, d := c.tb.Take(c.b, true, t0, c.cost)
			checkReservation(t, c.tb, c.b, s, d, c.cost)
			if d.Allowed != c.allowed || !near(d.Delay, c.delay) {
				t.Fatalf("%+v, want allowed %v delay %v", d, c.allowed, c.delay)
			}
		})
	}
}

// checkReservation checks the reservation invariants of one Take at t0 on
// a bucket last refilled at t0.
func checkReservation(t *testing.T, tb TokenBucket, in, s state.Bucket, d Decision, cost float64) {
	t.Helper()
	for _, x := range []float64{s.Tokens, s.LastRefill, d.Remaining, d.Wait, d.Reset, d.Delay} {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.Fatalf("non-finite value in %+v %+v", s, d)
		}
	}
	if d.Delay < 0 || d.Remaining < 0 || (d.Delay > 0 && (!d.Allowed || d.Wait != 0)) || (d.Allowed && d.Wait != 0) {
		t.Fatalf("inconsistent decision %+v", d)
	}
	if d.Delay > 0 && !(d.Delay <= tb.MaxDelay) {
		t.Fatalf("delay %v beyond max %v", d.Delay, tb.MaxDelay)
	}
	switch {
	case d.Allowed && s.Tokens != min(in.Tokens, tb.Burst)-cost:
		t.Fatalf("admitted: tokens %v, want %v - %v", s.Tokens, in.Tokens, cost)
	case !d.Allowed && s.Tokens != min(in.Tokens, tb.Burst):
		t.Fatalf("rejected but tokens moved: %v -> %v", in.Tokens, s.Tokens)
	case d.Delay > 0 && s.Tokens+d.Delay*tb.Rate < -1e-9:
		// Waiting Delay seconds pays the debt back (to within rounding).
		t.Fatalf("after the delay %v the bucket still owes: %v", d.Delay, s.Tokens+d.Delay*tb.Rate)
	}
}

// FuzzReserve: for any valid configuration and stored state, a reservation
// never waits longer than MaxDelay, never leaves the bucket below
// -Rate*MaxDelay, is paid back by its delay, and a rejection takes nothing.
func FuzzReserve(f *testing.F) {
	f.Add(5.0, 10.0, 1.0, -3.0, 0.5, 1.0)
	f.Add(0.001, 1.0, 60.0, -0.05, 10.0, 0.5)
	f.Add(1e6, 1e9, 0.001, 0.0, 0.0, 1e3)
	f.Fuzz(func(t *testing.T, rate, burst, maxDelay, tokens, elapsed, cost float64) {
		if !(rate > 0 && rate <= 1e12 && burst >= rate && burst <= 1e12 && maxDelay >= 0 && maxDelay <= 60 &&
			cost > 0 && cost <= 1e9 && elapsed >= 0 && elapsed < 1e6 && tokens >= -rate*maxDelay && tokens <= burst) {
			t.Skip()
		}
		tb := TokenBucket{Rate: rate, Burst: burst, MaxDelay: maxDelay}
		in := state.Bucket{Tokens: tokens, LastRefill: t0}
		s, d := tb.Take(in, true, t0+elapsed, cost)
		lvl := min(tokens+(t0+elapsed-t0)*rate, burst)
		checkReservation(t, tb, state.Bucket{Tokens: lvl, LastRefill: t0 + elapsed}, s, d, cost)
		if s.Tokens < -rate*maxDelay*(1+1e-9)-1e-9 {
			t.Fatalf("debt %v beyond rate*maxDelay %v", s.Tokens, rate*maxDelay)
		}
		if _, err := state.DecodeBucket(state.EncodeBucket(nil, s)); err != nil {
			t.Fatalf("unstorable %+v: %v", s, err)
		}
	})
}
