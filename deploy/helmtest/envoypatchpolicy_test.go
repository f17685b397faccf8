package helmtest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/admin/envoygateway/crdcheck"
	"github.com/sluice-rl/sluice/shared/policy"
)

// patchedCluster is a cluster an EnvoyPatchPolicy adds.
type patchedCluster struct {
	cluster *clusterv3.Cluster
	http2   bool
}

// checkPatchPolicy checks an EnvoyPatchPolicy against Envoy Gateway's CRD
// and each cluster it adds against Envoy's API (strict protojson, as Envoy
// Gateway reads it, and the API's own validation), and returns those.
func checkPatchPolicy(t *testing.T, doc []byte) map[string]patchedCluster {
	t.Helper()
	if err := crdcheck.CheckAgainstCRD(doc); err != nil {
		t.Errorf("EnvoyPatchPolicy does not match Envoy Gateway's CRD: %v\n%s", err, doc)
	}
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatal(err)
	}
	var epp struct {
		Spec struct {
			JSONPatches []struct {
				Type, Name string
				Operation  struct {
					Op    string
					Path  *string
					Value json.RawMessage
				}
			} `json:"jsonPatches"`
		}
	}
	if err := json.Unmarshal(j, &epp); err != nil {
		t.Fatal(err)
	}
	out := map[string]patchedCluster{}
	for _, p := range epp.Spec.JSONPatches {
		if p.Type != "type.googleapis.com/envoy.config.cluster.v3.Cluster" || p.Operation.Op != "add" || p.Operation.Path != nil {
			t.Errorf("patch %s: %s %s at %v, want a whole cluster added (op add, no path)", p.Name, p.Type, p.Operation.Op, p.Operation.Path)
			continue
		}
		var c clusterv3.Cluster
		if err := protojson.Unmarshal(p.Operation.Value, &c); err != nil {
			t.Errorf("patch %s: not an Envoy Cluster: %v\n%s", p.Name, err, p.Operation.Value)
			continue
		}
		if err := c.ValidateAll(); err != nil {
			t.Errorf("patch %s: the Cluster fails Envoy's validation: %v", p.Name, err)
		}
		if c.GetName() != p.Name {
			t.Errorf("patch named %s adds the cluster %s", p.Name, c.GetName())
		}
		pc := patchedCluster{cluster: &c}
		if opts := c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; opts != nil {
			var o httpv3.HttpProtocolOptions
			if err := opts.UnmarshalTo(&o); err != nil {
				t.Errorf("patch %s: %v", p.Name, err)
			}
			pc.http2 = o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
		}
		out[c.GetName()] = pc
	}
	return out
}

// endpointOf is the one address a patched cluster sends to.
func endpointOf(c *clusterv3.Cluster) string {
	eps := c.GetLoadAssignment().GetEndpoints()
	if len(eps) != 1 || len(eps[0].GetLbEndpoints()) != 1 {
		return fmt.Sprintf("%d localities", len(eps))
	}
	a := eps[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
	return fmt.Sprintf("%s:%d", a.GetAddress(), a.GetPortValue())
}

// With patchClusters, Envoy Gateway's Envoy gets the clusters the policy
// calls: sluice_admin for telemetry (HTTP/1.1) and, in fleet mode,
// sluice_rls (HTTP/2, gRPC), both to the admin's Service.
func TestChartPatchesTheAdminsClustersIntoEnvoyGateway(t *testing.T) {
	const policyYAML = `
policy:
  telemetry: {cluster: sluice_admin, token_env: SLUICE_TELEMETRY_TOKEN}
  fleet: {cluster: sluice_rls}
  rules:
    - {name: global, scope: global, limit_keys: ["header:x-tenant"], algorithm: token_bucket, algorithm_config: {rps: 10, burst: 20}}
`
	for _, c := range []struct {
		name, vals, gateway string
		clusters            map[string]string // name: endpoint
	}{
		{"fleet mode", "envoyGateway: {enabled: true, namespace: edge, target: {kind: Gateway, name: eg}, patchClusters: {enabled: true}}\nfleet: {enabled: true, redis: {addrs: \"r:6379\"}}\n" + policyYAML,
			"eg", map[string]string{"sluice_admin": "sluice.sluice.svc.cluster.local:9000", "sluice_rls": "sluice.sluice.svc.cluster.local:18081"}},
		{"telemetry only, an HTTPRoute's Gateway, other ports", "envoyGateway: {enabled: true, target: {kind: HTTPRoute, name: api}, patchClusters: {enabled: true, gateway: public}}\nservice: {httpPort: 8080}\nclusterDomain: corp.internal\n",
			"public", map[string]string{"sluice_admin": "sluice.sluice.svc.corp.internal:8080"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			objs, manifest, err := render(t, c.vals)
			if err != nil {
				t.Fatal(err)
			}
			if len(objs["EnvoyPatchPolicy"]) != 1 {
				t.Fatalf("%d EnvoyPatchPolicies", len(objs["EnvoyPatchPolicy"]))
			}
			epp := objs["EnvoyPatchPolicy"][0]
			doc, _ := yaml.Marshal(epp)
			got := checkPatchPolicy(t, doc)
			if ref := epp["spec"].(map[string]any)["targetRef"].(map[string]any); ref["kind"] != "Gateway" || ref["name"] != c.gateway {
				t.Errorf("targetRef %v, want the Gateway %s", ref, c.gateway)
			}
			if ns := epp["metadata"].(map[string]any)["namespace"]; ns != objs["EnvoyExtensionPolicy"][0]["metadata"].(map[string]any)["namespace"] {
				t.Errorf("the patch is in namespace %v, the extension policy elsewhere", ns)
			}
			if len(got) != len(c.clusters) {
				t.Errorf("clusters %v, want %v", keys(got), c.clusters)
			}
			for name, want := range c.clusters {
				pc, ok := got[name]
				if !ok || endpointOf(pc.cluster) != want || pc.http2 != (name == "sluice_rls") {
					t.Errorf("cluster %s: present %v, endpoint %s, HTTP/2 %v; want %s, HTTP/2 only for the rate limit service", name, ok, endpointOf(pc.cluster), pc.http2, want)
				}
			}
			// The clusters the extension policy's configuration calls are there.
			cfgJSON, _ := json.Marshal(objs["EnvoyExtensionPolicy"][0]["spec"].(map[string]any)["wasm"].([]any)[0].(map[string]any)["config"])
			cfg, err := policy.Parse(cfgJSON)
			if err != nil {
				t.Fatal(err)
			}
			for _, called := range []string{telemetryCluster(cfg), fleetCluster(cfg)} {
				if _, ok := got[called]; called != "" && !ok {
					t.Errorf("the policy calls the cluster %s, which the patch does not add\n%s", called, manifest)
				}
			}
		})
	}
	for _, c := range []struct{ vals, want string }{
		{"envoyGateway: {enabled: true, target: {kind: HTTPRoute, name: api}, patchClusters: {enabled: true}}", "envoyGateway.patchClusters.gateway is required"},
		{"envoyGateway: {enabled: true, patchClusters: {enabled: true}}\ngrpcTLS: {secretName: tls}", "cannot be used with grpcTLS.secretName"},
	} {
		if _, _, err := render(t, c.vals); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", c.vals, err, c.want)
		}
	}
	if objs, _, err := render(t, "envoyGateway: {enabled: true}"); err != nil || len(objs["EnvoyPatchPolicy"]) != 0 {
		t.Errorf("patchClusters off: %d EnvoyPatchPolicies, %v", len(objs["EnvoyPatchPolicy"]), err)
	}
}

func keys(m map[string]patchedCluster) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
