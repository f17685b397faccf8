package scenario

// Shadow mode: a shadow rule never rejects; it keeps its bucket as enforcing
// would (taking tokens when it admits, refunded when an enforce rule rejects
// the request), counts shadow_rejected, logs, and marks the upstream request
// with the shadow header (a client-sent one is removed). A rule's own mode
// wins over the top-level one; only enforce rules give RateLimit fields.

import (
	"testing"
)

func init() {
	register(Case{Name: "ShadowRuleNeverRejectsCountsAndMarksUpstream", Run: shadowRule})
}

func shadowRule(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"mode": "shadow", "policies": [
	  {"name": "a", "rules": [{"name": "shadowed", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 3}}]},
	  {"name": "b", "rules": [{"name": "enforced", "mode": "enforce", "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 2}}]}]}`)
	both := req("x-api-key", "k", "x-tenant", "t", "x-sluice-shadow", "forged")
	// Both rules apply: the enforce rule admits 2 (shadowed has 1 left).
	for i := 0; i < 2; i++ {
		res := do(t, h, both)
		if res.Rejected {
			t.Fatalf("request %d rejected", i)
		}
		wantHeaders(t, "both rules", res.UpstreamHeaders, "x-sluice-shadow", "-")
		wantHeaders(t, "both rules", res.ResponseHeaders, "ratelimit-policy", `"enforced";q=2;w=2000`)
	}
	// The enforce rule rejects: the shadow rule (which would admit) takes
	// nothing for these requests.
	for i := 0; i < 3; i++ {
		if res := do(t, h, both); !res.Rejected || res.Status != 429 {
			t.Fatalf("enforce rule in a shadow configuration: rejected %v status %d", res.Rejected, res.Status)
		}
	}
	// The shadow rule alone: its last token, then two would-be rejections,
	// admitted and marked; no RateLimit fields from a shadow rule.
	only := req("x-api-key", "k", "x-sluice-shadow", "forged")
	for i := 0; i < 3; i++ {
		res := do(t, h, only)
		if res.Rejected {
			t.Fatalf("shadow request %d rejected", i)
		}
		mark := "shadowed"
		if i == 0 {
			mark = "-" // a client-sent header never reaches upstream as sent
		}
		wantHeaders(t, "shadow only", res.UpstreamHeaders, "x-sluice-shadow", mark)
		wantHeaders(t, "shadow only", res.ResponseHeaders, "ratelimit", "-", "ratelimit-limit", "-", "ratelimit-policy", "-", "retry-after", "-")
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.shadowed.allowed": 3, "sluice.rule.shadowed.shadow_rejected": 2, "sluice.rule.shadowed.rejected": 0,
		"sluice.rule.enforced.allowed": 2, "sluice.rule.enforced.rejected": 3,
	})
	if logsContaining(h, "shadow rule shadowed would have rejected") == 0 {
		t.Errorf("shadow rejection not logged: %q", h.Logs())
	}
}
