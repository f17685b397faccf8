package scenario

// Calendar quotas and costs reported by the response.
//
// A monthly quota in Europe/Berlin resets at local midnight of the 1st (an
// hour before midnight UTC), t and Retry-After name that moment exactly
// (no jitter), and the next month's reset is 28 days on; a yearly quota
// resets at New Year in its zone. A token bucket
// charged from the response header x-tokens-used admits while it holds
// something, charges the reported cost when the response arrives (the
// RateLimit fields show the bucket after the charge), charges default_cost
// for a response without the header, an unusable value and a reset stream,
// clamps a huge cost at -max_debt and refuses until the refill pays the
// debt. A daily quota charged from a response trailer charges default_cost
// when no trailer comes.

import (
	"fmt"
	"testing"
	"time"
)

func init() {
	register(
		Case{Name: "QuotaMonthlyResetsAtLocalMonthStart", Run: quotaMonthly},
		Case{Name: "QuotaYearlyResetsAtLocalNewYear", Run: quotaYearly},
		Case{Name: "ResponseCostChargedAfterTheResponse", Run: responseCostHeader},
		Case{Name: "ResponseCostFromTrailersAndDefault", Run: responseCostTrailer},
	)
}

func quotaMonthly(t *testing.T, start Starter) {
	// 2026-01-31 23:30 in Berlin (CET, UTC+1).
	h := mustStart(t, start, Options{Start: time.Date(2026, 1, 31, 22, 30, 0, 0, time.UTC),
		Config: []byte(keyRule("monthly", "quota", `{"limit": 3, "period": "month", "time_zone": "Europe/Berlin"}`))})
	k := req("x-api-key", "k")
	const w = 2629746 // the nominal month
	for i := 0; i < 3; i++ {
		res := do(t, h, k)
		if res.Rejected {
			t.Fatalf("request %d rejected", i)
		}
		wantHeaders(t, "allowed", res.ResponseHeaders,
			"ratelimit-policy", fmt.Sprintf(`"monthly";q=3;w=%d`, w),
			"ratelimit", fmt.Sprintf(`"monthly";r=%d;t=1800`, 2-i))
	}
	res := do(t, h, k)
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("4th request: rejected %v status %d", res.Rejected, res.Status)
	}
	wantHeaders(t, "over the quota", res.ResponseHeaders,
		"x-ratelimit-reason", "quota_exceeded", "retry-after", "1800",
		"ratelimit", `"monthly";r=0;t=1800`)
	h.Advance(1800*time.Second - time.Millisecond)
	if res := do(t, h, k); !res.Rejected {
		t.Fatal("admitted a millisecond before the month starts in Berlin")
	}
	h.Advance(time.Millisecond) // 2026-02-01 00:00 CET
	res = do(t, h, k)
	if res.Rejected {
		t.Fatal("rejected at the start of February in Berlin")
	}
	wantHeaders(t, "February", res.ResponseHeaders, "ratelimit", fmt.Sprintf(`"monthly";r=2;t=%d`, 28*86400))
	if got := admitted(t, h, 4, k); got != 2 {
		t.Fatalf("February: %d more admitted, want 2", got)
	}
	noRecoveredPanics(t, h)
}

// quotaYearly: a yearly quota in America/New_York resets at local
// midnight of January 1st (05:00 UTC), whose next reset is 365 days on.
func quotaYearly(t *testing.T, start Starter) {
	// 2026-12-31 23:00 in New York (EST, UTC-5).
	h := mustStart(t, start, Options{Start: time.Date(2027, 1, 1, 4, 0, 0, 0, time.UTC),
		Config: []byte(keyRule("yearly", "quota", `{"limit": 2, "period": "year", "time_zone": "America/New_York"}`))})
	k := req("x-api-key", "k")
	if got := admitted(t, h, 3, k); got != 2 {
		t.Fatalf("%d admitted in 2026, want 2", got)
	}
	res := do(t, h, k)
	wantHeaders(t, "over the quota", res.ResponseHeaders, "x-ratelimit-reason", "quota_exceeded", "retry-after", "3600",
		"ratelimit-policy", `"yearly";q=2;w=31556952`)
	h.Advance(time.Hour) // 2027-01-01 00:00 EST
	res = do(t, h, k)
	if res.Rejected {
		t.Fatal("rejected at New Year in New York")
	}
	wantHeaders(t, "2027", res.ResponseHeaders, "ratelimit", fmt.Sprintf(`"yearly";r=1;t=%d`, 365*86400))
	noRecoveredPanics(t, h)
}

// llmRequest is a request of key k whose upstream reports cost (none when
// empty) in x-tokens-used.
func llmRequest(k, cost string) Request {
	r := req("x-api-key", k)
	r.ResponseHeaders = []Header{{":status", "200"}}
	if cost != "" {
		r.ResponseHeaders = append(r.ResponseHeaders, Header{"x-tokens-used", cost})
	}
	return r
}

func responseCostHeader(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(keyRule("llm", "token_bucket",
		`{"tokens_per_second": 1, "burst": 100, "cost_source": "response_header:x-tokens-used", "default_cost": 10, "max_debt": 50}`))})
	left := func(what string, r Request, remaining string) { t.Helper(); admittedLeaving(t, h, what, r, remaining) }
	left("reports 30", llmRequest("k", "30"), "70")
	left("reports nothing", llmRequest("k", ""), "60")
	left("reports a negative cost", llmRequest("k", "-5"), "50")
	left("reports garbage", llmRequest("k", "many"), "40")
	left("reports 0", llmRequest("k", "0"), "40")
	left("reports a huge cost", llmRequest("k", "1e15"), "0") // clamped at -50
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.llm.response_cost_charged": 6,
		"sluice.rule.llm.response_cost_default": 3,
		"sluice.rule.llm.response_cost_invalid": 2,
		"sluice.rule.llm.response_cost_clamped": 1,
		"sluice.rule.llm.response_cost_failed":  0,
	})
	res := do(t, h, llmRequest("k", "1"))
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("in debt: rejected %v status %d", res.Rejected, res.Status)
	}
	wantHeaders(t, "in debt", res.ResponseHeaders, "ratelimit", `"llm";r=0;t=50`) // 50 in debt at 1/s
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 50 {
		t.Fatalf("retry-after %d before the debt is paid", ra)
	}
	h.Advance(50 * time.Second) // exactly paid back: still nothing left
	if res := do(t, h, llmRequest("k", "1")); !res.Rejected {
		t.Fatal("admitted with an empty bucket")
	}
	h.Advance(time.Second)
	left("after the refill", llmRequest("k", "0"), "1")

	// A stream reset before its response is charged default_cost (10).
	r := llmRequest("k", "")
	r.ResetAfterRequest = true
	if res := do(t, h, r); res.Rejected {
		t.Fatal("the request to be reset was rejected")
	}
	res = do(t, h, llmRequest("k", "1"))
	if !res.Rejected {
		t.Fatal("admitted after a reset stream was charged default_cost")
	}
	wantHeaders(t, "after the reset", res.ResponseHeaders, "ratelimit", `"llm";r=0;t=9`)
	if got := metric(h, "sluice.rule.llm.response_cost_default"); got != 4 {
		t.Fatalf("response_cost_default = %d after a reset stream, want 4", got)
	}
	// Another key has its own bucket.
	left("another key", llmRequest("other", "99"), "1")
	noRecoveredPanics(t, h)
}

func responseCostTrailer(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Start: alignedStart.Add(18 * time.Hour),
		Config: []byte(keyRule("daily", "quota", `{"limit": 100, "period": "day", "cost_source": "response_trailer:x-cost"}`))})
	withTrailer := func(cost string) Request {
		r := req("x-api-key", "tenant")
		if cost != "" {
			r.ResponseTrailers = []Header{{"x-cost", cost}}
		}
		return r
	}
	for i, cost := range []string{"60", "", "60"} {
		if res := do(t, h, withTrailer(cost)); res.Rejected {
			t.Fatalf("request %d (trailer %q): rejected", i, cost)
		}
	}
	// Used 60 + 1 (no trailer: default_cost) + 60 = 121, over the limit.
	res := do(t, h, withTrailer("1"))
	if !res.Rejected {
		t.Fatal("admitted over the daily quota")
	}
	wantHeaders(t, "over the quota", res.ResponseHeaders, "ratelimit", `"daily";r=0;t=21600`, "retry-after", "21600")
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.daily.response_cost_charged": 3,
		"sluice.rule.daily.response_cost_default": 1,
		"sluice.rule.daily.response_cost_clamped": 0,
	})
	h.Advance(6 * time.Hour) // the next UTC day
	if res := do(t, h, withTrailer("5")); res.Rejected {
		t.Fatal("rejected on the next day")
	}
	noRecoveredPanics(t, h)
}
