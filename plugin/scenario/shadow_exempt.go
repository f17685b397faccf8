package scenario

// An exempt rule in shadow mode (a draft's health-check exemption tried
// beside the current policy) exempts its requests from shadow rules only:
// the shadow rules of every policy, before or after it, neither decide nor
// count them, while the enforced rules limit them as if the exempt rule
// were not there. It is counted like an exempt rule. Likewise a shadow
// deny rule only marks: an enforced deny rule of a later policy still
// denies the request it matches too.

import (
	"testing"
)

func init() {
	register(Case{Name: "ShadowExemptRuleExemptsFromShadowRulesOnly", Run: shadowExempt})
	register(Case{Name: "ShadowDenyRuleLeavesALaterEnforcedDenyRuleDenying", Run: shadowDenyBeforeDeny})
}

// shadowExemptConfig: an enforced per-address bucket of 2, a marking shadow
// bucket of 1 before the shadow exemption and another after it.
const shadowExemptConfig = `{"policies": [
  {"name": "current", "rules": [
    {"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 2}}]},
  {"name": "watch", "rules": [
    {"name": "watch-ip", "mode": "shadow", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]},
  {"name": "trial-gate", "rules": [
    {"name": "trial-health", "mode": "shadow", "action": "exempt", "match": {"path": "/healthz"}}]},
  {"name": "trial", "rules": [
    {"name": "trial-ip", "mode": "shadow", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}]}`

func shadowExempt(t *testing.T, start Starter) {
	h := startConfig(t, start, shadowExemptConfig)

	// Health checks from one address: the enforced bucket of 2 still
	// rejects the third and fourth; the shadow buckets of 1, which would
	// have refused from the second, are not consulted, so nothing is marked.
	health := req("@ip", "203.0.113.1:4000", ":path", "/healthz")
	for i, res := range many(t, h, 0, repeat(health, 4)) {
		if want := i >= 2; res.Rejected != want {
			t.Fatalf("health check %d: rejected %v, want %v: a shadow exempt rule must not exempt from enforced rules", i, res.Rejected, want)
		}
		if res.Rejected {
			if res.Status != 429 {
				t.Errorf("health check %d: status %d, want 429", i, res.Status)
			}
			wantHeaders(t, "enforced rejection under a shadow exemption", res.ResponseHeaders,
				"x-ratelimit-reason", "token_bucket_exceeded", "ratelimit-policy", `"per-ip";q=2;w=2000`)
			continue
		}
		wantHeaders(t, "shadow-exempted health check", res.UpstreamHeaders, "x-sluice-shadow", "-")
		wantHeaders(t, "shadow-exempted health check", res.ResponseHeaders, "ratelimit-policy", `"per-ip";q=2;w=2000`)
	}

	// Another path from another address: the shadow rules apply as before,
	// both refusing (and marking) from the second request.
	other := req("@ip", "203.0.113.2:4000", ":path", "/orders")
	for i, want := range []string{"-", "watch-ip,trial-ip"} {
		res := do(t, h, other)
		if res.Rejected {
			t.Fatalf("request %d to /orders rejected within the enforced burst", i)
		}
		wantHeaders(t, "not exempted", res.UpstreamHeaders, "x-sluice-shadow", want)
	}

	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.trial-health.exempted": 4,
		"sluice.rule.per-ip.allowed":        4, "sluice.rule.per-ip.rejected": 2,
		"sluice.rule.watch-ip.allowed": 1, "sluice.rule.watch-ip.shadow_rejected": 1,
		"sluice.rule.trial-ip.allowed": 1, "sluice.rule.trial-ip.shadow_rejected": 1,
	})
	noRecoveredPanics(t, h)
}

func shadowDenyBeforeDeny(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"policies": [
	  {"name": "trial-gate", "rules": [
	    {"name": "trial-scrapers", "mode": "shadow", "action": "deny", "match": {"header:user-agent": {"regex": "(?i)scrapy"}}}]},
	  {"name": "gate", "rules": [
	    {"name": "blocked", "action": "deny", "deny_status": 403, "match": {"header:x-api-key": "leaked"}}]}]}`)
	res := do(t, h, req("user-agent", "Scrapy/2.11", "x-api-key", "leaked"))
	if !res.Rejected || res.Status != 403 {
		t.Fatalf("matched by both deny rules: rejected %v status %d, want the enforced rule's 403", res.Rejected, res.Status)
	}
	wantHeaders(t, "denied", res.ResponseHeaders, "x-ratelimit-reason", "denied")
	// Matched by the shadow rule alone: through, marked.
	res = do(t, h, req("user-agent", "Scrapy/2.11", "x-api-key", "fine"))
	if res.Rejected {
		t.Fatal("a shadow deny rule rejected a request")
	}
	wantHeaders(t, "shadow deny", res.UpstreamHeaders, "x-sluice-shadow", "trial-scrapers")
	wantMetrics(t, h, map[string]uint64{"sluice.rule.blocked.denied": 1, "sluice.rule.trial-scrapers.shadow_rejected": 1})
}
