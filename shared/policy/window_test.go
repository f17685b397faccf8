package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func withAlg(alg, cfg string) string {
	return rules(`{"name":"r","limit_keys":["ip:address"],"algorithm":"` + alg + `","algorithm_config":` + cfg + `}`)
}

func TestParseWindowErrors(t *testing.T) {
	const c = "rules[0].algorithm_config."
	fw := func(cfg string) string { return withAlg("fixed_window", cfg) }
	sw := func(cfg string) string { return withAlg("sliding_window", cfg) }
	rw := func(cfg string) string { return withAlg("rolling_window", cfg) }
	for _, tc := range []struct {
		name, in, path string
		want           []string
	}{
		{"missing config", rules(`{"name":"r","limit_keys":["ip:address"],"algorithm":"fixed_window"}`), "rules[0].algorithm_config", []string{"missing", `"window_seconds"`}},
		{"config not object", fw(`[]`), "rules[0].algorithm_config", []string{"must be an object", "got an array"}},
		{"missing limit", fw(`{"window_seconds":60}`), c + "limit", []string{"missing"}},
		{"limit zero", fw(`{"limit":0,"window_seconds":60}`), c + "limit", []string{"not positive"}},
		{"limit negative", sw(`{"limit":-5,"window_seconds":60}`), c + "limit", []string{"not positive"}},
		{"limit string", fw(`{"limit":"10","window_seconds":60}`), c + "limit", []string{"must be a number", "without quotes"}},
		{"limit huge", fw(`{"limit":2e12,"window_seconds":60}`), c + "limit", []string{"too large"}},
		{"missing window", fw(`{"limit":10}`), c + "window_seconds", []string{"missing"}},
		{"window zero", fw(`{"limit":10,"window_seconds":0}`), c + "window_seconds", []string{"out of range"}},
		{"window fraction", sw(`{"limit":10,"window_seconds":1.5}`), c + "window_seconds", []string{"not an integer"}},
		{"window too long", fw(`{"limit":10,"window_seconds":40000000}`), c + "window_seconds", []string{"out of range", "366 days"}},
		{"unknown field", fw(`{"limit":10,"window_seconds":60,"burst":5}`), c + "burst", []string{`unknown field "burst"`, "allowed fields here: limit, window_seconds"}},
		{"period on fixed", fw(`{"limit":10,"window_seconds":60,"period_seconds":10}`), c + "period_seconds", []string{`unknown field "period_seconds"`}},
		{"cap on sliding", sw(`{"limit":10,"window_seconds":60,"max_per_period":5}`), c + "max_per_period", []string{`unknown field`}},
		{"typo", rw(`{"limit":10,"window_seconds":60,"period_seconds":10,"max_per_perod":1}`), c + "max_per_perod", []string{`did you mean "max_per_period"`}},
		{"missing period", rw(`{"limit":10,"window_seconds":60}`), c + "period_seconds", []string{"missing", "divid"}},
		{"period not dividing", rw(`{"limit":10,"window_seconds":60,"period_seconds":7}`), c + "period_seconds", []string{"7 does not divide window_seconds 60"}},
		{"period above window", rw(`{"limit":10,"window_seconds":60,"period_seconds":120}`), c + "period_seconds", []string{"exceeds window_seconds 60"}},
		{"too many periods", rw(`{"limit":10,"window_seconds":86400,"period_seconds":60}`), c + "period_seconds", []string{"1440 periods", "at most 60", "at least 1440 seconds"}},
		{"period zero", rw(`{"limit":10,"window_seconds":60,"period_seconds":0}`), c + "period_seconds", []string{"out of range"}},
		{"cap above limit", rw(`{"limit":10,"window_seconds":60,"period_seconds":10,"max_per_period":11}`), c + "max_per_period", []string{"exceeds limit 10"}},
		{"cap zero", rw(`{"limit":10,"window_seconds":60,"period_seconds":10,"max_per_period":0}`), c + "max_per_period", []string{"not positive"}},
		{"cost above limit", fw(`{"limit":10,"window_seconds":60,"fixed_cost":11}`), c + "fixed_cost", []string{"exceeds limit 10"}},
		{"cost above cap", rw(`{"limit":10,"window_seconds":60,"period_seconds":10,"max_per_period":2,"default_cost":3}`), c + "default_cost", []string{"exceeds max_per_period 2"}},
		{"cost zero", sw(`{"limit":10,"window_seconds":60,"default_cost":0}`), c + "default_cost", []string{"not positive"}},
		{"bad cost source", fw(`{"limit":10,"window_seconds":60,"cost_source":"cookie:x"}`), c + "cost_source", []string{"not a cost source"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantOneError(t, tc.in, tc.path, tc.want...) })
	}
}

// wantOneError checks that Parse refuses in with exactly one error, at
// path, whose message contains every string of want.
func wantOneError(t *testing.T, in, path string, want ...string) {
	t.Helper()
	_, err := Parse([]byte(in))
	var es Errors
	if !errors.As(err, &es) || len(es) != 1 {
		t.Fatalf("want exactly one error, got %v", err)
	}
	if es[0].Path != path {
		t.Errorf("path %q, want %q (%s)", es[0].Path, path, es[0].Message)
	}
	for _, w := range want {
		if !strings.Contains(es[0].Message, w) {
			t.Errorf("message %q lacks %q", es[0].Message, w)
		}
	}
}

func TestParseWindows(t *testing.T) {
	cfg := mustParse(t, rules(
		`{"name":"nominet","limit_keys":["header:x-api-key"],"algorithm":"rolling_window","algorithm_config":{"limit":10000,"window_seconds":86400,"period_seconds":3600,"max_per_period":1000}}`,
		`{"name":"fw","limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"limit":10,"window_seconds":60,"cost_source":"header:X-Cost","default_cost":2}}`,
		`{"name":"sw","limit_keys":["ip:address"],"algorithm":"sliding_window","algorithm_config":{"limit":10,"window_seconds":60}}`,
	))
	r := cfg.RuleByName("nominet")
	if r.Window == nil || *r.Window != (Window{Limit: 10000, WindowSeconds: 86400, PeriodSeconds: 3600, MaxPerPeriod: 1000, FixedCost: 1, DefaultCost: 1}) || r.Window.Periods() != 24 {
		t.Errorf("rolling: %+v", r.Window)
	}
	fw := cfg.RuleByName("fw").Window
	if fw.PeriodSeconds != 60 || fw.Periods() != 1 || fw.Cost != (CostSource{Kind: CostHeader, Name: "x-cost"}) || fw.DefaultCost != 2 {
		t.Errorf("fixed: %+v", fw)
	}
	// Normalized form round-trips, and rolling-only fields appear only there.
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back := mustParse(t, string(out))
	if *back.RuleByName("nominet").Window != *r.Window || *back.RuleByName("fw").Window != *fw {
		t.Errorf("normalized form does not round-trip: %s", out)
	}
	if strings.Count(string(out), "period_seconds") != 1 {
		t.Errorf("period_seconds outside rolling_window: %s", out)
	}
}
