package main

import (
	"io"
	"reflect"
	"testing"

	"github.com/sluice-rl/sluice/admin/xds"
)

func TestVMEnv(t *testing.T) {
	if got := vmEnv(DefaultTokenEnv, "tel-fixed-0123456789"); !reflect.DeepEqual(got,
		xds.VMEnv{KeyValues: map[string]string{DefaultTokenEnv: "tel-fixed-0123456789"}}) {
		t.Errorf("with -telemetry-token: %+v", got)
	}
	if got := vmEnv("TOK", ""); !reflect.DeepEqual(got, xds.VMEnv{HostEnvKeys: []string{"TOK"}}) {
		t.Errorf("generated token: %+v", got)
	}
	if got := vmEnv("off", "tel-fixed-0123456789"); !reflect.DeepEqual(got, xds.VMEnv{}) {
		t.Errorf("off: %+v", got)
	}
}

func TestTelemetryTokenEnvFlag(t *testing.T) {
	t.Setenv("SLUICE_TELEMETRY_TOKEN", "")
	o, err := parseOptions([]string{"-telemetry-token-env", "MY_TOKEN"}, io.Discard)
	if err != nil || o.TelemetryTokenEnv != "MY_TOKEN" || o.Istio.TokenEnv != "MY_TOKEN" {
		t.Fatalf("%v %+v", err, o)
	}
	if o, err := parseOptions(nil, io.Discard); err != nil || o.TelemetryTokenEnv != DefaultTokenEnv {
		t.Fatalf("default: %v %q", err, o.TelemetryTokenEnv)
	}
	if o, err := parseOptions([]string{"-telemetry-token-env", "off"}, io.Discard); err != nil || o.Istio.TokenEnv != "" {
		t.Fatalf("off: %v %+v", err, o.Istio)
	}
	if _, err := parseOptions([]string{"-telemetry-token-env", "1-bad"}, io.Discard); err == nil {
		t.Fatal("accepted a bad variable name")
	}
}
