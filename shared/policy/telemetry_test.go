package policy

import (
	"encoding/json"
	"strings"
	"testing"
)

const telemetryRules = `"rules": [{"name": "r", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	"algorithm_config": {"tokens_per_second": 1, "burst": 2}, "telemetry_identity": "clear"},
	{"name": "s", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	"algorithm_config": {"tokens_per_second": 1, "burst": 2}}]`

func TestTelemetryDefaults(t *testing.T) {
	cfg, err := Parse([]byte(`{"telemetry": {"cluster": "sluice_admin", "token": "s3cret"}, ` + telemetryRules + `}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Telemetry{Cluster: "sluice_admin", Authority: DefaultTelemetryAuthority, Path: DefaultTelemetryPath,
		IntervalMS: 1000, Token: "s3cret", TopN: 50, TimeoutMS: 500}
	if cfg.Telemetry == nil || *cfg.Telemetry != want {
		t.Fatalf("telemetry %+v, want %+v", cfg.Telemetry, want)
	}
	if r := cfg.Policies[0].Rules; !r[0].ClearIdentity || r[1].ClearIdentity {
		t.Fatalf("ClearIdentity %v %v", r[0].ClearIdentity, r[1].ClearIdentity)
	}
	// Normalized form round-trips.
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatalf("normalized %s: %v", out, err)
	}
	out2, _ := json.Marshal(back)
	if string(out) != string(out2) || *back.Telemetry != want || !back.Policies[0].Rules[0].ClearIdentity {
		t.Fatalf("round trip:\n%s\n%s", out, out2)
	}
	// Without telemetry, nothing new is written.
	plain, _ := Parse([]byte(`{"rules": [{"name": "s", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
		"algorithm_config": {"tokens_per_second": 1, "burst": 2}}]}`))
	if out, _ := json.Marshal(plain); strings.Contains(string(out), "telemetry") {
		t.Fatalf("normalized config without telemetry mentions it: %s", out)
	}
}

func TestTelemetryAllFields(t *testing.T) {
	cfg, err := Parse([]byte(`{"telemetry": {"cluster": "a", "authority": "adm.local", "path": "/t", "interval_ms": 100,
		"token": "x", "top_n": 1000, "timeout_ms": 99}, ` + telemetryRules + `}`))
	if err != nil {
		t.Fatal(err)
	}
	want := Telemetry{Cluster: "a", Authority: "adm.local", Path: "/t", IntervalMS: 100, Token: "x", TopN: 1000, TimeoutMS: 99}
	if *cfg.Telemetry != want {
		t.Fatalf("got %+v", *cfg.Telemetry)
	}
}

func TestTelemetryErrors(t *testing.T) {
	for _, tc := range []struct{ telemetry, path string }{
		{`"x"`, "telemetry"},
		{`{"token": "t"}`, "telemetry.cluster"},
		{`{"cluster": "c"}`, "telemetry.token_env"},
		{`{"cluster": "c", "token": "t", "token_env": "T"}`, "telemetry.token"},
		{`{"cluster": "c", "token_env": ""}`, "telemetry.token_env"},
		{`{"cluster": "c", "token_env": 1}`, "telemetry.token_env"},
		{`{"cluster": "c", "token_env": "9TOKEN"}`, "telemetry.token_env"},
		{`{"cluster": "c", "token_env": "SLUICE-TOKEN"}`, "telemetry.token_env"},
		{`{"cluster": "c", "token_env": "` + strings.Repeat("A", MaxEnvNameLen+1) + `"}`, "telemetry.token_env"},
		{`{"cluster": "c", "token": ""}`, "telemetry.token"},
		{`{"cluster": "c", "token": "q z"}`, "telemetry.token"},
		{`{"cluster": 1, "token": "t"}`, "telemetry.cluster"},
		{`{"cluster": "c", "token": "t", "path": "api"}`, "telemetry.path"},
		{`{"cluster": "c", "token": "t", "interval_ms": 99}`, "telemetry.interval_ms"},
		{`{"cluster": "c", "token": "t", "interval_ms": 60001}`, "telemetry.interval_ms"},
		{`{"cluster": "c", "token": "t", "top_n": 0}`, "telemetry.top_n"},
		{`{"cluster": "c", "token": "t", "top_n": 1001}`, "telemetry.top_n"},
		{`{"cluster": "c", "token": "t", "timeout_ms": 1000}`, "telemetry.timeout_ms"},
		{`{"cluster": "c", "token": "t", "interval_ms": 200, "timeout_ms": 300}`, "telemetry.timeout_ms"},
		{`{"cluster": "c", "token": "t", "timeout_ms": 0}`, "telemetry.timeout_ms"},
		{`{"cluster": "c", "token": "t", "intervall_ms": 100}`, "telemetry.intervall_ms"},
	} {
		_, err := Parse([]byte(`{"telemetry": ` + tc.telemetry + `, ` + telemetryRules + `}`))
		es, ok := err.(Errors)
		if !ok || len(es) != 1 || es[0].Path != tc.path {
			t.Errorf("%s: got %v, want one error at %s", tc.telemetry, err, tc.path)
			continue
		}
		if strings.Contains(es[0].Message, "q z") {
			t.Errorf("%s: the token leaks into the message %q", tc.telemetry, es[0].Message)
		}
	}
	for _, v := range []string{`"Clear"`, `true`, `""`} {
		_, err := Parse([]byte(`{"rules": [{"name": "r", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
			"algorithm_config": {"tokens_per_second": 1, "burst": 2}, "telemetry_identity": ` + v + `}]}`))
		es, ok := err.(Errors)
		if !ok || len(es) != 1 || es[0].Path != "rules[0].telemetry_identity" {
			t.Errorf("telemetry_identity %s: got %v", v, err)
		}
	}
}

func TestTelemetryTokenEnv(t *testing.T) {
	cfg, err := Parse([]byte(`{"telemetry": {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN"}, ` + telemetryRules + `}`))
	if err != nil {
		t.Fatal(err)
	}
	if tel := cfg.Telemetry; tel.TokenEnv != "SLUICE_TELEMETRY_TOKEN" || tel.Token != "" {
		t.Fatalf("telemetry %+v", tel)
	}
	out, _ := json.Marshal(cfg)
	if !strings.Contains(string(out), `"token_env":"SLUICE_TELEMETRY_TOKEN"`) || strings.Contains(string(out), `"token":`) {
		t.Fatalf("normalized: %s", out)
	}
	back, err := Parse(out)
	if err != nil || *back.Telemetry != *cfg.Telemetry {
		t.Fatalf("round trip: %v %+v", err, back)
	}
}

func TestTelemetryTokenErrorsNeverShowTheToken(t *testing.T) {
	_, err := Parse([]byte(`{"telemetry": {"cluster": "c", "token": "hunter2 secret", "token_env": "X"}, ` + telemetryRules + `}`))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("error %v", err)
	}
}
