package policies

import (
	"strings"
	"testing"
)

// A check (and so a save, the validate API and the editor) warns of
// overrides that have ended, on the admin's clock, without refusing them.
func TestCheckWarnsOfEndedOverrides(t *testing.T) {
	doc := `{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 10, "burst": 20}, "overrides": [
	    {"key": "past", "algorithm_config": {"burst": 40}, "until": "2020-01-01T00:00:00Z"},
	    {"key": "future", "algorithm_config": {"burst": 40}, "until": "2199-01-01T00:00:00Z"}]}]}`
	_, warnings, err := Check([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.HasPrefix(warnings[0].Message, "overrides[0] ended (the last on 2020-01-01T00:00:00Z)") {
		t.Errorf("warnings %v, want overrides[0] ended", warnings)
	}
	if w := Warnings([]byte(doc)); len(w) != 1 {
		t.Errorf("a version's warnings %v", w)
	}
}
