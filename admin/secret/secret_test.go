package secret

import (
	"strings"
	"testing"
)

func TestCheckStrengthNamesTheSecretAndTheProblem(t *testing.T) {
	for _, tc := range []struct {
		token, want string
	}{
		{"short", "the telemetry token is 5 characters long; use at least 16"},
		{"0123456789abcdef ghij", "the telemetry token contains spaces or control characters"},
		{"0123456789abcdef\x01", "the telemetry token contains spaces or control characters"},
	} {
		err := CheckStrength("telemetry token", tc.token)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckStrength(%q) = %v, want an error containing %q", tc.token, err, tc.want)
		}
	}
	if err := CheckStrength("admin token", "0123456789abcdef"); err != nil {
		t.Errorf("a 16-character printable token refused: %v", err)
	}
}

func TestRandomIs256BitsOfBase64URL(t *testing.T) {
	a, b := Random(), Random()
	if len(a) != 43 || strings.ContainsAny(a, "+/=") || a == b {
		t.Fatalf("Random() = %q, %q: want two different 43-character base64url strings", a, b)
	}
	if err := CheckStrength("generated token", a); err != nil {
		t.Fatalf("a generated token fails the strength check: %v", err)
	}
}
