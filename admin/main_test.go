package main

import (
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/istio"
)

func TestParseOptions(t *testing.T) {
	for _, k := range []string{"SLUICE_ADMIN_LISTEN", "SLUICE_XDS_LISTEN", "SLUICE_DATA_DIR", "SLUICE_ADMIN_TOKEN", "SLUICE_WASM_PATH", "SLUICE_ISTIO_URL", "SLUICE_ISTIO_SELECTOR", "SLUICE_ISTIO_TARGET",
		"SLUICE_POLICY_FILE", "SLUICE_POLICY_TESTS_FILE", "SLUICE_INITIAL_POLICY", "SLUICE_INITIAL_TESTS", "SLUICE_REQUIRE_REVIEW", "SLUICE_REVIEW_POLICIES"} {
		t.Setenv(k, "")
	}
	o, err := parseOptions([]string{"-listen", ":9999", "-istio-selector", "istio=ingressgateway", "-wasm-path", "x.wasm"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Listen != ":9999" || o.Istio.Selector["istio"] != "ingressgateway" || !filepath.IsAbs(o.WasmPath) || o.TelemetryMaxBytes != 64<<20 {
		t.Errorf("options %+v", o)
	}
	o, err = parseOptions([]string{"-istio-target", "Gateway/public,Service/reviews", "-wasm-path", "x.wasm"}, io.Discard)
	if err != nil || len(o.Istio.Targets) != 2 || o.Istio.Targets[1] != (istio.TargetRef{Group: "", Kind: "Service", Name: "reviews"}) {
		t.Errorf("-istio-target: %+v, %v", o.Istio.Targets, err)
	}
	if o, _ := parseOptions([]string{"-telemetry-max-bytes", "1GiB"}, io.Discard); o.TelemetryMaxBytes != 1<<30 {
		t.Errorf("-telemetry-max-bytes 1GiB: %d", o.TelemetryMaxBytes)
	}
	t.Setenv("SLUICE_DATA_DIR", "/var/lib/sluice")
	if o, _ := parseOptions(nil, io.Discard); o.DataDir != "/var/lib/sluice" {
		t.Errorf("env SLUICE_DATA_DIR ignored: %q", o.DataDir)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-token", "short"}, "-token"},
		{[]string{"-istio-url", "ftp://x"}, "url:"},
		{[]string{"-istio-namespace", "Bad"}, "namespace:"},
		{[]string{"-istio-selector", "novalue"}, "-istio-selector"},
		{[]string{"-istio-target", "HTTPRoute/r"}, "-istio-target"},
		{[]string{"-istio-target", "Gateway/a", "-istio-selector", "app=x"}, "one or the other"},
		{[]string{"-tls-cert", "c.pem"}, "-tls-key"},
		{[]string{"-wasm-path", ""}, "-wasm-path"},
		{[]string{"extra"}, "unexpected argument"},
		{[]string{"-nope"}, "not defined"},
		{[]string{"-telemetry-max-bytes", "lots"}, "-telemetry-max-bytes"},
		{[]string{"-database", "mysql://db"}, "-database"},
		{[]string{"-telemetry-max-bytes", "10KiB"}, "-telemetry-max-bytes"},
		{[]string{"-policy-tests-file", "t.yaml"}, "-policy-tests-file needs -policy-file"},
		{[]string{"-review-policies", "payments-*"}, "-review-policies needs -require-review"},
		{[]string{"-require-review", "-review-policies", "pay*ments"}, `-review-policies: policies: "pay*ments" is not a policy name`},
		{[]string{"-policy-file", "p.json", "-initial-policy", "i.json"}, "-initial-policy and -policy-file: give one"},
		{[]string{"-policy-file", "p.json", "-policy-tests-file", "t.yaml", "-initial-tests", "i.yaml"}, "-initial-tests and -policy-tests-file"},
		{[]string{"-policy-file", "p.json", "-policy-file-interval", "soon"}, `-policy-file-interval: "soon" is not a duration`},
		{[]string{"-policy-file", "p.json", "-policy-file-interval", "10ms"}, "-policy-file-interval: at least 1s"},
	} {
		if _, err := parseOptions(c.args, io.Discard); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error mentioning %q", c.args, err, c.want)
		}
	}
	if _, err := newLogger("loud", io.Discard); err == nil {
		t.Error("bad log level accepted")
	}
}

func TestNewTokenPrintsAndExits(t *testing.T) {
	dir := t.TempDir()
	var out strings.Builder
	if err := run([]string{"-data-dir", dir, "-new-token"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "sluice_") {
		t.Errorf("no token printed: %q", out.String())
	}
}
