package envoygateway

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/envoygateway/crdcheck"
	"sigs.k8s.io/yaml"
)

const testPolicy = `{"mode": "enforce", "telemetry": {"cluster": "sluice_admin", "token_env": "SLUICE_TELEMETRY_TOKEN"},
 "rules": [{"name": "free", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 10, "burst": 20}}]}`

func decode(t *testing.T, y []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := yaml.UnmarshalStrict(y, &m); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	return m
}

func wasm0(m map[string]any) map[string]any {
	return m["spec"].(map[string]any)["wasm"].([]any)[0].(map[string]any)
}

func TestExtensionPolicyFromImageMatchesTheCRDAndCarriesThePolicy(t *testing.T) {
	m, err := Render([]byte(testPolicy), 7, Options{TokenEnv: "SLUICE_TELEMETRY_TOKEN", Target: "HTTPRoute/backend", Namespace: "apps"})
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if err := crdcheck.CheckAgainstCRD(y); err != nil {
		t.Fatalf("the CRD schema refuses the YAML: %v\n%s", err, y)
	}
	if err := crdcheck.CheckAgainstCRD(m.JSON()); err != nil {
		t.Fatalf("the CRD schema refuses the JSON: %v", err)
	}
	doc := decode(t, y)
	w := wasm0(doc)
	code := w["code"].(map[string]any)
	if code["type"] != "Image" || code["image"].(map[string]any)["url"] != "ghcr.io/sluice-rl/ratelimit-wasm:latest" {
		t.Errorf("code %v: want the image make images builds", code)
	}
	if w["failOpen"] != true || w["rootID"] != "sluice" {
		t.Errorf("failOpen %v rootID %v: want true and sluice", w["failOpen"], w["rootID"])
	}
	cfg, _ := json.Marshal(w["config"])
	var want, got any
	json.Unmarshal([]byte(testPolicy), &want)
	json.Unmarshal(cfg, &got)
	if gj, wj := mustJSON(got), mustJSON(want); gj != wj {
		t.Errorf("config %s, want the policy %s", gj, wj)
	}
	ref := doc["spec"].(map[string]any)["targetRefs"].([]any)[0].(map[string]any)
	if ref["kind"] != "HTTPRoute" || ref["name"] != "backend" || ref["group"] != GatewayAPIGroup {
		t.Errorf("targetRefs[0] %v", ref)
	}
	if hk := w["env"].(map[string]any)["hostKeys"].([]any); len(hk) != 1 || hk[0] != "SLUICE_TELEMETRY_TOKEN" {
		t.Errorf("env.hostKeys %v", hk)
	}
	md := doc["metadata"].(map[string]any)
	if md["namespace"] != "apps" || md["annotations"].(map[string]any)["sluice-rl.github.io/policy-version"] != "7" {
		t.Errorf("metadata %v", md)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestExtensionPolicyFromHTTPCarriesTheModuleSHA256(t *testing.T) {
	sum := strings.Repeat("ab", 32)
	no := false
	m, err := Render([]byte(testPolicy), 1, Options{HTTPURL: "https://wasm.example.com/ratelimit.wasm", SHA256: sum, FailOpen: &no})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := m.YAML()
	if err := crdcheck.CheckAgainstCRD(y); err != nil {
		t.Fatalf("%v\n%s", err, y)
	}
	w := wasm0(decode(t, y))
	code := w["code"].(map[string]any)
	if code["type"] != "HTTP" || code["http"].(map[string]any)["sha256"] != sum || code["image"] != nil {
		t.Errorf("code %v", code)
	}
	if w["failOpen"] != false {
		t.Errorf("failOpen %v, want false as asked", w["failOpen"])
	}
}

func TestTheCRDCheckRefusesWhatEnvoyGatewayWouldNotRead(t *testing.T) {
	m, err := Render([]byte(testPolicy), 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	good := string(m.JSON())
	for _, bad := range []string{
		strings.Replace(good, `"failOpen": true`, `"failOpen": "yes"`, 1),
		strings.Replace(good, `"rootID"`, `"rootId"`, 1),
		strings.Replace(good, `"type": "Image"`, `"type": "OCI"`, 1),
	} {
		if bad == good {
			t.Fatal("the replacement did not apply")
		}
		if err := crdcheck.CheckAgainstCRD([]byte(bad)); err == nil {
			t.Errorf("the CRD check accepted %s", bad)
		}
	}
}

func TestBadOptionsAreRefusedNamingTheOption(t *testing.T) {
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{Target: "Service/x"}, "target:"},
		{Options{Target: "Gateway"}, "target:"},
		{Options{Image: "Not An Image"}, "image:"},
		{Options{HTTPURL: "https://x/y.wasm"}, "sha256: required"},
		{Options{HTTPURL: "ftp://x/y.wasm", SHA256: strings.Repeat("a", 64)}, "http-url:"},
		{Options{Image: "ghcr.io/a/b:v1", HTTPURL: "https://x/y.wasm"}, "one module source"},
		{Options{SHA256: "XYZ"}, "sha256:"},
		{Options{Namespace: "Bad_NS"}, "namespace:"},
		{Options{TokenEnv: "1-bad"}, "token-env:"},
	} {
		if _, err := Render([]byte("{}"), 1, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want an error naming %q", tc.o, err, tc.want)
		}
	}
	if _, err := Render([]byte("[1]"), 1, Options{}); err == nil || !strings.Contains(err.Error(), "config:") {
		t.Errorf("a JSON array as policy: %v", err)
	}
	if _, err := Render([]byte("{\"rules\": [\"caf\xe9\"]}"), 1, Options{}); err == nil || !strings.Contains(err.Error(), "config: the policy is not UTF-8") {
		t.Errorf("a policy that is not UTF-8: %v", err)
	}
}

func TestALiteralTelemetryTokenIsMaskedWithANote(t *testing.T) {
	m, err := Render([]byte(`{"telemetry": {"cluster": "c", "token": "s3cr3t-s3cr3t-s3cr3t"}, "rules": []}`), 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := m.YAML()
	if strings.Contains(string(y), "s3cr3t") || !strings.Contains(string(y), "env.hostKeys") {
		t.Errorf("the secret leaked or the note is missing:\n%s", y)
	}
}

// FuzzRender: any policy bytes and target give a manifest or an error,
// never a panic, and a manifest is valid JSON naming the target.
func FuzzRender(f *testing.F) {
	f.Add([]byte(testPolicy), "Gateway/eg", "")
	f.Add([]byte(`{"telemetry": {"token": "s3cr3t-s3cr3t-s3cr3t"}}`), "HTTPRoute/a.b", "https://x/y.wasm")
	f.Add([]byte("[]"), "Gateway/", "ftp://")
	f.Add([]byte("{"), "/", "")
	f.Add([]byte("{}"), "", "") // the default target
	f.Fuzz(func(t *testing.T, cfg []byte, target, httpURL string) {
		o := Options{Target: target}
		if httpURL != "" {
			o.HTTPURL, o.SHA256 = httpURL, strings.Repeat("0", 64)
		}
		m, err := Render(cfg, 1, o)
		if err != nil {
			return
		}
		j := m.JSON()
		if !json.Valid(j) {
			t.Fatalf("invalid JSON: %s", j)
		}
		if target == "" {
			target = DefaultTarget
		}
		_, name, _ := ParseTarget(target)
		if !strings.Contains(string(j), `"name": "`+name+`"`) {
			t.Fatalf("the target %q is missing: %s", target, j)
		}
		if _, err := m.YAML(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestTheClustersThePolicyCallsAreNamedForTheGatewaysEnvoy(t *testing.T) {
	const rules = `"rules":[{"name":"g","scope":"global","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]`
	for _, c := range []struct {
		config string
		want   []string
	}{
		{`{"telemetry":{"cluster":"sluice_admin","token_env":"T"},"fleet":{"cluster":"sluice_rls"},` + rules + `}`,
			[]string{`telemetry reports to the cluster "sluice_admin"`, `global rules call the cluster "sluice_rls"`}},
		{`{"telemetry":{"cluster":"sluice_admin","token_env":"T"},"rules":[]}`, []string{`telemetry reports to the cluster "sluice_admin"`}},
		{`{` + strings.Replace(rules, `"scope":"global",`, "", 1) + `}`, nil},
	} {
		m, err := Render([]byte(c.config), 1, Options{Target: "Gateway/eg"})
		if err != nil {
			t.Fatal(err)
		}
		y, err := m.YAML()
		if err != nil {
			t.Fatal(err)
		}
		got := ClusterNotes([]byte(c.config))
		if len(got) != len(c.want) {
			t.Errorf("%s: notes %q, want %d", c.config, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) || !strings.Contains(got[i], "envoyGateway.patchClusters") {
				t.Errorf("note %q does not say %s and how to add it", got[i], w)
			}
			if !strings.Contains(string(y), "# WARNING: "+got[i]) {
				t.Errorf("the YAML does not carry %q:\n%s", got[i], y)
			}
		}
		if err := crdcheck.CheckAgainstCRD(y); err != nil {
			t.Errorf("the YAML with its comments: %v", err)
		}
	}
}
