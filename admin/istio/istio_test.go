package istio

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"gopkg.in/yaml.v3"
	extensions "istio.io/api/extensions/v1alpha1"

	"github.com/sluice-rl/sluice/shared/policy"
)

const policyJSON = `{"mode":"enforce","reject_status":429,"response_headers":true,"legacy_headers":true,"shadow_header":"x-sluice-shadow","xff_trusted_hops":1,"policies":[{"name":"default","rules":[{"name":"per-ip","limit_keys":["ip:address","header:x-api-key"],"match":{"jwt:plan":"true","path_prefix":"/api/"},"algorithm":"token_bucket","algorithm_config":{"tokens_per_second":0.5,"burst":1000000000000,"cost_source":"fixed","fixed_cost":1,"default_cost":1},"mode":"enforce"}]}]}`

// unmarshalSpec reads a spec into istio.io/api's WasmPlugin, refusing
// unknown fields.
func unmarshalSpec(t *testing.T, spec []byte) *extensions.WasmPlugin {
	t.Helper()
	var wp extensions.WasmPlugin
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(spec, &wp); err != nil {
		t.Fatalf("spec is not a valid WasmPlugin: %v\n%s", err, spec)
	}
	return &wp
}

func checkPlugin(t *testing.T, wp *extensions.WasmPlugin, url string) {
	t.Helper()
	if wp.GetUrl() != url {
		t.Errorf("url = %q", wp.GetUrl())
	}
	if wp.GetPhase() != extensions.PluginPhase_AUTHZ {
		t.Errorf("phase = %v", wp.GetPhase())
	}
	if wp.GetFailStrategy() != extensions.FailStrategy_FAIL_OPEN {
		t.Errorf("failStrategy = %v", wp.GetFailStrategy())
	}
	if wp.GetPluginName() != "sluice" {
		t.Errorf("pluginName = %q", wp.GetPluginName())
	}
	if wp.GetType() != extensions.PluginType_HTTP {
		t.Errorf("type = %v", wp.GetType())
	}
	env := wp.GetVmConfig().GetEnv()
	if len(env) != 1 || env[0].GetName() != "GOGC" || env[0].GetValue() != DefaultGOGC || env[0].GetValueFrom() != extensions.EnvValueSource_INLINE {
		t.Errorf("vmConfig.env = %v", env)
	}
	// pluginConfig is the policy, as an object, and the filter's parser
	// reads it back to the same configuration.
	pc, err := protojson.Marshal(wp.GetPluginConfig())
	if err != nil {
		t.Fatal(err)
	}
	got, err := policy.Parse(pc)
	if err != nil {
		t.Fatalf("pluginConfig does not parse: %v\n%s", err, pc)
	}
	want, _ := policy.Parse([]byte(policyJSON))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pluginConfig parses to\n%+v\nwant\n%+v", got, want)
	}
}

func TestRenderIsAValidWasmPlugin(t *testing.T) {
	m, err := Render([]byte(policyJSON), 7, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPlugin(t, unmarshalSpec(t, m.Spec()), DefaultURL)

	var whole map[string]any
	if err := json.Unmarshal(m.JSON(), &whole); err != nil {
		t.Fatal(err)
	}
	md := whole["metadata"].(map[string]any)
	if whole["apiVersion"] != "extensions.istio.io/v1alpha1" || whole["kind"] != "WasmPlugin" ||
		md["name"] != DefaultName || md["namespace"] != DefaultNamespace ||
		md["annotations"].(map[string]any)[VersionAnnotation] != "7" {
		t.Errorf("header: %v %v %v", whole["apiVersion"], whole["kind"], md)
	}
	if _, ok := whole["spec"].(map[string]any)["selector"]; ok {
		t.Error("selector present without one configured")
	}
}

// TestYAMLMatchesJSON: the YAML form says exactly what the JSON form says.
func TestYAMLMatchesJSON(t *testing.T) {
	m, err := Render([]byte(policyJSON), 3, Options{
		URL: "file:///opt/sluice/ratelimit.wasm", Selector: map[string]string{"istio": "ingressgateway", "app.kubernetes.io/name": "gw"},
		SHA256: strings.Repeat("ab", 32), Namespace: "edge", Name: "limits",
	})
	if err != nil {
		t.Fatal(err)
	}
	y, err := m.YAML()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), "{") || !strings.Contains(string(y), "\nspec:\n") {
		t.Errorf("not block YAML:\n%s", y)
	}
	var fromYAML, fromJSON any
	if err := yaml.Unmarshal(y, &fromYAML); err != nil {
		t.Fatalf("YAML does not parse: %v\n%s", err, y)
	}
	json.Unmarshal(m.JSON(), &fromJSON)
	// Compare through JSON (yaml decodes ints as int, JSON as float64).
	a, _ := json.Marshal(fromYAML)
	var norm any
	json.Unmarshal(a, &norm)
	if !reflect.DeepEqual(norm, fromJSON) {
		t.Errorf("YAML and JSON differ:\n%s\n%s", a, m.JSON())
	}
	// The annotation "3" and GOGC "400" stay strings in YAML.
	if !strings.Contains(string(y), `"3"`) || !strings.Contains(string(y), `"400"`) {
		t.Errorf("numeric strings not quoted:\n%s", y)
	}
	spec, _ := json.Marshal(norm.(map[string]any)["spec"])
	wp := unmarshalSpec(t, spec)
	checkPlugin(t, wp, "file:///opt/sluice/ratelimit.wasm")
	if wp.GetSelector().GetMatchLabels()["istio"] != "ingressgateway" || wp.GetSha256() != strings.Repeat("ab", 32) {
		t.Errorf("selector/sha256: %v %q", wp.GetSelector(), wp.GetSha256())
	}
}

func TestRenderRefusesBadOptions(t *testing.T) {
	for _, c := range []struct {
		opts  Options
		field string
	}{
		{Options{URL: "ftp://x/y.wasm"}, "url:"},
		{Options{URL: "ratelimit.wasm"}, "url:"},
		{Options{URL: "oci://"}, "url:"},
		{Options{Name: "Bad_Name"}, "name:"},
		{Options{Namespace: "a.b"}, "namespace:"},
		{Options{SHA256: "abc"}, "sha256:"},
		{Options{GOGC: "-1"}, "gogc:"},
		{Options{Selector: map[string]string{"app": "a b"}}, "selector:"},
		{Options{Selector: map[string]string{"-x": "a"}}, "selector:"},
	} {
		_, err := Render([]byte(policyJSON), 1, c.opts)
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%+v: %v, want an error on %s", c.opts, err, c.field)
		}
	}
	for _, bad := range []string{"", "[]", "{", `"x"`, "{\"rules\": [\"caf\xe9\"]}"} {
		if _, err := Render([]byte(bad), 1, Options{}); err == nil || !strings.Contains(err.Error(), "pluginConfig") {
			t.Errorf("config %q: %v", bad, err)
		}
	}
}

func TestParseSelector(t *testing.T) {
	got, err := ParseSelector(" istio=ingressgateway , app=x")
	if err != nil || !reflect.DeepEqual(got, map[string]string{"istio": "ingressgateway", "app": "x"}) {
		t.Errorf("%v %v", got, err)
	}
	if got, err := ParseSelector(""); err != nil || len(got) != 0 {
		t.Errorf("empty: %v %v", got, err)
	}
	for _, bad := range []string{"app", "=x", "a=1,a=2"} {
		if _, err := ParseSelector(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestYAMLQuotesAmbiguousStrings: kubectl reads YAML 1.1, where yes, on,
// 12:30 and 1_000 are not strings; such values must be quoted.
func TestYAMLQuotesAmbiguousStrings(t *testing.T) {
	values := []string{"yes", "On", "n", "12:30", "1_000", "0x1f", "1e3", "~", "null", "", " lead", "a: b", "#c", "-", "/api/"}
	var rules []string
	for i, v := range values {
		q, _ := json.Marshal(v)
		if v == "" {
			continue
		}
		rules = append(rules, `{"name":"r`+strings.Repeat("x", i)+`","limit_keys":["ip:address"],"match":{"path":`+string(q)+`},"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}`)
	}
	m, err := Render([]byte(`{"rules":[`+strings.Join(rules, ",")+`]}`), 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	y, _ := m.YAML()
	for _, v := range values[:len(values)-1] {
		if v == "" {
			continue
		}
		if q, _ := json.Marshal(v); !strings.Contains(string(y), "path: "+string(q)+"\n") {
			t.Errorf("%q is not double-quoted:\n%s", v, y)
		}
	}
	for _, word := range []string{"ip:address", "token_bucket", "enforce"} {
		if strings.Contains(string(y), `"`+word+`"`) {
			t.Errorf("%q quoted needlessly", word)
		}
	}
}

func TestClustersIstioDoesNotCreateAreWarnedOf(t *testing.T) {
	const rule = `"rules":[{"name":"g","scope":"global","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]`
	for _, c := range []struct {
		telemetry, fleet string
		want             []string // a substring of each warning, in order
	}{
		{"outbound|9000||sluice.sluice.svc.cluster.local", "outbound|18081||sluice.sluice.svc.cluster.local", nil},
		{"inbound|9000||", "outbound|18081||rls.ops.svc.corp.internal", nil},
		{"sluice_admin", "outbound|18081||sluice.sluice.svc.cluster.local", []string{`telemetry.cluster "sluice_admin"`}},
		{"outbound|9000||sluice.sluice.svc.cluster.local", "sluice_rls", []string{`fleet.cluster "sluice_rls"`}},
		{"sluice.sluice.svc.cluster.local:9000", "outbound|port||rls", []string{"telemetry.cluster", "fleet.cluster"}},
	} {
		config := fmt.Sprintf(`{"telemetry":{"cluster":%q,"token_env":"T"},"fleet":{"cluster":%q},%s}`, c.telemetry, c.fleet, rule)
		if _, err := policy.Parse([]byte(config)); err != nil {
			t.Fatalf("the test's policy does not parse: %v", err)
		}
		m, err := Render([]byte(config), 1, Options{})
		if err != nil {
			t.Fatal(err)
		}
		y, err := m.YAML()
		if err != nil {
			t.Fatal(err)
		}
		got := ClusterWarnings([]byte(config))
		if len(got) != len(c.want) {
			t.Errorf("%s, %s: warnings %q, want %d", c.telemetry, c.fleet, got, len(c.want))
			continue
		}
		for i, w := range c.want {
			if !strings.Contains(got[i], w) || !strings.Contains(got[i], "outbound|<port>||") {
				t.Errorf("warning %q does not name %s and Istio's naming", got[i], w)
			}
			if !strings.Contains(string(y), "# WARNING: "+got[i]) {
				t.Errorf("the YAML does not carry the warning %q:\n%s", got[i], y)
			}
		}
	}
	// Only the JSON of a policy is read: without telemetry or fleet, no warning.
	if w := ClusterWarnings([]byte(`{` + rule + `}`)); len(w) != 0 {
		t.Errorf("a policy calling no cluster: %q", w)
	}
}
