package filter

import (
	"os"
	"strconv"

	"github.com/sluice-rl/sluice/shared/policy"
)

// resolveTelemetryToken returns the telemetry settings with the token in
// force: the literal "token", or the value of the VM environment variable
// named by "token_env" (Envoy: vm_config.environment_variables; Istio:
// vmConfig.env), read at configure time so that a configuration whose
// token is missing is rejected (Envoy keeps the previous one) instead of
// sending reports the admin refuses. Errors never show the value.
func resolveTelemetryToken(t *policy.Telemetry, getenv func(string) string) (*policy.Telemetry, error) {
	if t == nil || t.TokenEnv == "" {
		return t, nil
	}
	tok := getenv(t.TokenEnv)
	if tok == "" {
		return nil, policy.Errors{{Path: "telemetry.token_env", Message: "the VM environment variable " + t.TokenEnv +
			" is not set or empty; set it in the Wasm vm_config.environment_variables (Envoy: key_values or host_env_keys; " +
			"Istio: WasmPlugin vmConfig.env) to the admin's telemetry token"}}
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7e {
			return nil, policy.Errors{{Path: "telemetry.token_env", Message: "the value of " + t.TokenEnv +
				" contains a space, control or non-ASCII character at byte " + strconv.Itoa(i) + "; it is sent as a bearer token"}}
		}
	}
	resolved := *t
	resolved.Token = tok
	return &resolved, nil
}

// getenv reads the VM's environment (WASI environ, which Envoy fills from
// vm_config.environment_variables).
var getenv = os.Getenv
