package migrate

import (
	"slices"
	"strings"
	"testing"
)

// HTTPRoutes of the controller: plugins by ExtensionRef filters on their
// rules' routes, one by annotation on every route of an HTTPRoute, a
// Service's plugin on its Kong service; matches grouped by method and
// headers; a rule without matches (its hostnames alone).
const kongHTTPRouteStream = `apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: per-key, namespace: shop}
plugin: rate-limiting
config: {second: 5, limit_by: header, header_name: x-api-key}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: writes, namespace: shop}
plugin: rate-limiting
config: {minute: 10, limit_by: ip}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: per-ip, namespace: shop}
plugin: rate-limiting
config: {hour: 1000, limit_by: ip}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api, namespace: shop}
spec:
  parentRefs: [{name: kong}]
  hostnames: [api.example.com]
  rules:
  - matches:
    - path: {type: PathPrefix, value: /v1}
    - path: {type: Exact, value: /health}
    - path: {type: PathPrefix, value: /v1}
      method: POST
      headers: [{name: X-Tenant, value: "acme"}]
    filters:
    - type: ExtensionRef
      extensionRef: {group: configuration.konghq.com, kind: KongPlugin, name: per-key}
    backendRefs: [{name: api, port: 80}]
  - matches:
    - path: {type: RegularExpression, value: "/orders/[0-9]+"}
      method: DELETE
    filters:
    - type: ExtensionRef
      extensionRef: {group: configuration.konghq.com, kind: KongPlugin, name: writes}
    backendRefs: [{name: orders, port: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop, annotations: {konghq.com/plugins: per-key}}
spec:
  hostnames: [www.example.com]
  rules:
  - backendRefs: [{name: web, port: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop, annotations: {konghq.com/plugins: per-ip}}
spec: {ports: [{port: 8080}]}
`

// The kong.yaml the controller makes of kongHTTPRouteStream.
const kongHTTPRouteDeclarative = `_format_version: "3.0"
services:
- name: shop.api.80
  routes:
  - name: httproute.shop.api.0.0
    hosts: [api.example.com]
    paths: ["~/v1$", /v1/, "~/health$"]
    plugins: [{name: rate-limiting, config: {second: 5, limit_by: header, header_name: x-api-key}}]
  - name: httproute.shop.api.0.2
    hosts: [api.example.com]
    paths: ["~/v1$", /v1/]
    methods: [POST]
    headers: {x-tenant: [acme]}
    plugins: [{name: rate-limiting, config: {second: 5, limit_by: header, header_name: x-api-key}}]
- name: shop.orders.8080
  routes:
  - name: httproute.shop.api.1.0
    hosts: [api.example.com]
    paths: ["~/orders/[0-9]+"]
    methods: [DELETE]
    plugins: [{name: rate-limiting, config: {minute: 10, limit_by: ip}}]
- name: shop.web.8080
  plugins: [{name: rate-limiting, config: {hour: 1000, limit_by: ip}}]
  routes:
  - name: httproute.shop.web.0.0
    hosts: [www.example.com]
    plugins: [{name: rate-limiting, config: {second: 5, limit_by: header, header_name: x-api-key}}]
`

// With HTTPRoutes in the input, each plugin applies where the controller
// attaches it: the conversion is that of the kong.yaml the controller
// makes.
func TestKongPluginsApplyWhereTheHTTPRoutesAttachThem(t *testing.T) {
	kube, err := Kong([]byte(kongHTTPRouteStream), KongOptions{})
	if err != nil {
		t.Fatal(err)
	}
	decl, err := Kong([]byte(kongHTTPRouteDeclarative), KongOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(kube.Policy) != string(decl.Policy) {
		t.Errorf("the objects convert to\n%s\nthe controller's kong.yaml to\n%s", kube.Policy, decl.Policy)
	}
	cfg, _ := kongConvert(t, kongHTTPRouteStream, KongOptions{})
	for _, c := range []struct {
		method, host, path string
		headers            []string
		want               map[string]string // period -> the prefix of the rule that applies
	}{
		{"GET", "api.example.com", "/v1/items", nil, map[string]string{"second": "httproute.shop.api.0.0"}},
		{"GET", "api.example.com", "/health", nil, map[string]string{"second": "httproute.shop.api.0.0"}},
		{"POST", "api.example.com", "/v1/items", []string{"x-tenant", "acme"}, map[string]string{"second": "httproute.shop.api.0.2"}},
		{"DELETE", "api.example.com", "/orders/42", nil, map[string]string{"minute": "httproute.shop.api.1.0"}},
		// The route's own plugin wins over its service's, as in Kong.
		{"GET", "www.example.com", "/anything", []string{"x-api-key", "k"}, map[string]string{"second": "httproute.shop.web.0.0", "hour": "httproute.shop.web.0.0"}},
	} {
		req := kongRequest(c.host, c.path, c.headers...)
		req.Method = c.method
		got := applied(cfg, req)
		for period, rule := range c.want {
			if !strings.HasPrefix(got[period], rule) {
				t.Errorf("%s %s%s: policy %s applies %q, want %q (all: %v)", c.method, c.host, c.path, period, got[period], rule, got)
			}
		}
	}
}

func TestTheControllersPathsOfAnHTTPRouteMatch(t *testing.T) {
	val := func(s string) *string { return &s }
	for _, c := range []struct {
		typ   string
		value *string
		want  []string
	}{
		{"PathPrefix", val("/v1"), []string{"~/v1$", "/v1/"}},
		{"PathPrefix", val("/v1/"), []string{"~/v1/$", "/v1/"}},
		{"", nil, []string{"~/$", "/"}},
		{"Exact", val("/health"), []string{"~/health$"}},
		{"RegularExpression", val("/a/[0-9]+"), []string{"~/a/[0-9]+"}},
	} {
		m := kubeHTTPRouteMatch{}
		m.Path = &struct {
			Type  string  `yaml:"type"`
			Value *string `yaml:"value"`
		}{c.typ, c.value}
		if got := httpRoutePaths(m); !slices.Equal(got, c.want) {
			t.Errorf("%s %v: %q, want %q", c.typ, c.value, got, c.want)
		}
	}
	if got := httpRoutePaths(kubeHTTPRouteMatch{}); !slices.Equal(got, []string{"~/$", "/"}) {
		t.Errorf("no path: %q", got)
	}
}

func TestKongHTTPRouteNotes(t *testing.T) {
	stream := strings.Replace(kongHTTPRouteStream, "      headers: [{name: X-Tenant, value: \"acme\"}]", "      queryParams: [{name: page, value: \"1\"}]", 1)
	stream = strings.Replace(stream, "name: writes}", "name: absent}", 1)
	res, err := Kong([]byte(stream), KongOptions{})
	if err != nil {
		t.Fatal(err)
	}
	notesContain(t, res.Notes,
		"HTTPRoute shop/api: spec.rules[0].matches[2] matches query parameters, which Kong's routes (and so the converted rules) do not: the rules apply whatever the query",
		"HTTPRoute shop/api: spec.rules[1].filters[0] names KongPlugin absent, which the input does not have")
}
