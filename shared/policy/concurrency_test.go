package policy

import (
	"strings"
	"testing"
)

// TestParseConcurrency reads a concurrency rule: its limit, its
// max_request_seconds (default 300), an override's limit, and the
// normalized form, which parses back to the same rule.
func TestParseConcurrency(t *testing.T) {
	cfg, err := Parse([]byte(withAlg("concurrency", `{"limit": 10},"overrides":[{"key":"1.2.3.4","algorithm_config":{"limit":50}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	r := &cfg.Policies[0].Rules[0]
	if r.Window == nil || r.Window.Limit != 10 || r.Window.WindowSeconds != DefaultMaxRequestSeconds || r.Overrides[0].Window.Limit != 50 {
		t.Fatalf("rule %+v, override %+v", r.Window, r.Overrides[0].Window)
	}
	n, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(n), `"algorithm":"concurrency","algorithm_config":{"limit":10,"max_request_seconds":300}`) {
		t.Fatalf("normalized: %s", n)
	}
	again, err := Parse(n)
	if err != nil {
		t.Fatalf("the normalized form does not parse: %v\n%s", err, n)
	}
	if w := again.Policies[0].Rules[0].Window; *w != *r.Window {
		t.Fatalf("normalized form parses to %+v, want %+v", w, r.Window)
	}
	cfg, err = Parse([]byte(withAlg("concurrency", `{"limit": 1, "max_request_seconds": 3600}`)))
	if err != nil || cfg.Policies[0].Rules[0].Window.WindowSeconds != 3600 {
		t.Fatalf("max_request_seconds 3600: %v", err)
	}
}

// TestParseConcurrencyErrors: each mistake is refused naming its field.
func TestParseConcurrencyErrors(t *testing.T) {
	const c = "rules[0].algorithm_config."
	cc := func(cfg string) string { return withAlg("concurrency", cfg) }
	for _, tc := range []struct {
		name, in, path string
		want           []string
	}{
		{"missing limit", cc(`{}`), c + "limit", []string{"missing", "in flight at once"}},
		{"fractional limit", cc(`{"limit": 2.5}`), c + "limit", []string{"not an integer", "whole number of requests"}},
		{"zero limit", cc(`{"limit": 0}`), c + "limit", []string{"out of range", "from 1 to 1000000"}},
		{"huge limit", cc(`{"limit": 1e7}`), c + "limit", []string{"out of range"}},
		{"zero seconds", cc(`{"limit": 1, "max_request_seconds": 0}`), c + "max_request_seconds", []string{"out of range", "longest request"}},
		{"over a day", cc(`{"limit": 1, "max_request_seconds": 86401}`), c + "max_request_seconds", []string{"out of range"}},
		{"a cost", cc(`{"limit": 1, "fixed_cost": 2}`), c + "fixed_cost", []string{`unknown field "fixed_cost"`}},
		{"a window", cc(`{"limit": 1, "window_seconds": 60}`), c + "window_seconds", []string{`unknown field "window_seconds"`}},
		{"not an object", cc(`5`), "rules[0].algorithm_config", []string{"must be an object", `{"limit": <requests in flight at once>}`}},
		{"missing config", rules(`{"name":"r","limit_keys":["ip:address"],"algorithm":"concurrency"}`), "rules[0].algorithm_config", []string{"missing", `{"limit": <requests in flight at once>}`}},
		{"global", `{"fleet":{"cluster":"rls"},"rules":[{"name":"r","scope":"global","limit_keys":["ip:address"],"algorithm":"concurrency","algorithm_config":{"limit":5}}]}`,
			"rules[0].scope", []string{"not supported by a concurrency rule", `make the rule "local"`}},
		{"fractional override", cc(`{"limit": 1},"overrides":[{"key":"k","algorithm_config":{"limit":1.5}}]`), "rules[0].overrides[0].algorithm_config.limit", []string{"not an integer"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantOneError(t, tc.in, tc.path, tc.want...) })
	}
}
