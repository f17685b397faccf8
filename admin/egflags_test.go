package main

import (
	"io"
	"strings"
	"testing"
)

func TestEnvoyGatewayFlagsAreCheckedAtStart(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-eg-target", "Service/x"}, "-eg-* flags: target:"},
		{[]string{"-eg-http-url", "https://wasm.example.com/r.wasm"}, "sha256: required"},
		{[]string{"-eg-image", "NOT AN IMAGE"}, "image:"},
	} {
		if _, err := parseOptions(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error naming %q", tc.args, err, tc.want)
		}
	}
	o, err := parseOptions([]string{"-eg-target", "HTTPRoute/backend", "-eg-fail-open=false"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.EnvoyGateway.Target != "HTTPRoute/backend" || *o.EnvoyGateway.FailOpen || o.EnvoyGateway.TokenEnv == "" {
		t.Errorf("options %+v", o.EnvoyGateway)
	}
}
