package policy

import (
	"strings"
	"testing"
)

func TestALimitRulesRejectStatusWinsOverTheConfigurations(t *testing.T) {
	cfg := mustParse(t, `{"reject_status": 503, "rules": [
		{"name": "own", "match": {"path": "/own"}, "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}, "reject_status": 420},
		{"name": "shared", "limit_keys": ["path"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`)
	if own, shared := cfg.RuleByName("own"), cfg.RuleByName("shared"); cfg.RejectStatusOf(own) != 420 || cfg.RejectStatusOf(shared) != 503 {
		t.Errorf("statuses %d and %d, want the rule's 420 and the configuration's 503", cfg.RejectStatusOf(own), cfg.RejectStatusOf(shared))
	}
	out, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(out), `"reject_status":420`); n != 1 || strings.Count(string(out), `"reject_status"`) != 2 {
		t.Errorf("normalized form: the rule's own status written %d times, want once beside the top level's:\n%s", n, out)
	}
	if again := mustParse(t, string(out)); again.RuleByName("own").RejectStatus != 420 || again.RuleByName("shared").RejectStatus != 0 {
		t.Errorf("statuses changed through the normalized form:\n%s", out)
	}
	for _, tc := range []struct{ in, path, msg string }{
		{rules(`{"name": "d", "action": "deny", "reject_status": 429}`), "rules[0].reject_status", `a deny rule's status is "deny_status"`},
		{rules(`{"name": "e", "action": "exempt", "reject_status": 429}`), "rules[0].reject_status", `does not apply to an "exempt" rule`},
		{withTB(`{"rps": 1, "burst": 1}, "reject_status": 302`), "rules[0].reject_status", "from 400 to 599"},
		{withTB(`{"rps": 1, "burst": 1}, "reject_status": "429"`), "rules[0].reject_status", "got a string"},
	} {
		wantError(t, tc.in, tc.path, tc.msg)
	}
}
