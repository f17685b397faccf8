package helmtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/yaml"
)

// TestChartMonitoringScrapesEveryReplicaAndShipsTheAlertsAndDashboard: with
// the Prometheus Operator's objects and the Grafana dashboard turned on,
// the chart renders a ServiceMonitor on the admins' metrics port, the rules
// file as a PrometheusRule, and the dashboard in a ConfigMap Grafana's
// sidecar picks up, each exactly as in files/.
func TestChartMonitoringScrapesEveryReplicaAndShipsTheAlertsAndDashboard(t *testing.T) {
	objs, _, err := render(t, `
metrics:
  port: 9191
  peers: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
  serviceMonitor: {enabled: true, interval: 15s, labels: {release: kube-prometheus-stack}}
  prometheusRule: {enabled: true, labels: {release: kube-prometheus-stack}}
  grafanaDashboard: {enabled: true, namespace: grafana, annotations: {grafana_folder: Sluice}}
`)
	if err != nil {
		t.Fatal(err)
	}
	c := decode[appsv1.Deployment](t, objs["Deployment"][0]).Spec.Template.Spec.Containers[0]
	if env := envOf(c); env["SLUICE_METRICS_LISTEN"] != "0.0.0.0:9191" {
		t.Errorf("SLUICE_METRICS_LISTEN %q, want 0.0.0.0:9191", env["SLUICE_METRICS_LISTEN"])
	}
	if !hasPort(c.Ports, "metrics", 9191) {
		t.Errorf("container ports %+v, want metrics 9191", c.Ports)
	}
	svc := decode[corev1.Service](t, objs["Service"][0])
	var metricsPort *corev1.ServicePort
	for i, p := range svc.Spec.Ports {
		if p.Name == "metrics" {
			metricsPort = &svc.Spec.Ports[i]
		}
	}
	if metricsPort == nil || metricsPort.Port != 9191 || metricsPort.TargetPort.StrVal != "metrics" {
		t.Errorf("service ports %+v, want metrics 9191", svc.Spec.Ports)
	}
	np := decode[networkingv1.NetworkPolicy](t, objs["NetworkPolicy"][0])
	scrapers := 0
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port.StrVal == "metrics" {
				scrapers += len(rule.From)
				if len(rule.From) != 1 || rule.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
					t.Errorf("metrics port open to %+v, want the monitoring namespace", rule.From)
				}
			}
		}
	}
	if scrapers == 0 {
		t.Error("the NetworkPolicy lets nobody scrape the metrics port")
	}

	sm := decode[monitoringv1.ServiceMonitor](t, objs["ServiceMonitor"][0])
	if sm.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v, want the release label Prometheus selects", sm.Labels)
	}
	if !reflect.DeepEqual(sm.Spec.Selector.MatchLabels, svc.Spec.Selector) {
		t.Errorf("ServiceMonitor selects %v, the Service is labelled for %v", sm.Spec.Selector.MatchLabels, svc.Spec.Selector)
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("the Service lacks the label %s=%s the ServiceMonitor selects", k, v)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "metrics" || sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].Interval != "15s" {
		t.Errorf("ServiceMonitor endpoints %+v, want port metrics, /metrics every 15s", sm.Spec.Endpoints)
	}

	pr := decode[monitoringv1.PrometheusRule](t, objs["PrometheusRule"][0])
	var file monitoringv1.PrometheusRuleSpec
	raw, err := os.ReadFile(filepath.Join(chartDir, "files", "alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(raw, &file); err != nil {
		t.Fatalf("files/alerts.yaml is not a PrometheusRule spec: %v", err)
	}
	if len(file.Groups) == 0 || len(file.Groups[0].Rules) < 5 {
		t.Fatalf("files/alerts.yaml has %d groups", len(file.Groups))
	}
	if !reflect.DeepEqual(pr.Spec, file) {
		t.Errorf("the PrometheusRule differs from files/alerts.yaml:\n%+v\nwant\n%+v", pr.Spec, file)
	}
	if pr.Labels["release"] != "kube-prometheus-stack" {
		t.Errorf("PrometheusRule labels %v", pr.Labels)
	}

	var dash *corev1.ConfigMap
	for _, m := range objs["ConfigMap"] {
		if cm := decode[corev1.ConfigMap](t, m); strings.HasSuffix(cm.Name, "-dashboard") {
			dash = cm
		}
	}
	if dash == nil {
		t.Fatal("no dashboard ConfigMap")
	}
	if dash.Namespace != "grafana" || dash.Labels["grafana_dashboard"] != "1" || dash.Annotations["grafana_folder"] != "Sluice" {
		t.Errorf("dashboard ConfigMap %s/%s labels %v annotations %v", dash.Namespace, dash.Name, dash.Labels, dash.Annotations)
	}
	rawDash, err := os.ReadFile(filepath.Join(chartDir, "files", "dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal([]byte(dash.Data["sluice.json"]), &got); err != nil {
		t.Fatalf("the ConfigMap's dashboard is not JSON: %v", err)
	}
	json.Unmarshal(rawDash, &want)
	if !reflect.DeepEqual(got, want) {
		t.Error("the ConfigMap's dashboard differs from files/dashboard.json")
	}
}

func TestChartMetricsOffTakesThePortAwayAndRefusesAServiceMonitor(t *testing.T) {
	objs, _, err := render(t, "metrics: {enabled: false}")
	if err != nil {
		t.Fatal(err)
	}
	c := decode[appsv1.Deployment](t, objs["Deployment"][0]).Spec.Template.Spec.Containers[0]
	if _, ok := envOf(c)["SLUICE_METRICS_LISTEN"]; ok || hasPort(c.Ports, "metrics", 9090) {
		t.Errorf("metrics off, yet the admin listens for them: %+v", c)
	}
	if len(decode[corev1.Service](t, objs["Service"][0]).Spec.Ports) != 3 {
		t.Error("metrics off, yet the Service has a metrics port")
	}
	_, _, err = render(t, "metrics: {enabled: false, serviceMonitor: {enabled: true}}")
	if err == nil || !strings.Contains(err.Error(), "metrics.enabled") {
		t.Errorf("a ServiceMonitor without the metrics port: %v, want an error naming metrics.enabled", err)
	}
}

func envOf(c corev1.Container) map[string]string {
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	return env
}

func hasPort(ports []corev1.ContainerPort, name string, port int32) bool {
	for _, p := range ports {
		if p.Name == name && p.ContainerPort == port {
			return true
		}
	}
	return false
}
