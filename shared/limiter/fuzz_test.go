package limiter

import (
	"math"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/state"
)

// FuzzTake checks Take's invariants for arbitrary state, time and cost:
// every output is finite, and for a valid configuration the bucket never
// exceeds burst, never mints tokens for a backwards clock, never moves
// last_refill backwards, and admits exactly when the refilled level covers
// the cost.
func FuzzTake(f *testing.F) {
	f.Add(5.0, 10.0, 3.0, t0, t0+0.5, 1.0, true)
	f.Add(5.0, 10.0, 0.0, t0, t0-3600, 1.0, true)
	f.Add(1000.0, 2000.0, 0.0, 0.0, t0, 1.0, false)
	f.Add(0.001, 1.0, -50.0, t0, t0+1e9, 25.0, true)
	f.Add(1e12, 1e12, 1e12, t0, t0, 1e9, true)
	f.Fuzz(func(t *testing.T, rate, burst, tokens, last, now, cost float64, exists bool) {
		tb := TokenBucket{Rate: rate, Burst: burst}
		in := state.Bucket{Tokens: tokens, LastRefill: last}
		s, d := tb.Take(in, exists, now, cost)
		checkDecision(t, s, d)
		// Whatever comes in, what Take returns can be stored and read back.
		if _, err := state.DecodeBucket(state.EncodeBucket(nil, s)); err != nil {
			t.Fatalf("Take returned an unstorable bucket %+v: %v", s, err)
		}

		// Stronger invariants in the domain the configuration allows.
		finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
		if !(rate > 0 && rate <= 1e12 && burst >= rate && burst <= 1e12 &&
			cost > 0 && cost <= 1e9 && finite(now) && now >= 0 && now < 1e11) {
			return
		}
		if !exists || !finite(tokens) || !finite(last) {
			in = state.Bucket{Tokens: burst, LastRefill: now}
		}
		if s.LastRefill != math.Max(in.LastRefill, now) {
			t.Fatalf("LastRefill %v, want max(%v, %v)", s.LastRefill, in.LastRefill, now)
		}
		refilled := in.Tokens
		if now > in.LastRefill {
			refilled += (now - in.LastRefill) * rate
		}
		refilled = math.Min(refilled, burst)
		if d.Allowed != (refilled >= cost-rate*DueSlack) {
			t.Fatalf("Allowed=%v with %v tokens for cost %v", d.Allowed, refilled, cost)
		}
		want := refilled
		if d.Allowed {
			want -= cost
		}
		if s.Tokens != want {
			t.Fatalf("tokens %v, want %v", s.Tokens, want)
		}
		if s.Tokens > burst {
			t.Fatalf("tokens %v above burst %v", s.Tokens, burst)
		}
		if now <= in.LastRefill && s.Tokens > math.Min(in.Tokens, burst) {
			t.Fatalf("backwards clock minted tokens: %v -> %v", in.Tokens, s.Tokens)
		}
		if !d.Allowed {
			// Waiting Wait seconds really does gather the cost (up to
			// rounding), unless the cost can never fit.
			if cost <= burst && d.Wait < maxSeconds {
				if got := s.Tokens + d.Wait*rate; got < cost*(1-1e-9)-1e-9 {
					t.Fatalf("after Wait %v only %v tokens for cost %v", d.Wait, got, cost)
				}
			}
			if r := RetryAfter(d.Wait, "id"); float64(r) < math.Min(d.Wait, maxSeconds) || r < 1 {
				t.Fatalf("RetryAfter(%v) = %d", d.Wait, r)
			}
		}
	})
}

// FuzzRetryAfter: bounds and determinism for any wait and identity.
func FuzzRetryAfter(f *testing.F) {
	f.Add(1.5, "10.0.0.1")
	f.Add(0.0, "")
	f.Add(1e18, "x")
	f.Fuzz(func(t *testing.T, wait float64, id string) {
		r := RetryAfter(wait, id)
		if r != RetryAfter(wait, id) {
			t.Fatal("not deterministic")
		}
		if !(wait > 0) {
			if r != 0 {
				t.Fatalf("RetryAfter(%v) = %d, want 0", wait, r)
			}
			return
		}
		base := math.Ceil(math.Min(wait, maxSeconds))
		if float64(r) < base || float64(r) > math.Min(base+math.Floor(base/2), maxSeconds) || r < 1 {
			t.Fatalf("RetryAfter(%v) = %d, want [%v, %v]", wait, r, base, base*1.5)
		}
	})
}

// FuzzParseCost: accepted costs are finite, > 0 and <= MaxCost.
func FuzzParseCost(f *testing.F) {
	for _, s := range []string{"1", " 2.5 ", "1e9", "1e10", "NaN", "-1", "0x10", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, ok := ParseCost(v)
		if ok && !(c > 0 && c <= MaxCost) {
			t.Fatalf("ParseCost(%q) = %v", v, c)
		}
		if !ok && c != 0 {
			t.Fatalf("ParseCost(%q) = %v, false", v, c)
		}
	})
}

// FuzzLevel checks that Level is exactly the level Take refills a stored
// bucket to (Take with cost 0), for any configuration, state and time.
func FuzzLevel(f *testing.F) {
	f.Add(5.0, 10.0, 3.0, t0, t0+0.5)
	f.Add(5.0, 10.0, 0.0, t0, t0-3600)
	f.Add(0.001, 1.0, -50.0, t0, t0+1e9)
	f.Add(0.0, 10.0, 3.0, t0, t0+1)
	f.Add(math.Inf(1), 10.0, 3.0, t0, t0+1)
	f.Add(5.0, math.NaN(), 3.0, t0, t0+1)
	f.Add(5.0, 10.0, math.NaN(), t0, t0+1)
	f.Add(5.0, 10.0, 3.0, t0, math.Inf(1))
	f.Add(5.0, 10.0, 3.0, 10.0, -5.0)
	f.Add(1e300, 1e300, 1e300, 0.0, 1e300)
	f.Fuzz(func(t *testing.T, rate, burst, tokens, last, now float64) {
		tb := TokenBucket{Rate: rate, Burst: burst}
		s := state.Bucket{Tokens: tokens, LastRefill: last}
		want, _ := tb.Take(s, true, now, 0)
		if got := tb.Level(s, now); got != want.Tokens && !(math.IsNaN(got) && math.IsNaN(want.Tokens)) {
			t.Fatalf("Level(%+v, %v) with rate %v burst %v = %v, Take's level %v", s, now, rate, burst, got, want.Tokens)
		}
	})
}

// FuzzParseReportedCost: an accepted reported cost is finite, >= 0 and
// <= MaxCost; a refused one is 0.
func FuzzParseReportedCost(f *testing.F) {
	for _, s := range []string{"1", " 0 ", "2.5", "1e400", "-1", "NaN", "inf", "0x10", "", "12 tokens"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		c, ok := ParseReportedCost(v)
		if ok && !(c >= 0 && c <= MaxCost) {
			t.Fatalf("ParseReportedCost(%q) = %v", v, c)
		}
		if !ok && c != 0 {
			t.Fatalf("ParseReportedCost(%q) = %v, false", v, c)
		}
	})
}

// FuzzQuota: for any state, time, cost and debt, a quota's decisions and
// charges keep the state valid (one finite count >= 0, a start that is a
// period start at or before now unless the clock went back), admit only
// within the limit, charge at most limit + maxDebt, and name a finite,
// positive wait on a refusal.
func FuzzQuota(f *testing.F) {
	f.Add(uint8(4), 1e9, 3.0, 5.0, 10.0, 2.0, 1.0)
	f.Add(uint8(2), 0.0, 0.0, 1e300, math.Inf(1), 5.0, math.NaN())
	f.Add(uint8(1), -5.0, math.NaN(), 1.5e9, -1.0, 1.0, 0.0)
	f.Add(uint8(3), 1.8e9, 100.0, 1.7e9, 1e12, 1e12, 1e12)
	zones := []*time.Location{time.UTC, mustZone(f, "Europe/Berlin"), mustZone(f, "America/New_York"), mustZone(f, "Asia/Kolkata")}
	f.Fuzz(func(t *testing.T, p uint8, start, used, now, cost, limit, debt float64) {
		q := NewQuota(limit, Period(p%4+1), zones[int(p/4)%len(zones)])
		w := state.Window{Start: start, N: 1, Counts: [state.MaxCounts]float64{used}}
		d := q.Take(&w, true, now, cost)
		if w.N != 1 || !(w.Counts[0] >= 0) || math.IsInf(w.Counts[0], 0) || !(w.Start >= 0) || math.IsInf(w.Start, 0) {
			t.Fatalf("state after Take: %+v", w)
		}
		if d.Allowed && limit > 0 && w.Counts[0] > limit+costEpsilon && cost > 0 {
			t.Fatalf("admitted to %v over limit %v", w.Counts[0], limit)
		}
		if !d.Allowed && !(d.Wait > 0 && d.Wait <= maxSeconds) {
			t.Fatalf("refused with wait %v", d.Wait)
		}
		before := w.Counts[0]
		q.Charge(&w, true, now, cost, debt)
		ceiling := max(limit, 0) + max(validCost(debt), 0)
		if w.Counts[0] > max(ceiling, before) || !(w.Counts[0] >= 0) {
			t.Fatalf("charged to %v, ceiling %v", w.Counts[0], ceiling)
		}
	})
}

// FuzzTakeIntoMatchesTake: TakeInto writes every field of the decision it
// is given, whatever that held before, and returns Take's bucket.
func FuzzTakeIntoMatchesTake(f *testing.F) {
	f.Add(5.0, 10.0, 0.0, 3.0, t0, t0+0.5, 1.0, true)
	f.Add(5.0, 10.0, 2.0, -4.0, t0, t0+0.1, 3.0, true)
	f.Add(0.001, 1.0, 0.0, 0.0, 0.0, t0, 25.0, false)
	f.Fuzz(func(t *testing.T, rate, burst, maxDelay, tokens, last, now, cost float64, exists bool) {
		tb := TokenBucket{Rate: rate, Burst: burst, MaxDelay: maxDelay}
		in := state.Bucket{Tokens: tokens, LastRefill: last}
		wantS, wantD := tb.Take(in, exists, now, cost)
		d := Decision{Allowed: !wantD.Allowed, Remaining: 7, Wait: 7, Delay: 7, Reset: 7}
		s := tb.TakeInto(&d, in, exists, now, cost)
		same := func(a, b float64) bool { return math.Float64bits(a) == math.Float64bits(b) }
		if !same(s.Tokens, wantS.Tokens) || !same(s.LastRefill, wantS.LastRefill) {
			t.Fatalf("TakeInto bucket %+v, Take %+v", s, wantS)
		}
		if d.Allowed != wantD.Allowed || !same(d.Remaining, wantD.Remaining) || !same(d.Wait, wantD.Wait) ||
			!same(d.Delay, wantD.Delay) || !same(d.Reset, wantD.Reset) {
			t.Fatalf("TakeInto decision %+v, Take %+v", d, wantD)
		}
	})
}
