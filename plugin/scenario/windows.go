package scenario

// Windows: fixed_window, sliding_window and rolling_window admit exactly
// their quota at and across window boundaries (aligned to the epoch: the
// clock starts on a UTC day boundary), with RateLimit fields q = limit and
// w = window seconds, r the quota left, t the seconds until the quota is
// whole again (allowed) or until the cost fits (rejected), the reason
// <algorithm>_exceeded and Retry-After never earlier than t.

import (
	"fmt"
	"testing"
	"time"
)

func init() {
	register(
		Case{Name: "FixedWindowExactAtAndAcrossBoundaries", Run: fixedWindowBoundaries},
		Case{Name: "SlidingWindowWeightedEstimate", Run: slidingWindowEstimate},
		Case{Name: "RollingWindowHourByHour", Run: rollingWindowHourByHour},
	)
}

// windowRejected checks a window rule's 429: every field, and Retry-After
// between t and t plus 50%.
func windowRejected(t *testing.T, what string, res Response, rule, alg string, limit, window int, wantT int) {
	t.Helper()
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("%s: rejected %v status %d, want 429", what, res.Rejected, res.Status)
	}
	wantHeaders(t, what, res.ResponseHeaders,
		"x-ratelimit-reason", alg+"_exceeded",
		"ratelimit-policy", fmt.Sprintf(`"%s";q=%d;w=%d`, rule, limit, window),
		"ratelimit", fmt.Sprintf(`"%s";r=0;t=%d`, rule, wantT),
		"ratelimit-limit", "-", "ratelimit-remaining", "-", "ratelimit-reset", "-")
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < wantT || ra > wantT+wantT/2 {
		t.Errorf("%s: retry-after %d outside [t, 1.5 t] for t = %d", what, ra, wantT)
	}
}

// windowAllowed checks a window rule's allowed response fields.
func windowAllowed(t *testing.T, what string, res Response, rule string, limit, window, remaining, wantT int) {
	t.Helper()
	if res.Rejected {
		t.Fatalf("%s: rejected", what)
	}
	wantHeaders(t, what, res.ResponseHeaders,
		"ratelimit-policy", fmt.Sprintf(`"%s";q=%d;w=%d`, rule, limit, window),
		"ratelimit", fmt.Sprintf(`"%s";r=%d;t=%d`, rule, remaining, wantT),
		"ratelimit-limit", "-", "retry-after", "-", "x-ratelimit-reason", "-")
}

// fixedWindowBoundaries: 10 per aligned minute. 10 pass at :59 (the 11th is
// told t = 1), 10 more from :00 (the boundary burst), and the next window
// opens exactly on the minute, not a millisecond before.
func fixedWindowBoundaries(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Start: alignedStart.Add(59 * time.Second),
		Config: []byte(keyRule("fw", "fixed_window", `{"limit": 10, "window_seconds": 60}`))})
	k := req("x-api-key", "k")
	windowAllowed(t, "first at :59", do(t, h, k), "fw", 10, 60, 9, 1)
	if got := admitted(t, h, 14, k); got != 9 {
		t.Fatalf("at :59: %d more admitted, want 9", got)
	}
	windowRejected(t, "11th at :59", do(t, h, k), "fw", "fixed_window", 10, 60, 1)
	h.Advance(time.Second) // :00, the next window
	windowAllowed(t, "first at :00", do(t, h, k), "fw", 10, 60, 9, 60)
	if got := admitted(t, h, 15, k); got != 9 {
		t.Fatalf("at :00: %d more admitted, want 9 (20 within 2 seconds in all)", got)
	}
	windowRejected(t, "11th at :00", do(t, h, k), "fw", "fixed_window", 10, 60, 60)
	h.Advance(time.Minute - time.Millisecond)
	if res := do(t, h, k); !res.Rejected {
		t.Fatal("admitted a millisecond before the window's end")
	}
	h.Advance(time.Millisecond)
	if got := admitted(t, h, 12, k); got != 10 {
		t.Fatalf("on the next minute: %d admitted, want 10", got)
	}
	// Another key has its own count.
	if got := admitted(t, h, 12, req("x-api-key", "other")); got != 10 {
		t.Fatalf("another key: %d admitted, want 10", got)
	}
}

// slidingWindowEstimate: 10 per minute, 8 used in the previous minute. 15 s
// into the next the estimate is 8 x 0.75 = 6, so 4 pass; a 5th fits once
// 8 x (1 - f) <= 5, at f = 3/8 (22.5 s in: t = 8 from 15 s), not before.
func slidingWindowEstimate(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Start: alignedStart.Add(30 * time.Second),
		Config: []byte(keyRule("sw", "sliding_window", `{"limit": 10, "window_seconds": 60}`))})
	k := req("x-api-key", "k")
	// The use leaves the estimate at the end of the next minute: 90 s.
	windowAllowed(t, "first", do(t, h, k), "sw", 10, 60, 9, 90)
	if got := admitted(t, h, 7, k); got != 7 {
		t.Fatalf("first minute: %d of 7 more admitted", got)
	}
	h.Advance(45 * time.Second) // 15 s into the second minute
	if got := admitted(t, h, 10, k); got != 4 {
		t.Fatalf("15 s into the second minute: %d admitted, want 4", got)
	}
	windowRejected(t, "at 15 s", do(t, h, k), "sw", "sliding_window", 10, 60, 8)
	h.Advance(7400 * time.Millisecond) // 22.4 s: 8 x 0.6267 + 4 + 1 > 10
	if res := do(t, h, k); !res.Rejected {
		t.Fatal("admitted at 22.4 s, before the estimate allows it")
	}
	h.Advance(100 * time.Millisecond) // 22.5 s: exactly 10
	if got := admitted(t, h, 3, k); got != 1 {
		t.Fatalf("at 22.5 s: %d admitted, want 1", got)
	}
	// Two minutes on, both windows are empty: the whole limit.
	h.Advance(2 * time.Minute)
	if got := admitted(t, h, 12, k); got != 10 {
		t.Fatalf("two minutes later: %d admitted, want 10", got)
	}
}

// rollingWindowHourByHour: 10,000 per rolling 24 hours, at most 1,000 an
// hour, recalculated hourly; requests cost 100 (cost header), 11 an hour
// for 48 hours: 10 pass in each of hours 0-9, none in 10-23 (t names the
// hour when hour 0 leaves the window), 10 again from hour 24 as the old
// hours leave. Hour 48 with unit costs: exactly 1,000 of 1,001.
func rollingWindowHourByHour(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Start: alignedStart.Add(5 * time.Minute),
		Config: []byte(keyRule("daily", "rolling_window", `{"limit": 10000, "window_seconds": 86400,
		  "period_seconds": 3600, "max_per_period": 1000, "cost_source": "header:x-cost", "default_cost": 1}`))})
	hundred := req("x-api-key", "client", "x-cost", "100")
	for hour := 0; hour < 48; hour++ {
		if hour > 0 {
			h.Advance(time.Hour)
		}
		rs := make([]Request, 11)
		for i := range rs {
			rs[i] = hundred
		}
		got := 0
		var last Response
		for _, res := range many(t, h, 0, rs) {
			if !res.Rejected {
				got++
				wantHeaders(t, "allowed", res.ResponseHeaders, "ratelimit-policy", `"daily";q=10000;w=86400`)
			} else {
				last = res
			}
		}
		want := 0
		if hour%24 < 10 {
			want = 10
		}
		if got != want {
			t.Fatalf("hour %d: %d requests of cost 100 admitted, want %d", hour, got, want)
		}
		switch hour {
		case 3: // capped for the hour: more at the next hour, 55 minutes away
			windowRejected(t, "hour 3", last, "daily", "rolling_window", 10000, 86400, 55*60)
		case 10: // the window is spent: more when hour 0 leaves it, at hour 24
			windowRejected(t, "hour 10", last, "daily", "rolling_window", 10000, 86400, int((14*time.Hour - 5*time.Minute).Seconds()))
		}
	}
	h.Advance(time.Hour - 5*time.Minute) // hour 48 exactly
	if got := admitted(t, h, 1001, req("x-api-key", "client")); got != 1000 {
		t.Fatalf("hour 48 with unit costs: %d admitted, want 1000", got)
	}
}
