// Package helmtest checks the Helm chart in deploy/helm/sluice: it lints
// and renders it with Helm's own library for several value sets and
// decodes every object strictly (unknown fields fail) with the types of
// the API it belongs to: k8s.io/api, the Gateway API's, istio.io/api, and
// Envoy Gateway's CRD schema.
package helmtest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	extensions "istio.io/api/extensions/v1alpha1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/sluice-rl/sluice/admin/envoygateway/crdcheck"
	"github.com/sluice-rl/sluice/admin/istio/istiocrd"
	"github.com/sluice-rl/sluice/shared/policy"
)

const chartDir = "../helm/sluice"

var update = flag.Bool("update", false, "rewrite values.schema.json's policy schema from shared/policy")

// render lints the chart with vals (YAML) and renders it as helm template
// does; it returns the objects by kind.
func render(t *testing.T, valsYAML string) (map[string][]map[string]any, string, error) {
	t.Helper()
	vals, err := chartutil.ReadValues([]byte(valsYAML))
	if err != nil {
		t.Fatal(err)
	}
	lint := action.NewLint()
	lint.Namespace = "sluice"
	if res := lint.Run([]string{chartDir}, vals); len(res.Errors) > 0 {
		return nil, "", errorsOf(res)
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(&action.Configuration{})
	inst.DryRun, inst.ClientOnly, inst.Replace = true, true, true
	inst.ReleaseName, inst.Namespace = "sluice", "sluice"
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return nil, "", err
	}
	objs := map[string][]map[string]any{}
	for _, doc := range strings.Split(rel.Manifest, "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatalf("rendered YAML: %v\n%s", err, doc)
		}
		if m == nil {
			continue
		}
		kind, _ := m["kind"].(string)
		objs[kind] = append(objs[kind], m)
		checkStrict(t, kind, []byte(doc))
	}
	return objs, rel.Manifest, nil
}

type lintErrors []error

func (l lintErrors) Error() string {
	var b strings.Builder
	for _, e := range l {
		b.WriteString(e.Error() + "\n")
	}
	return b.String()
}

func errorsOf(r *action.LintResult) error {
	var out lintErrors
	out = append(out, r.Errors...)
	return out
}

// checkStrict decodes one object into its API type, refusing unknown fields.
func checkStrict(t *testing.T, kind string, doc []byte) {
	t.Helper()
	var target any
	switch kind {
	case "Deployment":
		target = &appsv1.Deployment{}
	case "Service":
		target = &corev1.Service{}
	case "Secret":
		target = &corev1.Secret{}
	case "ConfigMap":
		target = &corev1.ConfigMap{}
	case "PersistentVolumeClaim":
		target = &corev1.PersistentVolumeClaim{}
	case "NetworkPolicy":
		target = &networkingv1.NetworkPolicy{}
	case "PodDisruptionBudget":
		target = &policyv1.PodDisruptionBudget{}
	case "Ingress":
		target = &networkingv1.Ingress{}
	case "HTTPRoute":
		target = &gatewayv1.HTTPRoute{}
	case "WasmPlugin":
		var w struct {
			Spec json.RawMessage `json:"spec"`
		}
		j, _ := yaml.YAMLToJSON(doc)
		json.Unmarshal(j, &w)
		if err := (protojson.UnmarshalOptions{}).Unmarshal(w.Spec, &extensions.WasmPlugin{}); err != nil {
			t.Errorf("WasmPlugin spec is not istio.io/api's: %v\n%s", err, doc)
		}
		if err := istiocrd.Check(doc); err != nil {
			t.Errorf("WasmPlugin does not match Istio's CRD: %v\n%s", err, doc)
		}
		return
	case "ServiceMonitor":
		target = &monitoringv1.ServiceMonitor{}
	case "PrometheusRule":
		target = &monitoringv1.PrometheusRule{}
	case "EnvoyExtensionPolicy":
		if err := crdcheck.CheckAgainstCRD(doc); err != nil {
			t.Errorf("EnvoyExtensionPolicy does not match Envoy Gateway's CRD: %v\n%s", err, doc)
		}
		return
	case "EnvoyPatchPolicy":
		checkPatchPolicy(t, doc)
		return
	default:
		t.Errorf("unexpected kind %q", kind)
		return
	}
	if err := yaml.UnmarshalStrict(doc, target); err != nil {
		t.Errorf("%s does not decode strictly into %T: %v\n%s", kind, target, err, doc)
	}
}

func decode[T any](t *testing.T, m map[string]any) *T {
	t.Helper()
	b, _ := json.Marshal(m)
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return &v
}

func TestChartDefaultsRenderTheAdminHardenedAndProbed(t *testing.T) {
	objs, _, err := render(t, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"Deployment", "Service", "Secret", "ConfigMap", "PersistentVolumeClaim", "NetworkPolicy"} {
		if len(objs[k]) != 1 {
			t.Errorf("%d %s objects, want 1", len(objs[k]), k)
		}
	}
	if len(objs["WasmPlugin"])+len(objs["EnvoyExtensionPolicy"])+len(objs["ServiceMonitor"])+len(objs["PrometheusRule"]) != 0 {
		t.Error("integration objects rendered without being enabled")
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	c := d.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %+v %+v, want /healthz", c.ReadinessProbe, c.LivenessProbe)
	}
	sc := c.SecurityContext
	if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || d.Spec.Template.Spec.SecurityContext.RunAsNonRoot == nil || *d.Spec.Template.Spec.SecurityContext.RunAsUser != 65532 {
		t.Errorf("security context %+v / %+v", sc, d.Spec.Template.Spec.SecurityContext)
	}
	if c.Resources.Limits.Memory().IsZero() {
		t.Error("no memory limit")
	}
	if c.Image != "ghcr.io/sluice-rl/ratelimit-admin:latest" {
		t.Errorf("image %s", c.Image)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if r := env["SLUICE_ADMIN_TOKEN"].ValueFrom; r == nil || r.SecretKeyRef.Key != "admin-token" {
		t.Errorf("admin token not from the Secret: %+v", env["SLUICE_ADMIN_TOKEN"])
	}
	if _, ok := env["SLUICE_RLS_LISTEN"]; ok {
		t.Error("fleet mode on by default")
	}
	svc := decode[corev1.Service](t, objs["Service"][0])
	var ports []int32
	for _, p := range svc.Spec.Ports {
		ports = append(ports, p.Port)
	}
	if !reflect.DeepEqual(ports, []int32{9000, 18000, 18081, 9090}) {
		t.Errorf("service ports %v", ports)
	}
	sec := decode[corev1.Secret](t, objs["Secret"][0])
	if len(sec.Data["admin-token"]) < 16 || len(sec.Data["telemetry-token"]) < 16 || bytes.Equal(sec.Data["admin-token"], sec.Data["telemetry-token"]) {
		t.Errorf("generated tokens: %q / %q", sec.Data["admin-token"], sec.Data["telemetry-token"])
	}
	np := decode[networkingv1.NetworkPolicy](t, objs["NetworkPolicy"][0])
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if (p.Port.StrVal == "xds" || p.Port.StrVal == "rls") && len(rule.From) == 0 {
				t.Errorf("port %s open to everyone", p.Port.StrVal)
			}
		}
	}
	cm := decode[corev1.ConfigMap](t, objs["ConfigMap"][0])
	if _, err := policy.Parse([]byte(cm.Data["policy.json"])); err != nil {
		t.Errorf("the initial policy does not parse: %v", err)
	}
}

func TestChartWithIstioAndFleetMode(t *testing.T) {
	objs, _, err := render(t, `
auth: {existingSecret: sluice-tokens}
persistence: {existingClaim: sluice-pvc}
fleet: {enabled: true, redis: {addrs: "redis.sluice:6379", passwordSecret: {name: redis, key: pw}}}
istio: {enabled: true, selector: {istio: ingressgateway}}
wasmImage: {repository: registry.example.com/sluice/ratelimit-wasm, tag: v1.2.3, sha256: "`+strings.Repeat("ab", 32)+`"}
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs["Secret"]) != 0 || len(objs["PersistentVolumeClaim"]) != 0 {
		t.Error("a Secret or PVC rendered although existing ones were named")
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	env := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	if env["SLUICE_REDIS_ADDRS"].Value != "redis.sluice:6379" || env["SLUICE_RLS_LISTEN"].Value == "" {
		t.Errorf("fleet env %+v", env)
	}
	// The password is a file from the Secret, so that a rotation reaches
	// the admin without a restart.
	if mount := mountOf(t, d, "redis"); mount == "" || env["SLUICE_REDIS_PASSWORD_FILE"].Value != mount+"/password" {
		t.Errorf("SLUICE_REDIS_PASSWORD_FILE %q, the Secret mounted at %q", env["SLUICE_REDIS_PASSWORD_FILE"].Value, mount)
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName == "redis" && (len(v.Secret.Items) != 1 || v.Secret.Items[0].Key != "pw" || v.Secret.Items[0].Path != "password") {
			t.Errorf("the password Secret's items %+v, want the key pw as the file password", v.Secret.Items)
		}
	}
	if env["SLUICE_ADMIN_TOKEN"].ValueFrom.SecretKeyRef.Name != "sluice-tokens" {
		t.Error("the existing Secret is not used")
	}
	if d.Spec.Template.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "sluice-pvc" {
		t.Error("the existing claim is not used")
	}
	wp := objs["WasmPlugin"][0]
	spec, _ := json.Marshal(wp["spec"])
	var plugin extensions.WasmPlugin
	if err := protojson.Unmarshal(spec, &plugin); err != nil {
		t.Fatal(err)
	}
	if plugin.GetUrl() != "oci://registry.example.com/sluice/ratelimit-wasm:v1.2.3" || plugin.GetSha256() != strings.Repeat("ab", 32) ||
		plugin.GetPhase() != extensions.PluginPhase_AUTHZ || plugin.GetSelector().GetMatchLabels()["istio"] != "ingressgateway" {
		t.Errorf("WasmPlugin %v", &plugin)
	}
	pc, _ := protojson.Marshal(plugin.GetPluginConfig())
	if _, err := policy.Parse(pc); err != nil {
		t.Errorf("pluginConfig does not parse as a policy: %v\n%s", err, pc)
	}
}

// Replicated admins share the policy store in PostgreSQL, and fleet mode
// keeps its buckets there too: no volume claim, rolling updates, the URLs
// and the password from Secrets (a password, or a pgpass file).
func TestChartWithReplicatedAdminsAndFleetModeOnPostgres(t *testing.T) {
	objs, _, err := render(t, `
replicas: 3
database: {url: "postgres://sluice@db.sluice:5432/sluice?sslmode=require"}
postgres: {passwordSecret: {name: sluice-db, key: password}, passFileSecret: {name: sluice-pgpass, key: pgpass}}
fleet: {enabled: true, backend: postgres, postgres: {url: "postgres://sluice@fleet-db.sluice/fleet"}}
`)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs["PersistentVolumeClaim"]) != 0 {
		t.Error("a volume claim rendered for admins that keep their policies in PostgreSQL")
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("replicas %v, strategy %q; want 3, RollingUpdate", d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	pod := d.Spec.Template.Spec
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e
	}
	if env["SLUICE_DATABASE"].Value != "postgres://sluice@db.sluice:5432/sluice?sslmode=require" ||
		env["SLUICE_POSTGRES_URL"].Value != "postgres://sluice@fleet-db.sluice/fleet" || env["SLUICE_RLS_LISTEN"].Value == "" {
		t.Errorf("database env %+v", env)
	}
	if _, ok := env["SLUICE_REDIS_ADDRS"]; ok {
		t.Error("Redis configured for a PostgreSQL fleet backend")
	}
	if ref := env["PGPASSWORD"].ValueFrom; ref == nil || ref.SecretKeyRef.Name != "sluice-db" || ref.SecretKeyRef.Key != "password" {
		t.Errorf("PGPASSWORD %+v", env["PGPASSWORD"])
	}
	var pgpass *corev1.Volume
	for i, v := range pod.Volumes {
		if v.Name == "data" && v.EmptyDir == nil {
			t.Error("the data volume is not an emptyDir")
		}
		if v.Name == "pgpass" {
			pgpass = &pod.Volumes[i]
		}
	}
	if pgpass == nil || pgpass.Secret.SecretName != "sluice-pgpass" || env["PGPASSFILE"].Value != "/etc/sluice-pgpass/"+pgpass.Secret.Items[0].Path {
		t.Errorf("pgpass volume %+v, PGPASSFILE %q", pgpass, env["PGPASSFILE"].Value)
	}
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.Name == "pgpass" && (strings.HasPrefix(m.MountPath, "/etc/sluice/") || !m.ReadOnly) {
			t.Errorf("pgpass mounted at %s (read-only %v): not inside the policy's read-only mount, and read-only", m.MountPath, m.ReadOnly)
		}
	}
}

func TestChartWithEnvoyGatewayOnAnHTTPRoute(t *testing.T) {
	objs, _, err := render(t, `
persistence: {enabled: false}
envoyGateway: {enabled: true, namespace: apps, target: {kind: HTTPRoute, name: backend}, failOpen: false}
policy:
  mode: enforce
  rules:
    - {name: free, limit_keys: ["header:x-api-key"], algorithm: token_bucket, algorithm_config: {rps: 10, burst: 20}}
`)
	if err != nil {
		t.Fatal(err)
	}
	eep := objs["EnvoyExtensionPolicy"][0]
	if eep["metadata"].(map[string]any)["namespace"] != "apps" {
		t.Errorf("namespace %v", eep["metadata"])
	}
	w := eep["spec"].(map[string]any)["wasm"].([]any)[0].(map[string]any)
	ref := eep["spec"].(map[string]any)["targetRefs"].([]any)[0].(map[string]any)
	if ref["kind"] != "HTTPRoute" || ref["name"] != "backend" || w["failOpen"] != false ||
		w["code"].(map[string]any)["image"].(map[string]any)["url"] != "ghcr.io/sluice-rl/ratelimit-wasm:latest" {
		t.Errorf("EnvoyExtensionPolicy %v", eep)
	}
	cfg, _ := json.Marshal(w["config"])
	if p, err := policy.Parse(cfg); err != nil || len(p.Policies) == 0 {
		t.Errorf("config does not parse as the policy: %v\n%s", err, cfg)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	if d.Spec.Template.Spec.Volumes[0].EmptyDir == nil {
		t.Error("persistence disabled but no emptyDir")
	}
}

func TestChartRefusesBadValuesNamingThem(t *testing.T) {
	for _, tc := range []struct{ vals, want string }{
		{`service: {httpPort: "nine thousand"}`, "httpPort"},
		{`persistence: {enabled: "yes"}`, "enabled"},
		{`envoyGateway: {target: {kind: Service, name: x}}`, "kind"},
		{`policy: {rules: [{name: r, limit_keys: ["ip:address"], algorithm: leaky, algorithm_config: {rps: 1, burst: 1}}]}`, "policy"},
		{`policy: {mode: enforce, rulez: []}`, "policy"},
		{`auth: {adminToken: short}`, "adminToken"},
		{`networkPolicy: {proxyPeers: []}`, "proxyPeers"},
		{`fleet: {enabled: true}`, "fleet.redis.addrs"},
		{`fleet: {enabled: true, backend: postgres}`, "fleet.postgres.url"},
		{`fleet: {enabled: true, backend: mysql}`, "backend"},
		{`fleet: {enabled: true, redis: {addrs: "r:6379", tls: {clientCert: true}}}`, "fleet.redis.tls.clientCert needs fleet.redis.tls.secretName"},
		{`fleet: {enabled: true, redis: {addrs: "r:6379", tls: {enabled: "yes"}}}`, "enabled"},
		{`fleet: {enabled: true, redis: {addrs: "r:6379", tls: {enabled: true, skipNameCheck: true}}}`, "fleet.redis.tls.skipNameCheck needs fleet.redis.tls.secretName"},
		{`replicas: 2`, "database.url"},
		{`replicas: 0`, "replicas"},
		{`database: {url: "mysql://db/sluice"}`, "url"},
	} {
		_, _, err := render(t, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.vals, err, tc.want)
		}
	}
}

// TestValuesSchemaEmbedsThePolicySchema keeps values.schema.json's policy
// schema the one shared/policy publishes (go test -run this -update
// rewrites it).
func TestValuesSchemaEmbedsThePolicySchema(t *testing.T) {
	path := filepath.Join(chartDir, "values.schema.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var vs map[string]any
	if err := json.Unmarshal(raw, &vs); err != nil {
		t.Fatal(err)
	}
	var want any
	json.Unmarshal(policy.JSONSchema(), &want)
	props := vs["properties"].(map[string]any)
	if reflect.DeepEqual(props["policy"], want) {
		return
	}
	if !*update {
		t.Fatalf("values.schema.json's policy schema differs from shared/policy's; run: go test ./deploy/helmtest -run %s -update", t.Name())
	}
	props["policy"] = want
	out, _ := json.MarshalIndent(vs, "", "  ")
	os.WriteFile(path, append(out, '\n'), 0o644)
}
