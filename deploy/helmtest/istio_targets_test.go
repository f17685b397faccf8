package helmtest

import (
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/sluice-rl/sluice/shared/policy"
)

// The chart's WasmPlugin and the one its admin renders for each new
// version are the same object: same name and namespace (so applying the
// admin's replaces the chart's instead of running the filter twice), same
// attachment (selector or targetRefs), module, checksum and GOGC. The
// admin runs as a process with the Deployment's environment.
func TestChartAndItsAdminRenderTheSameWasmPlugin(t *testing.T) {
	bin := buildAdmin(t)
	sha := strings.Repeat("cd", 32)
	for _, c := range []struct{ name, vals string }{
		{"a selector", "istio: {enabled: true, namespace: istio-ingress, selector: {istio: ingressgateway, app: edge}, gogc: \"200\"}\n"},
		{"targets", "istio: {enabled: true, namespace: apps, targetRefs: [{kind: Gateway, name: public}, {kind: Service, name: reviews}]}\nwasmImage: {sha256: \"" + sha + "\"}\n"},
		{"neither: the whole namespace", "istio: {enabled: true}\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs, _, err := render(t, c.vals)
			if err != nil {
				t.Fatal(err)
			}
			chart := objs["WasmPlugin"][0]
			d := decode[appsv1.Deployment](t, objs["Deployment"][0])
			a := startPodAdmin(t, bin, objs, d, nil)
			currentVersion(t, a.url, chartAdminToken, a.out)
			admin := adminWasmPlugin(t, a.url)

			for _, f := range []string{"name", "namespace"} {
				if got, want := field(admin, "metadata", f), field(chart, "metadata", f); got != want {
					t.Errorf("metadata.%s: the admin's %v, the chart's %v", f, got, want)
				}
			}
			for _, f := range []string{"selector", "targetRefs", "url", "sha256", "phase", "failStrategy", "pluginName", "type", "vmConfig"} {
				if got, want := field(admin, "spec", f), field(chart, "spec", f); !reflect.DeepEqual(got, want) {
					t.Errorf("spec.%s: the admin's %v, the chart's %v", f, got, want)
				}
			}
			// The admin's is the normalized form of the chart's.
			if got, want := parsedConfig(t, admin), parsedConfig(t, chart); !reflect.DeepEqual(got, want) {
				t.Errorf("pluginConfig differs:\nadmin %+v\nchart %+v", got, want)
			}
		})
	}
}

func parsedConfig(t *testing.T, wasmPlugin map[string]any) *policy.Config {
	t.Helper()
	raw, _ := json.Marshal(field(wasmPlugin, "spec", "pluginConfig"))
	cfg, err := policy.Parse(raw)
	if err != nil {
		t.Fatalf("pluginConfig does not parse: %v\n%s", err, raw)
	}
	return cfg
}

// adminWasmPlugin fetches the admin's WasmPlugin for its current version.
func adminWasmPlugin(t *testing.T, base string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/istio/wasmplugin?format=json", nil)
	req.Header.Set("Authorization", "Bearer "+chartAdminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &m) != nil {
		t.Fatalf("the admin's WasmPlugin: %s\n%s", resp.Status, body)
	}
	return m
}

// field is obj[section][name], normalized through JSON (YAML's ints and
// JSON's floats compare equal).
func field(obj map[string]any, section, name string) any {
	s, _ := obj[section].(map[string]any)
	raw, _ := json.Marshal(s[name])
	var v any
	json.Unmarshal(raw, &v)
	return v
}

// Targets become the WasmPlugin's targetRefs, each kind with its API
// group; Istio's rules are the chart's.
func TestChartAttachesTheWasmPluginToTargets(t *testing.T) {
	objs, _, err := render(t, "istio: {enabled: true, targetRefs: [{kind: Gateway, name: public}, {kind: ServiceEntry, name: api.example.com}, {kind: GatewayClass, name: istio-waypoint}]}\n")
	if err != nil {
		t.Fatal(err)
	}
	got := field(objs["WasmPlugin"][0], "spec", "targetRefs")
	want := []any{
		map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public"},
		map[string]any{"group": "networking.istio.io", "kind": "ServiceEntry", "name": "api.example.com"},
		map[string]any{"group": "gateway.networking.k8s.io", "kind": "GatewayClass", "name": "istio-waypoint"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("targetRefs %v\nwant %v", got, want)
	}
	if field(objs["WasmPlugin"][0], "spec", "selector") != nil {
		t.Error("a selector beside targetRefs")
	}
	for _, c := range []struct{ vals, want string }{
		{"istio: {enabled: true, selector: {app: x}, targetRefs: [{kind: Gateway, name: g}]}", "istio.selector and istio.targetRefs: Istio takes one or the other"},
		{"istio: {enabled: true, targetRefs: [{kind: HTTPRoute, name: r}]}", "targetRefs"},
		{"istio: {enabled: true, targetRefs: [{kind: Gateway}]}", "name"},
		{"istio: {enabled: true, targetRefs: [{kind: Gateway, name: Public}]}", "targetRefs"},
	} {
		if _, _, err := render(t, c.vals); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.vals, err, c.want)
		}
	}
}
