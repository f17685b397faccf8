package migrate

import (
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/simulate"
)

// The controller's objects: two plugins, one on an Ingress's routes, one
// on a Service; a plugin nothing attaches; a global cluster plugin; a
// consumer with its key in a Secret and a plugin of its own.
const kongIngressStream = `apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: per-key, namespace: shop}
plugin: rate-limiting
config: {second: 5, minute: 100, limit_by: header, header_name: x-api-key}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: per-ip, namespace: shop}
plugin: rate-limiting
config: {minute: 60, limit_by: ip}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: forgotten, namespace: shop}
plugin: rate-limiting
config: {hour: 1}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: api
  namespace: shop
  annotations: {konghq.com/plugins: "per-key, missing"}
spec:
  ingressClassName: kong
  rules:
  - host: api.example.com
    http:
      paths:
      - {path: /v1, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
      - {path: /health, pathType: Exact, backend: {service: {name: api, port: {number: 80}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: web, namespace: shop}
spec:
  rules:
  - http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 8080}}}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: other, namespace: shop, annotations: {konghq.com/plugins: per-ip}}
spec:
  ingressClassName: nginx
  rules: [{host: other.example.com, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: web, port: {number: 8080}}}}]}}]
---
apiVersion: v1
kind: Service
metadata:
  name: web
  namespace: shop
  annotations: {konghq.com/plugins: per-ip}
spec: {ports: [{port: 8080}]}
`

// The kong.yaml the controller makes of kongIngressStream (its services,
// routes and their paths, plugins where the annotations put them).
const kongIngressDeclarative = `_format_version: "3.0"
services:
- name: shop.api.80
  routes:
  - name: shop.api.00
    hosts: [api.example.com]
    paths: [/v1/, "~/v1$"]
    plugins: [{name: rate-limiting, config: {second: 5, minute: 100, limit_by: header, header_name: x-api-key}}]
  - name: shop.api.01
    hosts: [api.example.com]
    paths: ["~/health$"]
    plugins: [{name: rate-limiting, config: {second: 5, minute: 100, limit_by: header, header_name: x-api-key}}]
- name: shop.web.8080
  plugins: [{name: rate-limiting, config: {minute: 60, limit_by: ip}}]
  routes:
  - name: shop.web.00
    paths: [/]
`

// With the Ingresses and Services in the input, each plugin applies where
// the controller attaches it: the conversion is that of the kong.yaml the
// controller makes.
func TestKongPluginsApplyWhereTheIngressAnnotationsAttachThem(t *testing.T) {
	kube, err := Kong([]byte(kongIngressStream), KongOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decl, err := Kong([]byte(kongIngressDeclarative), KongOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(kube.Policy) != string(decl.Policy) {
		t.Errorf("the objects convert to\n%s\nthe controller's kong.yaml to\n%s", kube.Policy, decl.Policy)
	}
	notesContain(t, kube.Notes,
		"document 3 (KongPlugin shop/forgotten): no Ingress, HTTPRoute, Service or KongConsumer of the input names it in konghq.com/plugins (or an HTTPRoute filter), so the controller attaches it nowhere; not converted",
		"Ingress shop/api: konghq.com/plugins names missing, which the input has no KongPlugin or KongClusterPlugin of",
		"Ingress shop/other: of class nginx, not kong: the Kong Ingress Controller makes no routes of it; left out")
	cfg, _ := kongConvert(t, kongIngressStream, KongOptions{})
	for _, c := range []struct {
		host, path string
		want       map[string]string
	}{
		{"api.example.com", "/v1/items", map[string]string{"second": "shop.api.00", "minute": "shop.api.00"}},
		{"api.example.com", "/v1", map[string]string{"second": "shop.api.00", "minute": "shop.api.00"}},
		{"api.example.com", "/health", map[string]string{"second": "shop.api.01", "minute": "shop.api.01"}},
		{"www.example.com", "/", map[string]string{"minute": "shop.web.8080"}},
	} {
		got := applied(cfg, kongRequest(c.host, c.path))
		for period, rule := range c.want {
			if !strings.HasPrefix(got[period], rule) {
				t.Errorf("%s%s: policy %s applies %q, want a rule of %s (all: %v)", c.host, c.path, period, got[period], rule, got)
			}
		}
	}
}

// A global KongClusterPlugin applies to every request, and a
// KongConsumer's plugin to the keys of its credentials' Secrets.
func TestKongClusterAndConsumerPluginsOfTheController(t *testing.T) {
	stream := kongIngressStream + `---
apiVersion: configuration.konghq.com/v1
kind: KongClusterPlugin
metadata: {name: everyone, labels: {global: "true"}}
plugin: rate-limiting
config: {hour: 10000, limit_by: ip}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: auth, namespace: shop}
plugin: key-auth
config: {key_names: [x-api-key]}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: gold, namespace: shop}
plugin: rate-limiting
config: {hour: 50000}
---
apiVersion: configuration.konghq.com/v1
kind: KongConsumer
metadata:
  name: acme
  namespace: shop
  annotations: {konghq.com/plugins: gold, kubernetes.io/ingress.class: kong}
username: acme
credentials: [acme-key]
---
apiVersion: v1
kind: Secret
metadata: {name: acme-key, namespace: shop, labels: {konghq.com/credential: key-auth}}
stringData: {key: k-acme-1}
`
	stream = strings.Replace(stream, `annotations: {konghq.com/plugins: "per-key, missing"}`, `annotations: {konghq.com/plugins: "per-key, auth"}`, 1)
	cfg, _ := kongConvert(t, stream, KongOptions{})
	// On the api routes, where key-auth runs, acme's own plugin is more
	// specific than the route's; the route's has no hour limit.
	if got := applied(cfg, kongRequest("api.example.com", "/v1/x", "x-api-key", "k-acme-1"))["hour"]; got != "acme-hour" {
		t.Errorf("acme on the api: the hour policy applies %q, want acme's own rule", got)
	}
	if got := applied(cfg, kongRequest("api.example.com", "/v1/x", "x-api-key", "k-other"))["hour"]; got != "shop.api.00-hour" {
		t.Errorf("another key on the api: the hour policy applies %q, want the route's unlimited rule", got)
	}
	// On the web route key-auth does not run: Kong never knows acme there.
	if got := applied(cfg, kongRequest("www.example.com", "/", "x-api-key", "k-acme-1"))["hour"]; got != "shop.web.8080-hour" {
		t.Errorf("acme on the web route: the hour policy applies %q, want the service's unlimited rule", got)
	}
	var hour []string
	for _, p := range cfg.Policies {
		if p.Name == "hour" {
			for _, r := range p.Rules {
				hour = append(hour, r.Name)
			}
		}
	}
	if len(hour) == 0 || hour[len(hour)-1] != "global-hour" {
		t.Errorf("the hour policy's rules %v: the global plugin's should come last", hour)
	}
}

func TestTheControllersPathsOfEachPathType(t *testing.T) {
	for _, c := range []struct {
		path, pathType string
		want           []string
		regexPrefix    string
	}{
		{"/v1/api/packages", "Prefix", []string{"/v1/api/packages/", "~/v1/api/packages$"}, ""},
		{"/v1/api/packages/", "Prefix", []string{"/v1/api/packages/", "~/v1/api/packages$"}, ""},
		{"", "Prefix", []string{"/"}, ""},
		{"/", "Prefix", []string{"/"}, ""},
		{"/v1/api/packages", "Exact", []string{"~/v1/api/packages$"}, ""},
		{"/v1/api/packages/", "Exact", []string{"~/v1/api/packages/$"}, ""},
		{"", "Exact", []string{"~/$"}, ""},
		{"/asdf$", "ImplementationSpecific", []string{"/asdf$"}, ""},
		{"/~/v1/[0-9]+", "ImplementationSpecific", []string{"~/v1/[0-9]+"}, ""},
		{"", "", []string{"/"}, ""},
		{"##/v1/[0-9]+", "ImplementationSpecific", []string{"~/v1/[0-9]+"}, "##"}, // konghq.com/regex-prefix
		{"/~/v1", "ImplementationSpecific", []string{"/~/v1"}, "##"},
	} {
		if c.regexPrefix == "" {
			c.regexPrefix = kicRegexPrefix
		}
		if got := kicPaths(c.path, c.pathType, c.regexPrefix); !slices.Equal(got, c.want) {
			t.Errorf("%q %s: %q, want %q", c.path, c.pathType, got, c.want)
		}
	}
}

// kongRequest is a request to host and path with headers as name, value
// pairs.
func kongRequest(host, path string, headers ...string) simulate.Request {
	h := map[string]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		h[headers[i]] = headers[i+1]
	}
	return simulate.Request{Host: host, Path: path, Headers: h}
}

// A credential Secret names its type by label or, in older controllers,
// in its data; its key may be base64 data.
func TestKongCredentialSecrets(t *testing.T) {
	stream := "kind: Secret\nmetadata: {name: s}\ndata: {kongCredType: a2V5LWF1dGg=, key: ay0x}\n"
	var o kongKubeObject
	if err := yamlDecode(stream, &o); err != nil {
		t.Fatal(err)
	}
	if kind, key, err := o.credential(); kind != "key-auth" || key != "k-1" || err != nil {
		t.Errorf("got %q %q %v, want key-auth k-1", kind, key, err)
	}
	o.Data["key"] = "not base64!"
	if _, _, err := o.credential(); err == nil || !strings.Contains(err.Error(), "data.key is not base64") {
		t.Errorf("a key that is not base64: %v", err)
	}
}

func yamlDecode(doc string, v any) error { return yaml.Unmarshal([]byte(doc), v) }
