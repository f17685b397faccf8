package migrate

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// rate-limiting-advanced's windows become policies of their own, one per
// window length, sliding or fixed as the plugin says, ordered by Kong's
// precedence among the advanced plugins only: Kong runs them apart from
// rate-limiting, so a request meets the most specific of each.
func TestKongAdvancedWindowsBecomePoliciesOfTheirOwn(t *testing.T) {
	cfg, res := kongConvert(t, `_format_version: "3.0"
services:
  - name: s
    routes: [{name: r, paths: [/r]}]
    plugins:
      - {name: rate-limiting-advanced, config: {limit: [3], window_size: [60], window_type: fixed, identifier: ip, strategy: redis, namespace: s, sync_rate: 0.5}}
      - {name: rate-limiting, config: {hour: 100, limit_by: ip}}
plugins:
  - name: rate-limiting-advanced
    config: {limit: [10, 100], window_size: [10, 60], identifier: ip, error_code: 429, error_message: slow down, retry_after_jitter_max: 2, disable_penalty: false}
`, KongOptions{})
	var names []string
	for _, p := range cfg.Policies {
		names = append(names, p.Name)
	}
	if want := []string{"hour", "advanced-10s", "advanced-60s"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("policies %v, want %v", names, want)
	}
	rule := func(name string) *policy.Rule {
		r := cfg.RuleByName(name)
		if r == nil {
			t.Fatalf("no rule %s", name)
		}
		return r
	}
	if r := rule("global-advanced-10s"); r.Algorithm != policy.AlgorithmSlidingWindow || r.Window.Limit != 10 || r.Window.WindowSeconds != 10 || r.Keys[0].String() != "ip:address" {
		t.Errorf("the global 10 s window: %s %+v %v", r.Algorithm, r.Window, r.Keys)
	}
	if r := rule("s-advanced-60s"); r.Algorithm != policy.AlgorithmFixedWindow || r.Window.Limit != 3 || !r.Global {
		t.Errorf("the service's 60 s window: %s %+v global %v, want a fixed window of 3 across the fleet", r.Algorithm, r.Window, r.Global)
	}
	// The service's plugin has no 10 s window: Kong applies only it to
	// its requests, so the global plugin's 10 s window does not limit them.
	if r := rule("s-advanced-10s"); r.Action != policy.ActionUnlimited {
		t.Errorf("s-advanced-10s: %+v, want an unlimited rule", r)
	}
	for _, c := range []struct {
		path string
		want map[string]string
	}{
		{"/r", map[string]string{"hour": "s-hour", "advanced-10s": "s-advanced-10s", "advanced-60s": "s-advanced-60s"}},
		{"/x", map[string]string{"advanced-10s": "global-advanced-10s", "advanced-60s": "global-advanced-60s"}},
	} {
		if got := applied(cfg, simulate.Request{Path: c.path}); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %v, want %v", c.path, got, c.want)
		}
	}
	notesHave(t, res.Notes, "sliding windows become sliding_window rules", "Kong also counts the requests it rejects",
		"retry_after_jitter_max is not converted")
}

// A KongPlugin of rate-limiting-advanced converts as in kong.yaml: its
// windows, each a policy.
func TestKongAdvancedKongPluginObjectConverts(t *testing.T) {
	cfg, _ := kongConvert(t, `apiVersion: configuration.konghq.com/v1
kind: KongClusterPlugin
metadata:
  name: per-ip
  labels: {global: "true"}
plugin: rate-limiting-advanced
config: {limit: [5, 50], window_size: [1, 60], window_type: fixed, identifier: ip}
`, KongOptions{})
	if len(cfg.Policies) != 2 {
		t.Fatalf("%d policies, want one per window", len(cfg.Policies))
	}
	for i, want := range []float64{5, 50} {
		r := cfg.Policies[i].Rules[0]
		if r.Algorithm != policy.AlgorithmFixedWindow || r.Window.Limit != want {
			t.Errorf("policy %s: %s %+v, want a fixed window of %v", cfg.Policies[i].Name, r.Algorithm, r.Window, want)
		}
	}
}

// Attached by an Ingress's konghq.com/plugins, a rate-limiting-advanced
// KongPlugin limits that Ingress's routes, beside a rate-limiting one on
// the same Ingress (Kong runs both).
func TestKongAdvancedPluginOnAnIngressLimitsItsRoutes(t *testing.T) {
	cfg, _ := kongConvert(t, `apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: burst, namespace: shop}
plugin: rate-limiting-advanced
config: {limit: [20], window_size: [30], identifier: ip}
---
apiVersion: configuration.konghq.com/v1
kind: KongPlugin
metadata: {name: hourly, namespace: shop}
plugin: rate-limiting
config: {hour: 1000, limit_by: ip}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: api, namespace: shop, annotations: {konghq.com/plugins: "burst, hourly"}}
spec:
  ingressClassName: kong
  rules:
  - http:
      paths:
      - {path: /v1, pathType: Prefix, backend: {service: {name: api, port: {number: 80}}}}
`, KongOptions{})
	got := applied(cfg, simulate.Request{Path: "/v1/items"})
	if len(got) != 2 || got["advanced-30s"] == "" || got["hour"] == "" {
		t.Fatalf("a request to the Ingress's path meets %v, want the 30 s window and the hour", got)
	}
	if r := cfg.RuleByName(got["advanced-30s"]); r.Algorithm != policy.AlgorithmSlidingWindow || r.Window.Limit != 20 {
		t.Errorf("the 30 s rule: %s %+v", r.Algorithm, r.Window)
	}
	if got := applied(cfg, simulate.Request{Path: "/elsewhere"}); len(got) != 0 {
		t.Errorf("a request to no Ingress path meets %v", got)
	}
}

// With disable_penalty: true, Kong counts only the requests it admits, as
// Sluice does: the note says so instead of naming the difference.
func TestKongAdvancedWithoutPenaltyIsNotedAsTheSame(t *testing.T) {
	_, res := kongConvert(t, `plugins: [{name: rate-limiting-advanced, config: {limit: [5], window_size: [60], identifier: ip, disable_penalty: true}}]`, KongOptions{})
	notesHave(t, res.Notes, "as Kong's with disable_penalty: true, count only the requests they admit")
	if strings.Contains(strings.Join(res.Notes, "\n"), "Kong also counts the requests it rejects") {
		t.Errorf("the penalty note with disable_penalty: true:\n%s", strings.Join(res.Notes, "\n"))
	}
}

// An enabled throttling holds requests over the limit instead of refusing
// them: the window becomes a token bucket of its limit, refilled over the
// window, with max_delay_ms the shorter of Kong's longest wait (interval x
// retry_times) and the refill of queue_limit requests.
func TestKongThrottledWindowsHoldRequests(t *testing.T) {
	cfg, res := kongConvert(t, `_format_version: "3.0"
plugins:
  - name: rate-limiting-advanced
    config: {limit: [5, 100], window_size: [60, 3600], identifier: ip, throttling: {enabled: true, interval: 10, retry_times: 3, queue_limit: 5}}
services:
  - name: s
    routes: [{name: r, paths: [/r]}]
    plugins:
      - {name: rate-limiting-advanced, config: {limit: [10], window_size: [60], identifier: ip, throttling: {enabled: false}}}
`, KongOptions{})
	bucket := func(name string) *policy.TokenBucket {
		r := cfg.RuleByName(name)
		if r == nil || r.TokenBucket == nil {
			t.Fatalf("rule %s: %+v, want a token bucket", name, r)
		}
		return r.TokenBucket
	}
	// 5 a minute: 30 s of waiting, but 5 queued requests refill in 60 s:
	// 30 s. 100 an hour: 5 queued take 180 s, Kong waits 30 s at most.
	if b := bucket("global-advanced-60s"); b.TokensPerSecond != 0.083333 || b.Burst != 5 || b.MaxDelayMS != 30000 {
		t.Errorf("the minute's bucket %+v, want 0.083333/s, burst 5, held up to 30 s", b)
	}
	if b := bucket("global-advanced-3600s"); b.Burst != 100 || b.MaxDelayMS != 30000 {
		t.Errorf("the hour's bucket %+v, want burst 100, held up to 30 s", b)
	}
	if r := cfg.RuleByName("s-advanced-60s"); r == nil || r.Algorithm != policy.AlgorithmSlidingWindow {
		t.Errorf("a plugin with throttling off: %+v, want its sliding window", r)
	}
	notesContain(t, res.Notes, "throttled windows become token_bucket rules")
	// A queue shorter than the wait bounds the hold: 2 queued of 10 a
	// minute refill in 12 s.
	cfg, _ = kongConvert(t, `_format_version: "3.0"
plugins:
  - name: rate-limiting-advanced
    config: {limit: [10], window_size: [60], identifier: ip, throttling: {enabled: true, queue_limit: 2}}
`, KongOptions{})
	if b := cfg.RuleByName("global-advanced-60s").TokenBucket; b == nil || b.MaxDelayMS != 12000 {
		t.Errorf("queue_limit 2 of 10 a minute: %+v, want held up to 12 s", b)
	}
}

// identifier route counts each route apart: a rule per route matching its
// requests, one counter for all of them; on a service, its routes only.
func TestKongAdvancedCountsPerRoute(t *testing.T) {
	cfg, _ := kongConvert(t, `_format_version: "3.0"
services:
  - name: s
    routes: [{name: a, paths: [/a]}, {name: b, paths: [/b]}]
    plugins:
      - {name: rate-limiting-advanced, config: {limit: [3], window_size: [60], window_type: fixed, identifier: route}}
  - name: t
    routes: [{name: c, paths: [/c]}]
`, KongOptions{})
	for _, c := range []struct{ path, rule string }{{"/a", "s-a-advanced-60s"}, {"/b", "s-b-advanced-60s"}} {
		r := cfg.RuleByName(c.rule)
		if r == nil || r.Window == nil || r.Window.Limit != 3 || len(r.Keys) != 1 || r.Keys[0].String() != "all" {
			t.Fatalf("rule %s: %+v, want a window of 3 with one counter", c.rule, r)
		}
		if got := applied(cfg, simulate.Request{Path: c.path}); got["advanced-60s"] != c.rule {
			t.Errorf("a request for %s is limited by %v, want %s", c.path, got, c.rule)
		}
	}
	if got := applied(cfg, simulate.Request{Path: "/c"}); len(got) != 0 {
		t.Errorf("a request of the other service is limited by %v", got)
	}
	_, err := Kong([]byte(`_format_version: "3.0"
consumers:
  - username: ann
    keyauth_credentials: [{key: k1}]
    plugins: [{name: rate-limiting-advanced, config: {limit: [3], window_size: [60], identifier: route}}]
services:
  - name: s
    routes: [{name: a, paths: [/a]}]
    plugins: [{name: key-auth}]
`), KongOptions{})
	if err == nil || !strings.Contains(err.Error(), "identifier route on a consumer's plugin is not converted") {
		t.Errorf("identifier route on a consumer's plugin: %v", err)
	}
}
