package scenario

// Rule actions. An exempt rule that applies lets its request through
// unlimited by every rule of every policy (health checks, the office
// network), counted per rule, touching no bucket. A deny rule rejects at
// once with its deny_status, X-RateLimit-Reason: denied and a JSON body,
// touching no bucket; in shadow mode it only names itself in the shadow
// header while the limits still apply. An exempt match wins over a deny
// match of another policy.

import (
	"testing"
)

func init() {
	register(Case{Name: "ExemptAndDenyActions", Run: exemptAndDenyActions})
}

const actionsConfig = `{"policies": [
  {"name": "access", "rules": [
    {"name": "health", "action": "exempt", "match": {"path": {"in": ["/healthz", "/readyz"]}}},
    {"name": "office", "action": "exempt", "match": {"ip:address": {"cidr": ["192.168.0.0/16"]}}},
    {"name": "leaked-keys", "action": "deny", "deny_status": 401, "limit_keys": ["header:x-api-key"],
     "match": {"header:x-api-key": {"in": ["leaked-1", "leaked-2"]}}},
    {"name": "scrapers", "action": "deny", "mode": "shadow", "match": {"header:user-agent": {"regex": "(?i)scrapy"}}},
    {"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 2}}]},
  {"name": "internal", "rules": [
    {"name": "monitoring", "action": "exempt", "match": {"header:x-monitor": {"present": true}}}]}]}`

func exemptAndDenyActions(t *testing.T, start Starter) {
	h := startConfig(t, start, actionsConfig)

	// Health checks: never limited, whatever their number; no RateLimit fields.
	for i, res := range many(t, h, 0, repeat(req(":path", "/healthz"), 10)) {
		if res.Rejected {
			t.Fatalf("health check %d rejected", i)
		}
		wantHeaders(t, "health check", res.ResponseHeaders, "ratelimit-policy", "-")
	}
	// The office network: exempt too; another client gets the per-IP burst of 2.
	if got := admitted(t, h, 5, req("@ip", "192.168.1.20:4000", ":path", "/x")); got != 5 {
		t.Errorf("office: %d of 5 admitted, want all", got)
	}
	if got := admitted(t, h, 5, req("@ip", "203.0.113.5:4000", ":path", "/x")); got != 2 {
		t.Errorf("outside client: %d of 5 admitted, want the burst of 2", got)
	}
	// The exhausted client is still exempt on a health check.
	if res := do(t, h, req("@ip", "203.0.113.5:4000", ":path", "/readyz")); res.Rejected {
		t.Error("an exhausted client's health check was rejected")
	}

	// A leaked key is denied at once with 401, from a fresh address.
	res := do(t, h, req("@ip", "198.51.100.1:4000", "x-api-key", "leaked-2"))
	if !res.Rejected || res.Status != 401 {
		t.Fatalf("leaked key: rejected %v status %d, want 401", res.Rejected, res.Status)
	}
	wantHeaders(t, "denied", res.ResponseHeaders, "x-ratelimit-reason", "denied", "content-type", "application/json",
		"retry-after", "-", "ratelimit-policy", "-")
	if got, want := string(res.LocalBody), `{"error":"denied","rule":"leaked-keys"}`; got != want {
		t.Errorf("denied body %s, want %s", got, want)
	}
	// ... and it took nothing from per-ip: that address still has its burst.
	if got := admitted(t, h, 3, req("@ip", "198.51.100.1:4000")); got != 2 {
		t.Errorf("after the denial: %d of 3 admitted, want 2", got)
	}
	// The monitoring exemption (another policy) wins over the deny.
	if res := do(t, h, req("@ip", "198.51.100.2:4000", "x-api-key", "leaked-1", "x-monitor", "1")); res.Rejected {
		t.Error("an exempt request of another policy was denied")
	}

	// The shadow deny rule: the request passes, marked, and still limited by nothing else
	// here (it is the policy's first match: per-ip does not apply to it).
	res = do(t, h, req("@ip", "198.51.100.3:4000", "user-agent", "Scrapy/2.11"))
	if res.Rejected {
		t.Fatal("a shadow deny rule rejected a request")
	}
	wantHeaders(t, "shadow deny", res.UpstreamHeaders, "x-sluice-shadow", "scrapers")

	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.health.exempted": 11, "sluice.rule.office.exempted": 5, "sluice.rule.monitoring.exempted": 1,
		"sluice.rule.leaked-keys.denied": 1, "sluice.rule.scrapers.shadow_rejected": 1, "sluice.rule.scrapers.denied": 0,
		"sluice.rule.per-ip.allowed": 4, "sluice.rule.per-ip.rejected": 4,
	})
	noRecoveredPanics(t, h)
}

// repeat returns n copies of r.
func repeat(r Request, n int) []Request {
	rs := make([]Request, n)
	for i := range rs {
		rs[i] = r
	}
	return rs
}
