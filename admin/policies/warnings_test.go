package policies

import (
	"strings"
	"testing"
)

// A check (and so a save, the validate API and the editor) warns of
// rules and overrides that have ended, on the admin's clock, without
// refusing them.
func TestCheckWarnsOfEndedRulesAndOverrides(t *testing.T) {
	doc := `{"rules": [{"name": "sale", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 2}, "until": "2020-01-01T00:00:00Z"},
	  {"name": "launch", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 1, "burst": 2}, "from": "2020-01-01T00:00:00Z", "until": "2199-01-01T00:00:00Z"},
	  {"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 10, "burst": 20}, "overrides": [
	    {"key": "past", "algorithm_config": {"burst": 40}, "until": "2020-01-01T00:00:00Z"},
	    {"key": "future", "algorithm_config": {"burst": 40}, "until": "2199-01-01T00:00:00Z"}]}]}`
	_, warnings, err := Check([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 2 || warnings[0].Rule != "sale" || !strings.HasPrefix(warnings[0].Message, "ended on 2020-01-01T00:00:00Z") ||
		!strings.HasPrefix(warnings[1].Message, "overrides[0] ended (the last on 2020-01-01T00:00:00Z)") {
		t.Errorf("warnings %v, want the sale rule and overrides[0] ended", warnings)
	}
	if w := Warnings([]byte(doc)); len(w) != 2 {
		t.Errorf("a version's warnings %v", w)
	}
}
