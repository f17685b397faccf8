package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// kongRealistic is the kind of kong.yaml a team runs: two services, a
// route with its own limits, a service counting in Redis, a customer with
// its own plan, key-auth everywhere and a per-address limit for the rest.
const kongRealistic = `_format_version: "3.0"
services:
  - name: catalog
    url: http://catalog.internal:8080
    routes:
      - name: products
        hosts: [api.example.com]
        paths: [/products]
        methods: [GET, HEAD]
      - name: search
        hosts: [api.example.com]
        paths: [/search]
        plugins:
          - name: rate-limiting
            config:
              second: 5
              hour: 1000
              limit_by: header
              header_name: x-api-key
              policy: local
  - name: orders
    url: http://orders.internal:8080
    routes:
      - name: orders
        hosts: [api.example.com]
        paths: [/orders, /carts]
    plugins:
      - name: rate-limiting
        config:
          minute: 100
          limit_by: consumer
          policy: redis
          redis: {host: redis.internal, port: 6379, timeout: 2000, ssl: true}
          sync_rate: -1
consumers:
  - username: acme
    keyauth_credentials:
      - key: acme-prod-7f3a
      - key: acme-staging-91c2
    plugins:
      - name: rate-limiting
        config: {minute: 2000, hour: 50000, limit_by: consumer, policy: local}
plugins:
  - name: key-auth
    config: {key_names: [x-api-key], key_in_query: false}
  - name: rate-limiting
    config: {minute: 600, limit_by: ip, policy: local, fault_tolerant: true, hide_client_headers: false}
`

// kongRealisticPolicy is what kongRealistic converts to.
const kongRealisticPolicy = `{
  "reject_body": "{\"message\":\"API rate limit exceeded\"}",
  "legacy_headers": true,
  "fleet": {"cluster": "sluice_rls"},
  "policies": [
    {"name": "second", "rules": [
      {"name": "acme-second", "action": "unlimited",
       "match": {"header:x-api-key": {"in": ["acme-prod-7f3a", "acme-staging-91c2"]}}},
      {"name": "search-second", "match": {"host": "api.example.com", "path": {"prefix": "/search"}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 5, "window_seconds": 1}, "limit_headers": {"limit": "X-RateLimit-Limit-Second", "remaining": "X-RateLimit-Remaining-Second"}},
      {"name": "search-address-second", "match": {"host": "api.example.com", "path": {"prefix": "/search"}},
       "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 5, "window_seconds": 1}, "limit_headers": {"limit": "X-RateLimit-Limit-Second", "remaining": "X-RateLimit-Remaining-Second"}}]},
    {"name": "minute", "rules": [
      {"name": "acme-minute", "match": {"header:x-api-key": {"in": ["acme-prod-7f3a", "acme-staging-91c2"]}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 2000, "window_seconds": 60}, "limit_headers": {"limit": "X-RateLimit-Limit-Minute", "remaining": "X-RateLimit-Remaining-Minute"}},
      {"name": "search-minute", "action": "unlimited", "match": {"host": "api.example.com", "path": {"prefix": "/search"}}},
      {"name": "orders-minute", "scope": "global", "match": {"host": "api.example.com", "path": {"regex": "^(?:/orders|/carts)"}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 100, "window_seconds": 60}, "limit_headers": {"limit": "X-RateLimit-Limit-Minute", "remaining": "X-RateLimit-Remaining-Minute"}},
      {"name": "orders-address-minute", "scope": "global", "match": {"host": "api.example.com", "path": {"regex": "^(?:/orders|/carts)"}},
       "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 100, "window_seconds": 60}, "limit_headers": {"limit": "X-RateLimit-Limit-Minute", "remaining": "X-RateLimit-Remaining-Minute"}},
      {"name": "global-minute", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 600, "window_seconds": 60}, "limit_headers": {"limit": "X-RateLimit-Limit-Minute", "remaining": "X-RateLimit-Remaining-Minute"}}]},
    {"name": "hour", "rules": [
      {"name": "acme-hour", "match": {"header:x-api-key": {"in": ["acme-prod-7f3a", "acme-staging-91c2"]}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 50000, "window_seconds": 3600}, "limit_headers": {"limit": "X-RateLimit-Limit-Hour", "remaining": "X-RateLimit-Remaining-Hour"}},
      {"name": "search-hour", "match": {"host": "api.example.com", "path": {"prefix": "/search"}},
       "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1000, "window_seconds": 3600}, "limit_headers": {"limit": "X-RateLimit-Limit-Hour", "remaining": "X-RateLimit-Remaining-Hour"}},
      {"name": "search-address-hour", "match": {"host": "api.example.com", "path": {"prefix": "/search"}},
       "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1000, "window_seconds": 3600}, "limit_headers": {"limit": "X-RateLimit-Limit-Hour", "remaining": "X-RateLimit-Remaining-Hour"}}]}
  ]
}`

// kongConvert converts doc and parses the policy.
func kongConvert(t *testing.T, doc string, opt KongOptions) (*policy.Config, Result) {
	t.Helper()
	res, err := Kong([]byte(doc), opt)
	return parsed(t, doc, res, err)
}

// applied is the rule each policy applies to req (policies where none
// does are left out).
func applied(cfg *policy.Config, req simulate.Request) map[string]string {
	if req.ClientAddress == "" {
		req.ClientAddress = "192.0.2.7:4000"
	}
	if req.Method == "" {
		req.Method = "GET"
	}
	out := map[string]string{}
	for _, p := range simulate.Run(cfg, req, simulate.Options{Now: 1.7e9}).Policies {
		if p.Applied >= 0 {
			out[p.Name] = p.Rules[p.Applied].Name
		}
	}
	return out
}

func sameJSON(t *testing.T, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("the expected JSON: %v", err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func notesHave(t *testing.T, notes []string, wants ...string) {
	t.Helper()
	all := strings.Join(notes, "\n")
	for _, w := range wants {
		if !strings.Contains(all, w) {
			t.Errorf("no note says %q; notes:\n%s", w, all)
		}
	}
}

func TestKongConvertsARealisticConfiguration(t *testing.T) {
	cfg, res := kongConvert(t, kongRealistic, KongOptions{})
	sameJSON(t, res.Policy, kongRealisticPolicy)
	notesHave(t, res.Notes,
		"consumers are known by their key-auth key in header:x-api-key (the first key_names of key-auth in the file)",
		`"scope": "global" rules`, `give Envoy the cluster "sluice_rls"`, "-redis-addrs",
		"limit_by consumer counts each key apart", `an "unlimited" rule stands for a plugin without that period`,
		"xff_trusted_hops", "X-RateLimit-Limit-<period>")
	acme := map[string]string{"x-api-key": "acme-prod-7f3a"}
	for _, tc := range []struct {
		what string
		req  simulate.Request
		want map[string]string
	}{
		// Kong applies acme's own plugin wherever acme calls: no limit
		// per second, its own per minute and hour.
		{"acme searching", simulate.Request{Host: "api.example.com", Path: "/search?q=x", Headers: acme},
			map[string]string{"second": "acme-second", "minute": "acme-minute", "hour": "acme-hour"}},
		{"another key searching", simulate.Request{Host: "api.example.com", Path: "/search", Headers: map[string]string{"x-api-key": "k2"}},
			map[string]string{"second": "search-second", "minute": "search-minute", "hour": "search-hour"}},
		{"another key ordering", simulate.Request{Host: "api.example.com", Path: "/carts/7", Method: "POST", Headers: map[string]string{"x-api-key": "k2"}},
			map[string]string{"minute": "orders-minute"}},
		{"no key ordering", simulate.Request{Host: "api.example.com", Path: "/orders"},
			map[string]string{"minute": "orders-address-minute"}},
		{"products", simulate.Request{Host: "api.example.com", Path: "/products/3", Headers: map[string]string{"x-api-key": "k2"}},
			map[string]string{"minute": "global-minute"}},
	} {
		if got := applied(cfg, tc.req); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.what, got, tc.want)
		}
	}
}

func TestKongOutputIsTheSameEveryTime(t *testing.T) {
	doc := `_format_version: "3.0"
services:
  - name: s
    routes:
      - {name: a, paths: [/a], headers: {x-b: [one], x-a: [two], x-c: [Three]}, hosts: [b.example, a.example]}
      - {name: b, paths: [/b], headers: {x-b: [one], x-a: [two], x-c: [Three]}, hosts: [b.example, a.example]}
    plugins:
      - {name: rate-limiting, config: {second: 1, minute: 2, hour: 3, day: 4, month: 5, year: 6, error_code: 503}}
consumers:
  - {username: u, keyauth_credentials: [{key: k1}], plugins: [{name: rate-limiting, config: {minute: 9, error_message: slow}}]}
  - {username: v, keyauth_credentials: [{key: k2}], plugins: [{name: rate-limiting, config: {minute: 9, error_code: 429}}]}
`
	first, err := Kong([]byte(doc), KongOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		again, err := Kong([]byte(doc), KongOptions{})
		if err != nil || !bytes.Equal(again.Policy, first.Policy) || !slices.Equal(again.Notes, first.Notes) {
			t.Fatalf("a second conversion differs: %v\n%s\n%s", err, again.Policy, first.Policy)
		}
	}
}

func TestKongPeriodsBecomeFixedWindowsAndCalendarQuotas(t *testing.T) {
	cfg, _ := kongConvert(t, `plugins: [{name: rate-limiting, config: {limit_by: ip, second: 1, minute: 2, hour: 3, day: 4, month: 5, year: 6}}]`, KongOptions{})
	var names []string
	for _, p := range cfg.Policies {
		names = append(names, p.Name)
	}
	if want := []string{"second", "minute", "hour", "day", "month", "year"}; !slices.Equal(names, want) {
		t.Fatalf("policies %v, want one per period %v", names, want)
	}
	for i, window := range []int{1, 60, 3600, 86400} {
		r := cfg.Policies[i].Rules[0]
		if r.Algorithm != policy.AlgorithmFixedWindow || r.Window.WindowSeconds != window || r.Window.Limit != float64(i+1) {
			t.Errorf("%s: %s %+v, want fixed_window of %d s, limit %d", names[i], r.Algorithm, r.Window, window, i+1)
		}
	}
	for i, period := range []string{"month", "year"} {
		r := cfg.Policies[4+i].Rules[0]
		if r.Algorithm != policy.AlgorithmQuota || r.Quota.Period != period || r.Quota.TimeZone != "UTC" || r.Quota.Limit != float64(5+i) {
			t.Errorf("%s: %s %+v, want a UTC quota of the calendar %s", period, r.Algorithm, r.Quota, period)
		}
	}
}

func TestKongFractionalLimitsCountWholeRequestsAsKongDoes(t *testing.T) {
	cfg, res := kongConvert(t, `plugins: [{name: rate-limiting, config: {limit_by: ip, minute: 2.5}}]`, KongOptions{})
	if l := cfg.Policies[0].Rules[0].Window.Limit; l != 3 {
		t.Errorf("limit %v, want 3 (Kong admits while the count is below 2.5)", l)
	}
	notesHave(t, res.Notes, "plugins[0].config.minute (line 1): 2.5 is 3 whole requests")
}

func TestKongLimitByBecomesTheRulesKeys(t *testing.T) {
	for _, tc := range []struct {
		config string
		opt    KongOptions
		keys   [][]string // of the minute policy's rules, in order
	}{
		{`{minute: 5, limit_by: ip}`, KongOptions{}, [][]string{{"ip:address"}}},
		{`{minute: 5, limit_by: header, header_name: X-Tenant}`, KongOptions{}, [][]string{{"header:x-tenant"}, {"ip:address"}}},
		{`{minute: 5}`, KongOptions{}, [][]string{{"header:apikey"}, {"ip:address"}}},
		{`{minute: 5, limit_by: credential}`, KongOptions{}, [][]string{{"header:apikey"}, {"ip:address"}}},
		{`{minute: 5, limit_by: consumer}`, KongOptions{ConsumerKey: "metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"},
			[][]string{{"metadata:envoy.filters.http.jwt_authn:jwt_payload.sub"}, {"ip:address"}}},
		// No service in the file: Kong counts per address.
		{`{minute: 5, limit_by: service}`, KongOptions{}, [][]string{{"ip:address"}}},
		{`{minute: 5, limit_by: path, path: /login}`, KongOptions{}, [][]string{{"path"}, {"ip:address"}}},
	} {
		cfg, _ := kongConvert(t, "plugins: [{name: rate-limiting, config: "+tc.config+"}]", tc.opt)
		var keys [][]string
		for _, r := range cfg.Policies[0].Rules {
			var ks []string
			for _, k := range r.Keys {
				ks = append(ks, k.String())
			}
			keys = append(keys, ks)
		}
		if !reflect.DeepEqual(keys, tc.keys) {
			t.Errorf("%s: keys %v, want %v", tc.config, keys, tc.keys)
		}
	}
}

func TestKongLimitByPathCountsThatPathAndTheOthersByAddress(t *testing.T) {
	cfg, _ := kongConvert(t, `services:
  - name: auth
    routes: [{name: auth, paths: [/auth]}]
    plugins: [{name: rate-limiting, config: {minute: 5, limit_by: path, path: /auth/login}}]
`, KongOptions{})
	for path, want := range map[string]string{"/auth/login": "auth-minute", "/auth/logout": "auth-address-minute", "/auth/login/x": "auth-address-minute"} {
		if got := applied(cfg, simulate.Request{Path: path})["minute"]; got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	_, res := kongConvert(t, `services:
  - name: auth
    routes: [{name: auth, paths: [/auth]}]
    plugins: [{name: rate-limiting, config: {minute: 5, limit_by: path, path: /other}}]
`, KongOptions{})
	notesHave(t, res.Notes, "limit_by path /other is not a path of its routes")
}

func TestKongConsumerKeyIsKeyAuthsFirstKeyName(t *testing.T) {
	doc := `_format_version: "3.0"
plugins:
  - {name: rate-limiting, config: {minute: 5}}
services:
  - name: s
    plugins: [{name: key-auth, config: {key_names: [X-Key, apikey]}}]
  - name: t
    plugins: [{name: key-auth, config: {key_names: [other]}}]
`
	cfg, res := kongConvert(t, doc, KongOptions{})
	if k := cfg.Policies[0].Rules[0].Keys[0].String(); k != "header:x-key" {
		t.Errorf("key %s, want header:x-key", k)
	}
	notesHave(t, res.Notes, "services[0].plugins[0]: key-auth reads the key from X-Key, apikey; the rules read header:x-key only",
		"services[1].plugins[0]: key-auth reads the key from other", "key_in_query")
	cfg, _ = kongConvert(t, doc, KongOptions{ConsumerKey: "query:apikey"})
	if k := cfg.Policies[0].Rules[0].Keys[0].String(); k != "query:apikey" {
		t.Errorf("key %s, want the option's query:apikey", k)
	}
	if _, err := Kong([]byte(doc), KongOptions{ConsumerKey: "form:x"}); err == nil || !strings.Contains(err.Error(), `consumer_key: "form:x" is not a key source`) {
		t.Errorf("a bad consumer key: %v", err)
	}
	var ie *InputError
	if _, err := Kong([]byte(doc), KongOptions{ConsumerKey: "form:x"}); !errors.As(err, &ie) || ie.Input != "consumer_key" {
		t.Errorf("the error is not about the consumer key: %#v", err)
	}
}

// kongLevels has a rate-limiting plugin at each of Kong's eight levels.
const kongLevels = `_format_version: "3.0"
services:
  - name: svc
    routes:
      - {name: rt, paths: [/rt]}
      - {name: other, paths: [/other]}
    plugins: [{name: rate-limiting, config: {minute: 7, limit_by: ip}}]
consumers:
  - username: alice
    keyauth_credentials: [{key: alice-key}]
plugins:
  - {name: rate-limiting, config: {minute: 8, limit_by: ip}}
  - {name: rate-limiting, route: rt, config: {minute: 6, limit_by: ip}}
  - {name: rate-limiting, consumer: alice, config: {minute: 5, limit_by: ip}}
  - {name: rate-limiting, route: rt, service: svc, config: {minute: 4, limit_by: ip}}
  - {name: rate-limiting, consumer: alice, service: svc, config: {minute: 3, limit_by: ip}}
  - {name: rate-limiting, consumer: alice, route: rt, config: {minute: 2, limit_by: ip}}
  - {name: rate-limiting, consumer: alice, route: rt, service: svc, config: {minute: 1, limit_by: ip}}
`

func TestKongPluginsAreOrderedByKongsPrecedence(t *testing.T) {
	cfg, _ := kongConvert(t, kongLevels, KongOptions{})
	var limits []float64
	for _, r := range cfg.Policies[0].Rules {
		limits = append(limits, r.Window.Limit)
	}
	if want := []float64{1, 2, 3, 4, 5, 6, 7, 8}; !slices.Equal(limits, want) {
		t.Errorf("rules of limits %v, want the most specific first %v", limits, want)
	}
	alice := map[string]string{"apikey": "alice-key"}
	for _, tc := range []struct {
		req  simulate.Request
		want string
	}{
		{simulate.Request{Path: "/rt", Headers: alice}, "alice-rt-minute"},
		{simulate.Request{Path: "/other", Headers: alice}, "alice-svc-minute"},
		{simulate.Request{Path: "/elsewhere", Headers: alice}, "alice-minute"},
		{simulate.Request{Path: "/rt"}, "rt-minute"},
		{simulate.Request{Path: "/other"}, "svc-minute"},
		{simulate.Request{Path: "/elsewhere"}, "global-minute"},
	} {
		if got := applied(cfg, tc.req)["minute"]; got != tc.want {
			t.Errorf("%s %v: %s, want %s", tc.req.Path, tc.req.Headers, got, tc.want)
		}
	}
}

func TestKongAPluginWithoutAPeriodKeepsLessSpecificOnesOff(t *testing.T) {
	cfg, res := kongConvert(t, `services:
  - name: s
    routes: [{name: r, paths: [/r]}]
    plugins: [{name: rate-limiting, config: {hour: 100, limit_by: ip}}]
plugins:
  - {name: rate-limiting, config: {minute: 60, hour: 600, limit_by: ip}}
`, KongOptions{})
	if got := applied(cfg, simulate.Request{Path: "/r"}); !reflect.DeepEqual(got, map[string]string{"minute": "s-minute", "hour": "s-hour"}) {
		t.Errorf("the service's request: %v; want the service's unlimited minute rule and its hour rule", got)
	}
	if r := cfg.RuleByName("s-minute"); r == nil || r.Action != policy.ActionUnlimited {
		t.Errorf("s-minute: %+v, want an unlimited rule", r)
	}
	if got := applied(cfg, simulate.Request{Path: "/x"}); !reflect.DeepEqual(got, map[string]string{"minute": "global-minute", "hour": "global-hour"}) {
		t.Errorf("another request: %v", got)
	}
	// The global plugin has no second: nothing would follow its
	// unlimited rule.
	cfg, _ = kongConvert(t, `services:
  - name: s
    routes: [{name: r, paths: [/r]}]
    plugins: [{name: rate-limiting, config: {second: 1, minute: 5, limit_by: ip}}]
plugins:
  - {name: rate-limiting, config: {minute: 60, limit_by: ip}}
`, KongOptions{})
	if p := cfg.Policies[0]; p.Name != "second" || len(p.Rules) != 1 || p.Rules[0].Name != "s-second" {
		t.Errorf("the second policy: %+v, want s-second alone", p)
	}
	notesHave(t, res.Notes, `an "unlimited" rule stands for a plugin without that period`)
}

func TestKongConsumerLimitsBecomeOverridesOfTheGlobalRule(t *testing.T) {
	doc := `consumers:
  - username: acme
    keyauth_credentials: [{key: acme-1}, {key: "a|b"}]
    plugins: [{name: rate-limiting, config: {minute: 1000, policy: redis}}]
  - username: small
    keyauth_credentials: [{key: small-1}]
    plugins: [{name: rate-limiting, config: {minute: 10, limit_by: credential, policy: redis}}]
  - username: same
    keyauth_credentials: [{key: same-1}]
    plugins: [{name: rate-limiting, config: {minute: 100, policy: redis}}]
plugins:
  - {name: rate-limiting, config: {minute: 100, policy: redis}}
  - {name: key-auth}
`
	cfg, res := kongConvert(t, doc, KongOptions{})
	p := cfg.Policies[0]
	if len(p.Rules) != 2 || p.Rules[0].Name != "global-minute" || p.Rules[1].Name != "global-address-minute" {
		t.Fatalf("rules:\n%s", res.Policy)
	}
	var got []string
	for _, o := range p.Rules[0].Overrides {
		got = append(got, fmt.Sprintf("%s=%v", o.Key, o.Window.Limit))
	}
	if want := []string{"acme-1=1000", `a\|b=1000`, "small-1=10"}; !slices.Equal(got, want) {
		t.Errorf("overrides %v, want %v", got, want)
	}
	r := simulate.Run(cfg, simulate.Request{Method: "GET", Path: "/", Headers: map[string]string{"apikey": "a|b"}, ClientAddress: "192.0.2.1"}, simulate.Options{Now: 1.7e9})
	if rr := r.Policies[0].Rules[0]; !rr.Applies || !rr.Overridden || !rr.Global {
		t.Errorf("the key a|b: %+v, want the global rule with its override", rr)
	}
	notesHave(t, res.Notes, "consumers' own limits are overrides of the global rule", "keep it as secret")
}

func TestKongConsumerLimitsAreRulesWhenARoutePluginComesBetween(t *testing.T) {
	cfg, _ := kongConvert(t, `services:
  - name: s
    routes: [{name: r, paths: [/r]}]
consumers:
  - username: acme
    keyauth_credentials: [{key: acme-1}, {key: acme-2}]
    plugins: [{name: rate-limiting, config: {minute: 1000}}]
plugins:
  - {name: rate-limiting, config: {minute: 100}}
  - {name: rate-limiting, route: r, config: {minute: 5}}
`, KongOptions{})
	acme := cfg.RuleByName("acme-minute")
	if acme == nil || len(acme.Match) != 1 || !slices.Equal(acme.Match[0].Cond.Values, []string{"acme-1", "acme-2"}) || len(cfg.RuleByName("global-minute").Overrides) != 0 {
		t.Fatalf("acme's rule: %+v", acme)
	}
	if got := applied(cfg, simulate.Request{Path: "/r", Headers: map[string]string{"apikey": "acme-2"}})["minute"]; got != "acme-minute" {
		t.Errorf("acme on the route: %s, want acme-minute (a consumer's plugin wins over a route's)", got)
	}
}

func TestKongConsumerPluginsApplyWhereKeyAuthRuns(t *testing.T) {
	cfg, res := kongConvert(t, `services:
  - name: private
    routes: [{name: private, paths: [/private]}]
    plugins:
      - {name: key-auth}
      - {name: rate-limiting, config: {minute: 50}}
  - name: public
    routes: [{name: public, paths: [/public]}]
    plugins: [{name: rate-limiting, config: {minute: 20, limit_by: consumer}}]
consumers:
  - username: acme
    keyauth_credentials: [{key: acme-1}]
    plugins: [{name: rate-limiting, config: {minute: 1000}}]
  - username: ghost
    plugins: [{name: rate-limiting, config: {minute: 1}}]
`, KongOptions{})
	key := map[string]string{"apikey": "acme-1"}
	if got := applied(cfg, simulate.Request{Path: "/private", Headers: key})["minute"]; got != "acme-minute" {
		t.Errorf("acme on the private service: %s", got)
	}
	if got := applied(cfg, simulate.Request{Path: "/public", Headers: key})["minute"]; got != "public-minute" {
		t.Errorf("acme on the public service, where Kong does not know it: %s", got)
	}
	if r := cfg.RuleByName("public-minute"); r.Keys[0].String() != "ip:address" || cfg.RuleByName("public-address-minute") != nil {
		t.Errorf("public-minute keys %v: Kong counts limit_by consumer per address where no consumer is known", r.Keys)
	}
	notesHave(t, res.Notes, "services[1].plugins[0]: key-auth does not run on its routes, so Kong counts limit_by consumer per client address",
		"consumers[1].plugins[0]: consumer ghost has no key-auth key in the file, so its plugin cannot be matched; skipped")
}

func TestKongRoutesBecomeMatches(t *testing.T) {
	for _, tc := range []struct {
		format, route, match string
	}{
		{"3.0", `{paths: [/api]}`, `{"path": {"prefix": "/api"}}`},
		{"3.0", `{paths: [/]}`, `null`},
		{"3.0", `{paths: [/a, /a/b, /c]}`, `{"path": {"regex": "^(?:/a|/c)"}}`},
		{"3.0", `{paths: ["~/users/\\d+$"]}`, `{"path": {"regex": "^(?:(?:/users/\\d+$))"}}`},
		{"3.0", `{paths: [/v1.0]}`, `{"path": {"prefix": "/v1.0"}}`},
		{"2.1", `{paths: ["/users/\\d+"]}`, `{"path": {"regex": "^(?:(?:/users/\\d+))"}}`},
		{"2.1", `{paths: [/v1.0]}`, `{"path": {"prefix": "/v1.0"}}`},
		{"3.0", `{hosts: [API.example.com]}`, `{"host": "api.example.com"}`},
		{"3.0", `{hosts: [a.example.com, b.example.com:8443]}`, `{"host": {"in": ["a.example.com", "b.example.com:8443"]}}`},
		{"3.0", `{hosts: ["*.example.com"]}`, `{"host": {"suffix": ".example.com"}}`},
		{"3.0", `{hosts: ["*.example.com", example.com]}`, `{"host": {"regex": "^(?:.*\\.example\\.com$|example\\.com$)"}}`},
		{"3.0", `{methods: [get]}`, `{"method": "GET"}`},
		{"3.0", `{headers: {X-Version: ["2"]}}`, `{"header:x-version": "2"}`},
		{"3.0", `{headers: {x-tier: [Gold, silver]}}`, `{"header:x-tier": {"regex": "^(?:(?i:Gold)$|(?i:silver)$)"}}`},
		{"3.0", `{headers: {x-tier: ["~*^gold"]}}`, `{"header:x-tier": {"regex": "^(?:.*(?i:^gold))"}}`},
	} {
		res, err := Kong([]byte(kongFlowRoute(tc.format, tc.route)), KongOptions{})
		if err != nil {
			t.Errorf("%s %s: %v", tc.format, tc.route, err)
			continue
		}
		var out struct {
			Policies []struct {
				Rules []struct {
					Match json.RawMessage `json:"match"`
				} `json:"rules"`
			} `json:"policies"`
		}
		if err := json.Unmarshal(res.Policy, &out); err != nil {
			t.Fatal(err)
		}
		m := out.Policies[0].Rules[0].Match
		if m == nil {
			m = json.RawMessage("null")
		}
		sameJSON(t, m, tc.match)
	}
}

func kongFlowRoute(format, route string) string {
	return "_format_version: \"" + format + "\"\nroutes:\n  - " + strings.TrimSuffix(route, "}") +
		", name: r, plugins: [{name: rate-limiting, config: {minute: 1, limit_by: ip}}]}\n"
}

func TestKongRouteMatchesHoldForTheRequestsKongRoutes(t *testing.T) {
	cfg, _ := kongConvert(t, kongFlowRoute("3.0", `{hosts: ["*.example.com"], paths: ["~/users/\\d+$", /static], methods: [GET], headers: {x-tier: [Gold]}}`), KongOptions{})
	r := cfg.RuleByName("r-minute")
	for _, tc := range []struct {
		host, path, method, tier string
		want                     bool
	}{
		{"shop.example.com", "/users/42", "GET", "gold", true},
		{"shop.example.com", "/static/app.js", "GET", "GOLD", true},
		{"shop.example.com", "/users/42/x", "GET", "gold", false},
		{"example.com", "/users/42", "GET", "gold", false},
		{"shop.example.com", "/users/42", "POST", "gold", false},
		{"shop.example.com", "/users/42", "GET", "silver", false},
		{"shop.example.com", "/api/users/42", "GET", "gold", false},
	} {
		got := true
		for _, m := range r.Match {
			v := map[policy.SourceKind]string{policy.SourceHost: tc.host, policy.SourcePath: tc.path, policy.SourceMethod: tc.method, policy.SourceHeader: tc.tier}[m.Source.Kind]
			got = got && m.Cond.Holds(v, v != "")
		}
		if got != tc.want {
			t.Errorf("%+v: %v", tc, got)
		}
	}
}

func TestKongServicePluginsMatchTheUnionOfTheirRoutes(t *testing.T) {
	cfg, _ := kongConvert(t, `services:
  - name: s
    routes:
      - {name: a, hosts: [a.example], paths: [/x]}
      - {name: b, hosts: [a.example], paths: [/y]}
      - {name: c, hosts: [b.example], paths: [/x, /y]}
    plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip}}]
`, KongOptions{})
	sameJSON(t, mustMarshal(t, ruleMatch(cfg, "s-minute")), `{"host": {"in": ["a.example", "b.example"]}, "path": {"regex": "^(?:/x|/y)"}}`)
	_, res := kongConvert(t, `services:
  - name: s
    routes:
      - {name: a, hosts: [a.example], paths: [/x]}
      - {name: b, hosts: [b.example], paths: [/y]}
    plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip}}]
`, KongOptions{})
	notesHave(t, res.Notes, "the routes of service s differ in more than one of paths, hosts, methods and headers, so its limits are 2 rules")
	_, res = kongConvert(t, `services:
  - name: lonely
    plugins: [{name: rate-limiting, config: {minute: 5}}]
plugins: [{name: rate-limiting, config: {minute: 9, limit_by: ip}}]
`, KongOptions{})
	notesHave(t, res.Notes, "service lonely has no routes in the file, so its plugin limits nothing")
}

// ruleMatch is the rule's match as written in the normalized form.
func ruleMatch(cfg *policy.Config, name string) any {
	out, _ := cfg.MarshalJSON()
	var doc struct {
		Policies []struct {
			Rules []struct {
				Name  string `json:"name"`
				Match any    `json:"match"`
			} `json:"rules"`
		} `json:"policies"`
	}
	_ = json.Unmarshal(out, &doc)
	for _, p := range doc.Policies {
		for _, r := range p.Rules {
			if r.Name == name {
				return r.Match
			}
		}
	}
	return nil
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestKongGlobalLimitByServiceCountsEachService(t *testing.T) {
	cfg, _ := kongConvert(t, `services:
  - {name: a, routes: [{name: a, hosts: [a.example]}]}
  - {name: b, routes: [{name: b, hosts: [b.example]}]}
plugins: [{name: rate-limiting, config: {minute: 5, limit_by: service}}]
`, KongOptions{})
	for host, want := range map[string]string{"a.example": "global-a-minute", "b.example": "global-b-minute", "c.example": "global-address-minute"} {
		if got := applied(cfg, simulate.Request{Host: host, Path: "/"})["minute"]; got != want {
			t.Errorf("%s: %s, want %s", host, got, want)
		}
	}
	if k := cfg.RuleByName("global-a-minute").Keys[0].String(); k != "all" {
		t.Errorf("service a's counter is keyed by %s, want all (one for the service)", k)
	}
}

func TestKongRedisAndClusterPoliciesCountAcrossTheFleet(t *testing.T) {
	cfg, res := kongConvert(t, `plugins:
  - {name: rate-limiting, config: {minute: 5, limit_by: ip, policy: cluster}}
`, KongOptions{FleetCluster: "rls"})
	if cfg.Fleet == nil || cfg.Fleet.Cluster != "rls" || !cfg.Policies[0].Rules[0].Global {
		t.Errorf("fleet %+v, global %v", cfg.Fleet, cfg.Policies[0].Rules[0].Global)
	}
	notesHave(t, res.Notes, `give Envoy the cluster "rls"`)
	cfg, _ = kongConvert(t, `plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip}}]`, KongOptions{})
	if cfg.Fleet != nil || cfg.Policies[0].Rules[0].Global {
		t.Errorf("a local plugin: fleet %+v", cfg.Fleet)
	}
}

func TestKongRejectionsAreKongs(t *testing.T) {
	cfg, res := kongConvert(t, `plugins:
  - {name: rate-limiting, config: {minute: 5, limit_by: ip, error_code: 503, error_message: "Slow down </please>"}}
`, KongOptions{})
	if cfg.RejectStatus != 503 || cfg.Reply == nil || cfg.Reply.Body != `{"message":"Slow down </please>"}` || cfg.Reply.ContentType != "application/json" || cfg.LegacyHeaders != policy.LegacyRateLimit || !cfg.ResponseHeaders {
		t.Errorf("status %d, reply %+v, legacy %v, headers %v", cfg.RejectStatus, cfg.Reply, cfg.LegacyHeaders, cfg.ResponseHeaders)
	}
	cfg, res = kongConvert(t, `services:
  - name: s
    routes: [{name: r, paths: [/r]}]
    plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip, error_code: 503, error_message: busy, hide_client_headers: true}}]
  - name: t
    routes: [{name: t, paths: [/t]}]
    plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip, error_code: 429}}]
plugins:
  - {name: rate-limiting, config: {minute: 5, limit_by: ip}}
`, KongOptions{})
	if cfg.RejectStatus != 429 || cfg.Reply.Body != `{"message":"API rate limit exceeded"}` || !cfg.ResponseHeaders {
		t.Errorf("status %d, reply %+v, headers %v", cfg.RejectStatus, cfg.Reply, cfg.ResponseHeaders)
	}
	if r := cfg.RuleByName("s-minute"); r.Reply == nil || r.Reply.Body != `{"message":"busy"}` || cfg.RuleByName("t-minute").Reply != nil {
		t.Errorf("s-minute's reply %+v, want its own message", r.Reply)
	}
	if s, t2 := cfg.RuleByName("s-minute"), cfg.RuleByName("t-minute"); cfg.RejectStatusOf(s) != 503 || cfg.RejectStatusOf(t2) != 429 || t2.RejectStatus != 0 {
		t.Errorf("statuses %d and %d, want s's own 503 and the top level's 429", cfg.RejectStatusOf(s), cfg.RejectStatusOf(t2))
	}
	notesHave(t, res.Notes, "hide_client_headers of services[0].plugins[0]")
	if s, t2 := cfg.RuleByName("s-minute"), cfg.RuleByName("t-minute"); s.LimitHeaders != nil || t2.LimitHeaders == nil || t2.LimitHeaders.Remaining != "x-ratelimit-remaining-minute" {
		t.Errorf("per-period fields: hiding plugin %+v, other %+v; want none, and X-RateLimit-Remaining-Minute", s.LimitHeaders, t2.LimitHeaders)
	}
	cfg, _ = kongConvert(t, `plugins: [{name: rate-limiting, config: {minute: 5, limit_by: ip, hide_client_headers: true}}]`, KongOptions{})
	if cfg.ResponseHeaders || cfg.LegacyHeaders.On() {
		t.Errorf("hide_client_headers: response headers %v, legacy %v", cfg.ResponseHeaders, cfg.LegacyHeaders)
	}
}

func TestKongProblemsNameTheField(t *testing.T) {
	rl := func(config string) string { return "plugins: [{name: rate-limiting, config: " + config + "}]" }
	for _, tc := range []struct{ doc, want string }{
		{rl(`{minute: 5, colour: red}`), "plugins[0].config.colour (line 1): not a field of Kong's rate-limiting plugin"},
		{rl(`{minute: "5"}`), "plugins[0].config.minute (line 1): want a number"},
		{rl(`{minute: 0}`), "plugins[0].config.minute (line 1): 0; want more than 0"},
		{rl(`{minute: 5, limit_by: tenant}`), `plugins[0].config.limit_by (line 1): "tenant"; want one of consumer, credential, ip, service, header, path`},
		{rl(`{minute: 5, limit_by: header}`), "plugins[0].config.header_name: required with limit_by header"},
		{rl(`{minute: 5, limit_by: path}`), "plugins[0].config.path: required with limit_by path"},
		{rl(`{minute: 5, error_code: 200}`), "plugins[0].config.error_code (line 1): 200; Sluice's reject_status is a status from 400 to 599"},
		{rl(`{minute: 5, policy: memcached}`), `plugins[0].config.policy (line 1): "memcached"`},
		{rl(`{limit_by: ip}`), "plugins[0].config: none of second, minute, hour, day, month and year is set"},
		{rl(`{minute: 5, minute: 6}`), "plugins[0].config.minute (line 1): set twice"},
		{"plugins: [{name: rate-limiting}]", "plugins[0].config: missing"},
		{"plugins: [{name: rate-limiting, route: nowhere, config: {minute: 1}}]", `plugins[0].route: no route named or with id "nowhere" in the file`},
		{"plugins: [{name: rate-limiting, service: {name: nowhere}, config: {minute: 1}}]", `plugins[0].service: no service named or with id "nowhere"`},
		{"plugins: [{name: rate-limiting, consumer: nobody, config: {minute: 1}}]", `plugins[0].consumer: no consumer named or with id "nobody"`},
		{"routes: [{name: r, service: gone}]", `routes[0].service: no service named or with id "gone"`},
		{"plugins:\n  - {name: rate-limiting, config: {minute: 1}}\n  - {name: rate-limiting, config: {hour: 1}}", "plugins[1]: a second rate-limiting plugin for global (also plugins[0])"},
		{"routes: [{name: r, expression: 'http.path == \"/x\"', plugins: [{name: rate-limiting, config: {minute: 1}}]}]", "routes[0].plugins[0]: routes[0].expression: Kong's expressions router is not converted"},
		{"routes: [{name: r, paths: ['~/(?=x)'], plugins: [{name: rate-limiting, config: {minute: 1}}]}]", `routes[0].paths[0]: "~/(?=x)" is not a regular expression Sluice reads`},
		{"_format_version: '4.0'\n" + rl(`{minute: 1}`), `config._format_version: "4.0"`},
		{"services: {name: s}", "config: line 1: a mapping where a list belongs"},
		{"", "config: empty"},
		{"a: 1\n---\nb: 2\n", "config: 2 YAML documents"},
		{"- just\n- a list\n", "config (line 1): want Kong's declarative configuration"},
		{"_format_version: '3.0'\nservices: []\n", "config: nothing to convert: no enabled rate-limiting plugin"},
		{"plugins: [{name: rate-limiting, enabled: false, config: {minute: 1}}, {name: graphql-rate-limiting-advanced, config: {}}]",
			"nothing to convert: no enabled rate-limiting plugin (the plugin at plugins[0] is disabled; graphql-rate-limiting-advanced at plugins[1] is not converted)"},
		{"plugins: [{name: rate-limiting-advanced, config: {}}]", "plugins[0].config: limit and window_size are required"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5, 10], window_size: [60]}}]", "plugins[0].config.limit (line 1): 2 limits for 1 window sizes"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5, 10], window_size: [60, 60]}}]", "window_size (line 1)[1]: 60 seconds twice"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [0.5]}}]", "window_size (line 1)[0]: 0.5; want whole seconds"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [0], window_size: [60]}}]", "limit (line 1)[0]: 0; want more than 0"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], window_type: rolling}}]", `window_type (line 1): "rolling"; want sliding or fixed`},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], identifier: consumer-group}}]", `identifier (line 1): "consumer-group" is not converted`},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], enforce_consumer_groups: true, consumer_groups: [gold]}}]", "enforce_consumer_groups (line 1): consumer groups' own limits are not converted"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], compound_identifier: [ip, path]}}]", "compound_identifier (line 1): a compound identifier is not converted"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], strategy: redis, throttling: {enabled: true, queue_limit: 5}}}]", "throttling (line 1): with strategy redis: Sluice holds requests only in each Envoy process"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], throttling: {enabled: true, interval: 0}}}]", "throttling (line 1).interval: 0; want a whole number from 1"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], throttling: {enabled: true, retries: 2}}}]", "throttling (line 1).retries: not a field of Kong's throttling"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], minute: 5}}]", "minute (line 1): not a field of Kong's rate-limiting-advanced plugin"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], identifier: header}}]", "header_name: required with identifier header"},
		{"plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60]}}, {name: rate-limiting-advanced, config: {limit: [6], window_size: [60]}}]", "plugins[1]: a second rate-limiting-advanced plugin for global (also plugins[0])"},
	} {
		_, err := Kong([]byte(tc.doc), KongOptions{})
		var ie *InputError
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ie) || ie.Input != "config" {
			t.Errorf("%q: %v, want %q", tc.doc, err, tc.want)
		}
	}
}

func TestKongTypeErrorsSayTheLineWithoutGoTypes(t *testing.T) {
	for doc, want := range map[string]string{
		"services:\n  - name: s\n    routes: {name: r}\n":                  "config: line 3: a mapping where a list belongs",
		"routes: [{name: r, regex_priority: high}]":                        "config: line 1: a string where a number belongs",
		"plugins: [{name: key-auth, config: {key_names: {a: b}}}]\n":       "plugins[0].config: line 1: a mapping where a list belongs",
		"kind: KongPlugin\nmetadata: {name: [x]}\nplugin: rate-limiting\n": "config: document 1: line 2: a list where a string belongs",
	} {
		if _, err := Kong([]byte(doc), KongOptions{}); err == nil || err.Error() != want {
			t.Errorf("%q: %v, want %s", doc, err, want)
		}
	}
}

func TestKongNotesWhatItLeavesOut(t *testing.T) {
	_, res := kongConvert(t, `_format_version: "3.0"
services:
  - name: s
    routes: [{name: r, paths: [/r], snis: [a.example]}]
    plugins:
      - {name: response-ratelimiting, config: {limits: {video: {minute: 10}}}}
      - {name: rate-limiting, enabled: false, config: {minute: 1}}
  - name: t
    routes: [{name: t, paths: [/t], snis: [a.example]}]
    plugins:
      - {name: rate-limiting, config: {minute: 1, limit_by: ip, fault_tolerant: false, redis_host: r.internal, redis: {host: r.internal}}}
consumer_groups:
  - name: gold
    plugins: [{name: rate-limiting-advanced, config: {limit: [5]}}]
plugins:
  - {name: rate-limiting, config: {minute: 5, limit_by: ip}}
`, KongOptions{})
	notesHave(t, res.Notes,
		"services[0].plugins[0]: response-ratelimiting is not converted",
		"services[0].plugins[1]: a disabled rate-limiting plugin (enabled: false); skipped",
		"consumer_groups[0].plugins[0]: rate-limiting-advanced of consumer group gold is not converted",
		"fault_tolerant: false is not converted",
		"services[1].routes[0]: route t's snis are not converted")
	if strings.Contains(strings.Join(res.Notes, "\n"), "route r's snis") {
		t.Errorf("a note on a route no converted plugin uses:\n%s", strings.Join(res.Notes, "\n"))
	}
}

func TestKongNamesLeaveTakenOnesAlone(t *testing.T) {
	cfg, _ := kongConvert(t, `plugins: [{name: rate-limiting, config: {minute: 5, limit_by: header, header_name: x-key}}]`,
		KongOptions{Taken: []string{"minute", "global-minute", "global-address-minute"}})
	p := cfg.Policies[0]
	if p.Name != "minute-2" || p.Rules[0].Name != "global-minute-2" || p.Rules[1].Name != "global-address-minute-2" {
		t.Errorf("policy %s, rules %s %s", p.Name, p.Rules[0].Name, p.Rules[1].Name)
	}
}

func TestKongReadsJSON(t *testing.T) {
	cfg, _ := kongConvert(t, `{"_format_version": "3.0", "plugins": [{"name": "rate-limiting", "config": {"hour": 10, "limit_by": "ip", "day": null}}]}`, KongOptions{})
	if len(cfg.Policies) != 1 || cfg.Policies[0].Name != "hour" {
		t.Errorf("%+v", cfg.Policies)
	}
}

const kongIngressPlugins = `apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: rl-by-key, namespace: shop}
plugin: rate-limiting
config: {minute: 5, hour: 100, limit_by: header, header_name: x-api-key, policy: redis}
---
apiVersion: configuration.konghq.com/v1
kind: KongClusterPlugin
metadata:
  name: everyone
  labels: {global: "true"}
  annotations: {kubernetes.io/ingress.class: kong}
plugin: rate-limiting
config: {second: 50, limit_by: ip}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: auth, namespace: shop}
plugin: key-auth
---
apiVersion: v1
kind: Service
metadata: {name: shop}
`

func TestKongIngressControllerPluginsBecomePoliciesForEveryRequest(t *testing.T) {
	cfg, res := kongConvert(t, kongIngressPlugins, KongOptions{})
	var names []string
	for _, p := range cfg.Policies {
		names = append(names, p.Name)
		for _, r := range p.Rules {
			if len(r.Match) > 0 {
				t.Errorf("rule %s has a match", r.Name)
			}
		}
	}
	if want := []string{"shop-rl-by-key-minute", "shop-rl-by-key-hour", "everyone-second"}; !slices.Equal(names, want) {
		t.Errorf("policies %v, want %v", names, want)
	}
	if r := cfg.RuleByName("shop-rl-by-key-minute"); r == nil || !r.Global || r.Keys[0].String() != "header:x-api-key" || cfg.RuleByName("shop-rl-by-key-address-minute") == nil {
		t.Errorf("shop/rl-by-key: %+v", r)
	}
	notesHave(t, res.Notes,
		"document 1 (KongPlugin shop/rl-by-key): its rules apply to every request; add to each the match of the routes of the Ingresses and Services whose konghq.com/plugins annotation names it",
		"document 2 (KongClusterPlugin everyone): a global plugin")
	_, err := Kong([]byte("kind: KongPlugin\nmetadata: {name: x}\nplugin: rate-limiting\nconfigFrom: {secretKeyRef: {name: s, key: k}}\n"), KongOptions{})
	if err == nil || !strings.Contains(err.Error(), "document 1 (KongPlugin x).configFrom") {
		t.Errorf("configFrom: %v", err)
	}
	_, err = Kong([]byte("kind: KongPlugin\nmetadata: {name: x}\nplugin: rate-limiting\nconfig: {minute: 1, colour: red}\n"), KongOptions{})
	if err == nil || !strings.Contains(err.Error(), "document 1 (KongPlugin x).config.colour (line 4)") {
		t.Errorf("an unknown field: %v", err)
	}
}

// kongLegacyFile is a 2.x file using most of what the conversion reads.
const kongLegacyFile = `_format_version: "2.1"
services:
  - name: s
    routes:
      - {name: a, paths: ["/u/\\d+", /x], hosts: ["*.a.example", "b.*"], methods: [GET], headers: {x-t: ["~*^g", v]}}
      - {name: b, paths: [/y], hosts: [c.example]}
    plugins: [{name: rate-limiting, config: {month: 5, year: 50, limit_by: path, path: /x/1, policy: cluster}}]
consumers:
  - {username: c, keyauth_credentials: [{key: k}], plugins: [{name: rate-limiting, route: a, config: {second: 1.5}}]}
keyauth_credentials: [{consumer: c, key: k2}]
plugins: [{name: rate-limiting, config: {day: 9, limit_by: service, error_message: "x"}}, {name: key-auth, service: s, config: {key_names: [k]}}]
`

func FuzzKong(f *testing.F) {
	f.Add([]byte(kongRealistic))
	f.Add([]byte(kongLevels))
	f.Add([]byte(kongIngressPlugins))
	f.Add([]byte(kongLegacyFile))
	f.Add([]byte(kongIngressStream))
	f.Add([]byte("services: [{name: s, routes: [{name: r, paths: [/r]}], plugins: [{name: rate-limiting-advanced, config: {limit: [3, 9], window_size: [1, 3600], window_type: fixed, identifier: header, header_name: x-k, strategy: cluster}}]}]\nplugins: [{name: rate-limiting-advanced, config: {limit: [2.5], window_size: [60]}}, {name: rate-limiting, config: {minute: 5}}]\n"))
	f.Add([]byte("kind: KongPlugin\nmetadata: {name: a}\nplugin: rate-limiting-advanced\nconfig: {limit: [1], window_size: [31536000], throttling: {enabled: false}, consumer_groups: [], compound_identifier: []}\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		res, err := Kong(doc, KongOptions{})
		if err != nil {
			return
		}
		if _, err := policy.Parse(res.Policy); err != nil {
			t.Fatalf("a converted policy the parser refuses: %v\n%s", err, res.Policy)
		}
	})
}

// A model of how Kong picks the rate-limiting plugin for a request and
// what it counts by, written request by request (the conversion writes
// rules), to compare with what the converted policy decides.

type modelRoute struct {
	name, svc, prefix string
	regex             *regexp.Regexp
	host, method, hv  string
}

type modelPlugin struct {
	name             string // instance_name: its rules' names start with it
	svc, route, cons string
	limits           map[string]float64
	limitBy, header  string
	path             string
}

type modelFile struct {
	routes  []modelRoute
	plugins []modelPlugin
	keys    map[string]string // key: consumer
	auth    []string          // where key-auth runs: "*", a service or a route
	yaml    string
}

func (r modelRoute) matches(req simulate.Request) bool {
	path, _, _ := strings.Cut(req.Path, "?")
	ok := strings.HasPrefix(path, r.prefix)
	if r.regex != nil {
		ok = r.regex.MatchString(path)
	}
	return ok && (r.host == "" || r.host == req.Host) && (r.method == "" || r.method == req.Method) &&
		(r.hv == "" || strings.EqualFold(r.hv, req.Headers["x-v"]))
}

func randomModelFile(rng *rand.Rand) modelFile {
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	f := modelFile{keys: map[string]string{}}
	var b strings.Builder
	b.WriteString("_format_version: \"3.0\"\nservices:\n")
	var svcs []string
	for i := range rng.IntN(3) + 1 {
		s := fmt.Sprintf("s%d", i)
		svcs = append(svcs, s)
		fmt.Fprintf(&b, "  - name: %s\n    routes:\n", s)
		for j := range rng.IntN(3) + 1 {
			r := modelRoute{name: fmt.Sprintf("%sr%d", s, j), svc: s, prefix: fmt.Sprintf("/%sr%d/", s, j)}
			fields := []string{"name: " + r.name}
			if rng.IntN(3) == 0 {
				r.regex = regexp.MustCompile("^" + r.prefix + "[0-9]+$")
				fields = append(fields, `paths: ["~`+r.prefix+`[0-9]+$"]`)
			} else {
				fields = append(fields, "paths: ["+r.prefix+"]")
			}
			if rng.IntN(3) == 0 {
				r.host = pick("a.example", "b.example")
				fields = append(fields, "hosts: ["+r.host+"]")
			}
			if rng.IntN(3) == 0 {
				r.method = pick("GET", "POST")
				fields = append(fields, "methods: ["+r.method+"]")
			}
			if rng.IntN(4) == 0 {
				r.hv = pick("Gold", "silver")
				fields = append(fields, "headers: {x-v: ["+r.hv+"]}")
			}
			f.routes = append(f.routes, r)
			fmt.Fprintf(&b, "      - {%s}\n", strings.Join(fields, ", "))
		}
	}
	switch rng.IntN(4) {
	case 0:
		f.auth = []string{"*"}
	case 1:
		f.auth = []string{svcs[0]}
	case 2:
		f.auth = []string{f.routes[0].name, svcs[len(svcs)-1]}
	}
	b.WriteString("consumers:\n")
	var conss []string
	for c := range rng.IntN(3) {
		name := fmt.Sprintf("c%d", c)
		conss = append(conss, name)
		var creds []string
		for k := range rng.IntN(3) {
			key := fmt.Sprintf("%s-k%d", name, k)
			f.keys[key] = name
			creds = append(creds, "{key: "+key+"}")
		}
		fmt.Fprintf(&b, "  - {username: %s, keyauth_credentials: [%s]}\n", name, strings.Join(creds, ", "))
	}
	b.WriteString("plugins:\n")
	for _, a := range f.auth {
		switch {
		case a == "*":
			b.WriteString("  - {name: key-auth}\n")
		case strings.Contains(a, "r"):
			b.WriteString("  - {name: key-auth, route: " + a + "}\n")
		default:
			b.WriteString("  - {name: key-auth, service: " + a + "}\n")
		}
	}
	used := map[string]bool{}
	for n := range rng.IntN(6) + 1 {
		p := modelPlugin{name: fmt.Sprintf("p%d", n), limits: map[string]float64{}, limitBy: pick("ip", "consumer", "credential", "header", "path", "service")}
		var refs []string
		if rng.IntN(2) == 0 && len(conss) > 0 {
			p.cons = pick(conss...)
			refs = append(refs, "consumer: "+p.cons)
		}
		switch rng.IntN(4) {
		case 0:
			p.svc = pick(svcs...)
			refs = append(refs, "service: "+p.svc)
		case 1:
			r := f.routes[rng.IntN(len(f.routes))]
			p.route = r.name
			refs = append(refs, "route: "+p.route)
			if rng.IntN(3) == 0 {
				p.svc = r.svc
				refs = append(refs, "service: "+p.svc)
			}
		}
		if scope := p.svc + "|" + p.route + "|" + p.cons; used[scope] {
			continue
		} else {
			used[scope] = true
		}
		cfg := []string{"limit_by: " + p.limitBy, "policy: " + pick("local", "redis")}
		for _, per := range []string{"second", "minute", "hour", "month"} {
			if rng.IntN(2) == 0 {
				p.limits[per] = float64(rng.IntN(5)+1) + choose(rng, 0, 0, 0.5)
				cfg = append(cfg, fmt.Sprintf("%s: %v", per, p.limits[per]))
			}
		}
		if len(p.limits) == 0 {
			p.limits["minute"] = 7
			cfg = append(cfg, "minute: 7")
		}
		switch p.limitBy {
		case "header":
			p.header = "x-api-key"
			cfg = append(cfg, "header_name: X-Api-Key")
		case "path":
			p.path = f.routes[rng.IntN(len(f.routes))].prefix + "1"
			cfg = append(cfg, "path: "+p.path)
		}
		f.plugins = append(f.plugins, p)
		fmt.Fprintf(&b, "  - {name: rate-limiting, instance_name: %s, %s config: {%s}}\n", p.name, strings.Join(append(refs, ""), ", "), strings.Join(cfg, ", "))
	}
	f.yaml = b.String()
	return f
}

func choose[T any](rng *rand.Rand, xs ...T) T { return xs[rng.IntN(len(xs))] }

func (f modelFile) authenticated(r modelRoute) bool {
	return slices.Contains(f.auth, "*") || slices.Contains(f.auth, r.svc) || slices.Contains(f.auth, r.name)
}

// plugin is Kong's lookup_cfg (kong/runloop/plugins_iterator.lua): the
// plugin of the most specific scope. Without a consumer, the scopes that
// name one are the others again, in the same order.
func (f modelFile) plugin(r modelRoute, cons string) *modelPlugin {
	for _, want := range [][3]string{{r.name, r.svc, cons}, {r.name, "", cons}, {"", r.svc, cons}, {r.name, r.svc, ""},
		{"", "", cons}, {r.name, "", ""}, {"", r.svc, ""}, {"", "", ""}} {
		for i, p := range f.plugins {
			if [3]string{p.route, p.svc, p.cons} == want {
				return &f.plugins[i]
			}
		}
	}
	return nil
}

func TestKongDecidesLikeKongOnRandomConfigurations(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	checked := 0
	for n := range 400 {
		f := randomModelFile(rng)
		res, err := Kong([]byte(f.yaml), KongOptions{})
		if err != nil {
			if strings.Contains(err.Error(), "nothing to convert") {
				continue
			}
			t.Fatalf("file %d: %v\n%s", n, err, f.yaml)
		}
		cfg, err := policy.Parse(res.Policy)
		if err != nil {
			t.Fatalf("file %d: %v", n, err)
		}
		broadened := strings.Contains(strings.Join(res.Notes, "\n"), "in any combination")
		for range 30 {
			r := f.routes[rng.IntN(len(f.routes))]
			req := simulate.Request{Method: choose(rng, "GET", "POST"), Host: choose(rng, "a.example", "b.example"), Headers: map[string]string{},
				Path: r.prefix + choose(rng, "1", "2", "x/y"), ClientAddress: "192.0.2.9:5000"}
			if rng.IntN(2) == 0 {
				req.Headers["x-v"] = choose(rng, "gold", "Silver", "x")
			}
			if rng.IntN(2) == 0 {
				req.Headers["x-api-key"] = "h1"
			}
			var keys []string
			for k := range f.keys {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if len(keys) > 0 && rng.IntN(3) != 0 {
				req.Headers["apikey"] = keys[rng.IntN(len(keys))]
			}
			if !r.matches(req) {
				continue // another route, or none: Kong answers 404
			}
			cons := ""
			if len(f.auth) == 0 {
				// No key-auth in the file: the conversion takes the keys
				// as authenticated elsewhere.
				cons = f.keys[req.Headers["apikey"]]
			} else if f.authenticated(r) {
				if cons = f.keys[req.Headers["apikey"]]; cons == "" {
					continue // Kong answers 401
				}
			} else if broadened && req.Headers["apikey"] != "" {
				continue // noted: the consumer's rules match more than key-auth's routes
			}
			p := f.plugin(r, cons)
			checked++
			f.check(t, n, cfg, res, req, r, cons, p)
		}
	}
	if checked < 1000 {
		t.Errorf("only %d requests checked", checked)
	}
}

func (f modelFile) check(t *testing.T, n int, cfg *policy.Config, res Result, req simulate.Request, r modelRoute, cons string, p *modelPlugin) {
	t.Helper()
	out := simulate.Run(cfg, req, simulate.Options{Now: 1.7e9})
	fail := func(format string, args ...any) {
		t.Fatalf("file %d, %s %s%s %v (route %s, consumer %q): %s\n%s\n%s", n, req.Method, req.Host, req.Path, req.Headers, r.name, cons, fmt.Sprintf(format, args...), f.yaml, res.Policy)
	}
	for _, pr := range out.Policies {
		var rr *simulate.RuleResult
		if pr.Applied >= 0 {
			rr = &pr.Rules[pr.Applied]
		}
		want, has := 0.0, false
		if p != nil {
			want, has = p.limits[pr.Name]
		}
		switch {
		case rr == nil && !has:
			continue
		case rr == nil:
			fail("policy %s applies no rule; Kong applies %s", pr.Name, p.name)
		case p == nil:
			fail("policy %s applies %s; Kong applies no plugin", pr.Name, rr.Name)
		case !strings.HasPrefix(rr.Name, p.name+"-") && !f.overrideOf(p, rr.Name):
			fail("policy %s applies %s; Kong applies %s", pr.Name, rr.Name, p.name)
		case !has && rr.Action != policy.ActionUnlimited:
			fail("policy %s applies %s; Kong's %s has no %s", pr.Name, rr.Name, p.name, pr.Name)
		case !has:
			continue
		}
		rule := cfg.RuleByName(rr.Name)
		limit := 0.0
		if rule.Window != nil {
			limit = rule.Window.Limit
		} else {
			limit = rule.Quota.Limit
		}
		for _, o := range rule.Overrides {
			switch {
			case !rr.Overridden || o.Key != req.Headers["apikey"]:
			case o.Window != nil:
				limit = o.Window.Limit
			default:
				limit = o.Quota.Limit
			}
		}
		if limit != math.Ceil(want) {
			fail("rule %s limits to %v, Kong's %s to %v", rr.Name, limit, p.name, want)
		}
		key, kongKey := rule.Keys[0].String(), p.identity(req, cons)
		if key != kongKey && !(key == "header:apikey" && f.partlyAuthenticated(p)) {
			fail("rule %s counts by %s, Kong by %s", rr.Name, key, kongKey)
		}
	}
}

// overrideOf: a consumer's own plugin may be written as overrides of the
// global plugin's rule (or left to it when the limits are the same).
func (f modelFile) overrideOf(p *modelPlugin, rule string) bool {
	if p.cons == "" || p.route != "" || p.svc != "" {
		return false
	}
	for _, g := range f.plugins {
		if g.cons == "" && g.route == "" && g.svc == "" {
			return strings.HasPrefix(rule, g.name+"-")
		}
	}
	return false
}

// partlyAuthenticated: key-auth runs on some of the plugin's routes
// only. Where it does not, Kong counts limit_by consumer per address, the
// rules by the key a request has (noted).
func (f modelFile) partlyAuthenticated(p *modelPlugin) bool {
	with, without := false, false
	for _, r := range f.routes {
		if (p.route == "" || p.route == r.name) && (p.svc == "" || p.svc == r.svc) {
			a := len(f.auth) == 0 || f.authenticated(r)
			with, without = with || a, without || !a
		}
	}
	return with && without
}

// identity is the key source of Kong's counter (handler.lua,
// get_identifier), the client address when the entity is missing.
func (p *modelPlugin) identity(req simulate.Request, cons string) string {
	path, _, _ := strings.Cut(req.Path, "?")
	switch {
	case p.limitBy == "service": // one counter per service
		return "all"
	case p.limitBy == "header" && req.Headers["x-api-key"] != "":
		return "header:x-api-key"
	case p.limitBy == "path" && path == p.path:
		return "path"
	case (p.limitBy == "consumer" || p.limitBy == "credential") && cons != "":
		return "header:apikey"
	}
	return "ip:address"
}

func TestTheGuidesKongPluginConvertsToTheGuidesPolicy(t *testing.T) {
	res, err := Kong([]byte(guideBlock(t, "## Kong `rate-limiting`", "yaml")), KongOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sameAsGuide(t, guideBlock(t, "<!-- example: kong -->", "json"), res.Policy)
}
