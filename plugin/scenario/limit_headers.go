package scenario

// A limit rule's own fields (limit_headers), as Kong's per-period
// X-RateLimit-Limit-Minute and X-RateLimit-Remaining-Minute: every enforced
// rule that admitted the request sends its own numbers under its names,
// beside the RateLimit fields of the most restrictive rule; a rejection
// carries the rejecting rule's, nothing remaining; a shadow rule sends none.

import "testing"

func init() {
	register(Case{Name: "LimitRulesSendTheirOwnNumbersUnderTheirOwnNames", Run: limitRulesSendTheirOwnNumbers})
}

const limitHeadersConfig = `{"policies": [
  {"name": "minute", "rules": [{"name": "key-minute", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
    "algorithm_config": {"limit": 3, "window_seconds": 60},
    "limit_headers": {"limit": "X-RateLimit-Limit-Minute", "remaining": "X-RateLimit-Remaining-Minute"}}]},
  {"name": "hour", "rules": [{"name": "key-hour", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
    "algorithm_config": {"limit": 100, "window_seconds": 3600},
    "limit_headers": {"limit": "x-ratelimit-limit-hour", "remaining": "x-ratelimit-remaining-hour", "reset": "x-ratelimit-reset-hour"}}]},
  {"name": "trial", "rules": [{"name": "trial-key", "mode": "shadow", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
    "algorithm_config": {"limit": 1, "window_seconds": 60}, "limit_headers": {"remaining": "x-trial-remaining"}}]}]}`

func limitRulesSendTheirOwnNumbers(t *testing.T, start Starter) {
	h := startConfig(t, start, limitHeadersConfig)
	r := req("x-api-key", "k1")
	r.ResponseHeaders = []Header{{":status", "200"}, {"x-ratelimit-remaining-minute", "999"}}
	res := do(t, h, r)
	if res.Rejected {
		t.Fatal("first request rejected")
	}
	// The minute has 2 left of 3, the hour 99 of 100; the RateLimit fields
	// are the minute's, the most restrictive. The hour's window ends at the
	// next whole hour of the clock (60 s for the minute).
	hourReset := header(res.ResponseHeaders, "x-ratelimit-reset-hour")
	wantHeaders(t, "allowed", res.ResponseHeaders,
		"x-ratelimit-limit-minute", "3", "x-ratelimit-remaining-minute", "2",
		"x-ratelimit-limit-hour", "100", "x-ratelimit-remaining-hour", "99", "x-ratelimit-reset-hour", hourReset,
		"x-trial-remaining", "-", "ratelimit", header(res.ResponseHeaders, "ratelimit"))
	if n := atoi(t, "x-ratelimit-reset-hour", hourReset); n < 1 || n > 3600 {
		t.Errorf("x-ratelimit-reset-hour %d, want within the hour", n)
	}
	if rl := header(res.ResponseHeaders, "ratelimit"); len(rl) < 13 || rl[:13] != `"key-minute";` {
		t.Errorf("RateLimit %q, want the minute's", rl)
	}
	do(t, h, req("x-api-key", "k1"))
	do(t, h, req("x-api-key", "k1"))
	res = do(t, h, req("x-api-key", "k1"))
	if !res.Rejected {
		t.Fatal("fourth request in the minute admitted")
	}
	// The rejecting rule's own fields only; the hour's are not sent (the
	// request took nothing from it).
	wantHeaders(t, "rejected", res.ResponseHeaders,
		"x-ratelimit-limit-minute", "3", "x-ratelimit-remaining-minute", "0",
		"x-ratelimit-limit-hour", "-", "x-ratelimit-remaining-hour", "-", "x-trial-remaining", "-")
	noRecoveredPanics(t, h)
}
