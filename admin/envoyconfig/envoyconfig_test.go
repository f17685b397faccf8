package envoyconfig

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/sluice-rl/sluice/admin/xds"
	"github.com/sluice-rl/sluice/plugin/wasmhost/wasmtest"
	"github.com/sluice-rl/sluice/shared/policy"
)

func readEnvoyYAML(t *testing.T) string { return readRootFile(t, "envoy.yaml") }

func readRootFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(wasmtest.ModuleRoot(t), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func sluiceExpect(t *testing.T) Expect {
	t.Helper()
	return Expect{
		ResourceName: xds.DefaultResourceName,
		WasmFilename: makeBuildWasmPath(t),
		VMID:         xds.VMID,
		RootID:       xds.RootID,
		HostEnvKeys:  []string{xds.DefaultTokenEnv},
		ParsePlugin: func(b []byte) error {
			_, err := policy.Parse(b)
			return err
		},
	}
}

// makeBuildWasmPath reads from the Makefile where `make build` writes the
// plugin: $(WASM_OUT), with $(BIN) expanded.
func makeBuildWasmPath(t *testing.T) string {
	t.Helper()
	mk, err := os.ReadFile(filepath.Join(wasmtest.ModuleRoot(t), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^([A-Z_]+)\s*[:?]?=\s*(\S+)\s*$`).FindAllStringSubmatch(string(mk), -1) {
		vars[m[1]] = m[2]
	}
	out := vars["WASM_OUT"]
	for name, v := range vars {
		out = strings.ReplaceAll(out, "$("+name+")", v)
	}
	if out == "" || strings.Contains(out, "$(") {
		t.Fatalf("cannot work out WASM_OUT from the Makefile (got %q)", out)
	}
	if !regexp.MustCompile(`(?m)^build:.*\bwasm\b`).Match(mk) || !regexp.MustCompile(`(?m)^wasm:.*\$\(WASM_OUT\)`).Match(mk) {
		t.Fatal("the Makefile's build target no longer builds $(WASM_OUT): update this test")
	}
	if out != xds.DefaultWasmPath {
		t.Errorf("make build writes %q but the admin pushes %q by default", out, xds.DefaultWasmPath)
	}
	return out
}

func TestEnvoyYAMLIsValid(t *testing.T) {
	if err := Validate([]byte(readEnvoyYAML(t)), sluiceExpect(t)); err != nil {
		t.Fatalf("envoy.yaml:\n%v", err)
	}
}

// TestEnvoyFleetYAMLIsValid: the fleet variant passes the same checks and
// has the HTTP/2 cluster that docs/fleet.md's policy names in fleet.cluster.
func TestEnvoyFleetYAMLIsValid(t *testing.T) {
	guide := readRootFile(t, "docs/fleet.md")
	m := regexp.MustCompile(`"fleet":\s*\{"cluster":\s*"([^"]+)"`).FindStringSubmatch(guide)
	if m == nil {
		t.Fatal("docs/fleet.md shows no policy with a fleet.cluster")
	}
	exp := sluiceExpect(t)
	exp.HTTP2Clusters = []string{m[1]}
	if err := Validate([]byte(readRootFile(t, "envoy-fleet.yaml")), exp); err != nil {
		t.Fatalf("envoy-fleet.yaml:\n%v", err)
	}
	// HTTP/1 on that cluster (the last one in the file), or no such
	// cluster, is refused.
	y := readRootFile(t, "envoy-fleet.yaml")
	i := strings.LastIndex(y, "http2_protocol_options: {}")
	if i < strings.Index(y, "- name: "+m[1]) {
		t.Fatalf("the cluster %s is not the last HTTP/2 cluster in envoy-fleet.yaml: update the test", m[1])
	}
	http1 := y[:i] + "http_protocol_options: {}" + y[i+len("http2_protocol_options: {}"):]
	if err := Validate([]byte(http1), exp); err == nil || !strings.Contains(err.Error(), "not configured for HTTP/2") {
		t.Errorf("the fleet cluster on HTTP/1: %v, want an error about HTTP/2", err)
	}
	exp.HTTP2Clusters = []string{"sluice_rls_missing"}
	if err := Validate([]byte(readRootFile(t, "envoy-fleet.yaml")), exp); err == nil || !strings.Contains(err.Error(), "sluice_rls_missing") {
		t.Errorf("a missing fleet cluster: %v, want an error naming it", err)
	}
}

// The checks must see what they are meant to check: a walker that found
// nothing would pass every file.
func TestEnvoyYAMLChecksSeeTheReferences(t *testing.T) {
	b, err := Parse([]byte(readEnvoyYAML(t)))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range References(b) {
		got = append(got, r.Cluster)
	}
	for _, want := range []string{"upstream", "sluice_xds"} {
		if !slices.Contains(got, want) {
			t.Errorf("references %v: want %q among them", got, want)
		}
	}
	anys := 0
	walk(b.ProtoReflect(), "", func(path string, _ *anypb.Any, _ proto.Message, err error) {
		if err != nil {
			t.Errorf("%s: %v", path, err)
		}
		anys++
	})
	// HCM, its default_config, the plugin configuration inside it, the
	// router, the cluster's protocol options.
	if anys < 5 {
		t.Errorf("walked %d Anys, want at least 5", anys)
	}
}

// mutate applies one exact replacement to envoy.yaml (failing if the
// original text is gone, so a stale mutation cannot pass silently).
func mutate(t *testing.T, old, new string) []byte {
	t.Helper()
	y := readEnvoyYAML(t)
	if strings.Count(y, old) != 1 {
		t.Fatalf("envoy.yaml does not contain %q exactly once: update the test", old)
	}
	return []byte(strings.Replace(y, old, new, 1))
}

func TestValidatorRejects(t *testing.T) {
	router := `          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`
	y := readEnvoyYAML(t)
	if !strings.Contains(y, router) {
		t.Fatal("router block not found in envoy.yaml: update the test")
	}
	routerFirst := strings.Replace(strings.Replace(y, router, "", 1), "          http_filters:\n", "          http_filters:\n"+router, 1)

	for _, tc := range []struct {
		name string
		yaml []byte
		want []string // all must appear in the error
	}{
		{"misspelled field", mutate(t, "stat_prefix: ingress_http", "stat_prefx: ingress_http"), []string{"stat_prefx"}},
		{"misspelled field in default_config", mutate(t, "vm_id: sluice", "vmid: sluice"), []string{"vmid"}},
		{"unknown @type", mutate(t, "envoy.extensions.filters.http.router.v3.Router", "envoy.extensions.filters.http.router.v3.Routr"), []string{"Routr"}},
		{"bad enum", mutate(t, "api_type: GRPC", "api_type: GRPCS"), []string{"GRPCS"}},
		{"dangling route cluster", mutate(t, "route: {cluster: upstream}", "route: {cluster: upstreem}"), []string{`"upstreem" does not exist`}},
		{"dangling xds cluster", mutate(t, "envoy_grpc: {cluster_name: sluice_xds}", "envoy_grpc: {cluster_name: xds}"), []string{`"xds" does not exist`}},
		{"xds cluster without HTTP/2", mutate(t, "          http2_protocol_options: {}\n", "          http_protocol_options: {}\n"), []string{"HTTP/2"}},
		{"rule inside typed_config (HCM stat_prefix required)", mutate(t, "stat_prefix: ingress_http", "stat_prefix: \"\""), []string{"StatPrefix"}},
		{"rule inside an Any inside an Any (empty filename)", mutate(t, "local: {filename: bin/ratelimit.wasm}", "local: {filename: \"\"}"), []string{"default_config", "Filename"}},
		{"router not last", []byte(routerFirst), []string{"router must be the last"}},
		{"ECDS resource name", mutate(t, "- name: sluice-ratelimit\n            config_discovery:", "- name: ratelimit\n            config_discovery:"), []string{`"ratelimit" is not the admin's ECDS resource`}},
		{"wasm file", mutate(t, "local: {filename: bin/ratelimit.wasm}", "local: {filename: ratelimit.wasm}"), []string{"make build"}},
		{"vm_id", mutate(t, "vm_id: sluice", "vm_id: other"), []string{"vm_id"}},
		{"token variable", mutate(t, "host_env_keys: [SLUICE_TELEMETRY_TOKEN]", "host_env_keys: [TOKEN]"), []string{"host_env_keys", "SLUICE_TELEMETRY_TOKEN"}},
		{"token in the file", mutate(t, "host_env_keys: [SLUICE_TELEMETRY_TOKEN]", "key_values: {SLUICE_TELEMETRY_TOKEN: s3cret}"), []string{"key_values", "host_env_keys"}},
		{"plugin JSON the plugin rejects", mutate(t, `"rps": 50, "burst": 100`, `"rps": 50, "burst": 10`), []string{"plugin would reject", "burst"}},
		{"ADS without ads_config", mutate(t, `dynamic_resources:
  ads_config:
    api_type: GRPC
    transport_api_version: V3
    set_node_on_first_message_only: true
    grpc_services:
    - envoy_grpc: {cluster_name: sluice_xds}
`, ""), []string{"ads_config is not set"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(tc.yaml, sluiceExpect(t))
			if err == nil {
				t.Fatal("accepted")
			}
			t.Logf("%v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not mention %q:\n%v", w, err)
				}
			}
		})
	}
}
