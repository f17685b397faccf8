package helmtest

import (
	"encoding/json"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Under Istio no cluster is named sluice_admin or sluice_rls: the chart
// writes the admin's ports as Istio names them, in the WasmPlugin and in
// the admin's initial version alike, and leaves other names alone.
func TestChartNamesTheAdminsPortsAsIstioDoes(t *testing.T) {
	const policyYAML = `
policy:
  mode: enforce
  telemetry: {cluster: sluice_admin, token_env: SLUICE_TELEMETRY_TOKEN}
  fleet: {cluster: sluice_rls}
  rules:
    - {name: per-ip, limit_keys: ["ip:address"], algorithm: token_bucket, algorithm_config: {rps: 100, burst: 200}}
    - {name: global, scope: global, limit_keys: ["header:x-tenant"], algorithm: token_bucket, algorithm_config: {rps: 10, burst: 20}}
`
	const ownNamesYAML = `
policy:
  telemetry: {cluster: outbound|9000||admin.ops.svc.cluster.local, token_env: SLUICE_TELEMETRY_TOKEN}
  fleet: {cluster: envoyproxy_ratelimit}
  rules:
    - {name: global, scope: global, limit_keys: ["header:x-tenant"], algorithm: token_bucket, algorithm_config: {rps: 10, burst: 20}}
`
	for _, c := range []struct {
		name, vals       string
		telemetry, fleet string
		wantWasmPlugin   bool
	}{
		{"Istio", "istio: {enabled: true}\n" + policyYAML,
			"outbound|9000||sluice.sluice.svc.cluster.local", "outbound|18081||sluice.sluice.svc.cluster.local", true},
		{"Istio with other ports and domain", "istio: {enabled: true}\nclusterDomain: corp.internal\nservice: {httpPort: 8080, rlsPort: 8081}\n" + policyYAML,
			"outbound|8080||sluice.sluice.svc.corp.internal", "outbound|8081||sluice.sluice.svc.corp.internal", true},
		{"Istio, clusters the policy names itself", "istio: {enabled: true}\n" + ownNamesYAML,
			"outbound|9000||admin.ops.svc.cluster.local", "envoyproxy_ratelimit", true},
		{"Envoy, no Istio", policyYAML, "sluice_admin", "sluice_rls", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs, _, err := render(t, c.vals)
			if err != nil {
				t.Fatal(err)
			}
			var configs [][]byte
			configs = append(configs, []byte(objs["ConfigMap"][0]["data"].(map[string]any)["policy.json"].(string)))
			if wp := objs["WasmPlugin"]; (len(wp) == 1) != c.wantWasmPlugin {
				t.Fatalf("%d WasmPlugins rendered", len(wp))
			} else if c.wantWasmPlugin {
				pc, _ := json.Marshal(wp[0]["spec"].(map[string]any)["pluginConfig"])
				configs = append(configs, pc)
			}
			for i, raw := range configs {
				cfg, err := policy.Parse(raw)
				if err != nil {
					t.Fatalf("config %d does not parse: %v\n%s", i, err, raw)
				}
				if cfg.Telemetry == nil || cfg.Telemetry.Cluster != c.telemetry || cfg.Fleet == nil || cfg.Fleet.Cluster != c.fleet {
					t.Errorf("config %d: telemetry cluster %q, fleet cluster %q; want %q, %q", i, telemetryCluster(cfg), fleetCluster(cfg), c.telemetry, c.fleet)
				}
			}
		})
	}
}

func telemetryCluster(c *policy.Config) string {
	if c.Telemetry == nil {
		return ""
	}
	return c.Telemetry.Cluster
}

func fleetCluster(c *policy.Config) string {
	if c.Fleet == nil {
		return ""
	}
	return c.Fleet.Cluster
}
