package e2e

import (
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// TestFleetOverridesHoldEachTenantToItsOwnLimit: the compiled plugin in
// three processes and the admin's rate limit service agree on who an
// override names. A global token bucket of burst 5 (and almost no refill)
// with an override of burst 40 for acme: across the fleet acme is admitted
// more than the rule's burst and at most its own, beta at most the rule's.
func TestFleetOverridesHoldEachTenantToItsOwnLimit(t *testing.T) {
	const policy = `{"fleet":{"cluster":"rls","timeout_ms":80,"sync_interval_ms":100,"lease_ttl_ms":5000,"lease_max":20,
	  "on_backend_down":"deny"},
	 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"token_bucket",
	   "algorithm_config":{"tokens_per_second":0.001,"burst":5},
	   "overrides":[{"key":"acme","algorithm_config":{"burst":40}}]}]}`
	for _, be := range fleetBackends {
		t.Run(be.name, func(t *testing.T) {
			rls, _ := be.start(t, policy)
			f := fleethosts.Start(t, fleethosts.Options{Config: policy, RLS: rls.url, Hosts: 3})
			admitted := map[string]int{}
			for range 20 {
				for hv := range skewedLoad {
					for _, tenant := range []string{"acme", "beta"} {
						if f.Request(hv[0], hv[1], tenant) {
							admitted[tenant]++
						}
					}
				}
			}
			f.CheckNoTraps()
			t.Logf("of 100 requests each: acme %d admitted, beta %d; backend errors %d", admitted["acme"], admitted["beta"],
				f.Metric("sluice.rule.g.backend_errors"))
			if a := admitted["acme"]; a <= 10 || a > 40 {
				t.Errorf("acme: %d admitted; want more than twice the rule's burst of 5 and at most its own 40", a)
			}
			if b := admitted["beta"]; b < 1 || b > 5 {
				t.Errorf("beta: %d admitted; want 1 to the rule's burst of 5", b)
			}
		})
	}
}
