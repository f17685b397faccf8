package policy

import (
	"strings"
	"testing"
)

// TestParseQuota reads a monthly quota in a zone and the defaults of a
// minimal one.
func TestParseQuota(t *testing.T) {
	cfg, err := Parse([]byte(withAlg("quota", `{"limit":10000,"period":"month","time_zone":"Europe/Berlin"}`)))
	if err != nil {
		t.Fatal(err)
	}
	q := cfg.Policies[0].Rules[0].Quota
	if q == nil || q.Limit != 10000 || q.Period != PeriodMonth || q.TimeZone != "Europe/Berlin" || q.Location.String() != "Europe/Berlin" {
		t.Fatalf("got %+v", q)
	}
	if q.FixedCost != 1 || q.DefaultCost != 1 || q.MaxDebt != 0 || q.Cost.Kind != CostFixed {
		t.Fatalf("defaults: %+v", q)
	}
	cfg, err = Parse([]byte(withAlg("quota", `{"limit":5,"period":"week"}`)))
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Policies[0].Rules[0].Quota; q.TimeZone != "UTC" || q.Location.String() != "UTC" {
		t.Fatalf("default zone: %+v", q)
	}
}

// TestParseResponseCost reads response cost sources and their max_debt
// default (the burst or limit) and explicit value.
func TestParseResponseCost(t *testing.T) {
	for _, tc := range []struct {
		alg, cfg string
		kind     CostKind
		name     string
		debt     float64
	}{
		{"token_bucket", `{"rps":100,"burst":1000,"cost_source":"response_header:X-Tokens-Used"}`, CostResponseHeader, "x-tokens-used", 1000},
		{"token_bucket", `{"rps":100,"burst":1000,"cost_source":"response_trailer:x-tokens-used","max_debt":0}`, CostResponseTrailer, "x-tokens-used", 0},
		{"quota", `{"limit":1e6,"period":"day","cost_source":"response_header:x-tokens-used","max_debt":5000,"default_cost":200}`, CostResponseHeader, "x-tokens-used", 5000},
		{"quota", `{"limit":1e6,"period":"day","cost_source":"response_trailer:grpc-cost"}`, CostResponseTrailer, "grpc-cost", 1e6},
		{"token_bucket", `{"rps":50,"burst":1e5,"cost_source":"response_json:usage.total_tokens"}`, CostResponseJSON, "usage.total_tokens", 1e5},
		{"quota", `{"limit":1e6,"period":"month","cost_source":"response_json:usage.input_tokens+usage.output_tokens","max_debt":0}`, CostResponseJSON, "usage.input_tokens+usage.output_tokens", 0},
	} {
		cfg, err := Parse([]byte(withAlg(tc.alg, tc.cfg)))
		if err != nil {
			t.Fatalf("%s %s: %v", tc.alg, tc.cfg, err)
		}
		r := &cfg.Policies[0].Rules[0]
		cs, _, _ := r.CostConfig()
		debt := 0.0
		if r.TokenBucket != nil {
			debt = r.TokenBucket.MaxDebt
		} else {
			debt = r.Quota.MaxDebt
		}
		if cs.Kind != tc.kind || cs.Name != tc.name || debt != tc.debt || !cs.FromResponse() {
			t.Fatalf("%s: cost %+v, max_debt %v", tc.cfg, cs, debt)
		}
		if !strings.HasPrefix(cs.String(), "response_") {
			t.Fatalf("String() = %q", cs.String())
		}
	}
}

// TestParseQuotaAndResponseCostErrors: every misconfiguration is refused
// with one error naming its field.
func TestParseQuotaAndResponseCostErrors(t *testing.T) {
	const c = "rules[0].algorithm_config."
	q := func(cfg string) string { return withAlg("quota", cfg) }
	for _, tc := range []struct {
		name, in, path string
		want           []string
	}{
		{"missing config", rules(`{"name":"r","limit_keys":["ip:address"],"algorithm":"quota"}`), "rules[0].algorithm_config", []string{"missing", `"period"`}},
		{"config not object", q(`7`), "rules[0].algorithm_config", []string{"must be an object"}},
		{"missing limit", q(`{"period":"day"}`), c + "limit", []string{"missing"}},
		{"limit zero", q(`{"limit":0,"period":"day"}`), c + "limit", []string{"not positive"}},
		{"limit huge", q(`{"limit":1e13,"period":"day"}`), c + "limit", []string{"too large"}},
		{"missing period", q(`{"limit":5}`), c + "period", []string{"missing", `"month"`}},
		{"unknown period", q(`{"limit":5,"period":"fortnight"}`), c + "period", []string{`"fortnight" is not a period`, `"hour", "day", "week", "month", "year"`}},
		{"period number", q(`{"limit":5,"period":30}`), c + "period", []string{"must be a string"}},
		{"unknown zone", q(`{"limit":5,"period":"day","time_zone":"Mars/Olympus"}`), c + "time_zone", []string{`"Mars/Olympus" is not a known IANA time zone`}},
		{"abbreviation", q(`{"limit":5,"period":"day","time_zone":"PST"}`), c + "time_zone", []string{"abbreviations", "Europe/Berlin"}},
		{"Local refused", q(`{"limit":5,"period":"day","time_zone":"Local"}`), c + "time_zone", []string{"not an IANA time zone name"}},
		{"zone path", q(`{"limit":5,"period":"day","time_zone":"../../etc/passwd"}`), c + "time_zone", []string{"not a known IANA time zone"}},
		{"zone number", q(`{"limit":5,"period":"day","time_zone":1}`), c + "time_zone", []string{"must be a string"}},
		{"window field", q(`{"limit":5,"period":"day","window_seconds":60}`), c + "window_seconds", []string{`unknown field "window_seconds"`}},
		{"cost above limit", q(`{"limit":5,"period":"day","fixed_cost":6}`), c + "fixed_cost", []string{"exceeds limit 5"}},
		{"max_debt without response cost", q(`{"limit":5,"period":"day","max_debt":3}`), c + "max_debt", []string{"applies only to a cost read from the response"}},
		{"max_debt negative", q(`{"limit":5,"period":"day","cost_source":"response_header:x-cost","max_debt":-1}`), c + "max_debt", []string{"is negative"}},
		{"max_debt on a token bucket without response cost", withTB(`{"rps":5,"burst":10,"max_debt":1}`), c + "max_debt", []string{"applies only"}},
		{"bad response header name", q(`{"limit":5,"period":"day","cost_source":"response_header:x y"}`), c + "cost_source", []string{"invalid header name"}},
		{"bad response body path", q(`{"limit":5,"period":"day","cost_source":"response_json:usage..total"}`), c + "cost_source", []string{`"response_json:usage..total" path "usage..total": has an empty key`}},
		{"response body path without a path", q(`{"limit":5,"period":"day","cost_source":"response_json:"}`), c + "cost_source", []string{`needs a path to a number in the response body`}},
		{"response body cost on a window", withAlg("sliding_window", `{"limit":5,"window_seconds":60,"cost_source":"response_json:usage.total_tokens"}`), c + "cost_source", []string{"token_bucket and quota only"}},
		{"response body cost with delays", withTB(`{"rps":5,"burst":10,"cost_source":"response_json:n","max_delay_ms":100}`), c + "max_delay_ms", []string{"cannot be combined with a response cost_source"}},
		{"response cost on a window", withAlg("fixed_window", `{"limit":5,"window_seconds":60,"cost_source":"response_header:x-cost"}`), c + "cost_source", []string{"token_bucket and quota only"}},
		{"response cost with delays", withTB(`{"rps":5,"burst":10,"cost_source":"response_trailer:x-cost","max_delay_ms":100}`), c + "max_delay_ms", []string{"cannot be combined with a response cost_source"}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantOneError(t, tc.in, tc.path, tc.want...) })
	}
}

// TestParseQuotaNormalizesStably: the normalized form of a quota parses to
// the same configuration.
func TestParseQuotaNormalizesStably(t *testing.T) {
	cfg, err := Parse([]byte(withAlg("quota", `{"limit":100,"period":"hour","time_zone":"Asia/Kolkata","cost_source":"response_header:x-cost"}`)))
	if err != nil {
		t.Fatal(err)
	}
	n, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"period":"hour"`, `"time_zone":"Asia/Kolkata"`, `"cost_source":"response_header:x-cost"`, `"max_debt":100`} {
		if !strings.Contains(string(n), want) {
			t.Fatalf("normalized %s lacks %s", n, want)
		}
	}
	again, err := Parse(n)
	if err != nil {
		t.Fatal(err)
	}
	n2, _ := again.MarshalJSON()
	if string(n2) != string(n) {
		t.Fatalf("normalizing twice differs:\n%s\n%s", n, n2)
	}
}
