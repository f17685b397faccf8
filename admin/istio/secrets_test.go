package istio

import (
	"strings"
	"testing"

	extensions "istio.io/api/extensions/v1alpha1"
)

// TestTokenEnvFromHost: the telemetry token variable is passed from the
// proxy's environment, never written into the manifest.
func TestTokenEnvFromHost(t *testing.T) {
	m, err := Render([]byte(`{"telemetry":{"cluster":"outbound|9000||sluice.sluice.svc.cluster.local","token_env":"SLUICE_TELEMETRY_TOKEN"}}`), 2,
		Options{TokenEnv: "SLUICE_TELEMETRY_TOKEN"})
	if err != nil {
		t.Fatal(err)
	}
	env := unmarshalSpec(t, m.Spec()).GetVmConfig().GetEnv()
	if len(env) != 2 || env[0].GetName() != "GOGC" || env[1].GetName() != "SLUICE_TELEMETRY_TOKEN" ||
		env[1].GetValueFrom() != extensions.EnvValueSource_HOST || env[1].GetValue() != "" {
		t.Fatalf("vmConfig.env = %v", env)
	}
	if m.Masked() {
		t.Error("Masked without a literal token")
	}
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(y), "valueFrom: HOST") || strings.Contains(string(y), "WARNING") {
		t.Errorf("YAML:\n%s", y)
	}
}

// TestLiteralTokenIsMasked: a literal telemetry.token never reaches the
// manifest, in either form, and the YAML says why.
func TestLiteralTokenIsMasked(t *testing.T) {
	const secret = "sluice_tel_do-not-print-me-0123456789"
	m, err := Render([]byte(`{"telemetry":{"cluster":"sluice_admin","token":"`+secret+`"}}`), 2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string][]byte{"JSON": m.JSON(), "YAML": y, "spec": m.Spec()} {
		if strings.Contains(string(out), "do-not-print-me") {
			t.Errorf("%s contains the token:\n%s", name, out)
		}
	}
	if !m.Masked() || !strings.HasPrefix(string(y), "# Generated") || !strings.Contains(string(y), MaskedTokenNote) {
		t.Errorf("YAML without the masking note:\n%s", y)
	}
}
