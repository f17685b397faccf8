package filter_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

var tokenEnvConfig = strings.Replace(telemetryConfig, `"token": "tel-s3cret"`, `"token_env": "SLUICE_TELEMETRY_TOKEN"`, 1)

// TestTelemetryTokenFromEnv: with token_env the reports carry the value of
// the VM environment variable (WASI environ, Envoy's
// vm_config.environment_variables).
func TestTelemetryTokenFromEnv(t *testing.T) {
	if tokenEnvConfig == telemetryConfig {
		t.Fatal("the test configuration does not use token_env")
	}
	f, err := tryStartTelemetry(t, tokenEnvConfig, 2, map[string]string{"SLUICE_TELEMETRY_TOKEN": "tel-from-env_0123"})
	if err != nil {
		t.Fatal(err)
	}
	f.do("x-api-key", "k1")
	calls := f.tick(time.Second)
	if len(calls) != 2 {
		t.Fatalf("%d reports, want 2", len(calls))
	}
	for vm, c := range calls {
		if got := c.Header("authorization"); got != "Bearer tel-from-env_0123" {
			t.Errorf("VM %d: authorization %q", vm, got)
		}
		answer(t, c, "204")
	}
}

// TestTelemetryTokenEnvMissing: a missing, empty or unsendable variable
// fails the configuration with an error naming the field and the variable,
// never the value.
func TestTelemetryTokenEnvMissing(t *testing.T) {
	for name, env := range map[string]map[string]string{
		"missing":   nil,
		"empty":     {"SLUICE_TELEMETRY_TOKEN": ""},
		"space":     {"SLUICE_TELEMETRY_TOKEN": "tel secret-value"},
		"other var": {"TELEMETRY_TOKEN": "tel-secret-value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := tryStartTelemetry(t, tokenEnvConfig, 1, env)
			if err == nil {
				t.Fatal("the configuration was accepted without its token")
			}
			msg := err.Error()
			if !strings.Contains(msg, "telemetry.token_env") || !strings.Contains(msg, "SLUICE_TELEMETRY_TOKEN") ||
				strings.Contains(msg, "secret-value") {
				t.Fatalf("error %q", msg)
			}
		})
	}
}

// TestTelemetryTokenEnvReconfigure: an update to a configuration whose
// variable is missing is rejected and the running one stays in force.
func TestTelemetryTokenEnvReconfigure(t *testing.T) {
	f := startTelemetry(t, telemetryConfig, 1)
	bad := strings.Replace(tokenEnvConfig, "SLUICE_TELEMETRY_TOKEN", "NOT_SET_ANYWHERE", 1)
	if err := f.h.Reconfigure(context.Background(), []byte(bad)); err == nil {
		t.Fatal("Reconfigure accepted a configuration whose token variable is not set")
	}
	f.do("x-api-key", "k1")
	calls := f.tick(time.Second)
	if len(calls) != 1 || calls[0].Header("authorization") != "Bearer tel-s3cret" {
		t.Fatalf("calls %v", calls)
	}
	answer(t, calls[0], "204")
}
