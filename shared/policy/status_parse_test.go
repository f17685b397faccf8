package policy

import "testing"

// TestParseStatusReadsThreeDigitsOnly: a :status that is not three digits
// reads as 0, which no response_status set counts.
func TestParseStatusReadsThreeDigitsOnly(t *testing.T) {
	for v, want := range map[string]int{"200": 200, "401": 401, "599": 599, "000": 0, "": 0, "40": 0, "4010": 0, "4a1": 0, " 401": 0, "-01": 0} {
		if got := ParseStatus(v); got != want {
			t.Errorf("ParseStatus(%q) = %d, want %d", v, got, want)
		}
	}
}

// TestParseGRPCStatusReadsOneOrTwoDigits: a grpc-status that is not one or
// two digits reads as -1, which no response_grpc_status set counts.
func TestParseGRPCStatusReadsOneOrTwoDigits(t *testing.T) {
	for v, want := range map[string]int{"0": 0, "7": 7, "16": 16, "99": 99, "": -1, "100": -1, "1x": -1, " 1": -1, "-1": -1} {
		if got := ParseGRPCStatus(v); got != want {
			t.Errorf("ParseGRPCStatus(%q) = %d, want %d", v, got, want)
		}
	}
}
