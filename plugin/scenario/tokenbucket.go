package scenario

import (
	"testing"
)

func init() {
	register(Case{Name: "TokenBucketAdmitsBurstThenRejects", Run: tokenBucketAdmitsBurstThenRejects})
}

// tokenBucketAdmitsBurstThenRejects: burst 3 at 1 token/s admits three
// requests at one instant, rejects the fourth with 429 and the RateLimit
// fields, and admits again once a token has refilled.
func tokenBucketAdmitsBurstThenRejects(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"rules": [{"name": "r", "limit_keys": ["header:x-api-key"],
		"algorithm": "token_bucket", "algorithm_config": {"tokens_per_second": 1, "burst": 3}}]}`)
	r := req("x-api-key", "k1")
	for i := 0; i < 3; i++ {
		if res := do(t, h, r); res.Rejected || res.Status != 200 {
			t.Fatalf("request %d: rejected %v status %d, want allowed 200", i+1, res.Rejected, res.Status)
		}
	}
	res := do(t, h, r)
	if !res.Rejected || res.Status != 429 {
		t.Fatalf("4th request: rejected %v status %d, want 429", res.Rejected, res.Status)
	}
	for _, name := range []string{"retry-after", "ratelimit", "ratelimit-policy", "ratelimit-remaining"} {
		if header(res.ResponseHeaders, name) == "" {
			t.Errorf("429 lacks %s: %v", name, res.ResponseHeaders)
		}
	}
	h.Advance(1e9)
	if res := do(t, h, r); res.Rejected {
		t.Fatalf("after a second's refill: rejected, want allowed")
	}
}
