package httpapi

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/istio"
	"github.com/sluice-rl/sluice/admin/policies"
)

// The Istio page warns when the policy calls a cluster Istio does not
// create, and is quiet once it names Istio's clusters.
func TestIstioPageWarnsOfClustersIstioDoesNotCreate(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	const rules = `"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]`
	for i, cluster := range []string{"sluice_admin", "outbound|9000||sluice.sluice.svc.cluster.local"} {
		body := `{"telemetry":{"cluster":"` + cluster + `","token_env":"SLUICE_TELEMETRY_TOKEN"},` + rules + `}`
		if _, err := e.svc.Save(context.Background(), policies.SaveRequest{Base: int64(i + 1), JSON: []byte(body)}); err != nil {
			t.Fatal(err)
		}
		page := get(t, c, e.srv.URL+"/istio")
		warned := strings.Contains(page, `class="flash flash-warn">telemetry.cluster &#34;sluice_admin&#34; is not a cluster Istio creates`)
		if want := cluster == "sluice_admin"; warned != want {
			t.Errorf("telemetry cluster %s: warned %v, want %v", cluster, warned, want)
		}
	}
}

// The Envoy Gateway page names the clusters the Gateway's Envoy must have
// for the policy's own calls.
func TestEnvoyGatewayPageNamesTheClustersThePolicyCalls(t *testing.T) {
	e := newEnv(t, nil)
	c := login(t, e, "alice")
	body := `{"telemetry":{"cluster":"sluice_admin","token_env":"SLUICE_TELEMETRY_TOKEN"},"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`
	if _, err := e.svc.Save(context.Background(), policies.SaveRequest{Base: 1, JSON: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	page := get(t, c, e.srv.URL+"/envoy-gateway?target=Gateway/eg")
	if !strings.Contains(page, `class="flash flash-warn">the policy sends telemetry reports to the cluster &#34;sluice_admin&#34;`) {
		t.Errorf("the page does not name the telemetry cluster:\n%s", page)
	}
}

// The Istio page and API attach the WasmPlugin to the targets the query
// names (replacing the flags' selector), say what it runs on, warn when a
// waypoint would have no cluster for the admin, and refuse a target Istio
// would refuse, naming the field.
func TestIstioPageAttachesToTargets(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Istio = istio.Options{Selector: map[string]string{"istio": "ingressgateway"}} })
	c := login(t, e, "alice")
	body := `{"telemetry":{"cluster":"outbound|9000||sluice.sluice.svc.cluster.local","token_env":"SLUICE_TELEMETRY_TOKEN"},"rules":[{"name":"per-ip","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`
	if _, err := e.svc.Save(context.Background(), policies.SaveRequest{Base: 1, JSON: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	page := get(t, c, e.srv.URL+"/istio")
	if !strings.Contains(page, "Runs on the workloads labelled istio=ingressgateway.") || strings.Contains(page, "targetRefs") {
		t.Errorf("without a target the page does not follow the selector:\n%s", page)
	}
	page = get(t, c, e.srv.URL+"/istio?target="+url.QueryEscape("Service/reviews"))
	for _, want := range []string{
		"Runs on the proxies of Service/reviews.",
		"targetRefs:",
		"kind: Service",
		`class="flash flash-warn">target Service/reviews runs the filter in waypoints`,
		`href="/istio/wasmplugin.yaml?target=Service%2Freviews"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %q:\n%s", want, page)
		}
	}
	if strings.Contains(page, "matchLabels") {
		t.Error("the target did not replace the selector")
	}
	resp, j := e.apiJSON(t, "GET", "/api/v1/istio/wasmplugin?format=json&target=Gateway/public", "")
	spec, _ := j["spec"].(map[string]any)
	refs, _ := spec["targetRefs"].([]any)
	if resp.StatusCode != 200 || len(refs) != 1 || refs[0].(map[string]any)["group"] != "gateway.networking.k8s.io" || spec["selector"] != nil {
		t.Errorf("api with a target: %d %v", resp.StatusCode, j)
	}
	resp, j = e.apiJSON(t, "GET", "/api/v1/istio/wasmplugin?target=HTTPRoute/r", "")
	if resp.StatusCode != 400 || j["field"] != "target" || !strings.Contains(fmt.Sprint(j["error"]), `kind "HTTPRoute" cannot carry a WasmPlugin`) {
		t.Errorf("a bad target: %d %v", resp.StatusCode, j)
	}
}
