package migrate

import (
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// convertHigress converts in and parses the result.
func convertHigress(t *testing.T, in string, opt HigressOptions) (*policy.Config, Result) {
	t.Helper()
	res, err := Higress([]byte(in), opt)
	return parsed(t, in, res, err)
}

// condition is r's match condition on source, nil if none.
func condition(r *policy.Rule, source string) *policy.Condition {
	for i := range r.Match {
		if r.Match[i].Source.String() == source {
			return &r.Match[i].Cond
		}
	}
	return nil
}

// ruleNames are the rule names of each policy.
func ruleNames(cfg *policy.Config) [][]string {
	var out [][]string
	for _, p := range cfg.Policies {
		var names []string
		for _, r := range p.Rules {
			names = append(names, r.Name)
		}
		out = append(out, names)
	}
	return out
}

// The guide's three Higress configurations convert to the guide's
// policies: the same configuration once parsed, and the same JSON.
func TestTheGuidesHigressExamplesConvertToTheGuidesPolicies(t *testing.T) {
	for _, tc := range []struct {
		plugin, example string
		opt             HigressOptions
	}{
		{"**`key-rate-limit`**", "higress-key-rate-limit", HigressOptions{}},
		{"**`cluster-key-rate-limit`**", "higress-cluster-key-rate-limit", HigressOptions{Scope: "local"}},
		{"**`ai-token-ratelimit`**", "higress-ai-token-ratelimit", HigressOptions{}},
	} {
		t.Run(tc.example, func(t *testing.T) {
			in := guideBlock(t, tc.plugin, "yaml")
			shown := guideBlock(t, "<!-- example: "+tc.example+" -->", "json")
			res, err := Higress([]byte(in), tc.opt)
			if err != nil {
				t.Fatal(err)
			}
			sameAsGuide(t, shown, res.Policy)
		})
	}
}

func TestKeyRateLimitValuesBecomeRulesMatchingThem(t *testing.T) {
	in := `limit_by_param: apikey
limit_keys:
  - {key: 9a342114, query_per_second: 10}
  - {key: 102234, query_per_hour: 10, query_per_day: 100}
  - {key: 9a342114, query_per_minute: 5}
  - {key: z, query_per_second: 0, query_per_day: 7}
`
	cfg, res := convertHigress(t, in, HigressOptions{Scope: "global"})
	if cfg.Reply == nil || cfg.Reply.Body != "Too many requests" || cfg.RejectStatus != 429 || cfg.Fleet != nil {
		t.Errorf("reply %+v, status %d, fleet %+v", cfg.Reply, cfg.RejectStatus, cfg.Fleet)
	}
	want := []struct {
		name           string
		limit, seconds int
	}{{"9a342114", 10, 1}, {"102234", 10, 3600}, {"z", 7, 86400}}
	rules := cfg.Policies[0].Rules
	if len(rules) != len(want) {
		t.Fatalf("rules %v, want %v", ruleNames(cfg), want)
	}
	for i, w := range want {
		r := rules[i]
		c := condition(&r, "query:apikey")
		if r.Name != w.name || r.Global || r.Keys[0].String() != "query:apikey" || c == nil || c.Value != w.name ||
			r.Window.Limit != float64(w.limit) || r.Window.WindowSeconds != w.seconds {
			t.Errorf("rule %d: %+v, want %+v", i, r, w)
		}
	}
	notesContain(t, res.Notes, "query_per_hour is read and query_per_day left out", `key "9a342114" again`)
}

func TestClusterRuleItemsBecomeRulesInTheirOrder(t *testing.T) {
	in := `rule_name: tiers
rule_items:
  - limit_by_header: X-Tier
    limit_keys:
      - {key: gold, query_per_minute: 1000}
  - limit_by_per_consumer: ''
    limit_keys:
      - {key: "regexp:^partner-.*", query_per_hour: 5000}
      - {key: "*", query_per_minute: 100}
      - {key: "regexp:never", query_per_minute: 1}
  - limit_by_per_ip: from-header-x-forwarded-for
    limit_keys:
      - {key: 192.168.1.7/16, query_per_second: 50}
      - {key: "2001:db8::1", query_per_second: 5}
  - limit_by_per_ip: from-header-x-real-ip
    limit_keys:
      - {key: 0.0.0.0/0, query_per_day: 10000}
redis: {service_name: redis.static, service_port: 6379, password: secret}
`
	cfg, res := convertHigress(t, in, HigressOptions{FleetCluster: "rls"})
	if cfg.Fleet == nil || cfg.Fleet.Cluster != "rls" {
		t.Errorf("fleet %+v", cfg.Fleet)
	}
	got := ruleNames(cfg)[0]
	want := []string{"X-Tier-gold", "consumer-partner", "consumer", "ip-192.168.0.0_16", "ip-2001_db8_1", "x-real-ip-0.0.0.0_0"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rules %v, want %v", got, want)
	}
	for _, r := range cfg.Policies[0].Rules {
		if !r.Global || r.Algorithm != policy.AlgorithmFixedWindow {
			t.Errorf("%s: global %v, %s", r.Name, r.Global, r.Algorithm)
		}
	}
	rs := cfg.Policies[0].Rules
	checks := []struct {
		rule          int
		source, value string
		holds         bool
	}{
		{0, "header:x-tier", "gold", true}, {0, "header:x-tier", "Gold", false},
		{1, "header:x-mse-consumer", "partner-acme", true}, {1, "header:x-mse-consumer", "acme", false},
		{3, "ip:address", "192.168.200.1", true}, {3, "ip:address", "10.0.0.1", false},
		{4, "ip:address", "2001:db8::1", true},
		{5, "header:x-real-ip", "203.0.113.9", true},
	}
	for _, c := range checks {
		cond := condition(&rs[c.rule], c.source)
		if cond == nil || cond.Holds(c.value, true) != c.holds {
			t.Errorf("%s on %s = %q: want %v", rs[c.rule].Name, c.source, c.value, c.holds)
		}
	}
	if rs[2].Match != nil || rs[2].Keys[0].String() != "header:x-mse-consumer" || rs[5].Keys[0].String() != "header:x-real-ip" {
		t.Errorf("per consumer %+v, per x-real-ip %+v", rs[2], rs[5])
	}
	if rs[1].Window.Limit != 5000 || rs[1].Window.WindowSeconds != 3600 || rs[5].Window.WindowSeconds != 86400 {
		t.Errorf("windows %+v %+v", rs[1].Window, rs[5].Window)
	}
	notesContain(t, res.Notes, "x-mse-consumer", "xff_trusted_hops", "x-real-ip", `the keys after "*" are never reached`, `"scope": "global"`, `"rls"`)
	if strings.Contains(string(res.Policy), "secret") {
		t.Errorf("the Redis password is in the output:\n%s", res.Policy)
	}
}

func TestListedConsumersAndAnEmptyMessageConvert(t *testing.T) {
	in := "rule_name: vip\nrule_items: [{limit_by_consumer: , limit_keys: [{key: alice, query_per_second: 3}]}]\nrejected_msg: ''\n"
	cfg, _ := convertHigress(t, in, HigressOptions{})
	r := cfg.Policies[0].Rules[0]
	if c := condition(&r, "header:x-mse-consumer"); r.Name != "vip" || c == nil || c.Value != "alice" || cfg.Reply == nil || cfg.Reply.Body != "" {
		t.Errorf("rule %+v, reply %+v", r, cfg.Reply)
	}
}

func TestCookieItemsKeyAndMatchOnTheCookie(t *testing.T) {
	in := "rule_name: web\nrule_items:\n  - {limit_by_cookie: ab, limit_keys: [{key: beta, query_per_second: 2}]}\n" +
		"  - {limit_by_per_cookie: sid, limit_keys: [{key: '*', query_per_minute: 60}]}\n"
	cfg, _ := convertHigress(t, in, HigressOptions{Scope: "local"})
	rs := cfg.Policies[0].Rules
	if len(rs) != 2 || rs[0].Keys[0].String() != "cookie:ab" || rs[1].Keys[0].String() != "cookie:sid" || rs[1].Match != nil {
		t.Fatalf("rules %+v", rs)
	}
	if c := condition(&rs[0], "cookie:ab"); c == nil || !c.Holds("beta", true) || c.Holds("alpha", true) {
		t.Errorf("the listed cookie's condition %+v", c)
	}
}

func TestClusterRulesAreLocalWhenAsked(t *testing.T) {
	cfg, res := convertHigress(t, "rule_name: r\nrule_items: [{limit_by_per_header: x-key, limit_keys: [{key: '*', query_per_second: 5}]}]\n", HigressOptions{Scope: "local"})
	if r := cfg.Policies[0].Rules[0]; r.Global || cfg.Fleet != nil || r.Name != "r" {
		t.Errorf("rule %+v, fleet %+v", r, cfg.Fleet)
	}
	notesContain(t, res.Notes, "each Envoy process counts on its own")
}

func TestGlobalThresholdIsOneCounterForItsRequests(t *testing.T) {
	for _, tc := range []struct {
		in, algorithm string
		check         func(r *policy.Rule) bool
	}{
		{"rule_name: route-a\nglobal_threshold: {query_per_minute: 1000}\n", policy.AlgorithmFixedWindow,
			func(r *policy.Rule) bool { return r.Window.Limit == 1000 && r.Window.WindowSeconds == 60 }},
		{"rule_name: route-a\nglobal_threshold: {token_per_hour: 36000}\n", policy.AlgorithmTokenBucket,
			func(r *policy.Rule) bool { return r.TokenBucket.TokensPerSecond == 10 && r.TokenBucket.Burst == 36000 }},
	} {
		cfg, res := convertHigress(t, tc.in, HigressOptions{Scope: "local"})
		r := &cfg.Policies[0].Rules[0]
		if r.Name != "route-a" || len(r.Keys) != 1 || r.Keys[0].Kind != policy.SourceAll || r.Algorithm != tc.algorithm || !tc.check(r) {
			t.Errorf("%s: %+v; notes %v", tc.in, r, res.Notes)
		}
	}
}

func TestAITokenLimitsChargeTheAnswersUsage(t *testing.T) {
	in := `rule_name: llm
rule_items:
  - limit_by_header: x-api-key
    limit_keys:
      - {key: small, token_per_second: 40}
      - {key: hourly, token_per_hour: 1}
  - limit_by_per_param: apikey
    limit_keys:
      - {key: "*", token_per_day: 2000000}
rejected_code: 403
rejected_msg: over budget
`
	cfg, res := convertHigress(t, in, HigressOptions{DefaultCost: 50, Scope: "global"})
	rs := cfg.Policies[0].Rules
	if len(rs) != 3 || cfg.RejectStatus != 403 || cfg.Reply == nil || cfg.Reply.Body != "over budget" || cfg.Fleet == nil ||
		!rs[0].Global || !rs[1].Global {
		t.Fatalf("%s", res.Policy)
	}
	small, hourly, daily := rs[0].TokenBucket, rs[1].TokenBucket, rs[2].Quota
	if small == nil || small.TokensPerSecond != 40 || small.Burst != 40 || small.DefaultCost != 40 || small.Cost.String() != tokenCost {
		t.Errorf("per second: %+v", small)
	}
	if hourly == nil || hourly.TokensPerSecond != 0.00027778 || hourly.Burst != 1 || hourly.DefaultCost != 1 {
		t.Errorf("per hour: %+v", hourly)
	}
	if daily == nil || daily.Limit != 2e6 || daily.Period != "day" || daily.DefaultCost != 50 || daily.Cost.String() != tokenCost || !rs[2].Global {
		t.Errorf("per day: %+v", daily)
	}
	notesContain(t, res.Notes, `"scope": "global"`, "default_cost is lowered", "usage.total_tokens")
	local, _ := convertHigress(t, in, HigressOptions{DefaultCost: 50, Scope: "local"})
	if local.Fleet != nil || local.Policies[0].Rules[0].Global {
		t.Errorf("with scope local: fleet %+v, first rule global %v", local.Fleet, local.Policies[0].Rules[0].Global)
	}
}

// The guide's stream: a cluster-key-rate-limit for an API's domains and
// the rest, counted across gateways, and an LLM token budget; the
// ConfigMap is skipped.
const higressStream = `apiVersion: extensions.higress.io/v1alpha1
kind: WasmPlugin
metadata:
  name: cluster-key-rate-limit
  namespace: higress-system
spec:
  url: oci://higress-registry.cn-hangzhou.cr.aliyuncs.com/plugins/cluster-key-rate-limit:1.0.0
  phase: UNSPECIFIED_PHASE
  priority: 20
  defaultConfig:
    rule_name: per-ip
    rule_items:
      - limit_by_per_ip: from-remote-addr
        limit_keys:
          - {key: 10.0.0.0/8, query_per_second: 100}
          - {key: 0.0.0.0/0, query_per_minute: 600}
    redis:
      service_name: redis.static
      service_port: 6379
  matchRules:
    - domain: [api.example.com, "*.api.example.com"]
      config:
        rule_name: api-keys
        rule_items:
          - limit_by_header: x-api-key
            limit_keys:
              - {key: partner-7f3a, query_per_minute: 6000}
          - limit_by_per_header: x-api-key
            limit_keys:
              - {key: "regexp:^trial-", query_per_hour: 100}
              - {key: "*", query_per_minute: 600}
        rejected_msg: '{"error":"rate_limited"}'
        redis:
          service_name: redis.static
          service_port: 6379
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: higress-config
  namespace: higress-system
data:
  higress: |
    downstream:
      idleTimeout: 180
---
apiVersion: extensions.higress.io/v1alpha1
kind: WasmPlugin
metadata:
  name: ai-token-ratelimit
  namespace: higress-system
spec:
  url: oci://higress-registry.cn-hangzhou.cr.aliyuncs.com/plugins/ai-token-ratelimit:1.0.0
  defaultConfig:
    rule_name: llm-budget
    rule_items:
      - limit_by_per_consumer: ''
        limit_keys:
          - {key: "*", token_per_minute: 20000}
      - limit_by_per_header: x-api-key
        limit_keys:
          - {key: "*", token_per_day: 1000000}
    redis:
      service_name: redis.static
`

const higressStreamConverted = `{
  "fleet": {"cluster": "sluice_rls"},
  "policies": [
    {"name": "cluster-key-rate-limit", "rules": [
      {"name": "x-api-key-partner-7f3a", "scope": "global",
       "match": {"header:x-api-key": "partner-7f3a", "host": {"regex": "^(?:api\\.example\\.com|.*\\.api\\.example\\.com)$"}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 6000, "window_seconds": 60},
       "reject_body": "{\"error\":\"rate_limited\"}"},
      {"name": "x-api-key-trial", "scope": "global",
       "match": {"header:x-api-key": {"regex": "^trial-"}, "host": {"regex": "^(?:api\\.example\\.com|.*\\.api\\.example\\.com)$"}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 100, "window_seconds": 3600},
       "reject_body": "{\"error\":\"rate_limited\"}"},
      {"name": "x-api-key", "scope": "global",
       "match": {"host": {"regex": "^(?:api\\.example\\.com|.*\\.api\\.example\\.com)$"}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 600, "window_seconds": 60},
       "reject_body": "{\"error\":\"rate_limited\"}"},
      {"name": "cluster-key-rate-limit-matchrule-0-others", "action": "unlimited",
       "match": {"host": {"regex": "^(?:api\\.example\\.com|.*\\.api\\.example\\.com)$"}}},
      {"name": "ip-10.0.0.0_8", "scope": "global", "match": {"ip:address": {"cidr": ["10.0.0.0/8"]}},
       "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 100, "window_seconds": 1}, "reject_body": "Too many requests"},
      {"name": "ip-0.0.0.0_0", "scope": "global", "match": {"ip:address": {"cidr": ["0.0.0.0/0"]}},
       "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 600, "window_seconds": 60}, "reject_body": "Too many requests"}]},
    {"name": "ai-token-ratelimit", "rules": [
      {"name": "consumer", "scope": "global", "limit_keys": ["header:x-mse-consumer"], "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 333.333, "burst": 20000,
                            "cost_source": "response_json:usage.total_tokens", "default_cost": 100}, "reject_body": "Too many requests"},
      {"name": "llm-budget-x-api-key", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
       "algorithm_config": {"limit": 1000000, "period": "day",
                            "cost_source": "response_json:usage.total_tokens", "default_cost": 100}, "reject_body": "Too many requests"}]}
  ]
}`

func TestRealisticWasmPluginsConvert(t *testing.T) {
	res, err := Higress([]byte(higressStream), HigressOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var want, got any
	if err := json.Unmarshal([]byte(higressStreamConverted), &want); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(res.Policy, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(want, got) {
		t.Errorf("the conversion makes\n%s", res.Policy)
	}
	if !strings.HasSuffix(string(res.Policy), "}\n") {
		t.Errorf("the policy does not end with a newline")
	}
	notesContain(t, res.Notes, "port included", "x-mse-consumer", `"scope": "global"`,
		"aligned to the clock", "ai-token-ratelimit's rules are \"scope\": \"global\"", "usage.total_tokens")
	again, _ := Higress([]byte(higressStream), HigressOptions{})
	if string(again.Policy) != string(res.Policy) || !reflect.DeepEqual(again.Notes, res.Notes) {
		t.Errorf("a second conversion differs")
	}
}

// A request is decided by the first matchRule whose domains it is for,
// else by the default, as in Higress.
func TestMatchRulesComeBeforeTheDefault(t *testing.T) {
	in := `apiVersion: v1
kind: List
items:
- apiVersion: extensions.higress.io/v1alpha1
  kind: WasmPlugin
  metadata: {name: limits, namespace: higress-system}
  spec:
    url: oci://registry.example.com/plugins/cluster-key-rate-limit:2.0.0
    matchRules:
      - ingress: [default/legacy]
        domain: [legacy.example.com]
        config: {rule_name: legacy, global_threshold: {query_per_second: 1}}
      - domain: [Shop.Example.com, www.example.com]
        config: {rule_name: shop, global_threshold: {query_per_second: 100}}
      - domain: ["*.internal"]
        configDisable: true
        config: {rule_name: internal, global_threshold: {query_per_second: 1}}
      - domain: ["api.*"]
        service: [api.default.svc.cluster.local]
        config:
          rule_name: api
          rule_items: [{limit_by_per_header: x-key, limit_keys: [{key: "*", query_per_second: 10}]}]
      - service: [batch.default.svc.cluster.local]
        config: {rule_name: batch, global_threshold: {query_per_second: 1}}
    defaultConfig:
      rule_name: site
      rule_items: [{limit_by_per_ip: from-remote-addr, limit_keys: [{key: 0.0.0.0/0, query_per_second: 20}]}]
`
	cfg, res := convertHigress(t, in, HigressOptions{Scope: "local"})
	got := ruleNames(cfg)
	want := [][]string{{"shop", "api", "limits-matchrule-3-others", "site"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rules %v, want %v\n%s", got, want, res.Policy)
	}
	rs := cfg.Policies[0].Rules
	if c := condition(&rs[0], "host"); c == nil || c.Op != policy.MatchIn || strings.Join(c.Values, ",") != "shop.example.com,www.example.com" {
		t.Errorf("shop's host condition %+v", c)
	}
	if c := condition(&rs[1], "host"); c == nil || c.Op != policy.MatchPrefix || c.Value != "api." {
		t.Errorf("api's host condition %+v", c)
	}
	if rs[2].Action != policy.ActionUnlimited || condition(&rs[2], "host") == nil || condition(&rs[2], "host").Value != "api." {
		t.Errorf("the rule keeping api's other requests from the default: %+v", rs[2])
	}
	if rs[3].Match[0].Source.Kind != policy.SourceIP || condition(&rs[3], "host") != nil {
		t.Errorf("the default's rule %+v", rs[3])
	}
	notesContain(t, res.Notes, "matchRules[0] (ingress default/legacy) is not converted",
		"matchRules[4] (service batch.default.svc.cluster.local) is not converted",
		"matchRules[3]: service api.default.svc.cluster.local is not read")
}

func TestDisabledConfigurationsAreLeftOut(t *testing.T) {
	wp := func(spec string) string {
		return "kind: WasmPlugin\nmetadata: {name: key-rate-limit}\nspec:\n" + spec
	}
	for _, tc := range []struct {
		spec  string
		rules []string
	}{
		{"  defaultConfigDisable: true\n  defaultConfig: {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}\n" +
			"  matchRules: [{domain: [a.example], config: {limit_by_header: k, limit_keys: [{key: b, query_per_second: 1}]}}]\n", []string{"b"}},
		{"  defaultConfig: {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}\n" +
			"  matchRules: [{domain: ['*'], config: {limit_by_header: k, limit_keys: [{key: b, query_per_second: 1}]}}]\n", []string{"b"}},
		{"  defaultConfig: {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}\n" +
			"  matchRules: [{service: [s.default], config: {limit_by_header: k, limit_keys: [{key: b, query_per_second: 1}]}}]\n", []string{"a"}},
		{"  defaultConfig: {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}\n" +
			"  matchRules: [{domain: [x.example], configDisable: true, config: {}}]\n", []string{"a"}},
		// key-rate-limit (C++) matches a rule with a service list by the
		// service alone.
		{"  defaultConfig: {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}\n" +
			"  matchRules: [{domain: [x.example], service: [s.default], config: {limit_by_header: k, limit_keys: [{key: b, query_per_second: 1}]}}]\n", []string{"a"}},
		// pluginConfig is passed as it is, the rest ignored.
		{"  pluginConfig: {limit_by_header: k, limit_keys: [{key: c, query_per_second: 1}]}\n" +
			"  defaultConfig: {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}\n", []string{"c"}},
	} {
		cfg, res := convertHigress(t, wp(tc.spec), HigressOptions{})
		if got := ruleNames(cfg)[0]; !reflect.DeepEqual(got, tc.rules) {
			t.Errorf("%s: rules %v, want %v\n%v", tc.spec, got, tc.rules, res.Notes)
		}
	}
}

func TestHostConditionsFollowHigressWildcards(t *testing.T) {
	for _, tc := range []struct {
		domains   []string
		match, no []string
	}{
		{[]string{"a.example.com"}, []string{"a.example.com", "A.EXAMPLE.COM"}, []string{"b.example.com"}},
		{[]string{"*.example.com"}, []string{"a.example.com", "a.b.example.com"}, []string{"example.com", "a.example.org"}},
		{[]string{"*.example.com", "example.com", "api.*"}, []string{"x.example.com", "example.com", "api.io"}, []string{"xexample.com", "apix.io", "www.api.io"}},
		{[]string{"a.example.com", "a.example.com"}, []string{"a.example.com"}, nil},
	} {
		cond, all, err := hostCondition(yval{"domain", nil}, tc.domains)
		if err != nil || all {
			t.Fatalf("%v: %v %v", tc.domains, err, all)
		}
		doc, _ := json.Marshal(map[string]any{"rules": []any{map[string]any{"name": "r", "match": map[string]any{"host": cond},
			"limit_keys": []string{"host"}, "algorithm": "fixed_window", "algorithm_config": map[string]int{"limit": 1, "window_seconds": 1}}}})
		cfg, err := policy.Parse(doc)
		if err != nil {
			t.Fatalf("%v: %v", tc.domains, err)
		}
		c := condition(&cfg.Policies[0].Rules[0], "host")
		for _, h := range tc.match {
			if !c.Holds(strings.ToLower(h), true) {
				t.Errorf("%v should match %s", tc.domains, h)
			}
		}
		for _, h := range tc.no {
			if c.Holds(h, true) {
				t.Errorf("%v should not match %s", tc.domains, h)
			}
		}
	}
}

func TestTrailingAnyIsDroppedOnlyWhereItChangesNothing(t *testing.T) {
	for re, want := range map[string]string{
		"^a.*": "^a", "a.*": "a", ".*": "", "^(a|b).*": "^(a|b)", `^a\.*`: `^a\.*`, "a|b.*": "a|b.*",
		"^a": "^a", `\Qa.*`: `\Qa.*`, "(?s)a.*": "(?s)a", "[.*]": "[.*]", "a.*?": "a.*?",
	} {
		if got := withoutTrailingAny(re); got != want {
			t.Errorf("%q: %q, want %q", re, got, want)
		}
	}
}

func TestThePluginIsToldByItsImageElseItsName(t *testing.T) {
	for _, tc := range []struct{ url, name, want string }{
		{"oci://higress-registry.cn-hangzhou.cr.aliyuncs.com/plugins/cluster-key-rate-limit:1.0.0", "anything", pluginClusterRateLimit},
		{"oci://r.example.com/plugins/key-rate-limit@sha256:abc", "", pluginKeyRateLimit},
		{"file:///opt/plugins/ai-token-ratelimit.wasm", "", pluginAITokenRateLimit},
		{"oci://r.example.com/plugins/basic-auth:1.0.0", "key-rate-limit", pluginKeyRateLimit},
		{"", "cluster-key-rate-limit-1.0.0", pluginClusterRateLimit},
		{"", "ai-token-ratelimit.internal", pluginAITokenRateLimit},
		{"", "key-rate-limiter", ""},
		{"oci://r.example.com/plugins/basic-auth:1.0.0", "basic-auth", ""},
	} {
		if got, _ := pluginOf(tc.url, tc.name); got != tc.want {
			t.Errorf("%q %q: %q, want %q", tc.url, tc.name, got, tc.want)
		}
	}
}

func TestOtherRateLimitersAreNamedInANote(t *testing.T) {
	in := "kind: WasmPlugin\nmetadata: {name: quota, namespace: ns}\nspec: {url: 'oci://r/plugins/ai-quota:1.0.0', defaultConfig: {a: 1}}\n---\n" +
		"kind: WasmPlugin\nmetadata: {name: auth}\nspec: {url: 'oci://r/plugins/basic-auth:1.0.0'}\n---\n" +
		"kind: WasmPlugin\nmetadata: {name: key-rate-limit}\nspec: {defaultConfig: {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}}\n"
	_, res := convertHigress(t, in, HigressOptions{})
	notesContain(t, res.Notes, "WasmPlugin ns/quota (ai-quota) is skipped")
	if strings.Contains(strings.Join(res.Notes, "\n"), "auth") {
		t.Errorf("a plugin that limits nothing is noted: %v", res.Notes)
	}
}

func TestShownQuotaKeepsHigressFieldNames(t *testing.T) {
	in := `kind: WasmPlugin
metadata: {name: cluster-key-rate-limit}
spec:
  defaultConfig: {rule_name: b, global_threshold: {query_per_second: 9}, show_limit_quota_header: true}
`
	cfg, _ := convertHigress(t, in, HigressOptions{})
	if !cfg.ResponseHeaders || cfg.LegacyHeaders != policy.LegacyXRateLimit {
		t.Errorf("show_limit_quota_header: true: response headers %v, legacy %v; want X-RateLimit- fields", cfg.ResponseHeaders, cfg.LegacyHeaders)
	}
	in = strings.Replace(in, "show_limit_quota_header: true", "show_limit_quota_header: false", 1)
	if cfg, _ = convertHigress(t, in, HigressOptions{}); cfg.ResponseHeaders || cfg.LegacyHeaders.On() {
		t.Errorf("show_limit_quota_header: false: response headers %v, legacy %v; want none", cfg.ResponseHeaders, cfg.LegacyHeaders)
	}
}

func TestSettingsOfSeveralConfigurationsAreMerged(t *testing.T) {
	in := `kind: WasmPlugin
metadata: {name: cluster-key-rate-limit}
spec:
  matchRules:
    - domain: [a.example]
      config: {rule_name: a, global_threshold: {query_per_second: 5}, rejected_code: 503, show_limit_quota_header: false}
  defaultConfig: {rule_name: b, global_threshold: {query_per_second: 9}, rejected_msg: slow down, show_limit_quota_header: false}
`
	cfg, _ := convertHigress(t, in, HigressOptions{})
	a, b := cfg.RuleByName("a"), cfg.RuleByName("b")
	if cfg.RejectStatus != 503 || cfg.ResponseHeaders || cfg.Reply != nil || a.Reply == nil || a.Reply.Body != "Too many requests" || b.Reply == nil || b.Reply.Body != "slow down" {
		t.Errorf("status %d, headers %v, bodies %+v %+v %+v", cfg.RejectStatus, cfg.ResponseHeaders, cfg.Reply, a.Reply, b.Reply)
	}
	if a.RejectStatus != 0 || b.RejectStatus != 429 {
		t.Errorf("rule statuses %d and %d, want the top level's 503 and b's own 429", a.RejectStatus, b.RejectStatus)
	}
	// global_threshold counts every request of its hosts: nothing falls
	// through to the default, so no unlimited rule is needed.
	if got := ruleNames(cfg)[0]; !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("rules %v", got)
	}
}

func TestTakenNamesAreAvoidedAndTheOutputIsNamedPolicies(t *testing.T) {
	in := guideBlock(t, "**`key-rate-limit`**", "yaml")
	cfg, res := convertHigress(t, in, HigressOptions{Taken: []string{"key-rate-limit", "gold-key", "default"}})
	if len(cfg.Policies) != 1 || cfg.Policies[0].Name != "key-rate-limit-2" {
		t.Fatalf("%s", res.Policy)
	}
	if got := ruleNames(cfg)[0]; !reflect.DeepEqual(got, []string{"gold-key-2", "trial-key"}) {
		t.Errorf("rules %v", got)
	}
	var doc map[string]any
	json.Unmarshal(res.Policy, &doc)
	if _, ok := doc["rules"]; ok {
		t.Errorf("top-level rules in output meant for AddTo")
	}
	// Added to a policy with a body of its own, the rules keep Higress's.
	merged, _, err := AddTo([]byte(`{"reject_body": "slow down", "rules":[{"name":"gold-key","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":1}}]}`), res.Policy)
	if err != nil {
		t.Fatalf("AddTo: %v", err)
	}
	mcfg, err := policy.Parse(merged)
	if err != nil || mcfg.Reply.Body != "slow down" || mcfg.RuleByName("trial-key").Reply == nil || mcfg.RuleByName("trial-key").Reply.Body != "Too many requests" {
		t.Errorf("%v:\n%s", err, merged)
	}
}

func TestHigressRefusesWhatItCannotConvert(t *testing.T) {
	cluster := func(items string) string { return "rule_name: r\nrule_items:\n" + items }
	for _, tc := range []struct {
		in    string
		opt   HigressOptions
		input string
		want  string
	}{
		{cluster("  - limit_by_per_cookie: 's id'\n    limit_keys: [{key: '*', query_per_second: 1}]\n"), HigressOptions{}, "config",
			`config.rule_items[0].limit_by_per_cookie (line 3): "s id" is not a valid cookie name`},
		{cluster("  - limit_by_header: a\n    limit_keys: [{key: x, query_per_second: 1, query_per_minute: 9}]\n"), HigressOptions{}, "config",
			"config.rule_items[0].limit_keys[0] (line 4): query_per_second, query_per_minute are all set"},
		{cluster("  - limit_by_header: a\n    limit_keys: [{key: x, query_per_mintue: 1}]\n"), HigressOptions{}, "config",
			`(line 4): unknown field "query_per_mintue"; allowed here: key, query_per_second`},
		{cluster("  - limit_by_header: a\n    limit_keys: [{key: x, query_per_second: -1}]\n"), HigressOptions{}, "config", "-1: want a positive number"},
		{cluster("  - limit_by_header: a\n    limit_keys: [{key: x, query_per_second: '5'}]\n"), HigressOptions{}, "config", `"5": want a whole number`},
		{cluster("  - limit_by_per_header: a\n    limit_keys: [{key: x, query_per_second: 1}]\n"), HigressOptions{}, "config",
			`"x": limit_by_per_header takes "*" (every value) or "regexp:<expression>"`},
		{cluster("  - limit_by_per_header: a\n    limit_keys: [{key: 'regexp:(', query_per_second: 1}]\n"), HigressOptions{}, "config", "missing closing )"},
		{cluster("  - limit_by_per_ip: from-remote-addr\n    limit_keys: [{key: office, query_per_second: 1}]\n"), HigressOptions{}, "config", `"office": want an IP address or CIDR block`},
		{cluster("  - limit_by_per_ip: remote\n    limit_keys: [{key: 1.2.3.4, query_per_second: 1}]\n"), HigressOptions{}, "config", "want from-remote-addr or from-header-<name>"},
		{cluster("  - limit_by_header: a\n    limit_by_param: b\n    limit_keys: [{key: x, query_per_second: 1}]\n"), HigressOptions{}, "config", "set exactly one of limit_by_header"},
		{cluster("  - limit_by_header: 'bad header'\n    limit_keys: [{key: x, query_per_second: 1}]\n"), HigressOptions{}, "config", `"bad header" is not a valid header name`},
		{cluster("  - limit_by_header: a\n"), HigressOptions{Plugin: pluginClusterRateLimit}, "config", "config.rule_items[0] (line 3): limit_keys: missing"},
		{"rule_name: r\nglobal_threshold: {query_per_second: 1}\nrejected_code: 200\n", HigressOptions{}, "config", "rejected_code (line 3): 200: Sluice's reject_status is an HTTP status from 400 to 599"},
		{"rule_name: r\nglobal_threshold: {query_per_second: 1}\nrule_items: []\n", HigressOptions{}, "config", "set one of global_threshold and rule_items"},
		{"global_threshold: {query_per_second: 1}\n", HigressOptions{}, "config", "rule_name: missing"},
		{"rule_name: r\nglobal_threshold: {}\n", HigressOptions{Plugin: pluginClusterRateLimit}, "config", "config.global_threshold (line 2): set one of query_per_second"},
		{"rule_name: r\nglobal_threshold: {query_per_second: 1}\n_rules_: []\n", HigressOptions{}, "config", "_rules_ is the gateway's internal form"},
		{"limit_by_header: k\nlimit_keys: [{key: a}]\n", HigressOptions{}, "config", "config.limit_keys[0] (line 2): set one of query_per_second"},
		{"limit_by_header: k\nlimit_by_param: p\nlimit_keys: [{key: a, query_per_second: 1}]\n", HigressOptions{}, "config", "set exactly one of limit_by_header, limit_by_param"},
		{"rule_name: r\nrule_items: [{limit_by_header: a, limit_keys: [{key: x}]}]\n", HigressOptions{}, "config", "cannot tell which plugin"},
		{"rule_name: r\nrule_items: [{limit_by_header: a, limit_keys: [{key: x, token_per_second: 1}]}]\n", HigressOptions{Plugin: pluginClusterRateLimit}, "config", `unknown field "token_per_second"`},
		{"a: [\n", HigressOptions{}, "config", "config: document 1"},
		{"# nothing\n", HigressOptions{}, "config", "config: empty"},
		{"kind: ConfigMap\nmetadata: {name: x}\n", HigressOptions{}, "config", "no WasmPlugin of"},
		{"kind: WasmPlugin\nmetadata: {name: key-rate-limit}\nspec:\n  matchRules: [{config: {}}]\n", HigressOptions{}, "config",
			"spec.matchRules[0] (line 4): a match rule needs an ingress, domain or service list"},
		{"kind: WasmPlugin\nmetadata: {name: key-rate-limit}\nspec:\n  matchRules: [{domains: [a]}]\n", HigressOptions{}, "config", `unknown field "domains"`},
		{"kind: WasmPlugin\nmetadata: {name: key-rate-limit}\nspec:\n  defaultConfig: {limit_keys: [{key: a, query_per_second: 1}]}\n", HigressOptions{}, "config",
			"WasmPlugin key-rate-limit: spec.defaultConfig (line 4): set exactly one of limit_by_header, limit_by_param"},
		{"x: 1\n---\ny: 2\n", HigressOptions{}, "config", "a plugin configuration is one YAML document"},
		{"limit_by_header: k\nlimit_keys: [{key: a, query_per_second: 1}]\n", HigressOptions{Plugin: "kong"}, "plugin", `plugin "kong"`},
		{"limit_by_header: k\nlimit_keys: [{key: a, query_per_second: 1}]\n", HigressOptions{Scope: "cluster"}, "scope", `scope "cluster"`},
		{"limit_by_header: k\nlimit_keys: [{key: a, query_per_second: 1}]\n", HigressOptions{DefaultCost: -1}, "default_cost", "default_cost -1"},
		{"limit_by_header: k\nlimit_keys: [{key: a, query_per_second: 1}]\n", HigressOptions{FleetCluster: "a\nb"}, "fleet_cluster", "printable ASCII"},
	} {
		_, err := Higress([]byte(tc.in), tc.opt)
		var ie *InputError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ie) || ie.Input != tc.input {
			t.Errorf("%q: %v, want %q (input %s)", tc.in, err, tc.want, tc.input)
		}
	}
}

// YAML aliases make a small file a large tree: the conversion stops.
func TestAliasesCannotMakeTheWorkUnbounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("kind: WasmPlugin\nmetadata: {name: key-rate-limit}\nspec:\n  matchRules:\n")
	b.WriteString("    - domain: &d [")
	for i := 0; i < 1000; i++ {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("h" + strconv.Itoa(i) + ".example")
	}
	b.WriteString("]\n      config: &c {limit_by_header: k, limit_keys: [{key: a, query_per_second: 1}]}\n")
	for i := 0; i < 200; i++ {
		b.WriteString("    - {domain: *d, config: *c}\n")
	}
	_, err := Higress([]byte(b.String()), HigressOptions{})
	if err == nil || !strings.Contains(err.Error(), "more than 100000 values (YAML aliases expanded)") {
		t.Errorf("%v", err)
	}
}

func FuzzHigress(f *testing.F) {
	f.Add([]byte(higressStream), "")
	f.Add([]byte("limit_by_header: x-api-key\nlimit_keys:\n  - {key: gold-key, query_per_minute: 100}\n"), "")
	f.Add([]byte("rule_name: r\nrule_items:\n  - limit_by_per_param: apikey\n    limit_keys:\n      - {key: \"regexp:^a.*\", query_per_second: 10}\n      - {key: \"*\", query_per_minute: 100}\nrejected_code: 503\n"), "local")
	f.Add([]byte("rule_name: r\nglobal_threshold: {token_per_day: 5}\n"), "")
	f.Fuzz(func(t *testing.T, doc []byte, scope string) {
		res, err := Higress(doc, HigressOptions{Scope: scope})
		if err != nil {
			return
		}
		if _, err := policy.Parse(res.Policy); err != nil {
			t.Fatalf("a converted policy the parser refuses: %v\n%s", err, res.Policy)
		}
	})
}
