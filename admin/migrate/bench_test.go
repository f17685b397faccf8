package migrate

import (
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
)

// BenchmarkConvert converts a large configuration of each source, as the
// admin's conversion page does while the user waits: a thousand
// per-customer values, hundreds of routes, locations, services or
// Ingresses.
func BenchmarkConvert(b *testing.B) {
	for _, c := range []struct {
		name string
		in   Input
	}{
		{"envoy-ratelimit-1000-values", Input{Config: ratelimitTable(1000), RateLimits: []byte("- actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]\n"), Scope: "local"}},
		{"envoy-ratelimit-1000-values-stream-done", Input{Config: ratelimitTable(1000), RateLimits: []byte(streamDonePair), Scope: "local"}},
		{"envoy-local-ratelimit-300-routes", Input{From: "envoy-local-ratelimit", Config: envoyRoutes(300)}},
		{"ingress-nginx-300-ingresses", Input{From: "ingress-nginx", Config: ingresses(300)}},
		{"nginx-300-locations", Input{From: "nginx", Config: nginxLocations(300)}},
		{"nginx-300-locations-in-300-files", nginxSplit(300)},
		{"kong-300-routes", Input{From: "kong", Config: kongRoutes(300)}},
		{"kong-300-ingresses", Input{From: "kong", Config: kongIngresses(300)}},
		{"kong-300-httproutes", Input{From: "kong", Config: kongHTTPRoutes(300)}},
		{"higress-1000-keys", Input{From: "higress", Config: higressKeys(1000), Scope: "local"}},
		{"envoy-gateway-300-httproutes", Input{From: "envoy-gateway", Config: envoyGatewayRoutes(300)}},
	} {
		b.Run(c.name, func(b *testing.B) {
			if _, err := Convert(c.in); err != nil {
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := Convert(c.in); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// streamDonePair is Envoy AI Gateway's pair of rate_limits entries on the
// descriptors of ratelimitTable: the tokens of each call, counted when the
// stream is done.
const streamDonePair = `- actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]
  hits_addend: {number: 0}
- actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]
  apply_on_stream_done: true
  hits_addend: {format: '%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%'}
`

func ratelimitTable(n int) []byte {
	var sb strings.Builder
	sb.WriteString("domain: edge\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 60}\n")
	for i := range n {
		fmt.Fprintf(&sb, "  - key: api_key\n    value: customer-%d\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", i, 100+i)
	}
	return []byte(sb.String())
}

func envoyRoutes(n int) []byte {
	var sb strings.Builder
	sb.WriteString(`static_resources:
  listeners:
  - name: ingress
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          route_config:
            virtual_hosts:
            - name: backend
              domains: ["*"]
              routes:
`)
	for i := range n {
		fmt.Fprintf(&sb, `              - name: svc-%d
                match: {prefix: /svc-%d/}
                route:
                  cluster: svc
                  rate_limits: [{actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]}]
                typed_per_filter_config:
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: svc_%d
                    token_bucket: {max_tokens: 100, tokens_per_fill: 50, fill_interval: 1s}
                    filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
                    filter_enforced: {default_value: {numerator: 100, denominator: HUNDRED}}
                    descriptors:
                    - entries: [{key: api_key}]
                      token_bucket: {max_tokens: 10, tokens_per_fill: 5, fill_interval: 1s}
`, i, i, i)
	}
	sb.WriteString(`          http_filters:
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: http_local_rate_limiter
              token_bucket: {max_tokens: 200, tokens_per_fill: 100, fill_interval: 1s}
              filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
              filter_enforced: {default_value: {numerator: 100, denominator: HUNDRED}}
`)
	return []byte(sb.String())
}

func ingresses(n int) []byte {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, `---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: app-%d
  namespace: web
  annotations: {nginx.ingress.kubernetes.io/limit-rps: "%d", nginx.ingress.kubernetes.io/limit-connections: "20"}
spec:
  rules: [{host: app-%d.example.com, http: {paths: [{path: /api, pathType: Prefix}]}}]
`, i, 5+i%10, i)
	}
	return []byte(sb.String())
}

func nginxLocations(n int) []byte {
	var sb strings.Builder
	sb.WriteString("limit_req_zone $binary_remote_addr zone=perip:10m rate=10r/s;\nlimit_req_zone $http_x_api_key zone=key:10m rate=50r/s;\n" +
		"limit_req zone=perip burst=20 nodelay;\nserver {\n  server_name example.com;\n  location = /health { }\n  location ~* \\.(css|js)$ { }\n")
	for i := range n {
		if i%2 == 0 {
			fmt.Fprintf(&sb, "  location /svc-%d/ { limit_req zone=key burst=100 nodelay; }\n", i)
		} else {
			fmt.Fprintf(&sb, "  location /svc-%d/ { proxy_pass http://svc; }\n", i)
		}
	}
	sb.WriteString("}\n")
	return []byte(sb.String())
}

// nginxSplit is nginxLocations(n) with its zones in a file of their own
// and each location in its own file, included.
func nginxSplit(n int) Input {
	files := fstest.MapFS{"conf.d/zones.conf": {Data: []byte("limit_req_zone $binary_remote_addr zone=perip:10m rate=10r/s;\n" +
		"limit_req_zone $http_x_api_key zone=key:10m rate=50r/s;\n")}}
	for i := range n {
		loc := fmt.Sprintf("location /svc-%d/ { proxy_pass http://svc; }\n", i)
		if i%2 == 0 {
			loc = fmt.Sprintf("location /svc-%d/ { limit_req zone=key burst=100 nodelay; }\n", i)
		}
		files[fmt.Sprintf("locations/svc-%03d.conf", i)] = &fstest.MapFile{Data: []byte(loc)}
	}
	conf := "include /etc/nginx/conf.d/*.conf;\nlimit_req zone=perip burst=20 nodelay;\nserver {\n  server_name example.com;\n" +
		"  location = /health { }\n  location ~* \\.(css|js)$ { }\n  include locations/*.conf;\n}\n"
	return Input{From: "nginx", Config: []byte(conf), Files: files}
}

// kongIngresses is n Ingresses of the Kong Ingress Controller, each with
// its own KongPlugin, and a global one.
func kongIngresses(n int) []byte {
	var sb strings.Builder
	sb.WriteString("apiVersion: configuration.konghq.com/v1\nkind: KongClusterPlugin\nmetadata: {name: all, labels: {global: \"true\"}}\n" +
		"plugin: rate-limiting\nconfig: {minute: 600, limit_by: ip}\n")
	for i := range n {
		fmt.Fprintf(&sb, "---\nkind: KongPlugin\nmetadata: {name: rl-%d, namespace: shop}\nplugin: rate-limiting\n"+
			"config: {second: 5, hour: 1000, limit_by: header, header_name: x-api-key}\n"+
			"---\nkind: Ingress\nmetadata: {name: svc-%d, namespace: shop, annotations: {konghq.com/plugins: rl-%d}}\n"+
			"spec: {rules: [{host: api.example.com, http: {paths: [{path: /svc-%d, pathType: Prefix, backend: {service: {name: svc-%d, port: {number: 80}}}}]}}]}\n",
			i, i, i, i, i)
	}
	return []byte(sb.String())
}

// kongHTTPRoutes is kongIngresses with HTTPRoutes, their plugins by
// ExtensionRef filters.
func kongHTTPRoutes(n int) []byte {
	var sb strings.Builder
	sb.WriteString("apiVersion: configuration.konghq.com/v1\nkind: KongClusterPlugin\nmetadata: {name: all, labels: {global: \"true\"}}\n" +
		"plugin: rate-limiting\nconfig: {minute: 600, limit_by: ip}\n")
	for i := range n {
		fmt.Fprintf(&sb, "---\nkind: KongPlugin\nmetadata: {name: rl-%d, namespace: shop}\nplugin: rate-limiting\n"+
			"config: {second: 5, hour: 1000, limit_by: header, header_name: x-api-key}\n"+
			"---\nkind: HTTPRoute\nmetadata: {name: svc-%d, namespace: shop}\n"+
			"spec: {hostnames: [api.example.com], rules: [{matches: [{path: {type: PathPrefix, value: /svc-%d}}], "+
			"filters: [{type: ExtensionRef, extensionRef: {group: configuration.konghq.com, kind: KongPlugin, name: rl-%d}}], "+
			"backendRefs: [{name: svc-%d, port: 80}]}]}\n",
			i, i, i, i, i)
	}
	return []byte(sb.String())
}

func kongRoutes(n int) []byte {
	var sb strings.Builder
	sb.WriteString("_format_version: \"3.0\"\nplugins:\n  - {name: rate-limiting, config: {minute: 600, limit_by: ip}}\nservices:\n")
	for i := range n {
		fmt.Fprintf(&sb, "  - name: svc-%d\n    url: http://svc-%d\n    routes:\n      - name: r-%d\n        paths: [/svc-%d]\n"+
			"        plugins: [{name: rate-limiting, config: {second: 5, hour: 1000, limit_by: header, header_name: x-api-key}}]\n", i, i, i, i)
	}
	return []byte(sb.String())
}

func higressKeys(n int) []byte {
	var sb strings.Builder
	sb.WriteString("rule_name: per-key\nrule_items:\n  - limit_by_header: x-api-key\n    limit_keys:\n")
	for i := range n {
		fmt.Fprintf(&sb, "      - {key: key-%d, query_per_minute: %d}\n", i, 100+i)
	}
	return []byte(sb.String())
}

// envoyGatewayRoutes is n HTTPRoutes, each with a BackendTrafficPolicy of
// a local per-key limit and a global per-address one.
func envoyGatewayRoutes(n int) []byte {
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "---\napiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: svc-%d, namespace: shop}\n"+
			"spec: {hostnames: [api.example.com], rules: [{matches: [{path: {type: PathPrefix, value: /svc-%d}}], backendRefs: [{name: svc-%d, port: 80}]}]}\n"+
			"---\napiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: rl-%d, namespace: shop}\n"+
			"spec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: svc-%d}]\n"+
			"  rateLimit:\n    local: {rules: [{clientSelectors: [{headers: [{name: x-api-key, type: Distinct}]}], limit: {requests: 5, unit: Second}}]}\n"+
			"    global: {rules: [{clientSelectors: [{sourceCIDR: {type: Distinct, value: 0.0.0.0/0}}], limit: {requests: 1000, unit: Hour}}]}\n",
			i, i, i, i, i)
	}
	return []byte(sb.String())
}
