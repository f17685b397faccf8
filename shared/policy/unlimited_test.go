package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestUnlimitedRulesTakeNoLimitAndRejectNothing(t *testing.T) {
	cfg, err := Parse([]byte(rules(
		`{"name":"batch","action":"unlimited","mode":"shadow","limit_keys":["header:x-api-key"],"match":{"header:x-api-key":{"in":["b1","b2"]}}}`,
		baseRule)))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Policies[0].Rules[0]
	if r.Action != ActionUnlimited || len(r.Keys) != 1 || r.Algorithm != "" || !LimitsNothing(r.Action) || !RejectsNothing(r.Action) {
		t.Fatalf("parsed %+v", r)
	}
	norm, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(norm), `"action":"unlimited"`) || strings.Contains(string(norm), `"name":"batch","max_keys"`) {
		t.Errorf("normalized: %s", norm)
	}
	if again, err := Parse(norm); err != nil || again.Policies[0].Rules[0].Action != ActionUnlimited {
		t.Errorf("the normalized form reads back as %v, %v", again, err)
	}
	const u = `{"name":"u","action":"unlimited","match":{"path":"/x"},`
	for _, tc := range []struct{ in, path, msg string }{
		{rules(u + `"algorithm":"token_bucket"}`), "rules[0].algorithm", `does not apply to an "unlimited" rule`},
		{rules(u + `"deny_status":429}`), "rules[0].deny_status", `applies only to rules with "action": "deny"`},
		{rules(u + `"reject_body":"no"}`), "rules[0].reject_body", `does not apply to an "unlimited" rule, which rejects nothing`},
		{rules(`{"name":"u","action":"unlimitted"}`), "rules[0].action", `use one of: "limit", "exempt", "unlimited", "deny"`},
	} {
		wantError(t, tc.in, tc.path, tc.msg)
	}
}

func TestAnUnlimitedRuleWithoutMatchIsWarnedWithTheRulesAfterIt(t *testing.T) {
	cfg, err := Parse([]byte(rules(`{"name":"all","action":"unlimited"}`, baseRule)))
	if err != nil {
		t.Fatal(err)
	}
	ws := cfg.Warnings()
	if len(ws) != 2 || ws[0].Rule != "all" || !strings.Contains(ws[0].Message, "its policy limits no request") ||
		!strings.Contains(ws[1].Message, "never applies") {
		t.Errorf("warnings %v", ws)
	}
}
