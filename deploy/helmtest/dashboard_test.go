package helmtest

import (
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// adminEnvOf renders vals and returns the admin container's environment
// with the objects.
func adminEnvOf(t *testing.T, vals string) (map[string][]map[string]any, map[string]string) {
	t.Helper()
	objs, _, err := render(t, vals)
	if err != nil {
		t.Fatal(err)
	}
	d := decode[appsv1.Deployment](t, objs["Deployment"][0])
	return objs, envOf(d.Spec.Template.Spec.Containers[0])
}

// servicePort returns the chart's Service name and the port named name.
func servicePort(t *testing.T, objs map[string][]map[string]any, name string) (string, int32) {
	t.Helper()
	svc := decode[corev1.Service](t, objs["Service"][0])
	for _, p := range svc.Spec.Ports {
		if p.Name == name {
			return svc.Name, p.Port
		}
	}
	t.Fatalf("the Service %s has no port %s", svc.Name, name)
	return "", 0
}

// An Ingress sends every path of its host to the Service's http port, with
// the class, annotations and TLS Secret given; the admin marks its login
// cookie Secure and reads the client's address from the proxies named.
func TestChartExposesTheDashboardThroughAnIngress(t *testing.T) {
	objs, env := adminEnvOf(t, `
ingress:
  enabled: true
  className: nginx
  annotations: {cert-manager.io/cluster-issuer: letsencrypt}
  host: sluice.example.com
  tlsSecretName: sluice-dashboard-tls
trustedProxies: [10.0.0.0/8, 192.0.2.7, "2001:db8::/32"]
`)
	if len(objs["Ingress"]) != 1 || len(objs["HTTPRoute"]) != 0 {
		t.Fatalf("%d Ingresses and %d HTTPRoutes, want 1 and 0", len(objs["Ingress"]), len(objs["HTTPRoute"]))
	}
	ing := decode[networkingv1.Ingress](t, objs["Ingress"][0])
	svcName, _ := servicePort(t, objs, "http")
	if ing.Name != svcName || ing.Labels["app.kubernetes.io/instance"] != "sluice" {
		t.Errorf("the Ingress %s, labels %v; want it named as the Service %s, with the chart's labels", ing.Name, ing.Labels, svcName)
	}
	if ing.Annotations["cert-manager.io/cluster-issuer"] != "letsencrypt" {
		t.Errorf("annotations %v", ing.Annotations)
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
		t.Errorf("ingressClassName %v, want nginx", ing.Spec.IngressClassName)
	}
	if want := []networkingv1.IngressTLS{{Hosts: []string{"sluice.example.com"}, SecretName: "sluice-dashboard-tls"}}; !reflect.DeepEqual(ing.Spec.TLS, want) {
		t.Errorf("tls %+v, want %+v", ing.Spec.TLS, want)
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "sluice.example.com" || ing.Spec.Rules[0].HTTP == nil || len(ing.Spec.Rules[0].HTTP.Paths) != 1 {
		t.Fatalf("rules %+v, want one for sluice.example.com with one path", ing.Spec.Rules)
	}
	p := ing.Spec.Rules[0].HTTP.Paths[0]
	if p.Path != "/" || p.PathType == nil || *p.PathType != networkingv1.PathTypePrefix {
		t.Errorf("path %q (%v), want / Prefix", p.Path, p.PathType)
	}
	if b := p.Backend.Service; b == nil || b.Name != svcName || b.Port.Name != "http" || b.Port.Number != 0 {
		t.Errorf("backend %+v, want the Service %s's port named http", p.Backend, svcName)
	}
	if env["SLUICE_ADMIN_SECURE_COOKIES"] != "true" {
		t.Errorf("SLUICE_ADMIN_SECURE_COOKIES %q, want true behind the Ingress", env["SLUICE_ADMIN_SECURE_COOKIES"])
	}
	if got := env["SLUICE_TRUSTED_PROXIES"]; got != "10.0.0.0/8,192.0.2.7,2001:db8::/32" {
		t.Errorf("SLUICE_TRUSTED_PROXIES %q", got)
	}

	// No class, no TLS Secret, plain HTTP: neither is written, nor Secure.
	objs, env = adminEnvOf(t, "ingress: {enabled: true, host: sluice.test}\nsecureCookies: false\n")
	ing = decode[networkingv1.Ingress](t, objs["Ingress"][0])
	if ing.Spec.IngressClassName != nil || ing.Spec.TLS != nil || len(ing.Annotations) != 0 || ing.Spec.Rules[0].Host != "sluice.test" {
		t.Errorf("class %v, tls %+v, annotations %v, host %q; want none but the host sluice.test", ing.Spec.IngressClassName, ing.Spec.TLS, ing.Annotations, ing.Spec.Rules[0].Host)
	}
	for _, name := range []string{"SLUICE_ADMIN_SECURE_COOKIES", "SLUICE_TRUSTED_PROXIES"} {
		if v, ok := env[name]; ok {
			t.Errorf("%s=%q with secureCookies: false and no trustedProxies", name, v)
		}
	}
}

// An HTTPRoute attaches to the Gateways named, for the hostnames given, and
// sends every path to the Service's http port by number.
func TestChartExposesTheDashboardThroughAnHTTPRoute(t *testing.T) {
	objs, env := adminEnvOf(t, `
service: {httpPort: 8080}
httpRoute:
  enabled: true
  annotations: {example.com/owner: platform}
  parentRefs:
    - {name: public, namespace: gateways, sectionName: https}
  hostnames: [sluice.example.com, "*.ops.example.com"]
`)
	if len(objs["HTTPRoute"]) != 1 || len(objs["Ingress"]) != 0 {
		t.Fatalf("%d HTTPRoutes and %d Ingresses, want 1 and 0", len(objs["HTTPRoute"]), len(objs["Ingress"]))
	}
	r := decode[gatewayv1.HTTPRoute](t, objs["HTTPRoute"][0])
	svcName, svcPort := servicePort(t, objs, "http")
	if r.Name != svcName || r.Labels["app.kubernetes.io/instance"] != "sluice" || r.Annotations["example.com/owner"] != "platform" {
		t.Errorf("the HTTPRoute %s, labels %v, annotations %v", r.Name, r.Labels, r.Annotations)
	}
	if len(r.Spec.ParentRefs) != 1 {
		t.Fatalf("parentRefs %+v, want one", r.Spec.ParentRefs)
	}
	ref := r.Spec.ParentRefs[0]
	if ref.Name != "public" || ref.Namespace == nil || *ref.Namespace != "gateways" || ref.SectionName == nil || *ref.SectionName != "https" || ref.Port != nil {
		t.Errorf("parentRef %+v, want public in gateways, listener https", ref)
	}
	if want := []gatewayv1.Hostname{"sluice.example.com", "*.ops.example.com"}; !reflect.DeepEqual(r.Spec.Hostnames, want) {
		t.Errorf("hostnames %v, want %v", r.Spec.Hostnames, want)
	}
	if len(r.Spec.Rules) != 1 || len(r.Spec.Rules[0].Matches) != 1 || len(r.Spec.Rules[0].BackendRefs) != 1 {
		t.Fatalf("rules %+v, want one with one match and one backend", r.Spec.Rules)
	}
	m := r.Spec.Rules[0].Matches[0].Path
	if m == nil || m.Type == nil || *m.Type != gatewayv1.PathMatchPathPrefix || m.Value == nil || *m.Value != "/" {
		t.Errorf("match %+v, want PathPrefix /", m)
	}
	b := r.Spec.Rules[0].BackendRefs[0].BackendObjectReference
	if svcPort != 8080 || b.Name != gatewayv1.ObjectName(svcName) || b.Port == nil || *b.Port != gatewayv1.PortNumber(svcPort) ||
		(b.Kind != nil && *b.Kind != "Service") || b.Namespace != nil {
		t.Errorf("backend %+v, want the Service %s on its http port %d", b, svcName, svcPort)
	}
	if env["SLUICE_ADMIN_SECURE_COOKIES"] != "true" {
		t.Errorf("SLUICE_ADMIN_SECURE_COOKIES %q, want true behind the HTTPRoute", env["SLUICE_ADMIN_SECURE_COOKIES"])
	}
	if v, ok := env["SLUICE_TRUSTED_PROXIES"]; ok {
		t.Errorf("SLUICE_TRUSTED_PROXIES=%q without trustedProxies", v)
	}

	// Without hostnames the route takes the listener's.
	objs, _ = adminEnvOf(t, "httpRoute: {enabled: true, parentRefs: [{name: public}]}\n")
	if r := decode[gatewayv1.HTTPRoute](t, objs["HTTPRoute"][0]); r.Spec.Hostnames != nil || r.Spec.ParentRefs[0].Namespace != nil {
		t.Errorf("hostnames %v, parentRef namespace %v; want neither", r.Spec.Hostnames, r.Spec.ParentRefs[0].Namespace)
	}
}

// By default the admin stays inside the cluster: no Ingress, no HTTPRoute,
// and its cookies follow the connection (secureCookies alone changes
// nothing).
func TestChartExposesNothingByDefault(t *testing.T) {
	for _, vals := range []string{"", "secureCookies: true\ningress: {host: sluice.example.com}\nhttpRoute: {parentRefs: [{name: public}]}\n"} {
		objs, env := adminEnvOf(t, vals)
		if n := len(objs["Ingress"]) + len(objs["HTTPRoute"]); n != 0 {
			t.Errorf("%q: %d Ingresses and HTTPRoutes, want none", vals, n)
		}
		for _, name := range []string{"SLUICE_ADMIN_SECURE_COOKIES", "SLUICE_TRUSTED_PROXIES"} {
			if v, ok := env[name]; ok {
				t.Errorf("%q: %s=%q", vals, name, v)
			}
		}
	}
}

// Turned on without an address to answer at, or with values that are not
// addresses, the chart refuses, naming the value.
func TestChartRefusesToExposeTheDashboardWithoutAnAddress(t *testing.T) {
	for _, tc := range []struct{ vals, want string }{
		{`ingress: {enabled: true}`, "ingress.host is required"},
		{`ingress: {enabled: true, className: nginx, tlsSecretName: tls}`, "ingress.host is required"},
		{`httpRoute: {enabled: true}`, "httpRoute.parentRefs is required"},
		{`httpRoute: {enabled: true, parentRefs: [], hostnames: [sluice.example.com]}`, "httpRoute.parentRefs is required"},
		{`ingress: {enabled: true, host: "https://sluice.example.com"}`, "host"},
		{`ingress: {enabled: true, host: sluice.example.com, path: /ui}`, "path"},
		{`httpRoute: {enabled: true, parentRefs: [{gateway: public}]}`, "parentRefs"},
		{`httpRoute: {enabled: true, parentRefs: [public]}`, "parentRefs"},
		{`httpRoute: {enabled: true, parentRefs: [{name: public}], hostnames: [Sluice_Example]}`, "hostnames"},
		{`trustedProxies: [proxy.local]`, "trustedProxies"},
		{`trustedProxies: 10.0.0.0/8`, "trustedProxies"},
		{`secureCookies: "yes"`, "secureCookies"},
	} {
		_, _, err := render(t, tc.vals)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.vals, err, tc.want)
		}
	}
}
