package httpapi

import (
	"context"
	"strings"
	"testing"

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
