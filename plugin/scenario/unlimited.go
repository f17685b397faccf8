package scenario

// An unlimited rule ends its policy: a matching request is not limited by
// that policy's later rules, while the other policies still apply (where
// an exempt rule would lift every limit). Counted in exempted; its mode
// changes nothing.

import "testing"

func init() {
	register(Case{Name: "UnlimitedRuleEndsItsPolicyOnly", Run: unlimitedRule})
}

func unlimitedRule(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"policies": [
	  {"name": "keys", "rules": [
	    {"name": "internal", "action": "unlimited", "match": {"header:x-api-key": {"in": ["batch", "backup"]}}},
	    {"name": "internal-shadow", "action": "unlimited", "mode": "shadow", "match": {"header:x-api-key": "cron"}},
	    {"name": "per-key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	     "algorithm_config": {"tokens_per_second": 0.001, "burst": 1}}]},
	  {"name": "addresses", "rules": [
	    {"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	     "algorithm_config": {"tokens_per_second": 0.001, "burst": 3}}]}]}`)
	from := func(addr, key string) Request { return req("@ip", addr+":1", "x-api-key", key) }

	// The batch key is past the per-key rule, not past the per-address one.
	if got := admitted(t, h, 4, from("198.51.100.1", "batch")); got != 3 {
		t.Errorf("batch from one address: %d of 4 admitted, want the address's 3", got)
	}
	if got := admitted(t, h, 3, from("198.51.100.2", "cron")); got != 3 {
		t.Errorf("cron (a shadow unlimited rule) from one address: %d of 3 admitted, want 3", got)
	}
	// Another key is limited by the per-key rule.
	if got := admitted(t, h, 2, from("198.51.100.3", "beta")); got != 1 {
		t.Errorf("beta: %d of 2 admitted, want its burst of 1", got)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.internal.exempted": 4, "sluice.rule.internal-shadow.exempted": 3,
		"sluice.rule.per-key.allowed": 1, "sluice.rule.per-key.rejected": 1, "sluice.rule.per-ip.rejected": 1})
	noRecoveredPanics(t, h)
}
