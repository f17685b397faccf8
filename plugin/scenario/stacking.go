package scenario

// Policy stacking: every policy applies to a request (here a per-user and a
// per-IP policy); a request is admitted only if every applying rule admits
// it; a request rejected by one rule consumes from no rule; the allowed
// response describes the rule with the fewest tokens left, and a 429 refused
// by several rules describes the longest wait.

import (
	"testing"
)

func init() {
	register(Case{Name: "StackedPoliciesAllApplyRejectedConsumesNothing", Run: stackedPolicies})
}

func stackedPolicies(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"policies": [
	  {"name": "users", "rules": [{"name": "per-user", "limit_keys": ["header:x-user"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.01, "burst": 5}}]},
	  {"name": "ips", "rules": [{"name": "per-ip", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
	    "algorithm_config": {"rps": 0.001, "burst": 3}}]}]}`)
	from := func(user, ip string) Request { return req("x-user", user, "@ip", ip) }

	// Both apply: per-ip (2 left) is more restrictive than per-user (4).
	res := do(t, h, from("u1", "10.1.1.1:1"))
	if res.Rejected {
		t.Fatal("first request rejected")
	}
	wantHeaders(t, "first", res.ResponseHeaders, "ratelimit", `"per-ip";r=2;t=1000`)
	// per-ip admits 3 in all; its 3 rejections take nothing from per-user.
	if got := admitted(t, h, 5, from("u1", "10.1.1.1:2")); got != 2 {
		t.Fatalf("%d more admitted from one IP, want 2 (per-ip burst 3)", got)
	}
	res = do(t, h, from("u1", "10.1.1.1:3"))
	if !res.Rejected {
		t.Fatal("per-ip's empty bucket admitted")
	}
	wantHeaders(t, "per-ip 429", res.ResponseHeaders, "ratelimit-policy", `"per-ip";q=3;w=3000`,
		"x-ratelimit-reason", "token_bucket_exceeded")
	// The same user from a new IP: exactly the user's 2 remaining tokens.
	if got := admitted(t, h, 4, from("u1", "10.1.1.2:1")); got != 2 {
		t.Fatalf("%d admitted from a new IP, want 2 (per-user's tokens left)", got)
	}
	// per-user's 2 rejections took nothing from the new IP: 1 left there.
	if got := admitted(t, h, 3, from("u2", "10.1.1.2:1")); got != 1 {
		t.Fatalf("%d admitted for a new user on the second IP, want 1", got)
	}
	// Both refuse: the reply describes the longer wait (per-ip: 1000 s,
	// per-user: 100 s), so Retry-After covers both.
	res = do(t, h, from("u1", "10.1.1.1:4"))
	if !res.Rejected {
		t.Fatal("admitted with both buckets empty")
	}
	wantHeaders(t, "both refuse", res.ResponseHeaders, "ratelimit", `"per-ip";r=0;t=1000`)
	if ra := atoi(t, "retry-after", header(res.ResponseHeaders, "retry-after")); ra < 1000 {
		t.Errorf("retry-after %d shorter than the longest wait, 1000 s", ra)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.per-user.allowed": 6, "sluice.rule.per-ip.allowed": 6})
}
