package policy

import (
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestRuleRejectHeadersWinOverTheConfigurations(t *testing.T) {
	cfg := mustParse(t, `{"reject_headers": {"X-Local-Rate-Limit": "true", "x-team": "payments"}, "policies": [{"name": "p", "rules": [
		{"name": "own", "match": {"path": "/own"}, "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1},
		 "reject_headers": {"x-limit": "own"}},
		{"name": "bare", "match": {"path": "/bare"}, "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1},
		 "reject_headers": {}},
		{"name": "shared", "limit_keys": ["path"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 60}},
		{"name": "blocked", "action": "deny", "match": {"path": "/blocked"}},
		{"name": "blocked-loudly", "action": "deny", "match": {"path": "/loud"}, "reject_headers": {"x-blocked-by": "sluice; rule=blocked-loudly"}},
		{"name": "health", "action": "exempt", "match": {"path": "/healthz"}}]}]}`)
	everyone := []RejectHeader{{"x-local-rate-limit", "true"}, {"x-team", "payments"}} // lower-cased, sorted
	want := map[string][]RejectHeader{
		"own":            {{"x-limit", "own"}},
		"bare":           {},
		"shared":         everyone,
		"blocked":        nil, // a deny rule sends the configuration's no more than its body
		"blocked-loudly": {{"x-blocked-by", "sluice; rule=blocked-loudly"}},
		"health":         nil,
	}
	for i := range cfg.Policies[0].Rules {
		r := &cfg.Policies[0].Rules[i]
		if got := cfg.RejectHeadersOf(r); !reflect.DeepEqual(got, want[r.Name]) {
			t.Errorf("%s: reject headers %+v, want %+v", r.Name, got, want[r.Name])
		}
	}
}

func TestBadRejectHeadersAreRefusedNamingTheField(t *testing.T) {
	many := make([]string, MaxRejectHeaders+1)
	for i := range many {
		many[i] = `"x-h` + strconv.Itoa(i) + `": "v"`
	}
	long := strings.Repeat("v", maxRejectHeaderValue+1)
	for _, tc := range []struct{ in, path, msg string }{
		{top(`"reject_headers": ["x-a: 1"]`), "reject_headers", "must be an object of header names to values"},
		{top(`"reject_headers": {` + strings.Join(many, ",") + `}`), "reject_headers", "at most 16"},
		{top(`"reject_headers": {"x a": "1"}`), `reject_headers["x a"]`, "contains ' '"},
		{top(`"reject_headers": {":status": "200"}`), `reject_headers[":status"]`, "pseudo-headers"},
		{top(`"reject_headers": {"Retry-After": "5"}`), "reject_headers.Retry-After", "the filter sends it with every rejection"},
		{top(`"reject_headers": {"content-type": "text/html"}`), "reject_headers.content-type", `"reject_content_type"`},
		{top(`"reject_headers": {"x-ratelimit-remaining": "0"}`), "reject_headers.x-ratelimit-remaining", `"legacy_headers": "x-ratelimit"`},
		{top(`"reject_headers": {"connection": "close"}`), "reject_headers.connection", "Envoy sets it"},
		{top(`"reject_headers": {"x-a": "1", "X-A": "2"}`), "reject_headers.X-A", `names the same header as "x-a"`},
		{top(`"reject_headers": {"x-a": true}`), "reject_headers.x-a", "must be a string"},
		{top(`"reject_headers": {"x-a": ""}`), "reject_headers.x-a", "is empty"},
		{top(`"reject_headers": {"x-a": " 1"}`), "reject_headers.x-a", "white space"},
		{top(`"reject_headers": {"x-a": "1\r\nx-injected: 1"}`), "reject_headers.x-a", "printable ASCII"},
		{top(`"reject_headers": {"x-a": "é"}`), "reject_headers.x-a", "printable ASCII"},
		{top(`"reject_headers": {"x-a": "` + long + `"}`), "reject_headers.x-a", "at most 1024"},
		{rules(`{"name": "h", "action": "exempt", "reject_headers": {"x-a": "1"}}`), "rules[0].reject_headers", `does not apply to an "exempt" rule`},
		{rules(`{"name": "u", "action": "unlimited", "reject_headers": {}}`), "rules[0].reject_headers", `does not apply to an "unlimited" rule`},
	} {
		wantError(t, tc.in, tc.path, tc.msg)
	}
}

func TestRejectHeadersSurviveNormalizing(t *testing.T) {
	in := `{"reject_headers": {"X-B": "2", "x-a": "1"}, "rules": [
		{"name": "a", "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}, "reject_headers": {}},
		{"name": "d", "action": "deny", "reject_headers": {"x-d": "gone\tfor good"}},
		{"name": "e", "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`
	cfg := mustParse(t, in)
	out, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"reject_headers":{"x-a":"1","x-b":"2"}`, `"reject_headers":{}`, `"reject_headers":{"x-d":"gone\tfor good"}`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("normalized form lacks %s:\n%s", want, out)
		}
	}
	if n := strings.Count(string(out), `"reject_headers"`); n != 3 {
		t.Errorf("reject_headers written %d times, want 3 (not on the rule without):\n%s", n, out)
	}
	again := mustParse(t, string(out))
	if !reflect.DeepEqual(again.RejectHeaders, cfg.RejectHeaders) {
		t.Errorf("top level changed through the normalized form: %+v", again.RejectHeaders)
	}
	for i, r := range cfg.Policies[0].Rules {
		if got := again.Policies[0].Rules[i].RejectHeaders; !reflect.DeepEqual(got, r.RejectHeaders) {
			t.Errorf("rule %s: %+v, was %+v", r.Name, got, r.RejectHeaders)
		}
	}
	if cfg := mustParse(t, `{"reject_headers": {}, "rules": [`+baseRule+`]}`); cfg.RejectHeaders != nil {
		t.Errorf("an empty top-level reject_headers is kept: %+v", cfg.RejectHeaders)
	}
}
