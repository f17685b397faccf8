package policy

import (
	"strings"
	"testing"
)

func TestWarningsFindRulesNoRequestReaches(t *testing.T) {
	for _, c := range []struct {
		name, config string
		want         []string // "rule: words" per warning, in order
	}{
		{"per key, else per address: nothing to say", `{"rules":[
			{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}},
			{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`, nil},
		{"a catch-all before another rule", `{"rules":[
			{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
			{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}},
			{"name":"per-path","limit_keys":["path","method"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`,
			[]string{`per-key: never applies: rule "per-ip" before it in policy "default"`, `per-path: never applies: rule "per-ip"`}},
		{"a catch-all in another policy leaves this one alone", `{"policies":[
			{"name":"a","rules":[{"name":"per-path","limit_keys":["path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]},
			{"name":"b","rules":[{"name":"per-key","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}]}`, nil},
		{"a key a request may lack is no catch-all", `{"rules":[
			{"name":"per-host","limit_keys":["host"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
			{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`, nil},
		{"a match is no catch-all", `{"rules":[
			{"name":"get","match":{"method":"GET"},"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
			{"name":"rest","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`, nil},
		{"an exempt rule without a match", `{"rules":[
			{"name":"all","action":"exempt"},
			{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`,
			[]string{"all: this exempt rule has no match, so it exempts every request: no rule of any policy limits", `per-ip: never applies: rule "all"`}},
		{"a rule for a time is no catch-all, and a blanket deny for a time is a maintenance window", `{"rules":[
			{"name":"maintenance","action":"deny","deny_status":503,"from":"2026-12-24T02:00:00Z","until":"2026-12-24T03:00:00Z"},
			{"name":"sale","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2},"until":"2026-12-27T00:00:00Z"},
			{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":5,"burst":10}}]}`, nil},
		{"a shadow exempt rule without a match", `{"rules":[{"name":"all","action":"exempt","mode":"shadow"}]}`,
			[]string{"all: this shadow exempt rule has no match, so it exempts every request: no shadow rule"}},
		{"a deny rule without a match", `{"rules":[{"name":"gone","action":"deny","deny_status":410}]}`,
			[]string{"gone: this deny rule has no match, so every request is rejected with 410"}},
		{"a shadow deny rule without a match", `{"rules":[{"name":"gone","action":"deny","mode":"shadow"}]}`,
			[]string{"gone: this shadow deny rule has no match, so every request is reported as denied"}},
		{"answers that report no tokens are almost free", `{"rules":[
			{"name":"llm","limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":1000,"burst":100000,"cost_source":"response_json:usage.total_tokens"}},
			{"name":"daily","limit_keys":["header:x-user"],"algorithm":"quota","algorithm_config":{"limit":2000000,"period":"day","cost_source":"response_header:x-tokens","default_cost":199}},
			{"name":"fair","limit_keys":["header:x-team"],"algorithm":"quota","algorithm_config":{"limit":2000000,"period":"day","cost_source":"response_trailer:x-tokens","default_cost":200}},
			{"name":"logins","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":0.01,"burst":5000,"cost_source":"response_status:401"}}]}`,
			[]string{"llm: default_cost 1 is under a ten-thousandth of its burst 100000: an answer that reports no cost",
				"daily: default_cost 199 is under a ten-thousandth of its limit 2000000"}},
		{"metadata under a filter's short name", `{"rules":[
			{"name":"per-user","match":{"metadata:json_to_metadata:model":"o1"},"limit_keys":["metadata:jwt_authn:payload.sub"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
			{"name":"per-tenant","limit_keys":["metadata:envoy.filters.http.ext_authz:tenant"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2,"cost_source":"metadata:ext_authz:cost"}}]}`,
			[]string{`per-user: "metadata:jwt_authn:payload.sub" reads namespace "jwt_authn", which Envoy never writes`,
				`per-user: "metadata:json_to_metadata:model" reads namespace "json_to_metadata"`,
				`per-tenant: "metadata:ext_authz:cost" reads namespace "ext_authz"`}},
		{"a rule's own fields that carry nothing", `{"response_headers":false,"rules":[
			{"name":"inflight","limit_keys":["header:x-api-key"],"algorithm":"concurrency","algorithm_config":{"limit":5},"limit_headers":{"remaining":"x-places","reset":"x-free-in"}}]}`,
			[]string{`inflight: its limit_headers are sent on its rejections only: "response_headers" is false`,
				`inflight: limit_headers.reset "x-free-in" is always 0`}},
		{"a rule's own fields that carry something: nothing to say", `{"rules":[
			{"name":"inflight","limit_keys":["header:x-api-key"],"algorithm":"concurrency","algorithm_config":{"limit":5},"limit_headers":{"remaining":"x-places"}},
			{"name":"minute","limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"limit":5,"window_seconds":60},"limit_headers":{"reset":"x-reset-minute"}}]}`, nil},
		{"a claim read straight under jwt_authn", `{"rules":[
			{"name":"per-user","limit_keys":["metadata:envoy.filters.http.jwt_authn:sub"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}},
			{"name":"per-issuer-user","limit_keys":["metadata:envoy.filters.http.jwt_authn:[https://idp.example.com].sub","metadata:envoy.filters.http.jwt_authn:payload.sub"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}}]}`,
			[]string{`per-user: "metadata:envoy.filters.http.jwt_authn:sub" reads no claim: jwt_authn keeps a token's claims under its payload_in_metadata key`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := mustParse(t, c.config)
			got := cfg.Warnings()
			if len(got) != len(c.want) {
				t.Fatalf("%d warnings, want %d: %v", len(got), len(c.want), got)
			}
			for i, w := range got {
				if s := w.Rule + ": " + w.Message; !strings.HasPrefix(s, c.want[i]) {
					t.Errorf("warning %d: %q\nwant it to start %q", i, s, c.want[i])
				}
			}
		})
	}
}
