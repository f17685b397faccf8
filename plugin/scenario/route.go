package scenario

// route keys and matches a request by the name of the Envoy route it
// matched (Envoy's xds.route_name; under Istio, a VirtualService's
// http[].name): one bucket for a whole route, as Envoy's local_ratelimit
// configured on a route gives, without repeating the route's path and host
// in the policy. A request on a route without a name has no value.

import "testing"

func init() {
	register(Case{Name: "RouteKeysAndMatchesTheEnvoyRouteName", Run: routeName})
}

const routeConfig = `{"policies": [{"name": "routes", "rules": [
  {"name": "checkout", "match": {"route": "checkout"}, "limit_keys": ["route"],
   "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}},
  {"name": "per-route", "limit_keys": ["route"], "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60}}]}]}`

func routeName(t *testing.T, start Starter) {
	h := startConfig(t, start, routeConfig)
	allowed := func(what string, r Request) { t.Helper(); wantAdmitted(t, h, what, r) }
	// One bucket for the whole checkout route, whoever calls it.
	allowed("checkout, first client", req("@route", "checkout", "@ip", "10.0.0.1:1"))
	wantRejection(t, "checkout, another client", do(t, h, req("@route", "checkout", "@ip", "10.0.0.2:2")), 429,
		`{"error":"rate_limited","rule":"checkout"...`, "ratelimit-policy", `"checkout";q=1;w=1000`)

	// Other routes: a window each.
	allowed("catalog 1", req("@route", "catalog"))
	allowed("catalog 2", req("@route", "catalog"))
	wantRejection(t, "catalog 3", do(t, h, req("@route", "catalog")), 429, `{"error":"rate_limited","rule":"per-route"...`)
	allowed("search", req("@route", "search"))

	// A route without a name: no rule applies.
	for range 4 {
		allowed("a route without a name", req())
	}
	noRecoveredPanics(t, h)
}
