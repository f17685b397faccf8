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
		`"overflow_identities": 2, "exempted": 1, "denied": 2, "overridden": 3,
		  "response_charged": 9, "response_default": 4, "response_invalid": 1, "key_missing": 6, "blocked": 2}`, 1)
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

// TestUnknownFieldMessagesListTheKnownFields: the message for an unknown
// field lists exactly the fields KnownFields has at that level.
func TestUnknownFieldMessagesListTheKnownFields(t *testing.T) {
	for _, tc := range []struct{ prefix, body string }{
		{"", strings.Replace(validJSON, `"v": 1`, `"v": 1, "extra": 1`, 1)},
		{"rules[].", strings.Replace(validJSON, `"fail_open": 0}`, `"fail_open": 0, "extra": 1}`, 1)},
		{"buckets[].", strings.Replace(validJSON, `"rejects": 12}`, `"rejects": 12, "extra": 1}`, 1)},
	} {
		_, err := Decode([]byte(tc.body))
		es, ok := err.(Errors)
		if !ok || len(es) != 1 {
			t.Fatalf("%q: %v", tc.prefix, err)
		}
		_, list, _ := strings.Cut(es[0].Message, "the fields are ")
		var listed []string
		for _, part := range strings.Split(strings.ReplaceAll(list, " and optionally ", ", "), ", ") {
			listed = append(listed, tc.prefix+part)
		}
		var want []string
		for _, p := range KnownFields() {
			if rest, ok := strings.CutPrefix(p, tc.prefix); ok && !strings.ContainsAny(rest, ".[") {
				want = append(want, p)
			}
		}
		sort.Strings(listed)
		sort.Strings(want)
		if !slices.Equal(listed, want) {
			t.Errorf("%q: the message lists %v, KnownFields %v", tc.prefix, listed, want)
		}
	}
}
