package scenario

// Tiers: within a policy the first rule whose match holds applies and the
// rest are skipped. Rules match on a JWT claim (jwt:plan, from an unsigned
// bearer token: claims are read, not verified) and on a header; a request
// matching several tiers is counted by the first only; a malformed token is
// a missing claim, so its request falls through to the catch-all rule.

import (
	"testing"
)

func init() {
	register(Case{Name: "TiersFirstMatchingRuleWithinPolicy", Run: tiersFirstMatchingRule})
}

func tiersFirstMatchingRule(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"legacy_headers": true, "rules": [
	  {"name": "enterprise", "limit_keys": ["header:x-api-key"], "match": {"jwt:plan": "enterprise"},
	   "algorithm": "token_bucket", "algorithm_config": {"rps": 1000, "burst": 2000}},
	  {"name": "gold", "limit_keys": ["header:x-api-key"], "match": {"header:x-tier": "gold"},
	   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.01, "burst": 5}},
	  {"name": "free", "limit_keys": ["header:x-api-key"],
	   "algorithm": "token_bucket", "algorithm_config": {"rps": 10, "burst": 20}}]}`)
	ent := bearer(`{"sub":"acme","plan":"enterprise"}`)
	counted := func(what string, res Response, policy, remaining string) {
		t.Helper()
		if res.Rejected {
			t.Fatalf("%s: rejected", what)
		}
		wantHeaders(t, what, res.ResponseHeaders, "ratelimit-policy", policy, "ratelimit-remaining", remaining)
	}

	// An enterprise token: far beyond the free burst, counted by enterprise.
	rs := make([]Request, 100)
	for i := range rs {
		rs[i] = req("x-api-key", "shared", "authorization", ent)
	}
	for i, res := range many(t, h, 0, rs) {
		if res.Rejected {
			t.Fatalf("enterprise request %d rejected", i)
		}
	}
	counted("enterprise 101st", do(t, h, req("x-api-key", "shared", "authorization", ent)), `"enterprise";q=2000;w=2`, "1899")

	// The same key without a token is free: its bucket is whole (the
	// enterprise requests never reached the free rule): 20, then 429.
	if got := admitted(t, h, 25, req("x-api-key", "shared")); got != 20 {
		t.Fatalf("free: %d of 25 admitted, want 20", got)
	}
	res := do(t, h, req("x-api-key", "shared", "authorization", bearer(`{"plan":"free"}`)))
	if !res.Rejected {
		t.Fatal("a token with plan free escaped the free rule's empty bucket")
	}
	wantHeaders(t, "plan free", res.ResponseHeaders, "ratelimit-policy", `"free";q=20;w=2`)
	// ... and the free rejections took nothing from enterprise.
	counted("enterprise after free", do(t, h, req("x-api-key", "shared", "authorization", ent)), `"enterprise";q=2000;w=2`, "1898")

	// Header match: gold.
	if got := admitted(t, h, 8, req("x-api-key", "g", "x-tier", "gold")); got != 5 {
		t.Fatalf("gold: %d of 8 admitted, want 5", got)
	}
	// Enterprise and gold both match: the first (enterprise) applies, gold's
	// empty bucket is not consulted.
	counted("enterprise and gold", do(t, h, req("x-api-key", "g", "x-tier", "gold", "authorization", ent)), `"enterprise";q=2000;w=2`, "1999")
	// A malformed token and another tier: neither matches, free applies.
	counted("malformed token", do(t, h, req("x-api-key", "g", "x-tier", "silver", "authorization", "Bearer garbage")), `"free";q=20;w=2`, "19")

	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.enterprise.allowed": 103, "sluice.rule.enterprise.rejected": 0,
		"sluice.rule.gold.allowed": 5, "sluice.rule.gold.rejected": 3,
		"sluice.rule.free.allowed": 21, "sluice.rule.free.rejected": 6,
	})
}
