package policy

import (
	"strings"
	"testing"
)

func TestLimitHeadersNameARulesOwnNumbers(t *testing.T) {
	cfg := mustParse(t, `{"policies": [
		{"name": "minute", "rules": [
			{"name": "key-minute", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 100, "window_seconds": 60},
			 "limit_headers": {"limit": "X-RateLimit-Limit-Minute", "remaining": "X-RateLimit-Remaining-Minute"}},
			{"name": "address-minute", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 100, "window_seconds": 60},
			 "limit_headers": {"limit": "x-ratelimit-limit-minute", "remaining": "x-ratelimit-remaining-minute"}}]},
		{"name": "hour", "rules": [
			{"name": "key-hour", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1000, "window_seconds": 3600},
			 "limit_headers": {"remaining": "x-ratelimit-remaining-hour", "reset": "x-ratelimit-reset-hour"}}]}]}`)
	if got := *cfg.RuleByName("key-minute").LimitHeaders; got != (LimitHeaders{Limit: "x-ratelimit-limit-minute", Remaining: "x-ratelimit-remaining-minute"}) {
		t.Errorf("key-minute: %+v, want the names lower-cased", got)
	}
	if got := cfg.RuleByName("key-hour").LimitHeaders.Names(); strings.Join(got, " ") != "x-ratelimit-remaining-hour x-ratelimit-reset-hour" {
		t.Errorf("key-hour's names %v", got)
	}
	out, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"limit_headers":{"remaining":"x-ratelimit-remaining-hour","reset":"x-ratelimit-reset-hour"}`) {
		t.Errorf("normalized form:\n%s", out)
	}
	if again := mustParse(t, string(out)); *again.RuleByName("key-hour").LimitHeaders != *cfg.RuleByName("key-hour").LimitHeaders {
		t.Errorf("changed through the normalized form:\n%s", out)
	}
}

func TestBadLimitHeadersAreRefusedNamingTheField(t *testing.T) {
	rule := func(extra string) string {
		return `{"name": "r", "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}` + extra + `}`
	}
	for _, tc := range []struct{ in, path, msg string }{
		{rules(rule(`, "limit_headers": "x-limit"`)), "rules[0].limit_headers", "must be an object"},
		{rules(rule(`, "limit_headers": {}`)), "rules[0].limit_headers", "is empty"},
		{rules(rule(`, "limit_headers": {"remain": "x-r"}`)), "rules[0].limit_headers.remain", "unknown field"},
		{rules(rule(`, "limit_headers": {"limit": 5}`)), "rules[0].limit_headers.limit", "must be a header name"},
		{rules(rule(`, "limit_headers": {"limit": "x limit"}`)), "rules[0].limit_headers.limit", "contains ' '"},
		{rules(rule(`, "limit_headers": {"limit": "RateLimit-Limit"}`)), "rules[0].limit_headers.limit", `"legacy_headers": true`},
		{rules(rule(`, "limit_headers": {"limit": "retry-after"}`)), "rules[0].limit_headers.limit", "cannot be set here"},
		{rules(rule(`, "limit_headers": {"limit": "x-a", "remaining": "X-A"}`)), "rules[0].limit_headers.remaining", "names the same header as limit"},
		{rules(rule(`, "limit_headers": {"limit": "x-a"}, "reject_headers": {"x-a": "1"}`)), "rules[0].limit_headers", "also one of the rule's reject_headers"},
		{rules(`{"name": "d", "action": "deny", "limit_headers": {"limit": "x-a"}}`), "rules[0].limit_headers", "applies only to limit rules"},
		{policies(`{"name": "p1", "rules": [`+rule(`, "limit_headers": {"remaining": "x-left"}`)+`]}`,
			`{"name": "p2", "rules": [`+strings.Replace(rule(`, "limit_headers": {"remaining": "X-Left"}`), `"r"`, `"s"`, 1)+`]}`),
			"policies[1].rules[0].limit_headers", `"x-left" is also rule "r"'s (policy "p1")`},
	} {
		wantError(t, tc.in, tc.path, tc.msg)
	}
	// A shadow rule sends no fields: its names may be another policy's.
	shadow := policies(`{"name": "p1", "rules": [`+rule(`, "limit_headers": {"remaining": "x-left"}`)+`]}`,
		`{"name": "p2", "rules": [`+strings.Replace(rule(`, "mode": "shadow", "limit_headers": {"remaining": "x-left"}`), `"r"`, `"s"`, 1)+`]}`)
	if _, err := Parse([]byte(shadow)); err != nil {
		t.Errorf("a shadow rule with another policy's limit_headers: %v", err)
	}
}
