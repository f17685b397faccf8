package main

import (
	"fmt"
	"regexp"

	"github.com/sluice-rl/sluice/admin/xds"
)

// DefaultTokenEnv is the default of -telemetry-token-env.
const DefaultTokenEnv = xds.DefaultTokenEnv

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

func checkTokenEnv(name string) error {
	if name != "off" && !envName.MatchString(name) {
		return fmt.Errorf("-telemetry-token-env: %q is not an environment variable name (letters, digits, _; or \"off\")", name)
	}
	return nil
}

// vmEnv is the plugin VM's environment the admin pushes over ECDS, fixed
// for the life of the process (vm_config must not change between pushes,
// or Envoy starts a new VM and every bucket is lost):
//   - with -telemetry-token the admin knows the token: it sets it
//     (key_values), so stored policies only carry "token_env";
//   - otherwise it knows only the token's hash: it asks Envoy to pass the
//     variable from its own environment (host_env_keys), where the operator
//     puts the token (from a Kubernetes Secret, a systemd credential, ...).
//
// A token rotated in the UI therefore never changes vm_config: rotation is
// only possible without -telemetry-token, when the value comes from Envoy's
// environment.
func vmEnv(tokenEnv, fixedToken string) xds.VMEnv {
	switch {
	case tokenEnv == "off":
		return xds.VMEnv{}
	case fixedToken != "":
		return xds.VMEnv{KeyValues: map[string]string{tokenEnv: fixedToken}}
	default:
		return xds.VMEnv{HostEnvKeys: []string{tokenEnv}}
	}
}
