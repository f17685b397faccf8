package filter

import "testing"

// TestParseStatusReadsThreeDigitsOnly: a :status that is not three digits
// reads as 0, which no response_status set counts.
func TestParseStatusReadsThreeDigitsOnly(t *testing.T) {
	for v, want := range map[string]int{"200": 200, "401": 401, "599": 599, "000": 0, "": 0, "40": 0, "4010": 0, "4a1": 0, " 401": 0, "-01": 0} {
		if got := parseStatus(v); got != want {
			t.Errorf("parseStatus(%q) = %d, want %d", v, got, want)
		}
	}
}
