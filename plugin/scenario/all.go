package scenario

// "all" keys every request the same: a rule keyed by it alone has one
// bucket for all the requests its match selects, whatever their host,
// client or headers, as Envoy local_ratelimit's bucket of a route.

import "testing"

func init() {
	register(Case{Name: "AllKeyIsOneBucketForEveryRequestItApplies", Run: allKey})
}

const allConfig = `{"policies": [{"name": "shared", "rules": [
  {"name": "api", "match": {"path": {"prefix": "/api/"}}, "limit_keys": ["all"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 3}}]}]}`

func allKey(t *testing.T, start Starter) {
	h := startConfig(t, start, allConfig)
	// Three requests from three clients, hosts and keys share the bucket.
	wantAdmitted(t, h, "a first client", req(":path", "/api/a", ":authority", "a.example.com", "@ip", "10.0.0.1:1"))
	wantAdmitted(t, h, "a second client", req(":path", "/api/b", ":authority", "b.example.com", "@ip", "10.0.0.2:1", "x-api-key", "k"))
	wantAdmitted(t, h, "a third client", req(":path", "/api/c", "@ip", "10.0.0.3:1"))
	wantRejection(t, "a fourth client", do(t, h, req(":path", "/api/d", ":authority", "d.example.com", "@ip", "10.0.0.4:1")), 429,
		`{"error":"rate_limited","rule":"api"...`, "ratelimit-policy", `"api";q=3;w=3000`)
	// The rule's match decides which requests share it.
	for i := range 5 {
		if res := do(t, h, req(":path", "/web/", "@ip", "10.0.0.1:1")); res.Rejected {
			t.Fatalf("request %d outside the rule's match was rejected", i)
		}
	}
	noRecoveredPanics(t, h)
}
