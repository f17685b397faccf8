package scenario

// peer:principal keys and matches a request by its client certificate's
// URI SAN (Envoy's connection.uri_san_peer_certificate): under Istio mutual
// TLS, the calling workload's SPIFFE ID. A request without a certificate
// has no value, so a rule keyed by it does not apply.

import "testing"

func init() {
	register(Case{Name: "PeerPrincipalKeysAndMatchesTheClientCertificate", Run: peerPrincipal})
}

const peerConfig = `{"policies": [{"name": "mesh", "rules": [
  {"name": "batch", "match": {"peer:principal": {"prefix": "spiffe://cluster.local/ns/batch/"}}, "limit_keys": ["peer:principal"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}},
  {"name": "workloads", "limit_keys": ["peer:principal"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 2}}]}]}`

func peerPrincipal(t *testing.T, start Starter) {
	h := startConfig(t, start, peerConfig)
	const etl, web, api = "spiffe://cluster.local/ns/batch/sa/etl", "spiffe://cluster.local/ns/shop/sa/web", "spiffe://cluster.local/ns/shop/sa/api"
	allowed := func(what string, r Request) { t.Helper(); wantAdmitted(t, h, what, r) }

	// The batch namespace's rule, by prefix, one request per workload.
	allowed("the batch workload's first request", req("@peer", etl))
	wantRejection(t, "the batch workload's second request", do(t, h, req("@peer", etl)), 429, `{"error":"rate_limited","rule":"batch"...`,
		"ratelimit-policy", `"batch";q=1;w=1000`)

	// Every other workload has a bucket of its own under the next rule.
	allowed("the web workload's first request", req("@peer", web))
	allowed("the web workload's second request", req("@peer", web))
	wantRejection(t, "the web workload's third request", do(t, h, req("@peer", web)), 429, `{"error":"rate_limited","rule":"workloads"...`)
	allowed("another workload", req("@peer", api))

	// Without a certificate there is no principal: no rule applies.
	for i := range 5 {
		if res := do(t, h, req()); res.Rejected {
			t.Fatalf("request %d without a certificate was rejected", i)
		}
	}
	noRecoveredPanics(t, h)
}
