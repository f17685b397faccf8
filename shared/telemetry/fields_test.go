package telemetry

import (
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestKnownFieldsAreTheDecodersFields: the example reports, with every
// optional field, use exactly the fields KnownFields lists, and Decode
// accepts them; a field outside the list is refused.
func TestKnownFieldsAreTheDecodersFields(t *testing.T) {
	body := strings.Replace(overflowBody("1", "2"), `"overflow_identities": 2}`,
		`"overflow_identities": 2, "exempted": 1, "denied": 2, "overridden": 3}`, 1)
	body = strings.Replace(body, `"rejects": 12}`, `"rejects": 12, "algorithm": "fixed_window"}`, 1)
	body = strings.Replace(body, `"reports_dropped": 0`, `"reports_dropped": 0,
  "fleet": {"backend_healthy": false, "fleet_size": 3,
            "rules": [{"rule": "free", "lease_tokens": 12.5, "pools": 4, "fallback_active": true}]}`, 1)
	if _, err := Decode([]byte(body)); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	got, err := FieldPaths([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := KnownFields()
	sort.Strings(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the full example has fields\n%v\nKnownFields lists\n%v", got, want)
	}
	for _, p := range want {
		if strings.Count(p, ".") > 0 {
			continue
		}
		bad := strings.Replace(body, `"`+p+`":`, `"`+p+`x":`, 1)
		if _, err := Decode([]byte(bad)); err == nil || !strings.Contains(err.Error(), p+"x: unknown field") {
			t.Errorf("renaming %s: %v", p, err)
		}
	}
}
