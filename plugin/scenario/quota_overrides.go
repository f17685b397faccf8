package scenario

// Overrides on a calendar quota: one monthly quota rule in Europe/Berlin
// gives two API keys different limits (a per-customer table), both reset
// at the rule's month start, and RateLimit-Policy shows each key's limit.
// An override change keeps the month's count: lowered below the use, the
// key is rejected until the reset; raised, it gets only the difference.

import (
	"fmt"
	"testing"
	"time"
)

func init() {
	register(Case{Name: "QuotaOverridesGiveCustomersTheirOwnMonthlyLimit", Run: quotaOverrides})
}

// quotaOverridesConfig is a monthly quota of 5 per API key with overrides.
func quotaOverridesConfig(overrides string) []byte {
	return []byte(`{"rules": [{"name": "monthly", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
	  "algorithm_config": {"limit": 5, "period": "month", "time_zone": "Europe/Berlin"},
	  "overrides": [` + overrides + `]}]}`)
}

func quotaOverrides(t *testing.T, start Starter) {
	// 2026-03-31 22:00 in Berlin (CEST, UTC+2): two hours before April.
	h := mustStart(t, start, Options{Start: time.Date(2026, 3, 31, 20, 0, 0, 0, time.UTC),
		Config: quotaOverridesConfig(`{"key": "acme", "algorithm_config": {"limit": 20}},
		  {"key": "globex", "algorithm_config": {"limit": 8}}`)})
	const w = 2629746 // the nominal month
	key := func(k string) Request { return req("x-api-key", k) }
	for _, c := range []struct {
		key   string
		limit int
	}{{"acme", 20}, {"globex", 8}, {"initech", 5}} {
		res := do(t, h, key(c.key))
		wantHeaders(t, c.key, res.ResponseHeaders,
			"ratelimit-policy", fmt.Sprintf(`"monthly";q=%d;w=%d`, c.limit, w),
			"ratelimit", fmt.Sprintf(`"monthly";r=%d;t=7200`, c.limit-1))
		if got := admitted(t, h, 30, key(c.key)) + 1; got != c.limit {
			t.Errorf("%s: %d admitted this month, want its limit %d", c.key, got, c.limit)
		}
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.monthly.overridden": 62})

	// A new month: acme uses 12 of its 20.
	h.Advance(2 * time.Hour)
	if got := admitted(t, h, 12, key("acme")); got != 12 {
		t.Fatalf("acme in April: %d of 12 admitted", got)
	}
	// Its override lowered to 10: the 12 counted stay, so it is rejected
	// until May, with Retry-After naming the reset.
	if err := h.Reconfigure(quotaOverridesConfig(`{"key": "acme", "algorithm_config": {"limit": 10}}`)); err != nil {
		t.Fatal(err)
	}
	res := do(t, h, key("acme"))
	if !res.Rejected {
		t.Fatal("acme admitted after its limit was lowered below its use")
	}
	wantHeaders(t, "acme lowered", res.ResponseHeaders,
		"x-ratelimit-reason", "quota_exceeded", "retry-after", fmt.Sprint(30*86400),
		"ratelimit-policy", fmt.Sprintf(`"monthly";q=10;w=%d`, w))
	// Raised to 15: only the 3 above the 12 counted.
	if err := h.Reconfigure(quotaOverridesConfig(`{"key": "acme", "algorithm_config": {"limit": 15}}`)); err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, h, 10, key("acme")); got != 3 {
		t.Errorf("acme raised to 15 after using 12: %d admitted, want 3", got)
	}
	// A period per identity is refused, naming the field.
	if err := h.Reconfigure(quotaOverridesConfig(`{"key": "acme", "algorithm_config": {"limit": 15, "period": "day"}}`)); err == nil {
		t.Error("an override changing the quota's period was accepted")
	}
	if logsContaining(h, "rules[0].overrides[0].algorithm_config.period: cannot be overridden") == 0 {
		t.Error("the refused period is not logged with its path")
	}
	noRecoveredPanics(t, h)
}
