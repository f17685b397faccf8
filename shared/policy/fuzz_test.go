package policy

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

// FuzzParse: Parse never panics; it returns either a Config that satisfies
// every invariant (and round-trips through its normalized form) or a
// non-empty Errors whose entries all carry a message.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		fairvisorTiered,
		`{"rules": [` + fairvisorGlobalRPS + `]}`,
		fragmentRule(fairvisorConfiguration, `"name": "r", "limit_keys": ["ip:address"]`),
		fragmentRule(fairvisorVariableCost, `"name": "r", "limit_keys": ["ip:address"], "algorithm": "token_bucket"`),
		configurationExample,
		`{"mode":"shadow","reject_status":503,"response_headers":false,"shadow_header":"X-S","xff_trusted_hops":2,"reject_grpc_status":"unavailable","rules":[` + baseRule + `]}`,
		`{"legacy_headers":"x-ratelimit","rules":[` + baseRule + `]}`,
		`{"policies":[{"name":"a","rules":[{"name":"r","limit_keys":["path"],"algorithm":"fixed_window","algorithm_config":{"limit":1,"window_seconds":60},"limit_headers":{"limit":"X-L","remaining":"x-r"}}]},{"name":"b","rules":[{"name":"s","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1},"limit_headers":{"remaining":"X-R","reset":"retry-after"}}]}]}`,
		`{"reject_status":503,"rules":[{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1},"reject_status":420},{"name":"d","action":"deny","reject_status":429}]}`,
		withMatch(`{"path_prefix":"/api/","method":"GET","header:X-Tier":"gold"}`),
		withTB(`{"tokens_per_second":10,"burst":5}`),
		withAlg("rolling_window", `{"limit":10000,"window_seconds":86400,"period_seconds":3600,"max_per_period":1000,"cost_source":"header:x-c"}`),
		withAlg("fixed_window", `{"limit":10,"window_seconds":60}`),
		withAlg("quota", `{"limit":10000,"period":"month","time_zone":"Europe/Berlin"}`),
		withAlg("quota", `{"limit":1e6,"period":"week","cost_source":"response_trailer:x-cost","max_debt":0}`),
		withTB(`{"rps":50,"burst":1e5,"cost_source":"response_header:x-tokens-used","default_cost":500,"max_debt":2e4}`),
		withTB(`{"rps":50,"burst":1e5,"cost_source":"response_json:usage.prompt_tokens+usage.completion_tokens","default_cost":500}`),
		withTB(`{"rps":0.01,"burst":5,"cost_source":"response_status:401,403,5xx","fixed_cost":2,"max_debt":0}`),
		withAlg("quota", `{"limit":20,"period":"day","cost_source":"response_status:4XX,429"}`),
		withTB(`{"rps":0.1,"burst":3,"cost_source":"response_grpc_status:unauthenticated,ok"}`),
		withAlg("concurrency", `{"limit":10,"max_request_seconds":600},"overrides":[{"key":"k","algorithm_config":{"limit":2}}]`),
		withAlg("concurrency", `{"limit":0.5,"max_request_seconds":-1,"burst":3}`),
		withAlg("sliding_window", `{"limit":10,"window_seconds":60,"fixed_cost":11}`),
		withKeys(`["header:X","header:x","query:q","jwt:sub","path","method","host"]`),
		withKeys(`["peer:principal","ip:address","route","cluster","connection"]`),
		withMatch(`{"connection":"7"}`),
		withMatch(`{"cluster":{"suffix":"|payments.prod.svc.cluster.local"},"cluster:x":"y","Cluster":"z"}`),
		withKeys(`["metadata:envoy.filters.http.jwt_authn:jwt_payload.sub","metadata:ns:a..b","metadata::x","metadata:ns:a:b"]`),
		withKeys(`["metadata:envoy.filters.http.jwt_authn:[https://idp.example.com].groups.0","metadata:ns:[a.b","metadata:ns:[].c","metadata:ns:[a]b","metadata:n[s]:a"]`),
		withMatch(`{"metadata:envoy.filters.http.json_to_metadata:model":{"in":["gpt-4o","o1"]},"metadata:ns:addr":{"cidr":["10.0.0.0/8"]}}`),
		withMatch(`{"route":{"in":["checkout","catalog"]},"route:x":"y"}`),
		withMatch(`{"peer:principal":{"prefix":"spiffe://cluster.local/ns/batch/"},"Peer:principal":"x","peer:address":"y"}`),
		withMatch(`{"path":{"regex":"^/users/[0-9]+$"},"ip:address":{"cidr":["10.0.0.0/8","2001:db8::/32"]},"jwt:plan":{"in":["gold","platinum"]}}`),
		withMatch(`{"header:x-debug":{"present":false},"host":{"not":{"suffix":".internal"}},"method":{"exact":"GET"},"query:v":{"prefix":"2"}}`),
		withMatch(`{"path":{"regex":"(["},"ip:address":{"cidr":["10.0.0.0/33","::ffff:1.2.3.4/100"]},"jwt:plan":{"in":[]},"path_prefix":{"x":1}}`),
		rules(`{"name":"h","action":"exempt","match":{"path":"/healthz"}}`, `{"name":"d","action":"deny","deny_status":451,"limit_keys":["path"]}`, baseRule),
		rules(`{"name":"w","action":"deny","schedule":{"days":["sun","mon"],"from":"23:00","until":"01:00","time_zone":"America/New_York"}}`, `{"name":"x","action":"exempt","schedule":{"days":[],"from":"9:00","until":"24:01","time_zone":"Local","tz":1}}`, baseRule),
		rules(`{"name":"m","action":"deny","from":"2026-12-24T02:00:00+01:00","until":"2026-12-24T03:00:00+01:00"}`, `{"name":"s","until":"2026-12-27T00:00:00.5Z","from":"2027-01-01T00:00:00Z","limit_keys":["all"],"action":"exempt"}`, baseRule),
		rules(`{"name":"x","action":"exempt","algorithm":"token_bucket","deny_status":1}`),
		ruleWith(`"name":"p","limit_keys":["header:k","method"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10},` +
			`"overrides":[{"key":"a\\|b|GET","algorithm_config":{"burst":20}},{"key":"c|POST","algorithm_config":{"rps":1,"burst":2}},{"key":"c|","algorithm_config":{"limit":1}}]}`),
		withAlg("rolling_window", `{"limit":100,"window_seconds":60,"period_seconds":10},"overrides":[{"key":"1.2.3.4","algorithm_config":{"limit":50,"max_per_period":10}}]`),
		withAlg("fixed_window", `{"limit":10,"window_seconds":60},"overrides":[{"key":"a","algorithm_config":{"limit":50},"from":"2026-12-24T10:00:00+01:00","until":"2026-12-25T00:00:00.5Z"},{"key":"b","algorithm_config":{"limit":5},"until":"1969-12-31T23:59:59Z","from":7}]`),
		withAlg("quota", `{"limit":1000,"period":"month","time_zone":"Europe/Berlin"},"overrides":[{"key":"1.2.3.4","algorithm_config":{"limit":5000}},{"key":"5.6.7.8","algorithm_config":{"period":"day"}}]`),
		withAlg("quota", `{"limit":1e4,"period":"day","cost_source":"response_header:x-cost"},"overrides":[{"key":"1.2.3.4","algorithm_config":{"limit":10}}]`),
		`{"reject_body":"{\"message\":\"API rate limit exceeded\"}","rules":[{"name":"d","action":"deny","reject_body":"","reject_content_type":"text/plain; charset=utf-8"},` + baseRule + `]}`,
		`{"reject_body":"x","reject_content_type":"text/pl ain;\r\n","rules":[{"name":"e","action":"exempt","reject_body":7}]}`,
		`{"reject_headers":{"X-Local-Rate-Limit":"true","x-b":"a\tb"},"rules":[{"name":"d","action":"deny","reject_headers":{}},{"name":"r","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1},"reject_headers":{"retry-after":"1","x-a":"\r"}}]}`,
		rules(`{"name":"t","mode":"shadow","shadow_mark":false,"limit_keys":["path"],"algorithm":"fixed_window","algorithm_config":{"limit":1,"window_seconds":1}}`, `{"name":"u","shadow_mark":"no","action":"exempt"}`),
		rules(`{"name":"p","enforce_percent":12.5,"shadow_mark":false,"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`, `{"name":"q","enforce_percent":1e3,"limit_keys":["all"],"action":"deny"}`),
		`{"rules":[` + baseRule + `],"resets":[{"id":"a","rule":"r","key":"1.2.3.4"},{"id":"a","rule":"x","key":"a|b"},{"id":"b c","rule":7},"x"]}`,
		`{"rules":[1,]}`, `[]`, `null`, `{"policies":[],"rules":[]}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			if c != nil {
				t.Fatal("config returned with an error")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %T %v", err, err)
			}
			for _, e := range es {
				if e.Message == "" {
					t.Fatalf("empty message at %q", e.Path)
				}
			}
			_ = err.Error()
			return
		}
		if c == nil {
			t.Fatal("nil config and nil error")
		}
		checkInvariants(t, c)
	})
}

// FuzzParseFields drives the validator rather than the JSON scanner: it
// builds well-formed configurations from fuzzed field values, so every
// input reaches the semantic checks.
func FuzzParseFields(f *testing.F) {
	f.Add("r", "ip:address", "jwt:plan", "enterprise", "token_bucket", "enforce", 5.0, 10.0, 1.0, 1.0, "fixed", int64(2), true)
	f.Add("a.b-c_d", "header:X-Api-Key", "path_prefix", "/api/", "token_bucket", "shadow", 0.5, 0.5, 0.5, 0.25, "header:x-w", int64(0), false)
	f.Add("", "cookie:x", "cookie", "", "leaky", "audit", -1.0, 0.0, 0.0, -1.0, "jwt:w", int64(11), true)
	f.Fuzz(func(t *testing.T, name, key, matchKey, matchVal, alg, mode string, rate, burst, fixed, def float64, costSource string, hops int64, useRPS bool) {
		tb := map[string]any{"burst": burst, "cost_source": costSource, "fixed_cost": fixed, "default_cost": def}
		if useRPS {
			tb["rps"] = rate
		} else {
			tb["tokens_per_second"] = rate
		}
		rule := map[string]any{
			"name": name, "limit_keys": []string{key, "method"}, "match": map[string]string{matchKey: matchVal},
			"algorithm": alg, "algorithm_config": tb, "mode": mode,
		}
		cfg := map[string]any{"xff_trusted_hops": hops, "shadow_header": key, "policies": []any{
			map[string]any{"name": name, "rules": []any{rule}},
		}}
		data, err := json.Marshal(cfg)
		if err != nil {
			return // NaN/Inf floats cannot be written as JSON
		}
		c, err := Parse(data)
		if err != nil {
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not a non-empty Errors: %v", err)
			}
			for _, e := range es {
				if e.Message == "" || (e.Path == "" && !strings.HasPrefix(e.Message, "no rules")) {
					t.Fatalf("error without message or path: %+v", e)
				}
			}
			return
		}
		checkInvariants(t, c)
	})
}
