package scenario

// cluster keys and matches a request by the upstream cluster its route
// sends it to (Envoy's xds.cluster_name; under Istio,
// outbound|<port>|<subset>|<service FQDN>): a limit per backend, whatever
// route or host leads to it. A route without a cluster (a direct
// response) gives no value.

import "testing"

func init() {
	register(Case{Name: "ClusterKeysAndMatchesTheUpstreamCluster", Run: clusterName})
}

const clusterConfig = `{"policies": [{"name": "backends", "rules": [
  {"name": "payments", "match": {"cluster": {"suffix": "|payments.prod.svc.cluster.local"}}, "limit_keys": ["cluster"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}},
  {"name": "per-backend", "limit_keys": ["cluster"], "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60}}]}]}`

const (
	paymentsV1 = "outbound|8080|v1|payments.prod.svc.cluster.local"
	paymentsV2 = "outbound|8080|v2|payments.prod.svc.cluster.local"
)

func clusterName(t *testing.T, start Starter) {
	h := startConfig(t, start, clusterConfig)
	allowed := func(what string, r Request) { t.Helper(); wantAdmitted(t, h, what, r) }
	// The payments service by its FQDN: its subsets are clusters of their
	// own, so each has its bucket; the route that led there does not matter.
	allowed("payments v1, from the checkout route", req("@cluster", paymentsV1, "@route", "checkout"))
	wantRejection(t, "payments v1, from another route", do(t, h, req("@cluster", paymentsV1, "@route", "refunds")), 429,
		`{"error":"rate_limited","rule":"payments"...`, "ratelimit-policy", `"payments";q=1;w=1000`)
	allowed("payments v2", req("@cluster", paymentsV2))

	// Other backends: a window each.
	web := "outbound|80||web.prod.svc.cluster.local"
	allowed("web 1", req("@cluster", web))
	allowed("web 2", req("@cluster", web, "@route", "home"))
	wantRejection(t, "web 3", do(t, h, req("@cluster", web)), 429, `{"error":"rate_limited","rule":"per-backend"...`)
	allowed("search", req("@cluster", "outbound|80||search.prod.svc.cluster.local"))

	// A route without a cluster: no rule applies.
	for range 4 {
		allowed("a direct response", req("@route", "health"))
	}
	noRecoveredPanics(t, h)
}
