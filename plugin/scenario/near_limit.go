package scenario

// near_limit counts admitted requests that left their identity less than a
// fifth of its capacity (the burst of a token bucket, the limit of a window
// or quota, a rolling window's per-period cap, an override's own), as envoyproxy/ratelimit's near_limit counts
// hits over 80% of the limit: a signal to alert on before clients are
// refused.

import "testing"

func init() {
	register(Case{Name: "NearLimitCountsRequestsInTheLastFifthOfTheLimit", Run: nearLimit})
}

const nearLimitConfig = `{"policies": [
  {"name": "buckets", "rules": [{"name": "bucket", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
    "algorithm_config": {"rps": 0.001, "burst": 10},
    "overrides": [{"key": "big", "algorithm_config": {"rps": 0.001, "burst": 20}}]}]},
  {"name": "windows", "rules": [{"name": "window", "limit_keys": ["header:x-user"], "algorithm": "fixed_window",
    "algorithm_config": {"limit": 5, "window_seconds": 60}}]},
  {"name": "rolling", "rules": [{"name": "capped", "limit_keys": ["header:x-batch"], "algorithm": "rolling_window",
    "algorithm_config": {"limit": 100, "window_seconds": 600, "period_seconds": 60, "max_per_period": 10}}]}]}`

func nearLimit(t *testing.T, start Starter) {
	h := startConfig(t, start, nearLimitConfig)
	send := func(n int, kv ...string) {
		t.Helper()
		for i := range n {
			if res := do(t, h, req(kv...)); res.Rejected {
				t.Fatalf("%v: request %d rejected", kv, i+1)
			}
		}
	}
	want := func(metric string, n uint64) {
		t.Helper()
		if got, ok := h.Metric(metric); !ok || got != n {
			t.Fatalf("%s = %d (defined %v), want %d", metric, got, ok, n)
		}
	}
	// Burst 10: the 9th and 10th requests leave 1 and 0, under 2.
	send(8, "x-api-key", "k1")
	want("sluice.rule.bucket.near_limit", 0)
	send(2, "x-api-key", "k1")
	want("sluice.rule.bucket.near_limit", 2)
	// An override's burst of 20: near from the 17th request (3 left, under 4).
	send(16, "x-api-key", "big")
	want("sluice.rule.bucket.near_limit", 2)
	send(4, "x-api-key", "big")
	want("sluice.rule.bucket.near_limit", 6)
	// A window of 5: only the 5th request leaves less than 1.
	send(5, "x-user", "u1")
	want("sluice.rule.window.near_limit", 1)
	// A refused request is not counted.
	if res := do(t, h, req("x-user", "u1")); !res.Rejected {
		t.Fatal("the 6th request in the window was admitted")
	}
	want("sluice.rule.window.near_limit", 1)
	want("sluice.rule.window.allowed", 5)
	// A rolling window capped at 10 a period: what a client can spend is
	// the cap, not the window's 100, so only the 9th and 10th are near.
	send(8, "x-batch", "b1")
	want("sluice.rule.capped.near_limit", 0)
	send(2, "x-batch", "b1")
	want("sluice.rule.capped.near_limit", 2)
	noRecoveredPanics(t, h)
}
