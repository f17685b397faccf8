package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestEnforcePercentIsParsedAndRoundTrips(t *testing.T) {
	cfg, err := Parse([]byte(rules(
		`{"name":"ramp","enforce_percent":12.5,"limit_keys":["header:x-api-key"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`,
		`{"name":"full","enforce_percent":100,"limit_keys":["ip:address"],"algorithm":"fixed_window","algorithm_config":{"limit":5,"window_seconds":60}}`,
		`{"name":"none","enforce_percent":0,"limit_keys":["ip:address","path"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`,
		`{"name":"plain","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`)))
	if err != nil {
		t.Fatal(err)
	}
	rs := cfg.Policies[0].Rules
	for i, want := range []struct {
		pct     float64
		set     bool
		partial bool
	}{{12.5, true, true}, {100, true, false}, {0, true, true}, {0, false, false}} {
		r := &rs[i]
		if (r.EnforcePercent != nil) != want.set || want.set && *r.EnforcePercent != want.pct || r.Partial() != want.partial {
			t.Errorf("rule %s: EnforcePercent %v, Partial %v; want %v (set %v), partial %v", r.Name, r.EnforcePercent, r.Partial(), want.pct, want.set, want.partial)
		}
	}
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), `"enforce_percent"`); n != 3 || !strings.Contains(string(out), `"enforce_percent":12.5`) {
		t.Fatalf("normalized form should keep the three percentages written, got %s", out)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("normalized %s: %v", out, err)
	}
	if p := back.Policies[0].Rules[0].EnforcePercent; p == nil || *p != 12.5 {
		t.Fatalf("round trip lost enforce_percent: %s", out)
	}
}

func TestEnforcePercentErrorsNameTheField(t *testing.T) {
	const limit = `"limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}`
	for _, c := range []struct{ rule, want string }{
		{`"name":"r","enforce_percent":101,` + limit, "out of range"},
		{`"name":"r","enforce_percent":-1,` + limit, "out of range"},
		{`"name":"r","enforce_percent":"50",` + limit, "must be a number"},
		{`"name":"r","enforce_percent":50,"mode":"shadow",` + limit, "this rule is in shadow mode"},
		{`"name":"r","enforce_percent":50,"limit_keys":["all"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}`, `keyed by "all" has one`},
		{`"name":"r","enforce_percent":50,"action":"deny"`, "does not apply"},
		{`"name":"r","enforce_percent":50,"action":"exempt","match":{"path":"/x"}`, "does not apply"},
	} {
		_, err := Parse([]byte(ruleWith(c.rule)))
		es, ok := err.(Errors)
		if !ok || len(es) != 1 || es[0].Path != "rules[0].enforce_percent" || !strings.Contains(es[0].Message, c.want) {
			t.Errorf("%s: got %v, want one error at rules[0].enforce_percent saying %q", c.rule, err, c.want)
		}
	}
	// The top-level mode counts as the rule's.
	_, err := Parse([]byte(`{"mode":"shadow","rules":[{"name":"r","enforce_percent":50,` + limit + `}]}`))
	if err == nil || !strings.Contains(err.Error(), "rules[0].enforce_percent") {
		t.Errorf("enforce_percent under a top-level shadow mode: %v", err)
	}
}
