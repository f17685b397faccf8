package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// localBootstrap is an Envoy bootstrap as a user has one: a listener
// whose connection manager limits every request (100/s, bursts of 200),
// /api with a configuration of its own (500/s for the route, and 10/s per
// API key, a partner's key 200/s), /health unlimited, the rest under the
// listener's limit.
const localBootstrap = `static_resources:
  listeners:
  - name: ingress
    address: {socket_address: {address: 0.0.0.0, port_value: 8080}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress_http
          route_config:
            name: local_route
            virtual_hosts:
            - name: backend
              domains: ["*"]
              routes:
              - match: {prefix: /api}
                route:
                  cluster: api
                  rate_limits:
                  - actions:
                    - request_headers: {header_name: x-api-key, descriptor_key: api_key}
                typed_per_filter_config:
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: api
                    token_bucket: {max_tokens: 1000, tokens_per_fill: 500, fill_interval: 1s}
                    filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
                    filter_enforced: {default_value: {numerator: 100, denominator: HUNDRED}}
                    descriptors:
                    - entries: [{key: api_key}]
                      token_bucket: {max_tokens: 20, tokens_per_fill: 10, fill_interval: 1s}
                    - entries: [{key: api_key, value: partner-7f3a}]
                      token_bucket: {max_tokens: 400, tokens_per_fill: 200, fill_interval: 1s}
              - match: {path: /health}
                route: {cluster: api}
                typed_per_filter_config:
                  envoy.filters.http.local_ratelimit:
                    "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
                    stat_prefix: health
                    token_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 1s}
                    filter_enabled: {default_value: {numerator: 0, denominator: HUNDRED}}
              - match: {prefix: /}
                route: {cluster: web}
          http_filters:
          - name: envoy.filters.http.local_ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              stat_prefix: http_local_rate_limiter
              token_bucket: {max_tokens: 200, tokens_per_fill: 100, fill_interval: 1s}
              filter_enabled:
                runtime_key: local_rate_limit_enabled
                default_value: {numerator: 100, denominator: HUNDRED}
              filter_enforced:
                runtime_key: local_rate_limit_enforced
                default_value: {numerator: 100, denominator: HUNDRED}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: api
    type: STRICT_DNS
    load_assignment:
      cluster_name: api
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: api, port_value: 8000}}}}]}]
`

// localBootstrapPolicy is what the bootstrap converts to.
const localBootstrapPolicy = `{
  "reject_grpc_status": "unavailable",
  "reject_body": "local_rate_limited",
  "policies": [
    {"name": "api-api_key", "rules": [
      {"name": "api-api_key", "mode": "enforce", "match": {"path": {"prefix": "/api"}},
       "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 10, "burst": 20},
       "overrides": [{"key": "partner-7f3a", "algorithm_config": {"tokens_per_second": 200, "burst": 400}}]}]},
    {"name": "api", "rules": [
      {"name": "api", "mode": "enforce", "match": {"path": {"prefix": "/api"}},
       "limit_keys": ["all"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 500, "burst": 1000}}]},
    {"name": "http_local_rate_limiter", "rules": [
      {"name": "api-own-limits", "action": "unlimited", "match": {"path": {"prefix": "/api"}}},
      {"name": "health-unlimited", "action": "unlimited", "match": {"path": "/health"}},
      {"name": "http_local_rate_limiter", "mode": "enforce", "limit_keys": ["all"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 100, "burst": 200}}]}
  ]
}`

// localEnvoyFilter is the same limits written as an Istio EnvoyFilter:
// the filter inserted into the sidecar's inbound connection manager, the
// per-route configurations merged into the routes named api and health.
const localEnvoyFilter = `apiVersion: networking.istio.io/v1alpha3
kind: EnvoyFilter
metadata:
  name: api-local-ratelimit
  namespace: shop
spec:
  workloadSelector:
    labels:
      app: api
  configPatches:
    - applyTo: HTTP_FILTER
      match:
        context: SIDECAR_INBOUND
        listener:
          filterChain:
            filter:
              name: envoy.filters.network.http_connection_manager
      patch:
        operation: INSERT_BEFORE
        value:
          name: envoy.filters.http.local_ratelimit
          typed_config:
            "@type": type.googleapis.com/udpa.type.v1.TypedStruct
            type_url: type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
            value:
              stat_prefix: http_local_rate_limiter
              token_bucket:
                max_tokens: 200
                tokens_per_fill: 100
                fill_interval: 1s
              filter_enabled:
                runtime_key: local_rate_limit_enabled
                default_value: {numerator: 100, denominator: HUNDRED}
              filter_enforced:
                runtime_key: local_rate_limit_enforced
                default_value: {numerator: 100, denominator: HUNDRED}
              response_headers_to_add:
                - append_action: OVERWRITE_IF_EXISTS_OR_ADD
                  header: {key: x-local-rate-limit, value: "true"}
    - applyTo: HTTP_ROUTE
      match:
        context: SIDECAR_INBOUND
        routeConfiguration:
          vhost:
            name: "inbound|http|8080"
            route:
              name: api
      patch:
        operation: MERGE
        value:
          route:
            rate_limits:
              - actions:
                  - request_headers:
                      header_name: x-api-key
                      descriptor_key: api_key
          typed_per_filter_config:
            envoy.filters.http.local_ratelimit:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              value:
                stat_prefix: api
                token_bucket: {max_tokens: 1000, tokens_per_fill: 500, fill_interval: 1s}
                filter_enabled: {default_value: {numerator: 100, denominator: HUNDRED}}
                filter_enforced: {default_value: {numerator: 100, denominator: HUNDRED}}
                descriptors:
                  - entries: [{key: api_key, value: ""}]
                    token_bucket: {max_tokens: 20, tokens_per_fill: 10, fill_interval: 1s}
                  - entries: [{key: api_key, value: partner-7f3a}]
                    token_bucket: {max_tokens: 400, tokens_per_fill: 200, fill_interval: 1s}
    - applyTo: HTTP_ROUTE
      match:
        context: SIDECAR_INBOUND
        routeConfiguration:
          vhost:
            name: "inbound|http|8080"
            route:
              name: health
      patch:
        operation: MERGE
        value:
          typed_per_filter_config:
            envoy.filters.http.local_ratelimit:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
              value:
                stat_prefix: health
                token_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 1s}
                filter_enabled: {default_value: {numerator: 0, denominator: HUNDRED}}
`

// The routes are named, so the rules match them by name and key their
// buckets by route.
const localEnvoyFilterPolicy = `{
  "reject_grpc_status": "unavailable",
  "reject_body": "local_rate_limited",
  "policies": [
    {"name": "api-api_key", "rules": [
      {"name": "api-api_key", "mode": "enforce", "match": {"route": "api"},
       "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 10, "burst": 20},
       "overrides": [{"key": "partner-7f3a", "algorithm_config": {"tokens_per_second": 200, "burst": 400}}]}]},
    {"name": "api", "rules": [
      {"name": "api", "mode": "enforce", "match": {"route": "api"},
       "limit_keys": ["route"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 500, "burst": 1000}}]},
    {"name": "http_local_rate_limiter", "rules": [
      {"name": "api-own-limits", "action": "unlimited", "match": {"route": "api"}},
      {"name": "health-unlimited", "action": "unlimited", "match": {"route": "health"}},
      {"name": "http_local_rate_limiter", "mode": "enforce", "limit_keys": ["all"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 100, "burst": 200}, "reject_headers": {"x-local-rate-limit": "true"}}]}
  ]
}`

// lrConvert converts doc and parses the policy.
func lrConvert(t *testing.T, doc string, opt LocalOptions) (*policy.Config, Result) {
	t.Helper()
	res, err := EnvoyLocalRatelimit([]byte(doc), opt)
	return parsed(t, doc, res, err)
}

func lrSameJSON(t *testing.T, want string, got []byte) {
	t.Helper()
	var w, g any
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the expected JSON: %v", err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(w, g) {
		t.Errorf("want\n%s\ngot\n%s", want, got)
	}
}

// lrLimitedBy lists, for a request, each policy's applying rule as
// "policy/rule", and "policy/rule (unlimited)" or "... (override)".
func lrLimitedBy(cfg *policy.Config, req simulate.Request) []string {
	var out []string
	for _, p := range simulate.Run(cfg, req, simulate.Options{Now: 1e9}).Policies {
		if p.Applied < 0 {
			continue
		}
		r := p.Rules[p.Applied]
		s := p.Name + "/" + r.Name
		switch {
		case r.Action == policy.ActionUnlimited:
			s += " (unlimited)"
		case r.Overridden:
			s += " (override)"
		}
		out = append(out, s)
	}
	return out
}

func TestTheBootstrapsRoutesKeepTheirOwnLimits(t *testing.T) {
	cfg, res := lrConvert(t, localBootstrap, LocalOptions{})
	lrSameJSON(t, localBootstrapPolicy, res.Policy)
	key := func(path, k string) simulate.Request {
		return simulate.Request{Method: "GET", Path: path, Host: "shop.example.com", Headers: map[string]string{"x-api-key": k}, ClientAddress: "203.0.113.7"}
	}
	for _, tc := range []struct {
		req  simulate.Request
		want []string
	}{
		{key("/api/orders", "k1"), []string{"api-api_key/api-api_key", "api/api", "http_local_rate_limiter/api-own-limits (unlimited)"}},
		{key("/api/orders", "partner-7f3a"), []string{"api-api_key/api-api_key (override)", "api/api", "http_local_rate_limiter/api-own-limits (unlimited)"}},
		// Without a key, Envoy builds no descriptor: the route's bucket alone.
		{key("/api/orders", ""), []string{"api/api", "http_local_rate_limiter/api-own-limits (unlimited)"}},
		{key("/health", "k1"), []string{"http_local_rate_limiter/health-unlimited (unlimited)"}},
		{key("/health/deep", "k1"), []string{"http_local_rate_limiter/http_local_rate_limiter"}},
		{key("/", ""), []string{"http_local_rate_limiter/http_local_rate_limiter"}},
	} {
		if got := lrLimitedBy(cfg, tc.req); !slices.Equal(got, tc.want) {
			t.Errorf("%s with key %q: %v, want %v", tc.req.Path, tc.req.Headers["x-api-key"], got, tc.want)
		}
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"routes[1].typed_per_filter_config.envoy.filters.http.local_ratelimit: filter_enabled is 0%",
		"runtime keys local_rate_limit_enabled, local_rate_limit_enforced are not read", "takes nothing from the others"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestTheEnvoyFilterConvertsToRulesMatchingTheRoutesByName(t *testing.T) {
	cfg, res := lrConvert(t, localEnvoyFilter, LocalOptions{})
	lrSameJSON(t, localEnvoyFilterPolicy, res.Policy)
	req := simulate.Request{Method: "GET", Path: "/anything", Host: "api.shop", Route: "health", ClientAddress: "10.0.0.1"}
	if got := lrLimitedBy(cfg, req); !slices.Equal(got, []string{"http_local_rate_limiter/health-unlimited (unlimited)"}) {
		t.Errorf("the health route: %v", got)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"EnvoyFilter shop/api-local-ratelimit applies to the workloads labelled app=api"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestLocalConversionIsDeterministic(t *testing.T) {
	for _, doc := range []string{localBootstrap, localEnvoyFilter} {
		a, err := EnvoyLocalRatelimit([]byte(doc), LocalOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			b, _ := EnvoyLocalRatelimit([]byte(doc), LocalOptions{})
			if !bytes.Equal(a.Policy, b.Policy) || !slices.Equal(a.Notes, b.Notes) {
				t.Fatalf("two conversions differ:\n%s\n%s", a.Policy, b.Policy)
			}
		}
	}
}

// lrHCM wraps http filters and a route configuration in a connection
// manager, the way an LDS resource or a bootstrap holds them.
func lrHCM(filters, routes string) string {
	return "typed_config:\n  \"@type\": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager\n" +
		"  stat_prefix: ingress\n  http_filters:\n" + lrIndent(filters, 2) + "  route_config:\n" + lrIndent(routes, 4)
}

func lrIndent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString(pad + l + "\n")
	}
	return b.String()
}

// lrFilter is a local_ratelimit http filter of a LocalRateLimit's fields.
func lrFilter(fields string) string {
	return "- name: envoy.filters.http.local_ratelimit\n  typed_config:\n    \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n" + lrIndent(fields, 4)
}

const (
	lrOnEnforced = "filter_enabled: {default_value: {numerator: 100}}\nfilter_enforced: {default_value: {numerator: 100}}\n"
	lrBucket10   = "token_bucket: {max_tokens: 20, tokens_per_fill: 10, fill_interval: 1s}\n"
)

// lrRule finds a rule by name, failing the test without it.
func lrRule(t *testing.T, cfg *policy.Config, name string) *policy.Rule {
	t.Helper()
	r := cfg.RuleByName(name)
	if r == nil {
		t.Fatalf("no lrRule %q", name)
	}
	return r
}

func TestLocalTokenBucketsBecomeRatesAndBursts(t *testing.T) {
	for _, tc := range []struct {
		bucket     string
		rate       float64
		burst      float64
		raisedNote bool
	}{
		{"{max_tokens: 10, tokens_per_fill: 5, fill_interval: 1s}", 5, 10, false},
		{"{max_tokens: 100, fill_interval: 60s}", 1.0 / 60, 100, false},
		{"{max_tokens: 60, tokens_per_fill: 60, fill_interval: 0.5s}", 120, 120, true},
		{"{max_tokens: 3, tokens_per_fill: 1, fill_interval: {seconds: 2, nanos: 500000000}}", 0.4, 3, false},
		{"{maxTokens: 4, tokensPerFill: {value: 2}, fillInterval: 2s}", 1, 4, false},
	} {
		cfg, res := lrConvert(t, "stat_prefix: edge\n"+lrOnEnforced+"token_bucket: "+tc.bucket+"\n", LocalOptions{})
		tb := lrRule(t, cfg, "edge").TokenBucket
		if tb.TokensPerSecond != tc.rate || tb.Burst != tc.burst {
			t.Errorf("%s: rate %g burst %g, want %g and %g", tc.bucket, tb.TokensPerSecond, tb.Burst, tc.rate, tc.burst)
		}
		if raised := strings.Contains(strings.Join(res.Notes, "\n"), "Sluice's burst is at least the rate"); raised != tc.raisedNote {
			t.Errorf("%s: burst raised note %v, want %v: %q", tc.bucket, raised, tc.raisedNote, res.Notes)
		}
	}
}

func TestTheFiltersSettingsBecomeTheTopLevelFields(t *testing.T) {
	for _, tc := range []struct {
		fields string
		check  func(*policy.Config) bool
	}{
		{"status: {code: ServiceUnavailable}", func(c *policy.Config) bool { return c.RejectStatus == 503 }},
		{"status: {code: 503}", func(c *policy.Config) bool { return c.RejectStatus == 503 }},
		{"status: {code: TooManyRequests}", func(c *policy.Config) bool { return c.RejectStatus == 429 }},
		{"status: {code: OK}", func(c *policy.Config) bool { return c.RejectStatus == 429 }},
		{"", func(c *policy.Config) bool { return c.RejectGRPCStatus == 14 && c.Reply.Body == "local_rate_limited" }},
		{"rate_limited_as_resource_exhausted: true", func(c *policy.Config) bool { return c.RejectGRPCStatus == 8 }},
		{"enable_x_ratelimit_headers: DRAFT_VERSION_03", func(c *policy.Config) bool { return c.LegacyHeaders == policy.LegacyXRateLimit }},
		{"enable_x_ratelimit_headers: OFF", func(c *policy.Config) bool { return !c.LegacyHeaders.On() }},
	} {
		cfg, _ := lrConvert(t, "stat_prefix: edge\n"+lrOnEnforced+lrBucket10+tc.fields+"\n", LocalOptions{})
		if !tc.check(cfg) {
			t.Errorf("%q: status %d, grpc %d, legacy %v", tc.fields, cfg.RejectStatus, cfg.RejectGRPCStatus, cfg.LegacyHeaders)
		}
	}
}

func TestEnabledAndEnforcedPercentagesChooseTheMode(t *testing.T) {
	for _, tc := range []struct {
		fields, mode, note string
	}{
		{lrOnEnforced, "enforce", ""},
		{"filter_enabled: {default_value: {numerator: 100}}\n", "shadow", "filter_enforced is 0% or absent"},
		{"filter_enabled: {default_value: {numerator: 5000, denominator: TEN_THOUSAND}}\nfilter_enforced: {default_value: {numerator: 1, denominator: MILLION}}\n", "shadow", "filter_enabled 50%: the rules limit every request"},
		{"filter_enabled: {default_value: {numerator: 100}}\nfilter_enforced: {default_value: {numerator: 50}}\nrequest_headers_to_add_when_not_enforced: [{header: {key: X-Would-Limit, value: 'yes'}}]\n", "shadow", "Sluice adds x-would-limit"},
	} {
		cfg, res := lrConvert(t, "stat_prefix: edge\n"+lrBucket10+tc.fields, LocalOptions{})
		if m := lrRule(t, cfg, "edge").Mode; string(m) != tc.mode {
			t.Errorf("%q: mode %s, want %s", tc.fields, m, tc.mode)
		}
		if tc.note != "" && !strings.Contains(strings.Join(res.Notes, "\n"), tc.note) {
			t.Errorf("%q: notes lack %q: %q", tc.fields, tc.note, res.Notes)
		}
	}
	cfg, _ := lrConvert(t, "stat_prefix: edge\n"+lrBucket10+"filter_enabled: {default_value: {numerator: 100}}\nfilter_enforced: {default_value: {numerator: 50}}\nrequest_headers_to_add_when_not_enforced: [{header: {key: X-Would-Limit, value: 'yes'}}]\n", LocalOptions{})
	if cfg.ShadowHeader != "x-would-limit" {
		t.Errorf("shadow header %q", cfg.ShadowHeader)
	}
}

// A route whose configuration rejects with another status than the
// filter's keeps it: its limit rules reject with their own.
func TestARoutesOwnStatusStaysOnItsRules(t *testing.T) {
	doc := strings.Replace(localBootstrap, "                    stat_prefix: api\n", "                    stat_prefix: api\n                    status: {code: ServiceUnavailable}\n", 1)
	if doc == localBootstrap {
		t.Fatal("the bootstrap has no api route configuration to give a status")
	}
	cfg, _ := lrConvert(t, doc, LocalOptions{})
	for _, p := range cfg.Policies {
		for i := range p.Rules {
			r := &p.Rules[i]
			want := policy.DefaultRejectStatus
			if strings.HasPrefix(r.Name, "api") && r.Action == policy.ActionLimit {
				want = 503
			}
			if r.Action == policy.ActionLimit && cfg.RejectStatusOf(r) != want {
				t.Errorf("%s rejects with %d, want %d", r.Name, cfg.RejectStatusOf(r), want)
			}
		}
	}
	if cfg.RejectStatus != policy.DefaultRejectStatus {
		t.Errorf("top-level status %d, want the filter's 429", cfg.RejectStatus)
	}
}

// response_headers_to_add is reject_headers; a field Sluice sends itself
// is left out, and said so.
func TestResponseHeadersToAddAreSentWithRejections(t *testing.T) {
	cfg, res := lrConvert(t, "stat_prefix: edge\n"+lrOnEnforced+lrBucket10+`response_headers_to_add:
- {append_action: OVERWRITE_IF_EXISTS_OR_ADD, header: {key: X-Local-Rate-Limit, value: "true"}}
- {header: {key: retry-after, value: "60"}}
`, LocalOptions{})
	if len(cfg.RejectHeaders) != 1 || cfg.RejectHeaders[0] != (policy.RejectHeader{Name: "x-local-rate-limit", Value: "true"}) {
		t.Errorf("reject headers %+v, want x-local-rate-limit: true", cfg.RejectHeaders)
	}
	notesContain(t, res.Notes, `response_headers_to_add: retry-after is left out: "retry-after" cannot be set here`)
}

// masked_remote_address is the client's network; a descriptor of one
// network is that network's override.
func TestMaskedAddressesBecomeNetworkKeys(t *testing.T) {
	const fields = `descriptors:
- entries: [{key: masked_remote_address}]
  token_bucket: {max_tokens: 20, tokens_per_fill: 10, fill_interval: 1s}
- entries: [{key: masked_remote_address, value: 10.0.0.0/24}]
  token_bucket: {max_tokens: 200, tokens_per_fill: 100, fill_interval: 1s}
`
	routes := `virtual_hosts:
- name: all
  domains: ['*']
  rate_limits: [{actions: [{masked_remote_address: {v4_prefix_mask_len: 24, v6_prefix_mask_len: 64}}]}]
  routes:
  - match: {prefix: /}
    route: {cluster: c}
`
	cfg, _ := lrConvert(t, lrHCM(lrFilter("stat_prefix: edge\n"+lrOnEnforced+fields), routes), LocalOptions{})
	r := cfg.Policies[0].Rules[0]
	if len(r.Keys) != 1 || r.Keys[0].String() != "ip:network" || len(r.Overrides) != 1 || r.Overrides[0].Key != "10.0.0.0/24" ||
		r.Overrides[0].TokenBucket.Burst != 200 {
		t.Errorf("want a rule keyed by ip:network with 10.0.0.0/24's override: %+v", r)
	}
}

// filter_enforced under 100%: a rule with a bucket per client is enforced
// on that share of its clients; a single bucket, all or none, stays in
// shadow mode.
func TestAPartlyEnforcedFilterEnforcesPerClientRulesOnAShareOfClients(t *testing.T) {
	const fields = `filter_enabled: {default_value: {numerator: 100}}
filter_enforced: {default_value: {numerator: 30}}
descriptors:
- entries: [{key: remote_address}]
  token_bucket: {max_tokens: 20, tokens_per_fill: 10, fill_interval: 1s}
- entries: [{key: method, value: POST}]
  token_bucket: {max_tokens: 2, tokens_per_fill: 1, fill_interval: 1s}
`
	routes := `virtual_hosts:
- name: all
  domains: ['*']
  rate_limits:
  - actions: [{remote_address: {}}]
  - actions: [{request_headers: {header_name: ":method", descriptor_key: method}}]
  routes:
  - match: {prefix: /}
    route: {cluster: c}
`
	cfg, res := lrConvert(t, lrHCM(lrFilter("stat_prefix: edge\n"+lrBucket10+fields), routes), LocalOptions{})
	var perClient, oneBucket int
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			switch {
			case r.Partial() && *r.EnforcePercent == 30 && r.Keys[0].String() == "ip:address":
				perClient++
			case r.EnforcePercent == nil && r.Mode == "shadow":
				oneBucket++
			default:
				t.Errorf("rule %s: mode %s, keys %v, enforce_percent %v", r.Name, r.Mode, r.Keys, r.EnforcePercent)
			}
		}
	}
	if perClient != 1 || oneBucket != 2 {
		t.Errorf("%d rules per client enforced on 30%%, %d single buckets in shadow mode; want 1 and 2 (the POST bucket, the default)", perClient, oneBucket)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "enforced on 30% of their clients") {
		t.Errorf("notes do not say what the share means: %q", res.Notes)
	}
}

// A filter not enabled (filter_enabled absent is 0%) limits nothing:
// with nothing else to convert, the conversion says so.
func TestAFilterNeverEnabledHasNothingToConvert(t *testing.T) {
	for _, doc := range []string{
		"stat_prefix: edge\n" + lrBucket10,
		"stat_prefix: edge\nfilter_enabled: {default_value: {numerator: 0}}\n" + lrBucket10,
		"stat_prefix: edge\n" + lrOnEnforced,
	} {
		_, err := EnvoyLocalRatelimit([]byte(doc), LocalOptions{})
		if err == nil || !strings.Contains(err.Error(), "nothing to convert") {
			t.Errorf("%q: %v", doc, err)
		}
	}
}

func TestDescriptorActionsBecomeKeysAndConditions(t *testing.T) {
	const descs = `descriptors:
- entries: [{key: remote_address, value: ""}, {key: method, value: POST}]
  token_bucket: {max_tokens: 2, tokens_per_fill: 1, fill_interval: 1s}
- entries: [{key: remote_address}, {key: method}]
  token_bucket: {max_tokens: 20, tokens_per_fill: 10, fill_interval: 1s}
- entries: [{key: remote_address, value: 10.0.0.1}, {key: method, value: POST}]
  token_bucket: {max_tokens: 200, tokens_per_fill: 100, fill_interval: 1s}
  shadow_mode: true
- entries: [{key: query_match, value: debug}]
  token_bucket: {max_tokens: 1, tokens_per_fill: 1, fill_interval: 10s}
- entries: [{key: tenant}, {key: generic_key, value: api}]
  token_bucket: {max_tokens: 50, tokens_per_fill: 50, fill_interval: 1s}
`
	routes := `virtual_hosts:
- name: all
  domains: ['*']
  rate_limits:
  - actions: [{remote_address: {}}, {request_headers: {header_name: ":method", descriptor_key: method}}]
  - actions: [{query_parameter_value_match: {descriptor_value: debug, query_parameters: [{name: debug, present_match: true}]}}]
  - actions: [{query_parameters: {query_parameter_name: tenant, descriptor_key: tenant}}, {generic_key: {descriptor_value: api}}]
  routes:
  - match: {prefix: /}
    route: {cluster: c}
`
	doc := lrHCM(lrFilter("stat_prefix: edge\n"+lrOnEnforced+descs), routes)
	cfg, res := lrConvert(t, doc, LocalOptions{})
	pols := map[string][]string{}
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			pols[p.Name] = append(pols[p.Name], r.Name)
		}
	}
	want := map[string][]string{
		// Envoy looks the exact descriptor up first, and it is in shadow
		// mode: a rule of its own before the wildcard ones.
		"edge-remote_address-method": {"edge-remote_address-10.0.0.1-method-POST", "edge-remote_address-method-POST", "edge-remote_address-method"},
		"edge-query_match":           {"edge-query_match-debug"},
		"edge-tenant-generic_key":    {"edge-tenant-generic_key-api"},
	}
	if !reflect.DeepEqual(pols, want) {
		t.Fatalf("policies %v, want %v\n%s", pols, want, res.Policy)
	}
	if r := lrRule(t, cfg, "edge-remote_address-10.0.0.1-method-POST"); r.Mode != policy.ModeShadow || len(r.Match) != 2 || r.Keys[0].Kind != policy.SourceIP {
		t.Errorf("the exact descriptor %+v", r)
	}
	if r := lrRule(t, cfg, "edge-remote_address-method-POST"); len(r.Keys) != 1 || r.Keys[0].Kind != policy.SourceIP || r.Match[0].Source.Kind != policy.SourceMethod {
		t.Errorf("POST per address %+v", r)
	}
	if r := lrRule(t, cfg, "edge-remote_address-method"); len(r.Keys) != 2 || r.Keys[1].Kind != policy.SourceMethod {
		t.Errorf("per address and method %+v", r)
	}
	if r := lrRule(t, cfg, "edge-query_match-debug"); r.Match[0].Source.String() != "query:debug" || !r.Match[0].Cond.Present || r.Keys[0].Kind != policy.SourceAll {
		t.Errorf("the query match %+v", r)
	}
	if r := lrRule(t, cfg, "edge-tenant-generic_key-api"); r.Keys[0].String() != "query:tenant" || len(r.Match) != 0 {
		t.Errorf("per tenant %+v", r)
	}
	// The listener's own bucket is taken besides (always_consume_default_token_bucket).
	if cfg.RuleByName("edge") != nil {
		t.Errorf("a default bucket without token_bucket")
	}
	if cfg.TrustedHops != 1 {
		t.Errorf("xff_trusted_hops %d, want 1 (Envoy trusts the last X-Forwarded-For entry without use_remote_address)", cfg.TrustedHops)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "xff_trusted_hops 1") {
		t.Errorf("notes %q", res.Notes)
	}
}

// remote_address is the client address Envoy's connection manager finds:
// xff_trusted_hops reads the same one.
func TestTheClientAddressFollowsTheConnectionManager(t *testing.T) {
	for _, tc := range []struct {
		hcm  string
		hops int
	}{
		{"use_remote_address: true\n", 0},
		{"use_remote_address: true\nxff_num_trusted_hops: 1\n", 2},
		{"xff_num_trusted_hops: 2\n", 3},
		{"", 1},
	} {
		fields := "stat_prefix: edge\n" + lrOnEnforced + "descriptors: [{entries: [{key: remote_address}], " + strings.TrimSuffix(lrBucket10, "\n") + "}]\n" +
			"rate_limits: [{actions: [{remote_address: {}}]}]\n"
		doc := strings.Replace(lrHCM(lrFilter(fields), ""), "  route_config:\n", lrIndent(tc.hcm, 2), 1)
		cfg, res := lrConvert(t, doc, LocalOptions{})
		if cfg.TrustedHops != tc.hops {
			t.Errorf("%q: xff_trusted_hops %d, want %d (%q)", tc.hcm, cfg.TrustedHops, tc.hops, res.Notes)
		}
	}
}

// envoyDocsExample is Envoy's documented descriptor example: the virtual
// host's actions build (client_cluster, path) descriptors, which /foo's
// configuration limits for two paths (and here a third, outside /foo).
const envoyDocsExample = `name: envoy.filters.network.http_connection_manager
typed_config:
  "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
  stat_prefix: ingress_http
  http_filters:
  - name: envoy.filters.http.local_ratelimit
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
      stat_prefix: http_local_rate_limiter
  - name: envoy.filters.http.router
  route_config:
    name: local_route
    virtual_hosts:
    - name: local_service
      domains: ["*"]
      routes:
      - match: {prefix: "/foo"}
        route: {cluster: service_protected_by_rate_limit}
        typed_per_filter_config:
          envoy.filters.http.local_ratelimit:
            "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
            stat_prefix: http_local_rate_limiter
            token_bucket: {max_tokens: 1000, tokens_per_fill: 1000, fill_interval: 60s}
            filter_enabled: {runtime_key: local_rate_limit_enabled, default_value: {numerator: 100, denominator: HUNDRED}}
            filter_enforced: {runtime_key: local_rate_limit_enforced, default_value: {numerator: 100, denominator: HUNDRED}}
            response_headers_to_add: [{append_action: APPEND_IF_EXISTS_OR_ADD, header: {key: x-test-rate-limit, value: 'true'}}]
            descriptors:
            - entries: [{key: client_cluster, value: foo}, {key: path, value: /foo/bar}]
              token_bucket: {max_tokens: 10, tokens_per_fill: 10, fill_interval: 60s}
            - entries: [{key: client_cluster, value: foo}, {key: path, value: /foo/bar2}]
              token_bucket: {max_tokens: 100, tokens_per_fill: 100, fill_interval: 60s}
            - entries: [{key: client_cluster, value: foo}, {key: path, value: /elsewhere}]
              token_bucket: {max_tokens: 100, tokens_per_fill: 100, fill_interval: 60s}
      - match: {prefix: "/"}
        route: {cluster: default_service}
      rate_limits:
      - actions:
        - request_headers: {header_name: x-envoy-downstream-service-cluster, descriptor_key: client_cluster}
        - request_headers: {header_name: ":path", descriptor_key: path}
`

// A descriptor value on the path the route's prefix also conditions is
// the one condition the value implies; one outside the prefix can never
// match the route's requests, and is left out.
func TestEnvoysDocumentedDescriptorExampleConverts(t *testing.T) {
	cfg, res := lrConvert(t, envoyDocsExample, LocalOptions{})
	bar := lrRule(t, cfg, "foo-client_cluster-foo-path-_foo_bar")
	if bar.TokenBucket.Burst != 10 || len(bar.Match) != 2 || bar.Match[1].Source.Kind != policy.SourcePath || bar.Match[1].Cond.Value != "/foo/bar" {
		t.Errorf("/foo/bar %+v", bar)
	}
	req := simulate.Request{Method: "GET", Path: "/foo/bar2", Host: "h", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-envoy-downstream-service-cluster": "foo"}}
	if got := lrLimitedBy(cfg, req); !slices.Equal(got, []string{"foo-client_cluster-path/foo-client_cluster-foo-path-_foo_bar2", "foo/foo"}) {
		t.Errorf("/foo/bar2: %v", got)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), "descriptors[2]: left out: typed_config") {
		t.Errorf("notes %q", res.Notes)
	}
}

func TestTheRouteMatchBecomesTheRulesConditions(t *testing.T) {
	for _, tc := range []struct {
		match string
		in    []simulate.Request
		out   []simulate.Request
	}{
		{"{prefix: /api}", lrReqs("/api", "/apis/x"), lrReqs("/ap", "/other")},
		{"{path: /login}", lrReqs("/login", "/login?next=/"), lrReqs("/login/x")},
		{"{prefix: /API, case_sensitive: false}", lrReqs("/api/x", "/Api"), lrReqs("/ap")},
		{"{path_separated_prefix: /v1}", lrReqs("/v1", "/v1/x"), lrReqs("/v10")},
		{"{safe_regex: {regex: '/users/[0-9]+'}}", lrReqs("/users/42"), lrReqs("/users/42/x", "/x/users/42")},
		{"{prefix: /, headers: [{name: x-tier, exact_match: gold}, {name: ':method', string_match: {exact: post, ignore_case: true}}]}",
			[]simulate.Request{{Path: "/", Method: "POST", Headers: map[string]string{"x-tier": "gold"}}},
			[]simulate.Request{{Path: "/", Method: "GET", Headers: map[string]string{"x-tier": "gold"}}, {Path: "/", Method: "POST"}}},
		{"{prefix: /, headers: [{name: x-internal, present_match: true, invert_match: true}]}",
			lrReqs("/"), []simulate.Request{{Path: "/", Headers: map[string]string{"x-internal": "1"}}}},
		{"{prefix: /, query_parameters: [{name: v, string_match: {prefix: '2'}}]}", lrReqs("/?v=2.1"), lrReqs("/?v=1", "/")},
		{"{prefix: /, grpc: {}}", []simulate.Request{{Path: "/", Headers: map[string]string{"content-type": "application/grpc+proto"}}}, lrReqs("/")},
	} {
		routes := "virtual_hosts:\n- name: all\n  domains: ['*']\n  routes:\n  - match: " + tc.match + "\n    route: {cluster: c}\n" +
			"    typed_per_filter_config:\n      envoy.filters.http.local_ratelimit:\n        \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n" +
			lrIndent("stat_prefix: r\n"+lrOnEnforced+lrBucket10, 8)
		cfg, res := lrConvert(t, lrHCM(lrFilter("stat_prefix: edge\n"), routes), LocalOptions{})
		p := cfg.Policies[0]
		want := p.Name + "/" + p.Rules[len(p.Rules)-1].Name
		for _, q := range tc.in {
			if got := lrLimitedBy(cfg, lrFill(q)); !slices.Equal(got, []string{want}) {
				t.Errorf("%s: %s %v: %v, want the route's lrRule\n%s", tc.match, q.Path, q.Headers, got, res.Policy)
			}
		}
		for _, q := range tc.out {
			if got := lrLimitedBy(cfg, lrFill(q)); len(got) != 0 {
				t.Errorf("%s: %s %v: %v, want none", tc.match, q.Path, q.Headers, got)
			}
		}
	}
}

func lrReqs(paths ...string) []simulate.Request {
	out := make([]simulate.Request, len(paths))
	for i, p := range paths {
		out[i] = simulate.Request{Path: p}
	}
	return out
}

func lrFill(q simulate.Request) simulate.Request {
	if q.Method == "" {
		q.Method = "GET"
	}
	q.Host, q.ClientAddress = "shop.example.com", "10.0.0.1"
	return q
}

// With several virtual hosts, each route's rules hold for its hosts only;
// the catch-all virtual host's for the hosts no other one names.
func TestVirtualHostsBecomeHostConditions(t *testing.T) {
	perRoute := func(name string) string {
		return "    typed_per_filter_config:\n      envoy.filters.http.local_ratelimit:\n        \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n" +
			lrIndent("stat_prefix: "+name+"\n"+lrOnEnforced+lrBucket10, 8)
	}
	routes := "virtual_hosts:\n- name: api\n  domains: [api.example.com, '*.api.example.com']\n  routes:\n  - match: {prefix: /}\n    route: {cluster: c}\n" + perRoute("a") +
		"- name: rest\n  domains: ['*']\n  routes:\n  - match: {prefix: /}\n    route: {cluster: c}\n" + perRoute("b")
	cfg, res := lrConvert(t, lrHCM(lrFilter("stat_prefix: edge\n"), routes), LocalOptions{})
	for host, want := range map[string]string{"api.example.com": "root", "API.example.com:8443": "root", "eu.api.example.com": "root", "www.example.com": "root-2"} {
		got := lrLimitedBy(cfg, simulate.Request{Method: "GET", Path: "/", Host: host, ClientAddress: "10.0.0.1"})
		if !slices.Equal(got, []string{want + "/" + want}) {
			t.Errorf("%s: %v, want %s\n%s", host, got, want, res.Policy)
		}
	}
}

func TestAVirtualHostsConfigurationLeavesOutRoutesConfiguredOtherwise(t *testing.T) {
	lr := "\"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n"
	routes := `virtual_hosts:
- name: shop
  domains: ['*']
  typed_per_filter_config:
    envoy.filters.http.local_ratelimit:
` + lrIndent(lr+"stat_prefix: shop\n"+lrOnEnforced+lrBucket10, 6) + `  routes:
  - name: checkout
    match: {prefix: /checkout}
    route: {cluster: c}
    typed_per_filter_config:
      envoy.filters.http.local_ratelimit:
        "@type": type.googleapis.com/envoy.config.route.v3.FilterConfig
        disabled: true
  - match: {prefix: /}
    route: {cluster: c}
`
	cfg, _ := lrConvert(t, lrHCM(lrFilter("stat_prefix: edge\n"), routes), LocalOptions{})
	if len(cfg.Policies) != 1 || len(cfg.Policies[0].Rules) != 2 {
		t.Fatalf("policies %+v", cfg.Policies)
	}
	stop, limit := cfg.Policies[0].Rules[0], cfg.Policies[0].Rules[1]
	if stop.Action != policy.ActionUnlimited || stop.Match[0].Source.Kind != policy.SourceRoute || stop.Match[0].Cond.Value != "checkout" || limit.Name != "shop" {
		t.Errorf("rules %+v", cfg.Policies[0].Rules)
	}
}

func TestWithoutAlwaysConsumingTheDefaultBucketADescriptorTakesItsPlace(t *testing.T) {
	fields := "stat_prefix: edge\n" + lrOnEnforced + lrBucket10 + "always_consume_default_token_bucket: false\n" +
		"descriptors: [{entries: [{key: user}], token_bucket: {max_tokens: 5, tokens_per_fill: 1, fill_interval: 1s}}]\n" +
		"rate_limits: [{actions: [{request_headers: {header_name: x-user, descriptor_key: user}}]}]\n"
	cfg, _ := lrConvert(t, fields, LocalOptions{})
	req := simulate.Request{Method: "GET", Path: "/", Host: "h", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-user": "u1"}}
	if got := lrLimitedBy(cfg, req); !slices.Equal(got, []string{"edge-user/edge-user", "edge/edge-user-no-default (unlimited)"}) {
		t.Errorf("with a user: %v", got)
	}
	req.Headers = nil
	if got := lrLimitedBy(cfg, req); !slices.Equal(got, []string{"edge/edge"}) {
		t.Errorf("without: %v", got)
	}
}

// The virtual host's rate_limits build descriptors unless the route has
// its own (vh_rate_limits OVERRIDE, the default), both with INCLUDE;
// entries of another stage, or with a disable_key, build none.
func TestRateLimitsComeFromTheRouteAndTheVirtualHostAsEnvoyPicksThem(t *testing.T) {
	descs := "descriptors:\n- entries: [{key: a}]\n  " + lrBucket10 + "- entries: [{key: b}]\n  " + lrBucket10 + "- entries: [{key: c}]\n  " + lrBucket10
	routes := func(option string) string {
		return `virtual_hosts:
- name: all
  domains: ['*']
  rate_limits: [{actions: [{request_headers: {header_name: x-a, descriptor_key: a}}]}]
  routes:
  - match: {prefix: /}
    route:
      cluster: c
      rate_limits:
      - actions: [{request_headers: {header_name: x-b, descriptor_key: b}}]
      - {stage: 1, actions: [{request_headers: {header_name: x-c, descriptor_key: c}}]}
      - {disable_key: off, actions: [{request_headers: {header_name: x-c, descriptor_key: c}}]}
    typed_per_filter_config:
      envoy.filters.http.local_ratelimit:
        "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
` + lrIndent("stat_prefix: r\n"+lrOnEnforced+lrBucket10+option+descs, 8)
	}
	for option, want := range map[string][]string{
		"":                          {"root-b"},
		"vh_rate_limits: INCLUDE\n": {"root-b", "root-a"},
		"vh_rate_limits: IGNORE\n":  {"root-b"},
		"stage: 1\n":                {"root-c"},
	} {
		cfg, res := lrConvert(t, lrHCM(lrFilter("stat_prefix: edge\n"), routes(option)), LocalOptions{})
		var got []string
		for _, p := range cfg.Policies {
			if p.Name != "root" {
				got = append(got, p.Name)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%q: descriptor policies %v, want %v\n%s", option, got, want, res.Policy)
		}
	}
}

func TestSkipIfAbsentBuildsTheShorterDescriptorToo(t *testing.T) {
	fields := "stat_prefix: edge\n" + lrOnEnforced +
		"descriptors:\n- entries: [{key: tenant}, {key: user}]\n  " + lrBucket10 + "- entries: [{key: tenant}]\n  token_bucket: {max_tokens: 100, tokens_per_fill: 100, fill_interval: 1s}\n" +
		"rate_limits: [{actions: [{request_headers: {header_name: x-tenant, descriptor_key: tenant}}, {request_headers: {header_name: x-user, descriptor_key: user, skip_if_absent: true}}]}]\n"
	cfg, _ := lrConvert(t, fields, LocalOptions{})
	both := simulate.Request{Method: "GET", Path: "/", Host: "h", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-tenant": "t", "x-user": "u"}}
	if got := lrLimitedBy(cfg, both); !slices.Equal(got, []string{"edge-tenant-user/edge-tenant-user"}) {
		t.Errorf("tenant and user: %v", got)
	}
	both.Headers = map[string]string{"x-tenant": "t"}
	if got := lrLimitedBy(cfg, both); !slices.Equal(got, []string{"edge-tenant-user/edge-tenant"}) {
		t.Errorf("tenant alone: %v", got)
	}
}

// A descriptor with a wildcard before the all-wildcard one would take an
// exact descriptor's requests first: that exact one keeps a rule of its own.
func TestAnExactDescriptorAPartialOneWouldTakeKeepsItsOwnRule(t *testing.T) {
	fields := "stat_prefix: edge\n" + lrOnEnforced + `descriptors:
- entries: [{key: org}, {key: user}]
  token_bucket: {max_tokens: 10, tokens_per_fill: 10, fill_interval: 1s}
- entries: [{key: org, value: acme}, {key: user}]
  token_bucket: {max_tokens: 50, tokens_per_fill: 50, fill_interval: 1s}
- entries: [{key: org, value: acme}, {key: user, value: root}]
  token_bucket: {max_tokens: 500, tokens_per_fill: 500, fill_interval: 1s}
- entries: [{key: org, value: initech}, {key: user, value: bob}]
  token_bucket: {max_tokens: 5, tokens_per_fill: 5, fill_interval: 1s}
rate_limits: [{actions: [{request_headers: {header_name: x-org, descriptor_key: org}}, {request_headers: {header_name: x-user, descriptor_key: user}}]}]
`
	cfg, res := lrConvert(t, fields, LocalOptions{})
	rules := cfg.Policies[0].Rules
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Name
	}
	if !slices.Equal(names, []string{"edge-org-acme-user-root", "edge-org-acme-user", "edge-org-user"}) {
		t.Fatalf("rules %v\n%s", names, res.Policy)
	}
	if ov := rules[2].Overrides; len(ov) != 1 || ov[0].Key != "initech|bob" || ov[0].TokenBucket.TokensPerSecond != 5 {
		t.Errorf("overrides %+v", ov)
	}
	req := simulate.Request{Method: "GET", Path: "/", Host: "h", ClientAddress: "10.0.0.1", Headers: map[string]string{"x-org": "acme", "x-user": "root"}}
	if got := lrLimitedBy(cfg, req); !slices.Equal(got, []string{"edge-org-user/edge-org-acme-user-root"}) {
		t.Errorf("acme's root: %v", got)
	}
}

// An RDS route configuration in another document belongs to the
// connection manager whose rds names it; the configuration's own
// rate_limits replace the routes'.
func TestARouteConfigurationFromRDSJoinsItsConnectionManager(t *testing.T) {
	lds := `name: listener
filter_chains:
- filters:
  - name: envoy.filters.network.http_connection_manager
    typed_config:
      "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
      stat_prefix: in
      rds: {route_config_name: shop, config_source: {ads: {}}}
      http_filters:
      - name: limits
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
          stat_prefix: edge
`
	rds := `name: shop
virtual_hosts:
- name: shop
  domains: ['*']
  routes:
  - name: search
    match: {prefix: /search}
    route: {cluster: c}
    typed_per_filter_config:
      limits:
        "@type": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit
        stat_prefix: search
        token_bucket: {max_tokens: 4, tokens_per_fill: 2, fill_interval: 1s}
        filter_enabled: {default_value: {numerator: 100}}
        filter_enforced: {default_value: {numerator: 100}}
        descriptors: [{entries: [{key: remote_address}], token_bucket: {max_tokens: 2, tokens_per_fill: 1, fill_interval: 1s}}]
        rate_limits: [{actions: [{remote_address: {}}]}]
`
	cfg, _ := lrConvert(t, lds+"---\n"+rds, LocalOptions{})
	if r := lrRule(t, cfg, "search"); r.Keys[0].Kind != policy.SourceRoute || r.Match[0].Cond.Value != "search" {
		t.Errorf("the route's bucket %+v", r)
	}
	if r := lrRule(t, cfg, "search-remote_address"); r.Keys[0].Kind != policy.SourceIP {
		t.Errorf("per address %+v", r)
	}
}

func TestARouteConfigurationAloneStandsForAFilterEnabledPerRoute(t *testing.T) {
	rc := `{"name": "shop", "virtualHosts": [{"name": "shop", "domains": ["*"], "routes": [
  {"match": {"prefix": "/"}, "route": {"cluster": "c"},
   "typedPerFilterConfig": {"envoy.filters.http.local_ratelimit": {
     "@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
     "statPrefix": "all", "tokenBucket": {"maxTokens": 10, "tokensPerFill": 5, "fillInterval": "1s"},
     "filterEnabled": {"defaultValue": {"numerator": 100}}, "filterEnforced": {"defaultValue": {"numerator": 100}}}}}]}]}`
	cfg, res := lrConvert(t, rc, LocalOptions{})
	if r := lrRule(t, cfg, "root"); r.TokenBucket.Burst != 10 || len(r.Match) != 0 {
		t.Errorf("the route's lrRule %+v", r)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), `no local_ratelimit filter named "envoy.filters.http.local_ratelimit" in the input`) {
		t.Errorf("notes %q", res.Notes)
	}
}

func TestLocalSettingsSluiceLacksAreNoted(t *testing.T) {
	fields := "stat_prefix: edge\n" + lrOnEnforced + lrBucket10 + "max_dynamic_descriptors: 100\nlocal_rate_limit_per_downstream_connection: true\nlocal_cluster_rate_limit: {}\n"
	_, res := lrConvert(t, fields, LocalOptions{})
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"max_dynamic_descriptors 100", "local_rate_limit_per_downstream_connection", "local_cluster_rate_limit"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
}

func TestLocalConversionLeavesTakenNamesAlone(t *testing.T) {
	cfg, _ := lrConvert(t, localBootstrap, LocalOptions{Taken: []string{"api", "api-api_key", "http_local_rate_limiter"}})
	var names []string
	for _, p := range cfg.Policies {
		names = append(names, p.Name)
		for _, r := range p.Rules {
			names = append(names, r.Name)
		}
	}
	for _, taken := range []string{"api", "api-api_key", "http_local_rate_limiter"} {
		if slices.Contains(names, taken) {
			t.Errorf("%q is used: %v", taken, names)
		}
	}
	if !slices.Contains(names, "api-2") || !slices.Contains(names, "http_local_rate_limiter-2") {
		t.Errorf("names %v", names)
	}
}

func TestLocalConversionRefusalsNameTheField(t *testing.T) {
	withRoute := func(match, action string) string {
		return lrHCM(lrFilter("stat_prefix: edge\n"+lrOnEnforced+lrBucket10), "virtual_hosts:\n- name: all\n  domains: ['*']\n  routes:\n"+
			"  - match: {prefix: /public}\n    route: {cluster: c}\n"+
			"  - match: "+match+"\n    route:\n      cluster: c\n      rate_limits: [{actions: ["+action+"]}]\n"+
			"    typed_per_filter_config:\n      envoy.filters.http.local_ratelimit:\n        \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n"+
			lrIndent("stat_prefix: r\n"+lrOnEnforced+lrBucket10+"descriptors: [{entries: [{key: k}], "+strings.TrimSuffix(lrBucket10, "\n")+"}]\n", 8))
	}
	header := "{request_headers: {header_name: x-k, descriptor_key: k}}"
	for _, tc := range []struct{ doc, want string }{
		{"stat_prefix: edge\n" + lrBucket10 + "colour: red\n", "colour (line 3): not a field of LocalRateLimit"},
		{"stat_prefix: edge\ntoken_bucket: {max_tokens: 5, fill_interval: 0.01s}\n", "token_bucket (line 2): fill_interval 10ms: Envoy refuses less than 50ms"},
		{"stat_prefix: edge\ntoken_bucket: {max_tokens: 5, fill_interval: soon}\n", `token_bucket.fill_interval (line 2): "soon": want a duration`},
		{"stat_prefix: edge\ntoken_bucket: {fill_interval: 1s}\n", "max_tokens: missing"},
		{"stat_prefix: edge\nstatus: {code: Slow}\n", `status.code (line 2): "Slow": want an HTTP status code`},
		{"stat_prefix: edge\ndescriptors: [{entries: [{key: a}], token_bucket: {max_tokens: 1, fill_interval: 1s}}, {entries: [{key: a}], token_bucket: {max_tokens: 2, fill_interval: 1s}}]\n",
			"descriptors[1] (line 2): the same entries as descriptors[0]"},
		{withRoute("{prefix: /p, runtime_fraction: {default_value: {numerator: 5}}}", header), "routes[1].match.runtime_fraction (line 19): not converted"},
		{withRoute("{prefix: /p}", "{extension: {name: custom}}"), "rate_limits[0].actions[0].extension (line 22): not converted"},
		{withRoute("{prefix: /p}", "{masked_remote_address: {v4_prefix_mask_len: 33}}"), "v4_prefix_mask_len (line 22): \"33\": want a whole number from 1 to 32"},
		{withRoute("{prefix: /p}", "{request_headers: {header_name: ':path', descriptor_key: k, skip_if_absent: maybe}}"), "skip_if_absent (line 22): want true or false"},
		{withRoute("{prefix: /p}", "{request_headers: {header_name: ':scheme', descriptor_key: k}}"), `":scheme": Sluice reads headers`},
		{withRoute("{prefix: /public/x}", header), "routes[1]: route typed_config.route_config.virtual_hosts[0].routes[0], limited by edge, comes before this route"},
		{"kind: [", "config: document 1: line 1"},
		{"", "config: empty"},
		{"foo: bar\n", "no local_ratelimit filter"},
	} {
		_, err := EnvoyLocalRatelimit([]byte(tc.doc), LocalOptions{})
		var ie *InputError
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q:\n%v\nwant %q", tc.doc, err, tc.want)
		} else if !errors.As(err, &ie) || ie.Input != "config" {
			t.Errorf("%q: %T %v", tc.doc, err, err)
		}
	}
}

// An earlier route limited by the filter's own configuration may take
// some of a later route's requests: the later route's rules cannot keep
// them apart without names.
func TestAnOverlappingEarlierRouteNeedsNames(t *testing.T) {
	perRoute := "    typed_per_filter_config:\n      envoy.filters.http.local_ratelimit:\n        \"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit\n" +
		lrIndent("stat_prefix: r\n"+lrOnEnforced+lrBucket10, 8)
	routes := func(n1, n2 string) string {
		return "virtual_hosts:\n- name: all\n  domains: ['*']\n  routes:\n  - " + n1 + "match: {prefix: /api/public}\n    route: {cluster: c}\n  - " + n2 + "match: {prefix: /api}\n    route: {cluster: c}\n" + perRoute
	}
	_, err := EnvoyLocalRatelimit([]byte(lrHCM(lrFilter("stat_prefix: edge\n"+lrOnEnforced+lrBucket10), routes("", ""))), LocalOptions{})
	if err == nil || !strings.Contains(err.Error(), "give this route a name") {
		t.Errorf("unnamed: %v", err)
	}
	cfg, _ := lrConvert(t, lrHCM(lrFilter("stat_prefix: edge\n"+lrOnEnforced+lrBucket10), routes("name: public\n    ", "name: api\n    ")), LocalOptions{})
	req := simulate.Request{Method: "GET", Path: "/api/public/x", Host: "h", Route: "public", ClientAddress: "10.0.0.1"}
	if got := lrLimitedBy(cfg, req); !slices.Equal(got, []string{"edge/edge"}) {
		t.Errorf("a public request: %v", got)
	}
	req.Route = "api"
	if got := lrLimitedBy(cfg, req); !slices.Equal(got, []string{"api/api", "edge/api-own-limits (unlimited)"}) {
		t.Errorf("an api request: %v", got)
	}
}

func TestLocalConversionBoundsAliases(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [*a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d, *a%d]\n", i, i, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1, i-1)
	}
	_, err := EnvoyLocalRatelimit([]byte(b.String()), LocalOptions{})
	if err == nil || !strings.Contains(err.Error(), "YAML nodes once aliases are expanded") {
		t.Errorf("%v", err)
	}
}

// Each unnamed route configured on its own needs an unlimited rule for
// every earlier route that may take its requests: the rules are bounded.
func TestLocalConversionBoundsTheRulesRoutesNeed(t *testing.T) {
	var b strings.Builder
	b.WriteString("virtual_hosts:\n- name: all\n  domains: ['*']\n  routes:\n")
	for i := 1; i <= 400; i++ {
		fmt.Fprintf(&b, "  - match: {prefix: /%s}\n    route: {cluster: c}\n    typed_per_filter_config:\n      envoy.filters.http.local_ratelimit:\n"+
			"        {\"@type\": type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit, stat_prefix: r, "+
			"filter_enabled: {default_value: {numerator: 100}}, token_bucket: {max_tokens: 1, fill_interval: 1s}}\n", strings.Repeat("a", i))
	}
	_, err := EnvoyLocalRatelimit([]byte(b.String()), LocalOptions{})
	if err == nil || !strings.Contains(err.Error(), "more than 50000 rules") {
		t.Errorf("%v", err)
	}
}

func FuzzEnvoyLocalRatelimit(f *testing.F) {
	f.Add([]byte(localBootstrap))
	f.Add([]byte(localEnvoyFilter))
	f.Add([]byte(envoyDocsExample))
	f.Add([]byte("stat_prefix: e\n" + lrOnEnforced + lrBucket10 + "always_consume_default_token_bucket: false\n" +
		"descriptors: [{entries: [{key: u}, {key: generic_key, value: g}], token_bucket: {max_tokens: 5, fill_interval: 1s}}]\n" +
		"rate_limits: [{actions: [{request_headers: {header_name: x-u, descriptor_key: u, skip_if_absent: true}}, {generic_key: {descriptor_value: g}}]}]\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		res, err := EnvoyLocalRatelimit(doc, LocalOptions{Taken: []string{"api"}})
		if err != nil {
			return
		}
		if _, err := policy.Parse(res.Policy); err != nil {
			t.Fatalf("a converted policy the parser refuses: %v\n%s", err, res.Policy)
		}
	})
}

func TestTheGuidesEnvoyConfigurationConvertsToTheGuidesPolicy(t *testing.T) {
	res, err := EnvoyLocalRatelimit([]byte(guideBlock(t, "### Converting an Envoy configuration", "yaml")), LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameAsGuide(t, guideBlock(t, "<!-- example: envoy-local-converted -->", "json"), res.Policy)
}

func TestTheGuidesPerConnectionFilterConvertsToTheGuidesPolicy(t *testing.T) {
	res, err := EnvoyLocalRatelimit([]byte(guideBlock(t, "### A bucket per connection", "yaml")), LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameAsGuide(t, guideBlock(t, "<!-- example: envoy-local-per-connection -->", "json"), res.Policy)
}

// destination_cluster is the route's cluster: a fixed value on a route
// with one, and on a route that picks one per request (weighted_clusters)
// the cluster source, which reads the cluster picked.
func TestDestinationClusterIsTheRoutesClusterOrTheOnePicked(t *testing.T) {
	weighted := strings.Replace(localBootstrap, "                  cluster: api\n",
		"                  weighted_clusters: {clusters: [{name: api-v1, weight: 90}, {name: api-v2, weight: 10}]}\n", 1)
	weighted = strings.Replace(weighted, "                    - request_headers: {header_name: x-api-key, descriptor_key: api_key}\n",
		"                    - destination_cluster: {}\n", 1)
	weighted = strings.Replace(weighted, "                    - entries: [{key: api_key}]\n", "                    - entries: [{key: destination_cluster}]\n", 1)
	weighted = strings.Replace(weighted, "                    - entries: [{key: api_key, value: partner-7f3a}]\n",
		"                    - entries: [{key: destination_cluster, value: api-v2}]\n", 1)
	if weighted == localBootstrap || strings.Contains(weighted, "api_key") {
		t.Fatal("the bootstrap's /api route was not rewritten")
	}
	cfg, _ := lrConvert(t, weighted, LocalOptions{})
	r := cfg.RuleByName("api-destination_cluster")
	if r == nil || len(r.Keys) != 1 || r.Keys[0].Kind != policy.SourceCluster || r.TokenBucket.Burst != 20 ||
		len(r.Overrides) != 1 || r.Overrides[0].Key != "api-v2" || r.Overrides[0].TokenBucket.Burst != 400 {
		t.Fatalf("the weighted route's rule: %+v", r)
	}

	// The same on a route with one cluster: its name, whose own bucket
	// the route's requests take (the rule first in its policy).
	single := strings.Replace(weighted, "                  weighted_clusters: {clusters: [{name: api-v1, weight: 90}, {name: api-v2, weight: 10}]}\n",
		"                  cluster: api-v2\n", 1)
	cfg, _ = lrConvert(t, single, LocalOptions{})
	r = cfg.RuleByName("api-destination_cluster-api-v2")
	if r == nil || cfg.Policies[0].Rules[0].Name != r.Name || len(r.Keys) != 1 || r.Keys[0].Kind != policy.SourceAll || r.TokenBucket.Burst != 400 {
		t.Fatalf("the single-cluster route's rule: %+v", r)
	}
}

// local_rate_limit_per_downstream_connection keeps each bucket per
// connection: every rule is keyed by connection first, and a bucket Envoy
// keeps for the whole filter is one per connection.
func TestPerConnectionBucketsAreKeyedByConnection(t *testing.T) {
	fields := "stat_prefix: edge\n" + lrOnEnforced + lrBucket10 + "local_rate_limit_per_downstream_connection: true\n" +
		"descriptors: [{entries: [{key: user}], token_bucket: {max_tokens: 5, tokens_per_fill: 1, fill_interval: 1s}}]\n" +
		"rate_limits: [{actions: [{request_headers: {header_name: x-user, descriptor_key: user}}]}]\n"
	cfg, res := lrConvert(t, fields, LocalOptions{})
	keys := func(name string) []string {
		var out []string
		for _, k := range lrRule(t, cfg, name).Keys {
			out = append(out, k.String())
		}
		return out
	}
	if got := keys("edge"); !slices.Equal(got, []string{"connection"}) {
		t.Errorf("the filter's bucket is keyed by %v, want connection", got)
	}
	if got := keys("edge-user"); !slices.Equal(got, []string{"connection", "header:x-user"}) {
		t.Errorf("the descriptor's bucket is keyed by %v, want connection then the user", got)
	}
	if !strings.Contains(strings.Join(res.Notes, "\n"), `keyed by "connection" first`) {
		t.Errorf("notes %q", res.Notes)
	}
	// The same configuration without the field: one bucket per process.
	cfg, _ = lrConvert(t, strings.Replace(fields, "local_rate_limit_per_downstream_connection: true\n", "", 1), LocalOptions{})
	if got := keys("edge"); !slices.Equal(got, []string{"all"}) {
		t.Errorf("without per-connection buckets: %v", got)
	}
}

// A rate_limits entry's hits_addend format is its descriptors' rules'
// cost, and a request without the value is not counted by them (Envoy
// ignores its descriptor): each rule requires the value.
func TestALocalHitsAddendFormatIsTheDescriptorRulesCost(t *testing.T) {
	const actions = "                    - request_headers: {header_name: x-api-key, descriptor_key: api_key}\n"
	doc := strings.Replace(localBootstrap, actions, actions+"                    hits_addend: {format: \"%REQ(X-Cost)%\"}\n", 1)
	cfg, res := lrConvert(t, doc, LocalOptions{})
	charged := 0
	for _, p := range cfg.Policies {
		for _, r := range p.Rules {
			if r.TokenBucket == nil || r.TokenBucket.Cost.String() != "header:x-cost" {
				continue
			}
			charged++
			if !slices.ContainsFunc(r.Match, func(m policy.Matcher) bool {
				return m.Source.String() == "header:x-cost" && m.Cond.Op == policy.MatchPresent && m.Cond.Present
			}) {
				t.Errorf("rule %s is charged from x-cost but applies to requests without it: %+v", r.Name, r.Match)
			}
		}
	}
	// The key's descriptor is one rule; the partner's value its override,
	// which keeps the rule's cost.
	if charged != 1 || !strings.Contains(strings.Join(res.Notes, "\n"), "Envoy ignores the descriptor of a request without it") {
		t.Errorf("%d rules charged from x-cost, want the api_key descriptors' one; notes %q", charged, res.Notes)
	}
	bad := strings.Replace(localBootstrap, actions, actions+"                    hits_addend: {format: \"%BYTES_RECEIVED%\"}\n", 1)
	if _, err := EnvoyLocalRatelimit([]byte(bad), LocalOptions{}); err == nil || !strings.Contains(err.Error(), "hits_addend.format") || !strings.Contains(err.Error(), "is not converted") {
		t.Errorf("a format read at the stream's end: %v, want it refused naming the field", err)
	}
}
