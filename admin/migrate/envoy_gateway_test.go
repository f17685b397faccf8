package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// convertEG converts in and parses the result.
func convertEG(t *testing.T, in string, opt EnvoyGatewayOptions) (*policy.Config, Result) {
	t.Helper()
	res, err := EnvoyGateway([]byte(in), opt)
	return parsed(t, in, res, err)
}

// btp is a BackendTrafficPolicy named name in namespace ns targeting
// target ("HTTPRoute/api"), with the rateLimit given (indented under
// rateLimit).
func btp(name, target, rateLimit string) string {
	kind, tname, _ := strings.Cut(target, "/")
	return "apiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: " + name + ", namespace: shop}\nspec:\n" +
		"  targetRefs: [{group: gateway.networking.k8s.io, kind: " + kind + ", name: " + tname + "}]\n  rateLimit:\n" + rateLimit
}

// The guide's two examples convert to the guide's policies: the same JSON,
// and the same configuration once parsed.
func TestTheGuidesEnvoyGatewayExamplesConvertToTheGuidesPolicies(t *testing.T) {
	for _, tc := range []struct {
		marker, example string
	}{
		{"Ten requests a second per API key on an HTTPRoute", "envoy-gateway-local"},
		{"An Envoy AI Gateway token budget on a Gateway", "envoy-gateway-global"},
	} {
		t.Run(tc.example, func(t *testing.T) {
			in := guideBlock(t, tc.marker, "yaml")
			shown := guideBlock(t, "<!-- example: "+tc.example+" -->", "json")
			res, err := EnvoyGateway([]byte(in), EnvoyGatewayOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameAsGuide(t, shown, res.Policy)
		})
	}
}

// The golden: a stream of policies on a Gateway and its routes, local and
// global, with the routes' hostnames and paths, a route with a policy of
// its own, and objects of other kinds.
func TestRealisticEnvoyGatewayObjectsConvertToTheGolden(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("testdata", "envoy-gateway", "objects.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "envoy-gateway", "objects.json"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := EnvoyGateway(in, EnvoyGatewayOptions{FleetCluster: "rls"})
	if err != nil {
		t.Fatal(err)
	}
	sameAsGuide(t, string(golden), res.Policy)
	notesContain(t, res.Notes, `"scope": "global"`, `"rls"`, "HTTPRoute shop/checkout has a BackendTrafficPolicy of its own",
		"xff_trusted_hops", "HTTPRoute shop/web: its matches' headers, method are not part",
		"GRPCRoute shop/orders is not in the input", "calendar month", "usage.prompt_tokens")
	again, _ := EnvoyGateway(in, EnvoyGatewayOptions{FleetCluster: "rls"})
	if !bytes.Equal(again.Policy, res.Policy) || !reflect.DeepEqual(again.Notes, res.Notes) {
		t.Error("a second conversion differs")
	}
	// The requests each rule takes, in the filter's own terms.
	cfg, _ := convertEG(t, string(in), EnvoyGatewayOptions{})
	web := cfg.RuleByName("shop-web-rule-0")
	if web == nil || web.TokenBucket == nil || web.TokenBucket.Burst != 50 || web.TokenBucket.TokensPerSecond != 50 {
		t.Fatalf("shop-web-rule-0: %+v", web)
	}
	for _, c := range []struct {
		source, value string
		holds         bool
	}{
		{"host", "www.example.com", true}, {"host", "shop.example.com", true}, {"host", "example.com", false},
		{"path", "/cart", true}, {"path", "/cart/items", true}, {"path", "/cartoon", false},
		{"path", "/static/app.js", true}, {"path", "/static/app.css", false},
	} {
		if got := condition(web, c.source).Holds(c.value, true); got != c.holds {
			t.Errorf("shop-web-rule-0 on %s %q: %v, want %v", c.source, c.value, got, c.holds)
		}
	}
}

func TestEnvoyGatewaySelectorsBecomeConditionsAndKeys(t *testing.T) {
	in := btp("sel", "HTTPRoute/api", `    global:
      rules:
        - clientSelectors:
            - headers:
                - {name: X-User-Id, type: Distinct}
                - {name: x-user-id, value: admin, invert: true}
                - {name: x-tier, type: RegularExpression, value: "gold|silver"}
              queryParams:
                - {name: region, value: eu}
                - {name: page, type: Distinct}
            - methods: [{value: POST}, {value: PUT}]
              path: {type: Exact, value: /v1/orders}
          limit: {requests: 5, unit: Minute}
        - clientSelectors:
            - sourceCIDR: {value: 10.1.2.3/16}
              path: {value: /admin, invert: true}
          limit: {requests: 100, unit: Second}
        - clientSelectors:
            - sourceCIDR: {type: Distinct, value: "2001:db8::/32", invert: true}
              methods: [{value: GET, invert: true}]
          limit: {requests: 7, unit: Day}
          shadowMode: true
`)
	cfg, res := convertEG(t, in, EnvoyGatewayOptions{Scope: "local"})
	if cfg.Fleet != nil || len(cfg.Policies) != 3 {
		t.Fatalf("%s", res.Policy)
	}
	r0, r1, r2 := &cfg.Policies[0].Rules[0], &cfg.Policies[1].Rules[0], &cfg.Policies[2].Rules[0]
	if keys := sourcesOf(r0.Keys); !reflect.DeepEqual(keys, []string{"header:x-user-id", "query:page"}) || r0.Global {
		t.Errorf("rule 0 keys %v, global %v", keys, r0.Global)
	}
	if r0.Window == nil || r0.Window.Limit != 5 || r0.Window.WindowSeconds != 60 {
		t.Errorf("rule 0's window %+v", r0.Window)
	}
	checks := []struct {
		r             *policy.Rule
		source, value string
		holds         bool
	}{
		{r0, "header:x-user-id", "alice", true}, {r0, "header:x-user-id", "admin", false},
		{r0, "header:x-tier", "gold", true}, {r0, "header:x-tier", "golden", false}, {r0, "header:x-tier", "platinum", false},
		{r0, "query:region", "eu", true}, {r0, "query:region", "us", false},
		{r0, "method", "PUT", true}, {r0, "method", "GET", false},
		{r0, "path", "/v1/orders", true}, {r0, "path", "/v1/orders/7", false},
		{r1, "ip:address", "10.1.200.1", true}, {r1, "ip:address", "10.2.0.1", false},
		{r1, "path", "/admin", false}, {r1, "path", "/admin/users", false}, {r1, "path", "/administrator", true},
		{r2, "ip:address", "2001:db8::1", false}, {r2, "ip:address", "192.0.2.1", true},
		{r2, "method", "GET", false}, {r2, "method", "POST", true},
	}
	for _, c := range checks {
		cond := condition(c.r, c.source)
		if cond == nil {
			t.Errorf("%s: no condition on %s", c.r.Name, c.source)
			continue
		}
		if got := cond.Holds(c.value, true); got != c.holds {
			t.Errorf("%s on %s %q: %v, want %v", c.r.Name, c.source, c.value, got, c.holds)
		}
	}
	if c := condition(r0, "header:x-user-id"); !c.Holds("", false) {
		t.Error("an inverted header match holds without the header, as in Envoy")
	}
	if keys := sourcesOf(r1.Keys); !reflect.DeepEqual(keys, []string{"all"}) || r1.Window.Limit != 100 || r1.Window.WindowSeconds != 1 {
		t.Errorf("an Exact block is one counter: keys %v, window %+v", keys, r1.Window)
	}
	if keys := sourcesOf(r2.Keys); !reflect.DeepEqual(keys, []string{"ip:address"}) || r2.Mode != policy.ModeShadow || r2.Window.WindowSeconds != 86400 {
		t.Errorf("a Distinct block: keys %v, mode %v, window %+v", keys, r2.Mode, r2.Window)
	}
	notesContain(t, res.Notes, "xff_trusted_hops", "query string", "are local: each Envoy process counts on its own", "HTTPRoute shop/api is not in the input")
}

func sourcesOf(keys []policy.KeySource) []string {
	var out []string
	for _, k := range keys {
		out = append(out, k.String())
	}
	return out
}

// Local rules are token buckets of requests refilled over the unit;
// global ones windows of the unit, or with units of a month or a year,
// calendar quotas.
func TestEnvoyGatewayUnits(t *testing.T) {
	for _, tc := range []struct {
		block, unit string
		check       func(r *policy.Rule) bool
	}{
		{"local", "Second", func(r *policy.Rule) bool { return r.TokenBucket.TokensPerSecond == 120 && r.TokenBucket.Burst == 120 }},
		{"local", "Minute", func(r *policy.Rule) bool { return r.TokenBucket.TokensPerSecond == 2 && r.TokenBucket.Burst == 120 }},
		{"local", "Hour", func(r *policy.Rule) bool {
			return r.TokenBucket.TokensPerSecond == 0.033333 && r.TokenBucket.Burst == 120
		}},
		{"local", "Week", func(r *policy.Rule) bool { return r.TokenBucket.Burst == 120 }},
		{"local", "Month", func(r *policy.Rule) bool { return r.Quota.Period == "month" && r.Quota.Limit == 120 }},
		{"global", "Hour", func(r *policy.Rule) bool { return r.Window.WindowSeconds == 3600 && r.Window.Limit == 120 && r.Global }},
		{"global", "Week", func(r *policy.Rule) bool { return r.Window.WindowSeconds == 604800 }},
		{"global", "Year", func(r *policy.Rule) bool { return r.Quota.Period == "year" && r.Quota.Limit == 120 && r.Global }},
	} {
		in := btp("u", "HTTPRoute/api", "    "+tc.block+":\n      rules:\n        - clientSelectors: [{headers: [{name: k, type: Distinct}]}]\n          limit: {requests: 120, unit: "+tc.unit+"}\n")
		cfg, res := convertEG(t, in, EnvoyGatewayOptions{})
		if r := &cfg.Policies[0].Rules[0]; !tc.check(r) {
			t.Errorf("%s %s: %s", tc.block, tc.unit, res.Policy)
		}
	}
}

func TestEnvoyGatewayCosts(t *testing.T) {
	rule := func(limit, cost string) string {
		return btp("c", "HTTPRoute/llm", "    global:\n      rules:\n        - clientSelectors: [{headers: [{name: x-user-id, type: Distinct}]}]\n          limit: "+limit+"\n          cost: "+cost+"\n")
	}
	ai := func(key string) string {
		return "{request: {from: Number, number: 0}, response: {from: Metadata, metadata: {namespace: io.envoy.ai_gateway, key: " + key + "}}}"
	}
	for _, tc := range []struct {
		limit, cost string
		check       func(r *policy.Rule) bool
		notes       []string
	}{
		{"{requests: 100000, unit: Day}", ai("llm_total_token"), func(r *policy.Rule) bool {
			return r.Quota != nil && r.Quota.Period == "day" && r.Quota.Cost.String() == "response_json:usage.total_tokens"
		}, []string{"from the answer's body itself"}},
		{"{requests: 6000, unit: Minute}", ai("llm_input_token"), func(r *policy.Rule) bool {
			return r.TokenBucket != nil && r.TokenBucket.Burst == 6000 && r.TokenBucket.TokensPerSecond == 100 && r.TokenBucket.Cost.String() == "response_json:usage.prompt_tokens"
		}, []string{"token bucket of the limit"}},
		{"{requests: 50, unit: Hour}", "{response: {from: Metadata, metadata: {namespace: io.envoy.ai_gateway, key: llm_output_token}}}", func(r *policy.Rule) bool {
			return r.Quota != nil && r.Quota.Cost.String() == "response_json:usage.completion_tokens"
		}, []string{"does not count the request itself"}},
		{"{requests: 50, unit: Hour}", ai("llm_cel_cost"), func(r *policy.Rule) bool {
			return r.Window != nil && r.Window.Cost.String() == "fixed"
		}, []string{"llm_cel_cost (a CEL expression"}},
		{"{requests: 50, unit: Hour}", "{request: {from: Number, number: 5}}", func(r *policy.Rule) bool {
			return r.Window != nil && r.Window.FixedCost == 5
		}, nil},
		{"{requests: 50, unit: Hour}", "{request: {from: Number, number: 2}, response: {from: Number, number: 3}}", func(r *policy.Rule) bool {
			return r.Window != nil && r.Window.FixedCost == 5
		}, []string{"a response cost of 3 is charged with the request (5 in all)"}},
		{"{requests: 50, unit: Hour}", "{request: {from: Metadata, metadata: {namespace: envoy.filters.http.ext_authz, key: weight}}}", func(r *policy.Rule) bool {
			return r.Window != nil && r.Window.Cost.String() == "metadata:envoy.filters.http.ext_authz:weight"
		}, nil},
		{"{requests: 50, unit: Hour}", "{response: {from: Metadata, metadata: {namespace: acme.billing, key: units}}}", func(r *policy.Rule) bool {
			return r.Window != nil && r.Window.FixedCost == 1
		}, []string{"metadata acme.billing:units is not converted"}},
	} {
		cfg, res := convertEG(t, rule(tc.limit, tc.cost), EnvoyGatewayOptions{})
		if r := &cfg.Policies[0].Rules[0]; !tc.check(r) || !r.Global {
			t.Errorf("%s: %s", tc.cost, res.Policy)
		}
		notesContain(t, res.Notes, tc.notes...)
	}
	// A cost of 0 with nothing charged from the answer counts nothing.
	in := rule("{requests: 5, unit: Hour}", "{request: {from: Number, number: 0}}") +
		"        - limit: {requests: 9, unit: Second}\n"
	cfg, res := convertEG(t, in, EnvoyGatewayOptions{})
	if got := ruleNames(cfg); !reflect.DeepEqual(got, [][]string{{"shop-c-rule-1"}}) {
		t.Errorf("rules %v", got)
	}
	notesContain(t, res.Notes, "a request cost of 0 counts nothing")
}

// A route the input holds is matched by its hostnames and paths; one it
// does not by the names Envoy Gateway gives its Envoy routes. A Gateway's
// rules count per Envoy route unless shared, and leave out the routes with
// a policy of their own.
func TestEnvoyGatewayTargets(t *testing.T) {
	in := btp("gw", "Gateway/eg", "    global:\n      rules:\n        - limit: {requests: 1000, unit: Second}\n        - limit: {requests: 9, unit: Second}\n          shared: true\n") +
		"---\n" + btp("own", "HTTPRoute/billing", "    local: {rules: [{limit: {requests: 3, unit: Second}}]}\n") +
		"---\n" + btp("merged", "HTTPRoute/search", "    local: {rules: [{limit: {requests: 4, unit: Second}}]}\n") + "  mergeType: StrategicMerge\n" +
		"---\napiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: many, namespace: shop}\nspec:\n" +
		"  targetRefs: [{kind: HTTPRoute, name: a}, {kind: GRPCRoute, name: b}]\n" +
		"  rateLimit: {global: {rules: [{limit: {requests: 2, unit: Minute}, shared: true}, {limit: {requests: 3, unit: Minute}}]}}\n" +
		"---\napiVersion: gateway.envoyproxy.io/v1alpha1\nkind: BackendTrafficPolicy\nmetadata: {name: picked, namespace: shop}\nspec:\n" +
		"  targetSelectors: [{kind: GRPCRoute, matchLabels: {tier: gold}}]\n" +
		"  rateLimit: {local: {rules: [{limit: {requests: 8, unit: Second}}]}}\n" +
		"---\napiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: orders, namespace: shop, labels: {tier: gold}}\nspec:\n" +
		"  parentRefs: [{name: eg}]\n  hostnames: [grpc.example.com]\n" +
		"  rules: [{matches: [{method: {service: shop.Orders, method: Get}}, {method: {service: shop.Orders, method: List}}]}]\n"
	cfg, res := convertEG(t, in, EnvoyGatewayOptions{Scope: "local"})
	want := [][]string{
		// a and b are not in the input: they may be the Gateway's.
		{"shop-gw-rule-0-billing-own-policy", "shop-gw-rule-0-a-own-policy", "shop-gw-rule-0-b-own-policy", "shop-gw-rule-0-orders-own-policy", "shop-gw-rule-0"},
		{"shop-gw-rule-1-billing-own-policy", "shop-gw-rule-1-a-own-policy", "shop-gw-rule-1-b-own-policy", "shop-gw-rule-1-orders-own-policy", "shop-gw-rule-1"},
		{"shop-own-default"},
		{"shop-merged-default"},
		{"shop-many-rule-0"},
		{"shop-many-rule-1-a", "shop-many-rule-1-b"},
		{"shop-picked-default"},
	}
	if got := ruleNames(cfg); !reflect.DeepEqual(got, want) {
		t.Fatalf("rules %v, want %v\n%s", got, want, res.Policy)
	}
	gw, shared := cfg.RuleByName("shop-gw-rule-0"), cfg.RuleByName("shop-gw-rule-1")
	if k := sourcesOf(gw.Keys); !reflect.DeepEqual(k, []string{"route"}) || gw.Match != nil {
		t.Errorf("a Gateway's rule, not shared: keys %v, match %+v", k, gw.Match)
	}
	if k := sourcesOf(shared.Keys); !reflect.DeepEqual(k, []string{"all"}) {
		t.Errorf("a Gateway's shared rule: keys %v", k)
	}
	stop := cfg.Policies[0].Rules[0]
	if c := condition(&stop, "route"); stop.Action != policy.ActionUnlimited || c == nil || !c.Holds("httproute/shop/billing/rule/0/match/0/pay_example_com", true) || c.Holds("httproute/shop/billingx/rule/0", true) {
		t.Errorf("the billing route's own policy: %+v", stop)
	}
	both := condition(cfg.RuleByName("shop-many-rule-0"), "route")
	for name, holds := range map[string]bool{"httproute/shop/a/rule/0/match/0/x": true, "grpcroute/shop/b/rule/1/match/0/y": true, "httproute/shop/b/rule/0": false} {
		if both == nil || both.Holds(name, true) != holds {
			t.Errorf("the shared rule of two routes on route %q: want %v", name, holds)
		}
	}
	grpc := cfg.RuleByName("shop-picked-default")
	if c := condition(grpc, "path"); c == nil || !c.Holds("/shop.Orders/Get", true) || !c.Holds("/shop.Orders/List", true) || c.Holds("/shop.Orders/Delete", true) {
		t.Errorf("the GRPCRoute's methods as paths: %+v", grpc.Match)
	}
	notesContain(t, res.Notes, "HTTPRoute shop/billing has a BackendTrafficPolicy of its own", "mergeType", `limit_keys start with "route"`,
		"HTTPRoute shop/a is not in the input", "attach Sluice to that Gateway")
}

// A local rule without selectors is the route's default bucket: the
// requests another local rule matches do not take from it.
func TestEnvoyGatewayDefaultBucketLeavesOutTheOtherRulesRequests(t *testing.T) {
	in := btp("d", "HTTPRoute/api", `    local:
      rules:
        - clientSelectors: [{headers: [{name: x-key, type: Distinct}, {name: x-plan, value: free}]}]
          limit: {requests: 2, unit: Second}
        - limit: {requests: 50, unit: Second}
        - clientSelectors: [{sourceCIDR: {value: 192.0.2.0/24}}]
          limit: {requests: 5, unit: Second}
`)
	cfg, res := convertEG(t, in, EnvoyGatewayOptions{})
	d := cfg.Policies[1].Rules
	if len(d) != 3 || d[0].Action != policy.ActionUnlimited || d[1].Action != policy.ActionUnlimited || d[2].TokenBucket == nil || d[2].TokenBucket.Burst != 50 {
		t.Fatalf("%s", res.Policy)
	}
	if c := condition(&d[0], "header:x-key"); c == nil || c.Holds("", false) || !c.Holds("k", true) {
		t.Errorf("the keyed rule's requests: %+v", d[0].Match)
	}
	if c := condition(&d[0], "header:x-plan"); c == nil || !c.Holds("free", true) || c.Holds("paid", true) {
		t.Errorf("the keyed rule's requests: %+v", d[0].Match)
	}
	if c := condition(&d[1], "ip:address"); c == nil || !c.Holds("192.0.2.7", true) {
		t.Errorf("the block's requests: %+v", d[1].Match)
	}
	if cfg.Policies[1].Name != "shop-d-default" || cfg.Policies[0].Name != "shop-d-rule-0" || cfg.Policies[2].Name != "shop-d-rule-2" {
		t.Errorf("policies %v", ruleNames(cfg))
	}
}

func TestEnvoyGatewayTypeDeniesAndHeaders(t *testing.T) {
	in := btp("t", "HTTPRoute/api", `    type: Global
    global:
      rules:
        - clientSelectors: [{headers: [{name: x-key, type: Distinct}]}]
          limit: {requests: 0, unit: Second}
          xRateLimitHeaders: "Off"
    local:
      rules: [{limit: {requests: 1, unit: Second}}]
`)
	cfg, res := convertEG(t, in, EnvoyGatewayOptions{})
	if len(cfg.Policies) != 1 || cfg.Fleet != nil || cfg.LegacyHeaders.On() {
		t.Fatalf("%s", res.Policy)
	}
	r := cfg.Policies[0].Rules[0]
	if c := condition(&r, "header:x-key"); r.Action != policy.ActionDeny || r.DenyStatus != 429 || c == nil || c.Holds("", false) {
		t.Errorf("requests 0: %+v", r)
	}
	notesContain(t, res.Notes, "type Global: Envoy Gateway reads rateLimit.global alone", `"action": "deny" rule answering 429`)
}

func TestEnvoyGatewayOptionsAndNames(t *testing.T) {
	in := guideBlock(t, "An Envoy AI Gateway token budget on a Gateway", "yaml")
	cfg, res := convertEG(t, in, EnvoyGatewayOptions{Scope: "local", Taken: []string{"ai-llm-rule-0"}})
	if cfg.Fleet != nil || cfg.Policies[0].Rules[0].Global || cfg.Policies[0].Name != "ai-llm-rule-0-2" || cfg.Policies[0].Rules[0].Name != "ai-llm-rule-0-2" {
		t.Errorf("scope local, a name taken:\n%s", res.Policy)
	}
	cfg, _ = convertEG(t, in, EnvoyGatewayOptions{FleetCluster: "rate_limit_cluster"})
	if cfg.Fleet == nil || cfg.Fleet.Cluster != "rate_limit_cluster" {
		t.Errorf("fleet %+v", cfg.Fleet)
	}
	// A List of objects, as kubectl writes them, converts the same.
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
	for _, line := range strings.Split(strings.TrimSpace(in), "\n") {
		prefix := "  "
		if strings.HasPrefix(line, "apiVersion:") {
			prefix = "- "
		}
		b.WriteString(prefix + line + "\n")
	}
	listed, err := EnvoyGateway([]byte(b.String()), EnvoyGatewayOptions{})
	plain, _ := EnvoyGateway([]byte(in), EnvoyGatewayOptions{})
	if err != nil || !bytes.Equal(listed.Policy, plain.Policy) {
		t.Errorf("a List: %v\n%s", err, listed.Policy)
	}
}

func TestEnvoyGatewayRefusesWhatItCannotConvert(t *testing.T) {
	rules := func(r string) string { return btp("bad", "HTTPRoute/api", "    global:\n      rules:\n"+r) }
	local := func(r string) string { return btp("bad", "HTTPRoute/api", "    local:\n      rules:\n"+r) }
	for _, tc := range []struct {
		in    string
		opt   EnvoyGatewayOptions
		input string
		want  string
	}{
		{rules("        - limit: {requests: 5, unit: Fortnight}\n"), EnvoyGatewayOptions{}, "config",
			`BackendTrafficPolicy shop/bad: spec.rateLimit.global.rules[0].limit.unit (line 9): "Fortnight": want one of Second, Minute`},
		{rules("        - limit: {requests: '5', unit: Second}\n"), EnvoyGatewayOptions{}, "config", `rules[0].limit.requests (line 9): "5": want a whole number`},
		{rules("        - limit: {requests: -1, unit: Second}\n"), EnvoyGatewayOptions{}, "config", "-1: want a number of requests from 0 to 4294967295"},
		{rules("        - limits: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", `(line 9): unknown field "limits"; allowed here: clientSelectors, limit`},
		{rules("        - clientSelectors: [{headers: [{name: x, type: Prefix, value: a}]}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config",
			`clientSelectors[0].headers[0].type (line 9): "Prefix": want Exact, RegularExpression or Distinct`},
		{rules("        - clientSelectors: [{headers: [{name: x, type: Distinct, value: a}]}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", "a Distinct match takes no value"},
		{rules("        - clientSelectors: [{headers: [{name: x, type: Distinct, invert: true}]}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", "a Distinct match cannot be inverted"},
		{rules("        - clientSelectors: [{headers: [{name: x}]}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", "value: missing (an Exact match needs one)"},
		{rules("        - clientSelectors: [{headers: [{name: x, type: RegularExpression, value: '(a'}]}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", "missing closing )"},
		{rules("        - clientSelectors: [{headers: [{name: 'bad name', value: a}]}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", `"bad name" is not a header name Sluice reads`},
		{rules("        - clientSelectors: [{sourceCIDR: {value: office}}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", `"office": want a CIDR block`},
		{rules("        - clientSelectors: [{sourceCIDR: {type: Range, value: 10.0.0.0/8}}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", `"Range": want Exact or Distinct`},
		{rules("        - clientSelectors: [{}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", "a selector needs headers, methods, path, sourceCIDR or queryParams"},
		{rules("        - clientSelectors: [{methods: [{value: get}]}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", `"get": want an HTTP method`},
		{rules("        - clientSelectors: [{path: {type: Suffix, value: /a}}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", `"Suffix": want PathPrefix, Exact or RegularExpression`},
		{rules("        - clientSelectors: [{path: {value: api}}]\n          limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{}, "config", `"api": a path prefix starts with /`},
		{rules("        - limit: {requests: 5, unit: Second}\n          cost: {request: {from: Number, number: 9}}\n"), EnvoyGatewayOptions{}, "config", "a request costs 9, more than limit.requests 5"},
		{rules("        - limit: {requests: 5, unit: Second}\n          cost: {request: {from: Header}}\n"), EnvoyGatewayOptions{}, "config", `"Header": want Number or Metadata`},
		{rules("        - limit: {requests: 5, unit: Second}\n          cost: {request: {from: Number, number: 1, metadata: {namespace: a, key: b}}}\n"), EnvoyGatewayOptions{}, "config", "set one of number and metadata"},
		{rules("        - limit: {requests: 5, unit: Second}\n          shared: yes please\n"), EnvoyGatewayOptions{}, "config", `"yes please": want true or false`},
		{rules("        - limit: {requests: 5, unit: Second}\n          xRateLimitHeaders: Draft\n"), EnvoyGatewayOptions{}, "config", `"Draft": want Off or DraftVersion03`},
		{local("        - limit: {requests: 5, unit: Second}\n        - limit: {requests: 6, unit: Second}\n"), EnvoyGatewayOptions{}, "config",
			"rules[1] (line 10): a second rule without clientSelectors"},
		{local("        - limit: {requests: 5, unit: Hour}\n          cost: {response: {from: Number, number: 1}}\n"), EnvoyGatewayOptions{}, "config", "a response cost is for global rate limits only"},
		{local("        - limit: {requests: 5, unit: Hour, fromMetadata: {namespace: a, key: b}}\n"), EnvoyGatewayOptions{}, "config", "fromMetadata is for global rate limits only"},
		{btp("bad", "HTTPRoute/api", "    global: {}\n"), EnvoyGatewayOptions{}, "config", "rules: missing; a global rate limit needs at least one rule"},
		{btp("bad", "HTTPRoute/api", "    type: Local\n    global: {rules: [{limit: {requests: 1, unit: Second}}]}\n"), EnvoyGatewayOptions{}, "config", "type Local without local"},
		{btp("bad", "HTTPRoute/api", "    type: Both\n"), EnvoyGatewayOptions{}, "config", `"Both": want Global or Local`},
		{"kind: BackendTrafficPolicy\nmetadata: {name: x}\nspec: {rateLimit: {local: {rules: []}}}\n", EnvoyGatewayOptions{}, "config", "no targetRef, targetRefs or targetSelectors"},
		{"kind: BackendTrafficPolicy\nmetadata: {name: x}\nspec: {targetRefs: [{name: eg}], rateLimit: {}}\n", EnvoyGatewayOptions{}, "config", "a target needs its kind and name"},
		{"kind: BackendTrafficPolicy\nspec: {}\n", EnvoyGatewayOptions{}, "config", "BackendTrafficPolicy without metadata"},
		{"kind: HTTPRoute\nmetadata: {name: x}\n", EnvoyGatewayOptions{}, "config", "no BackendTrafficPolicy with a rateLimit"},
		{"rules: []\n", EnvoyGatewayOptions{}, "config", "want Kubernetes objects"},
		{"a: [\n", EnvoyGatewayOptions{}, "config", "config: document 1"},
		{"# nothing\n", EnvoyGatewayOptions{}, "config", "config: empty"},
		{rules("        - limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{Scope: "cluster"}, "scope", `scope "cluster"`},
		{rules("        - limit: {requests: 5, unit: Second}\n"), EnvoyGatewayOptions{FleetCluster: "a\nb"}, "fleet_cluster", "printable ASCII"},
	} {
		_, err := EnvoyGateway([]byte(tc.in), tc.opt)
		var ie *InputError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ie) || ie.Input != tc.input {
			t.Errorf("%q: %v, want %q (input %s)", tc.in, err, tc.want, tc.input)
		}
	}
}

// YAML aliases make a small file a large tree: the conversion stops.
func TestEnvoyGatewayAliasesCannotMakeTheWorkUnbounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(btp("a", "HTTPRoute/api", "    global:\n      rules:\n        - &r\n          clientSelectors: [{headers: ["))
	for i := range 300 {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("{name: h" + strconv.Itoa(i) + ", value: v}")
	}
	b.WriteString("]}]\n          limit: {requests: 1, unit: Second}\n")
	for range 250 {
		b.WriteString("        - *r\n")
	}
	_, err := EnvoyGateway([]byte(b.String()), EnvoyGatewayOptions{})
	if err == nil || !strings.Contains(err.Error(), "(YAML aliases expanded)") {
		t.Errorf("%v", err)
	}
}

func TestTheEnvoyGatewayCommandConvertsPolicies(t *testing.T) {
	f := filepath.Join(t.TempDir(), "objects.yaml")
	if err := os.WriteFile(f, []byte(guideBlock(t, "An Envoy AI Gateway token budget on a Gateway", "yaml")), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"envoy-gateway", "-f", f, "-scope", "local"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	cfg, err := policy.Parse(stdout.Bytes())
	if err != nil || cfg.Fleet != nil || cfg.RuleByName("ai-llm-rule-1") == nil || !strings.Contains(stderr.String(), "note: ") {
		t.Errorf("%v:\n%s\n%s", err, stdout.String(), stderr.String())
	}
	stderr.Reset()
	if code := Main([]string{"envoy-gateway", "-f", f, "-scope", "fleet"}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), `scope "fleet"`) {
		t.Errorf("a bad scope: exit %d, %s", code, stderr.String())
	}
	if code := Main([]string{"envoy-gateway"}, &stdout, &stderr); code != 2 {
		t.Errorf("no -f: exit %d, want 2", code)
	}
	res, err := Convert(Input{From: "envoy-gateway", Config: []byte(guideBlock(t, "Ten requests a second per API key", "yaml")), Plugin: "x"})
	var ie *InputError
	if !errors.As(err, &ie) || ie.Input != "plugin" {
		t.Errorf("a choice the source does not read: %v %s", err, res.Policy)
	}
}

func FuzzEnvoyGateway(f *testing.F) {
	for _, name := range []string{"objects.yaml"} {
		doc, err := os.ReadFile(filepath.Join("testdata", "envoy-gateway", name))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(doc, "")
	}
	f.Add([]byte(btp("f", "Gateway/eg", "    global: {rules: [{clientSelectors: [{sourceCIDR: {type: Distinct, value: 10.0.0.0/8}, path: {value: /a}}], limit: {requests: 3, unit: Month}}]}\n")), "local")
	f.Add([]byte(btp("f", "HTTPRoute/r", "    local: {rules: [{clientSelectors: [{headers: [{name: k, type: Distinct}], methods: [{value: GET, invert: true}]}], limit: {requests: 2, unit: Second}}, {limit: {requests: 9, unit: Minute}}]}\n")), "")
	f.Fuzz(func(t *testing.T, doc []byte, scope string) {
		res, err := EnvoyGateway(doc, EnvoyGatewayOptions{Scope: scope})
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("an error naming no input: %v", err)
			}
			return
		}
		if _, err := policy.Parse(res.Policy); err != nil {
			t.Fatalf("a converted policy the parser refuses: %v\n%s", err, res.Policy)
		}
		var v any
		if err := json.Unmarshal(res.Policy, &v); err != nil {
			t.Fatal(err)
		}
	})
}
