package migrate

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// guideConfig is docs/migrating.md's envoyproxy/ratelimit example, with a
// customer whose hourly limit is its own.
const guideConfig = `domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 60}
  - key: api_key
    value: internal-batch
    rate_limit: {unlimited: true}
  - key: api_key
    value: revoked-key
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: api_key
    value: acme
    rate_limit: {unit: hour, requests_per_unit: 50000}
  - key: api_key
    rate_limit: {unit: hour, requests_per_unit: 1000}
`

const guideActions = `- actions: [{remote_address: {}}]
- actions: [{request_headers: {header_name: X-Api-Key, descriptor_key: api_key}}]
`

func convert(t *testing.T, config, actions string, opt Options) *policy.Config {
	t.Helper()
	_, cfg := ratelimitConvert(t, config, actions, opt)
	return cfg
}

func TestEachRateLimitsEntryBecomesAPolicyOfItsPaths(t *testing.T) {
	cfg := convert(t, guideConfig, guideActions, Options{})
	if len(cfg.Policies) != 2 || cfg.Fleet == nil || cfg.Fleet.Cluster != "sluice_rls" {
		t.Fatalf("%d policies, fleet %+v", len(cfg.Policies), cfg.Fleet)
	}
	addr := cfg.Policies[0].Rules
	if len(addr) != 1 || addr[0].Name != "remote_address" || !addr[0].Global || addr[0].Keys[0].Kind != policy.SourceIP ||
		addr[0].Window.Limit != 60 || addr[0].Window.WindowSeconds != 60 {
		t.Errorf("per-address rules %+v", addr)
	}
	keyRules := cfg.Policies[1].Rules
	if len(keyRules) != 2 {
		t.Fatalf("per-key rules: %+v", keyRules)
	}
	deny, hourly := keyRules[0], keyRules[1]
	if deny.Action != policy.ActionDeny || deny.DenyStatus != 429 || len(deny.Match) != 1 || deny.Match[0].Cond.Value != "revoked-key" {
		t.Errorf("the revoked key's rule %+v", deny)
	}
	if hourly.Window.Limit != 1000 || hourly.Window.WindowSeconds != 3600 || hourly.Keys[0].Name != "x-api-key" {
		t.Errorf("the hourly rule %+v", hourly)
	}
	// The unlimited and the revoked key are left out of the hourly rule;
	// acme's own limit is an override of it.
	if len(hourly.Match) != 1 || hourly.Match[0].Cond.Not == nil || strings.Join(hourly.Match[0].Cond.Not.Values, ",") != "internal-batch,revoked-key" {
		t.Errorf("the hourly rule's match %+v", hourly.Match)
	}
	if len(hourly.Overrides) != 1 || hourly.Overrides[0].Key != "acme" || hourly.Overrides[0].Window.Limit != 50000 {
		t.Errorf("the hourly rule's overrides %+v", hourly.Overrides)
	}
}

func TestLocalScopeHasNoFleet(t *testing.T) {
	cfg := convert(t, guideConfig, guideActions, Options{Scope: "local"})
	if cfg.Fleet != nil || cfg.Policies[0].Rules[0].Global {
		t.Errorf("a local conversion has fleet %+v, global %v", cfg.Fleet, cfg.Policies[0].Rules[0].Global)
	}
}

// Nested descriptors: a value at the first level picks its own subtree
// (the service never falls back to the key's own node), so the key's own
// node leaves that value out; a generic_key's fixed value picks a node and
// adds no condition.
func TestNestedDescriptorsFollowTheServicesLookup(t *testing.T) {
	const config = `domain: d
descriptors:
  - key: tenant
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tenant
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 10}
        shadow_mode: true
      - key: user
        value: bot
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: generic_key
    value: api
    descriptors:
      - key: method
        rate_limit: {unit: day, requests_per_unit: 7}
`
	const actions = `cluster: backend
timeout: 5s
rate_limits:
  - actions:
      - request_headers: {header_name: x-tenant, descriptor_key: tenant}
      - request_headers: {header_name: x-user, descriptor_key: user}
  - actions:
      - generic_key: {descriptor_value: api}
      - request_headers: {header_name: ":method", descriptor_key: method}
`
	cfg := convert(t, config, actions, Options{Scope: "local"})
	rules := cfg.Policies[0].Rules
	if len(rules) != 3 {
		t.Fatalf("tenant-user rules %+v", rules)
	}
	gold, bot, any := rules[0], rules[1], rules[2]
	if len(gold.Keys) != 1 || gold.Keys[0].Name != "x-user" || gold.Match[0].Cond.Value != "gold" || gold.Window.Limit != 100 {
		t.Errorf("gold %+v", gold)
	}
	if len(bot.Keys) != 1 || bot.Keys[0].Name != "x-tenant" || bot.Window.WindowSeconds != 1 || len(bot.Match) != 2 {
		t.Errorf("bot %+v", bot)
	}
	if len(any.Keys) != 2 || any.Mode != policy.ModeShadow || len(any.Match) != 2 || any.Window.Limit != 10 {
		t.Errorf("any tenant, any user %+v", any)
	}
	if m := cfg.Policies[1].Rules; len(m) != 1 || m[0].Keys[0].Kind != policy.SourceMethod || len(m[0].Match) != 0 || m[0].Window.WindowSeconds != 86400 {
		t.Errorf("per method %+v", m)
	}
}

// header_value_match and query_parameter_value_match put a fixed value in
// the descriptor when their conditions hold: the rules of its paths carry
// the conditions (negated with expect_match false).
func TestValueMatchesBecomeTheRulesConditions(t *testing.T) {
	config := `domain: d
descriptors:
  - key: remote_address
    descriptors:
      - key: header_match
        value: bulk
        rate_limit: {unit: minute, requests_per_unit: 2}
  - key: query_match
    value: no-debug
    descriptors:
      - key: api_key
        rate_limit: {unit: hour, requests_per_unit: 50}
`
	actions := `- actions:
    - remote_address: {}
    - header_value_match:
        descriptor_value: bulk
        headers: [{name: x-bulk, present_match: true}, {name: x-plan, string_match: {prefix: batch-}}]
- actions:
    - query_parameter_value_match:
        descriptor_value: no-debug
        expect_match: false
        query_parameters: [{name: debug, present_match: true}]
    - request_headers: {header_name: x-api-key, descriptor_key: api_key}
`
	res, err := EnvoyRatelimit([]byte(config), []byte(actions), Options{})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, res.Policy, `{"reject_headers": {"x-envoy-ratelimited": "true"}, "policies": [
  {"name": "remote_address-header_match", "rules": [{"name": "remote_address-header_match-bulk", "scope": "global",
    "match": {"header:x-bulk": {"present": true}, "header:x-plan": {"prefix": "batch-"}},
    "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60}}]},
  {"name": "query_match-api_key", "rules": [{"name": "query_match-no-debug-api_key", "scope": "global",
    "match": {"query:debug": {"present": false}},
    "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 50, "window_seconds": 3600}}]}
 ],
 "fleet": {"cluster": "sluice_rls"}}`)
}

// With skip_if_absent, Envoy builds the descriptor without the entry when
// the value is missing: the shorter descriptor's rules say the value is
// not there.
func TestSkipIfAbsentBuildsTheShorterDescriptorsRules(t *testing.T) {
	config := `domain: d
descriptors:
  - key: region
    descriptors:
      - key: user
        rate_limit: {unit: hour, requests_per_unit: 4}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 7}
`
	actions := `- actions:
    - request_headers: {header_name: x-region, descriptor_key: region, skip_if_absent: true}
    - request_headers: {header_name: x-user, descriptor_key: user}
`
	res, err := EnvoyRatelimit([]byte(config), []byte(actions), Options{Scope: "local"})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, res.Policy, `{"reject_headers": {"x-envoy-ratelimited": "true"}, "policies": [{"name": "region-user", "rules": [
  {"name": "region-user", "limit_keys": ["header:x-region", "header:x-user"], "algorithm": "fixed_window", "algorithm_config": {"limit": 4, "window_seconds": 3600}},
  {"name": "user", "match": {"header:x-region": {"present": false}}, "limit_keys": ["header:x-user"], "algorithm": "fixed_window", "algorithm_config": {"limit": 7, "window_seconds": 3600}}
 ]}]}`)
}

// Wildcard values (ending with *) take the values starting with the rest,
// after the exact values and in order, each value its own counter unless
// share_threshold makes one for them all; a value the service decides by
// an exact node or an earlier wildcard is kept from the later ones.
func TestWildcardValuesBecomePrefixConditions(t *testing.T) {
	config := `domain: d
descriptors:
  - key: partner
    value: p-vip
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: partner
    value: p-free-trial
    rate_limit: {unlimited: true}
  - key: partner
    value: "p-free*"
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: partner
    value: "p-*"
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 50}
  - key: partner
    rate_limit: {unit: hour, requests_per_unit: 10}
`
	actions := "- actions: [{request_headers: {header_name: x-partner, descriptor_key: partner}}]\n"
	res, cfg := ratelimitConvert(t, config, actions, Options{Scope: "local"})
	for partner, want := range map[string]string{
		"p-vip": "partner-p-vip", "p-free-trial": "partner-values", "p-free-9": "partner-p-free",
		"p-other": "partner-p", "x": "partner",
	} {
		got := applied(cfg, simulate.Request{Path: "/", Headers: map[string]string{"x-partner": partner}})["partner"]
		if got != want {
			t.Errorf("partner %s: rule %q applies, want %q\n%s", partner, got, want, res.Policy)
		}
	}
	keys := map[string]string{}
	for _, r := range cfg.Policies[0].Rules {
		if len(r.Keys) > 0 {
			keys[r.Name] = r.Keys[0].String()
		}
	}
	if keys["partner-p-free"] != "header:x-partner" || keys["partner-p"] != "all" {
		t.Errorf("keys %v: p-free* counts each value, p-* (share_threshold) one for all", keys)
	}
}

// masked_remote_address is the client's network (ip:network); a value of
// its own, a network, is a CIDR condition on the address.
func TestMaskedAddressesKeyOnTheClientsNetwork(t *testing.T) {
	config := `domain: d
descriptors:
  - key: masked_remote_address
    value: 10.0.0.0/24
    rate_limit: {unit: hour, requests_per_unit: 500}
  - key: masked_remote_address
    value: 192.0.2.0/24
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: masked_remote_address
    rate_limit: {unit: hour, requests_per_unit: 30}
`
	actions := "- actions: [{masked_remote_address: {v4_prefix_mask_len: 24, v6_prefix_mask_len: 56}}]\n"
	res, cfg := ratelimitConvert(t, config, actions, Options{Scope: "local"})
	// 10.0.0.0/24 is an override of the network rule; 192.0.2.0/24, in
	// shadow mode, a rule of its own matching the addresses of that network.
	for addr, want := range map[string]string{"10.0.0.9:1": "masked_remote_address", "192.0.2.9:1": "masked_remote_address-192.0.2.0_24",
		"10.0.1.9:1": "masked_remote_address", "[2001:db8::1]:1": "masked_remote_address"} {
		sim := simulate.Run(cfg, simulate.Request{Method: "GET", Path: "/", ClientAddress: addr}, simulate.Options{Now: 1e9})
		p := sim.Policies[0]
		if p.Applied < 0 || p.Rules[p.Applied].Name != want || p.Rules[p.Applied].Overridden != (addr == "10.0.0.9:1") {
			t.Errorf("%s: %+v, want rule %s (overridden for 10.0.0.0/24)\n%s", addr, p, want, res.Policy)
		}
	}
	for _, r := range cfg.Policies[0].Rules {
		if r.Keys[0].String() != "ip:network:24:56" {
			t.Errorf("rule %s keyed by %s, want ip:network:24:56", r.Name, r.Keys[0])
		}
	}
	if res, err := EnvoyRatelimit([]byte(config), []byte("- actions: [{masked_remote_address: {}}]\n"), Options{Scope: "local"}); err != nil ||
		!strings.Contains(string(res.Policy), `"ip:address"`) || strings.Contains(string(res.Policy), "ip:network") {
		t.Errorf("Envoy's default masks (32, 128) are the address itself: %v\n%s", err, res.Policy)
	}
}

// A descriptor of generic_keys alone is one bucket for every request, as
// the service keeps one counter.
func TestGenericKeysAloneConvertToOneBucket(t *testing.T) {
	config := `domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: generic_key
    value: everyone
    rate_limit: {unit: hour, requests_per_unit: 10000}
`
	actions := `- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]
- actions: [{generic_key: {descriptor_value: everyone}}]
`
	cfg := convert(t, config, actions, Options{})
	if r := cfg.Policies[0].Rules[0]; r.Window == nil || r.Window.WindowSeconds != 60 || r.Window.Limit != 100 || r.Keys[0].Kind != policy.SourceHeader {
		t.Errorf("per key: %+v", r)
	}
	if r := cfg.Policies[1].Rules[0]; len(r.Keys) != 1 || r.Keys[0].Kind != policy.SourceAll || r.Window.WindowSeconds != 3600 {
		t.Errorf("generic_key only: keys %v, window %+v; want one bucket for all requests", r.Keys, r.Window)
	}
}

func TestWhatCannotBeConvertedIsNamed(t *testing.T) {
	header := `- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]`
	for _, tc := range []struct{ config, actions, want string }{
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    colour: red\n", header, "config: line 5: field colour not found"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n", header, "config.descriptors[0].rate_limit.requests_per_unit: missing"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n", header, `config.descriptors[0].rate_limit.unit "fortnight"`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1, replaces: [{name: x}]}\n", header, "rate_limit.replaces: not converted"},
		{"domain: d\ndescriptors:\n  - key: k\n    value: a\n    share_threshold: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", header, "config.descriptors[0].share_threshold: only for a wildcard value"},
		{"domain: d\ndescriptors:\n  - key: k\n    quota_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n", header, "config.descriptors[0].quota_mode: not converted"},
		{"domain: d\ndescriptors:\n  - key: k\n  - key: k\n", header, "config.descriptors[1]: key \"k\" value \"\" again"},
		{"domain: d\ndescriptors:\n  - {value: v}\n", header, "config.descriptors[0].key: missing"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "", "rate_limits: empty"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`- actions: [{header_value_match: {descriptor_value: x, headers: []}}]`, "rate_limits[0].actions[0].header_value_match: headers: missing"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`- actions: [{source_cluster: {}}]`, "rate_limits[0].actions[0]: source_cluster is not converted"},
		{"domain: d\ndescriptors:\n  - key: masked_remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`- actions: [{masked_remote_address: {v4_prefix_mask_len: 0}}]`, `masked_remote_address.v4_prefix_mask_len: "0": want a whole number from 1 to 32`},
		{"domain: d\ndescriptors:\n  - key: masked_remote_address\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`- actions: [{masked_remote_address: {v4_prefix_mask_len: many}}]`, `masked_remote_address.v4_prefix_mask_len: "many": want a whole number`},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"- actions: [{request_headers: {header_name: x-a, descriptor_key: a, skip_if_absent: true}}, {request_headers: {header_name: x-b, descriptor_key: b, skip_if_absent: true}}, " +
				"{request_headers: {header_name: x-c, descriptor_key: c, skip_if_absent: true}}, {request_headers: {header_name: x-d, descriptor_key: d, skip_if_absent: true}}, " +
				"{query_parameters: {query_parameter_name: e, descriptor_key: e, skip_if_absent: true}}]", "more than 4 skip_if_absent actions"},
		{"domain: d\ndescriptors:\n  - key: generic_key\n    value: v\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
			`- actions: [{generic_key: {descriptor_value: v}}]`, "requests_per_unit 0 with generic_key actions only would refuse every request"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 1, unit_multiplier: 0}\n", header, "rate_limit.unit_multiplier: 0 multiplies the window to nothing"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: year, requests_per_unit: 1, unit_multiplier: 2}\n", header, "rate_limit.unit_multiplier: 2 years is 63072000 seconds; Sluice's windows are at most 31622400"},
		{"domain: d\ndescriptors:\n  - key: other\n    rate_limit: {unit: second, requests_per_unit: 1}\n", header, "nothing to convert"},
		{"domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n", "cluster: backend\n", "no rate_limits member"},
	} {
		_, err := EnvoyRatelimit([]byte(tc.config), []byte(tc.actions), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config %q, actions %q: error %v, want %q", tc.config, tc.actions, err, tc.want)
		}
	}
}

func TestOverrideKeysAreEscapedAndNamesValid(t *testing.T) {
	const config = `domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: 'a|b#c\d'
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: k
    value: 'not a name!'
    rate_limit: {unit: minute, requests_per_unit: 5}
`
	cfg := convert(t, config, `- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]`, Options{})
	rules := cfg.Policies[0].Rules
	if len(rules) != 2 || rules[0].Name != "k-not_a_name" || rules[1].Name != "k" {
		t.Fatalf("rules %+v", rules)
	}
	if ov := rules[1].Overrides; len(ov) != 1 || ov[0].Key != `a\|b\#c\\d` {
		t.Errorf("overrides %+v", ov)
	}
}

func TestCommandWritesThePolicyAndTheNotes(t *testing.T) {
	dir := t.TempDir()
	cfgPath, actPath, out := filepath.Join(dir, "config.yaml"), filepath.Join(dir, "rl.yaml"), filepath.Join(dir, "policy.json")
	os.WriteFile(cfgPath, []byte(guideConfig), 0o644)
	os.WriteFile(actPath, []byte(guideActions), 0o644)
	var stdout, stderr bytes.Buffer
	if code := Main([]string{"envoy-ratelimit", "-config", cfgPath, "-rate-limits", actPath, "-scope", "local", "-o", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	doc, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := policy.Parse(doc); err != nil || !strings.Contains(stderr.String(), "note: the rules are local") {
		t.Errorf("policy %v; stderr %s", err, stderr.String())
	}
	for _, args := range [][]string{{}, {"envoy-ratelimit"}, {"haproxy"}, {"envoy-ratelimit", "-config", cfgPath}} {
		if code := Main(args, &stdout, &stderr); code != 2 {
			t.Errorf("%q: exit %d, want 2 (usage)", args, code)
		}
	}
	if code := Main([]string{"envoy-ratelimit", "-config", filepath.Join(dir, "missing"), "-rate-limits", actPath}, &stdout, &stderr); code != 1 ||
		!strings.Contains(stderr.String(), "missing: no such file") {
		t.Errorf("a missing file: exit %d, %s", code, stderr.String())
	}
}

func FuzzEnvoyRatelimit(f *testing.F) {
	f.Add([]byte(guideConfig), []byte(guideActions), true)
	f.Add([]byte("domain: d\ndescriptors:\n  - key: k\n    descriptors: [{key: j, rate_limit: {unit: day, requests_per_unit: 3}}]\n"),
		[]byte("rate_limits: [{actions: [{request_headers: {header_name: a, descriptor_key: k}}, {query_parameters: {query_parameter_name: q, descriptor_key: j}}]}]"), false)
	f.Add([]byte("domain: d\ndescriptors:\n  - {key: k, value: a, rate_limit: {unlimited: true}}\n  - {key: k, value: \"a*\", descriptors: [{key: j, value: \"x*\", share_threshold: true, rate_limit: {unit: hour, requests_per_unit: 0}}]}\n"+
		"  - {key: k, rate_limit: {unit: hour, requests_per_unit: 2}}\n  - {key: header_match, value: m, rate_limit: {unit: minute, requests_per_unit: 9}}\n"),
		[]byte("- actions: [{request_headers: {header_name: a, descriptor_key: k}}, {query_parameters: {query_parameter_name: q, descriptor_key: j, skip_if_absent: true}}]\n"+
			"- actions: [{header_value_match: {descriptor_value: m, headers: [{name: b, string_match: {prefix: z}}]}}]\n"), true)
	f.Add([]byte(streamDoneConfig), []byte(streamDoneActions+"- actions: [{destination_cluster: {}}]\n"), true)
	f.Add([]byte(guideConfig), []byte(guideActions+"  hits_addend: {format: '%DYNAMIC_METADATA(a:b:c.d)%'}\n- actions: [{remote_address: {}}]\n  hits_addend: {format: '%REQ(x-a)%'}\n"), false)
	f.Fuzz(func(t *testing.T, config, actions []byte, global bool) {
		opt := Options{Scope: "local"}
		if global {
			opt.Scope = "global"
		}
		res, err := EnvoyRatelimit(config, actions, opt)
		if err != nil {
			return
		}
		if _, err := policy.Parse(res.Policy); err != nil {
			t.Fatalf("a converted policy the parser refuses: %v\n%s", err, res.Policy)
		}
	})
}

// The policy docs/migrating.md shows for its envoyproxy/ratelimit
// configuration is what the conversion makes of it.
func TestTheMigrationGuideShowsTheConversionsOutput(t *testing.T) {
	for example, in := range map[string][2]string{
		"envoyproxy-ratelimit-converted":   {guideConfig, guideActions},
		"envoyproxy-ratelimit-stream-done": {streamDoneGuideConfig, strings.ReplaceAll(streamDoneActions, "x-user", "x-user-id")},
		"envoyproxy-ratelimit-hits-format": {"domain: api\ndescriptors:\n  - key: api_key\n    rate_limit: {unit: minute, requests_per_unit: 100}\n",
			"- actions: [{request_headers: {header_name: x-api-key, descriptor_key: api_key}}]\n  hits_addend: {format: \"%REQ(x-cost)%\"}\n"},
	} {
		res, err := EnvoyRatelimit([]byte(in[0]), []byte(in[1]), Options{Scope: "local"})
		if err != nil {
			t.Fatalf("%s: %v", example, err)
		}
		sameAsGuide(t, guideBlock(t, "<!-- example: "+example+" -->", "json"), res.Policy)
	}
}

// streamDoneGuideConfig is streamDoneConfig without vip, as the guide shows it.
var streamDoneGuideConfig = streamDoneConfig[:strings.Index(streamDoneConfig, "  - key: user\n    value: vip")]

// requests_per_unit 0 on a key's own node refuses every other value: the
// values with nodes of their own are stopped before the deny rule by an
// unlimited rule, after their own rules.
func TestARefusedKeyKeepsItsValuesOfTheirOwn(t *testing.T) {
	const config = `domain: d
descriptors:
  - key: partner
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: partner
    value: p1
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: partner
    value: p2
    rate_limit: {unlimited: true}
`
	cfg := convert(t, config, `- actions: [{request_headers: {header_name: x-partner, descriptor_key: partner}}]`, Options{Scope: "local"})
	rules := cfg.Policies[0].Rules
	if len(rules) != 3 || rules[0].Window == nil || rules[1].Action != policy.ActionUnlimited || rules[2].Action != policy.ActionDeny {
		t.Fatalf("rules %+v", rules)
	}
	if c := rules[1].Match[0].Cond; strings.Join(c.Values, ",") != "p1,p2" {
		t.Errorf("the unlimited rule's values %v", c.Values)
	}
	if c := rules[2].Match[0].Cond; c.Op != policy.MatchPresent || !c.Present {
		t.Errorf("the deny rule's condition %+v", c)
	}
}

// ratelimitConvert converts config and actions and parses the policy.
func ratelimitConvert(t *testing.T, config, actions string, opt Options) (Result, *policy.Config) {
	t.Helper()
	res, err := EnvoyRatelimit([]byte(config), []byte(actions), opt)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(res.Policy)
	if err != nil {
		t.Fatalf("%v\n%s", err, res.Policy)
	}
	return res, cfg
}

// unit_multiplier lengthens the window: the service counts per unit ×
// multiplier seconds, aligned on the epoch, as a fixed window does.
func TestAMultipliedUnitIsAWindowThatMuchLonger(t *testing.T) {
	cfg := convert(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100, unit_multiplier: 5}\n",
		`- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]`, Options{})
	r := &cfg.Policies[0].Rules[0]
	if r.Algorithm != policy.AlgorithmFixedWindow || r.Window == nil || r.Window.Limit != 100 || r.Window.WindowSeconds != 300 {
		t.Fatalf("rule %s: %s %+v, want a fixed window of 100 per 300 s", r.Name, r.Algorithm, r.Window)
	}
	// A value of another multiple of the key's unit keeps its own window:
	// it is a rule of its own, not an override of the key's.
	cfg = convert(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n  - key: k\n    value: slow\n    rate_limit: {unit: minute, requests_per_unit: 10, unit_multiplier: 5}\n",
		`- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]`, Options{})
	rules := cfg.Policies[0].Rules
	if len(rules) != 2 || rules[0].Window.WindowSeconds != 300 || rules[0].Window.Limit != 10 || rules[1].Window.WindowSeconds != 60 || len(rules[1].Overrides) != 0 {
		t.Errorf("a value of 10 per 5 minutes under a key of 100 a minute: %+v", rules)
	}
}

// hits_addend's number is what each request costs the descriptor's
// counter: every window rule of the entry gets it as its fixed_cost.
func TestHitsAddendIsEachRequestsCost(t *testing.T) {
	cfg := convert(t, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n    descriptors: []\n  - key: k\n    value: big\n    rate_limit: {unit: minute, requests_per_unit: 1000}\n",
		"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {number: 5}\n", Options{})
	r := &cfg.Policies[0].Rules[len(cfg.Policies[0].Rules)-1]
	if r.Window == nil || r.Window.FixedCost != 5 || r.Window.Limit != 100 {
		t.Fatalf("rule %s: %+v, want 100 a minute at 5 a request", r.Name, r.Window)
	}
	for _, tc := range []struct{ actions, want string }{
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {format: '%BYTES_RECEIVED%'}\n", `hits_addend.format: "%BYTES_RECEIVED%" is not converted`},
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {format: '%REQ(x-a?x-b)%'}\n", "is not converted"},
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {format: 'n=%REQ(x-a)%'}\n", "is not converted"},
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {format: '%DYNAMIC_METADATA(ns)%'}\n", "with one key or more"},
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {number: 2, format: '%REQ(x-a)%'}\n", "want number or format, one of them"},
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {number: 0}\n", "hits_addend.number: 0 counts nothing, so the entry only checks"},
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {number: 101}\n", "101 hits per request, more than rule"},
		{"- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  stage: 1\n", "not stage, disable_key or limit"},
	} {
		_, err := EnvoyRatelimit([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"), []byte(tc.actions), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want an error containing %q", tc.actions, err, tc.want)
		}
	}
}

// A hits_addend format reading the request (a header, dynamic metadata)
// is each request's cost, read by the filter the same way; a request
// without it is not limited by the entry's rules, as Envoy ignores its
// descriptors.
func TestHitsAddendFormatIsTheRulesCostSource(t *testing.T) {
	config := "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	for _, tc := range []struct{ format, source string }{
		{"%REQ(X-Cost)%", "header:x-cost"},
		{"%REQUEST_HEADER(x-cost)%", "header:x-cost"},
		{"%DYNAMIC_METADATA(envoy.filters.http.lua:cost)%", "metadata:envoy.filters.http.lua:cost"},
		{"%DYNAMIC_METADATA(ns:usage:a.b)%", "metadata:ns:usage.[a.b]"},
	} {
		res, cfg := ratelimitConvert(t, config, "- actions: [{request_headers: {header_name: x-k, descriptor_key: k}}]\n  hits_addend: {format: '"+tc.format+"'}\n", Options{})
		r := &cfg.Policies[0].Rules[0]
		if r.Window == nil || r.Window.Cost.String() != tc.source || len(r.Match) != 1 || r.Match[0].Source.String() != tc.source {
			t.Errorf("%s: rule %+v, match %+v; want cost_source %s and a condition that it is present", tc.format, r.Window, r.Match, tc.source)
		}
		if !slices.ContainsFunc(res.Notes, func(n string) bool { return strings.Contains(n, "ignores the descriptors of a request without it") }) {
			t.Errorf("%s: no note on requests without the value: %q", tc.format, res.Notes)
		}
	}
}

// streamDoneConfig limits each user's LLM tokens per minute, and a
// customer's per day.
const streamDoneConfig = `domain: ai
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 6000}
  - key: user
    value: acme
    rate_limit: {unit: day, requests_per_unit: 1000000}
  - key: user
    value: vip
    rate_limit: {unit: minute, requests_per_unit: 60000}
`

// streamDoneActions are Envoy AI Gateway's pair: the request-path check and
// the tokens counted when the stream is done.
const streamDoneActions = `- actions: [{request_headers: {header_name: x-user, descriptor_key: user}}]
  hits_addend: {number: 0}
- actions: [{request_headers: {header_name: x-user, descriptor_key: user}}]
  apply_on_stream_done: true
  hits_addend: {format: '%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%'}
`

// A request-path check and an apply_on_stream_done entry of the same
// actions convert to one policy whose rules charge the answer's usage:
// a minute's limit is a token bucket, a day's a calendar quota; a value
// of the key's own unit is an override of the key's rule, with the
// bucket's or the quota's numbers.
func TestStreamDoneTokenCountsBecomeRulesChargedFromTheAnswer(t *testing.T) {
	res, cfg := ratelimitConvert(t, streamDoneConfig, streamDoneActions, Options{})
	if len(cfg.Policies) != 1 {
		t.Fatalf("%d policies, want one for the pair", len(cfg.Policies))
	}
	rules := cfg.Policies[0].Rules
	if len(rules) != 2 {
		t.Fatalf("rules %+v", rules)
	}
	acme, each := rules[0], rules[1]
	if acme.Quota == nil || acme.Quota.Limit != 1000000 || acme.Quota.Period != "day" || !acme.Global ||
		acme.Quota.Cost.String() != "response_json:usage.total_tokens" || len(acme.Match) != 1 || acme.Match[0].Cond.Value != "acme" {
		t.Errorf("acme's rule %+v (quota %+v)", acme, acme.Quota)
	}
	if each.TokenBucket == nil || each.TokenBucket.Burst != 6000 || each.TokenBucket.TokensPerSecond != 100 || !each.Global ||
		each.TokenBucket.Cost.String() != "response_json:usage.total_tokens" || len(each.Overrides) != 1 {
		t.Fatalf("the per-user rule %+v (bucket %+v)", each, each.TokenBucket)
	}
	if o := each.Overrides[0]; o.Key != "vip" || o.TokenBucket == nil || o.TokenBucket.Burst != 60000 || o.TokenBucket.TokensPerSecond != 1000 {
		t.Errorf("vip's override %+v (bucket %+v), want 60,000 refilled over a minute", o, o.TokenBucket)
	}
	// A day's value under a day's key: an override of the quota's limit.
	daily := convert(t, "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 100000}\n  - key: user\n    value: acme\n    rate_limit: {unit: day, requests_per_unit: 1000000}\n",
		streamDoneActions, Options{})
	if r := daily.Policies[0].Rules; len(r) != 1 || r[0].Quota == nil || r[0].Quota.Limit != 100000 || len(r[0].Overrides) != 1 ||
		r[0].Overrides[0].Quota == nil || r[0].Overrides[0].Quota.Limit != 1000000 {
		t.Errorf("a daily table: %+v", r)
	}
	notes := strings.Join(res.Notes, "\n")
	for _, want := range []string{"read by Sluice from the answer's body itself (response_json:usage.total_tokens", "a token bucket of the limit"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the notes do not say %q:\n%s", want, notes)
		}
	}
	// Each of the AI Gateway's counts is read from its place in the answer.
	for count, want := range map[string]string{"llm_input_token": "usage.prompt_tokens", "llm_output_token": "usage.completion_tokens"} {
		cfg := convert(t, streamDoneConfig, strings.Replace(streamDoneActions, "llm_total_token", count, 1), Options{Scope: "local"})
		if got := cfg.Policies[0].Rules[1].TokenBucket.Cost.String(); got != "response_json:"+want || cfg.Policies[0].Rules[1].Global {
			t.Errorf("%s: cost %s, want response_json:%s on a local rule", count, got, want)
		}
	}
}

// What a stream-done entry cannot convert to is refused, naming the field.
func TestStreamDoneEntriesThatCannotConvertAreNamed(t *testing.T) {
	const check = "- actions: [{request_headers: {header_name: x-user, descriptor_key: user}}]\n  hits_addend: {number: 0}\n"
	const done = "- actions: [{request_headers: {header_name: x-user, descriptor_key: user}}]\n  apply_on_stream_done: true\n"
	const tokens = "  hits_addend: {format: '%DYNAMIC_METADATA(io.envoy.ai_gateway:llm_total_token)%'}\n"
	minute := "domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 100}\n"
	for _, tc := range []struct{ config, actions, want string }{
		{minute, done + tokens, "rate_limits[0].apply_on_stream_done: no rate_limits entry of the same actions checks"},
		{minute, strings.Replace(check, "number: 0", "number: 1", 1) + done + tokens, "rate_limits[0].hits_addend: it checks rate_limits[1]'s descriptors and counts each request too"},
		{minute, check + done + "  hits_addend: {number: 3}\n", "rate_limits[1].hits_addend: an apply_on_stream_done entry is converted when"},
		{minute, check + done, "rate_limits[1].hits_addend: an apply_on_stream_done entry"},
		{minute, check + done + "  hits_addend: {format: '%DYNAMIC_METADATA(acme:tokens)%'}\n", `rate_limits[1].hits_addend.format "%DYNAMIC_METADATA(acme:tokens)%": not converted`},
		{minute, check + done + "  hits_addend: {format: '%DYNAMIC_METADATA(io.envoy.ai_gateway:my_cost)%'}\n", "my_cost is not one of Envoy AI Gateway's token counts"},
		{minute, check + done + tokens + done + tokens, "rate_limits[2]: rate_limits[0] already checks the same descriptors for rate_limits[1]"},
		{"domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 100}\n", check + done + tokens, "rule user: unit_multiplier on descriptors charged when the stream is done"},
		{"domain: d\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 0}\n", check + done + tokens, "rule user: requests_per_unit 0 on descriptors charged"},
	} {
		_, err := EnvoyRatelimit([]byte(tc.config), []byte(tc.actions), Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.actions, err, tc.want)
		}
	}
}

// destination_cluster is the cluster the route sends the request to:
// Sluice's cluster source, each cluster its own counter, a cluster's own
// limit an override.
func TestDestinationClusterKeysOnTheUpstreamCluster(t *testing.T) {
	cfg := convert(t, `domain: backends
descriptors:
  - key: destination_cluster
    rate_limit: {unit: second, requests_per_unit: 100}
  - key: destination_cluster
    value: payments
    rate_limit: {unit: second, requests_per_unit: 10}
`, "- actions: [{destination_cluster: {}}]\n", Options{Scope: "local"})
	r := cfg.Policies[0].Rules[0]
	if len(r.Keys) != 1 || r.Keys[0].Kind != policy.SourceCluster || r.Window == nil || r.Window.Limit != 100 ||
		len(r.Overrides) != 1 || r.Overrides[0].Key != "payments" || r.Overrides[0].Window.Limit != 10 {
		t.Fatalf("rule %+v", r)
	}
	res := simulate.Run(cfg, simulate.Request{Method: "GET", Path: "/", Cluster: "payments"}, simulate.Options{Now: 1e9})
	if res.Policies[0].Applied != 0 || res.Policies[0].Rules[0].Identity != "cluster=payments" {
		t.Errorf("a request to the payments cluster: %+v", res.Policies[0])
	}
}
