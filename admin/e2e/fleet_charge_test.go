package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// chargedPolicy is a global budget charged from the response: 1000 tokens
// a second, burst 2000, each answer reporting its cost in x-tokens, debt
// down to 500.
const chargedPolicy = `{"fleet":{"cluster":"rls","timeout_ms":80,"sync_interval_ms":100,"lease_ttl_ms":1000,"lease_max":200,
  "on_backend_down":"deny"},
 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"token_bucket",
   "algorithm_config":{"tokens_per_second":1000,"burst":2000,"cost_source":"response_header:x-tokens",
     "default_cost":20,"max_debt":500}}]}`

const chargedRate, chargedBurst, chargedDebt, chargedLeaseMax = 1000.0, 2000.0, 500.0, 200.0

// TestFleetResponseCostsAgainstTheAdmin: three Envoy-like processes answer
// at ten times the budget, each answer costing 25 tokens, against the
// admin's rate limit service on a real Redis and on PostgreSQL. The tokens
// the answers used stay within burst + rate x T + max_debt (plus what the
// service clamped at its debt limit), every one of them is booked by the
// service (granted to a pool, or charged), and what it booked beyond them
// is at most the leases' tokens left in the pools.
func TestFleetResponseCostsAgainstTheAdmin(t *testing.T) {
	for _, b := range fleetBackends {
		t.Run(b.name, func(t *testing.T) {
			rls, _ := b.start(t, chargedPolicy)
			f := fleethosts.Start(t, fleethosts.Options{Config: chargedPolicy, RLS: rls.url, Hosts: 3})
			f.StartTickers()
			const cost = 25
			res := offerLoad(skewedLoad, 3, 4*time.Second, func(host, vm int) bool {
				return f.Send(host, vm, answerCosting("acme", cost))
			})
			time.Sleep(300 * time.Millisecond) // the last answers' charges go out with the next ticks
			f.Wait()
			f.CheckNoTraps()

			m := func(decision string) float64 {
				return rls.metric(t, "sluice_fleet_tokens_total", "rule", "g", "decision", decision)
			}
			granted, returned, charged, clamped := m("granted"), m("returned"), m("charged"), m("clamped")
			T := res.elapsed.Seconds()
			used := float64(res.admitted * cost)
			booked := granted - returned + charged
			bound := chargedBurst + chargedRate*T + chargedDebt + clamped
			t.Logf("%d answers admitted (%.0f tokens) of %d in %.2fs; bound %.0f; the service granted %.0f, returned %.0f, charged %.0f (clamped %.0f); plugin errors %d",
				res.admitted, used, res.offered, T, bound, granted, returned, charged, clamped, f.Metric("sluice.rule.g.backend_errors"))
			if used > bound {
				t.Errorf("answers used %.0f tokens > burst + rate x T + max_debt + clamped = %.0f", used, bound)
			}
			if used > booked {
				t.Errorf("answers used %.0f tokens, the service booked %.0f: a cost went uncounted", used, booked)
			}
			if stranded := booked - used; stranded > 3*chargedLeaseMax {
				t.Errorf("%.0f booked tokens never used: more than the leases outstanding (3 x lease_max)", stranded)
			}
			if charged == 0 {
				t.Error("nothing was charged: no answer outran its pool")
			}
			if got := float64(f.Metric("sluice.rule.g.global_charged")); f.Metric("sluice.rule.g.backend_errors") == 0 && got != charged {
				t.Errorf("the plugins charged %.0f tokens, the service counted %.0f", got, charged)
			}
			if floor := 0.8 * (chargedBurst + chargedRate*T); used < floor {
				t.Errorf("answers used %.0f tokens, under 80%% of burst + rate x T (%.0f)", used, floor)
			}
		})
	}
}

// answerCosting is a request of tenant whose answer reports cost tokens.
func answerCosting(tenant string, cost int) *wasmhost.Request {
	r := fleethosts.Tenant(tenant)
	r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"x-tokens", strconv.Itoa(cost)}}
	return r
}

// chargedQuotaPolicy is a global daily budget of 3000 tokens charged from
// the response, 500 of debt beyond it.
const chargedQuotaPolicy = `{"fleet":{"cluster":"rls","timeout_ms":80,"sync_interval_ms":100,"lease_ttl_ms":1000,"lease_max":200,
  "on_backend_down":"deny"},
 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"quota",
   "algorithm_config":{"limit":3000,"period":"day","cost_source":"response_header:x-tokens",
     "default_cost":20,"max_debt":500}}]}`

// TestFleetDailyQuotaChargedAgainstTheAdmin: the same load against a global
// daily quota charged from the response. Within the day the answers use at
// most limit + max_debt (plus what the service clamped), every token is
// booked, and at most the leases left in the pools go unused.
func TestFleetDailyQuotaChargedAgainstTheAdmin(t *testing.T) {
	for _, b := range fleetBackends {
		t.Run(b.name, func(t *testing.T) {
			if d := time.Until(time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)); d < 10*time.Second {
				t.Skipf("the UTC day ends in %v, within the run", d)
			}
			rls, _ := b.start(t, chargedQuotaPolicy)
			f := fleethosts.Start(t, fleethosts.Options{Config: chargedQuotaPolicy, RLS: rls.url, Hosts: 3})
			f.StartTickers()
			const cost, limit, debt = 25, 3000.0, 500.0
			res := offerLoad(skewedLoad, 3, 2*time.Second, func(host, vm int) bool {
				return f.Send(host, vm, answerCosting("acme", cost))
			})
			time.Sleep(300 * time.Millisecond)
			f.Wait()
			f.CheckNoTraps()
			m := func(decision string) float64 {
				return rls.metric(t, "sluice_fleet_tokens_total", "rule", "g", "decision", decision)
			}
			granted, returned, charged, clamped := m("granted"), m("returned"), m("charged"), m("clamped")
			used := float64(res.admitted * cost)
			booked := granted - returned + charged
			t.Logf("%d answers admitted (%.0f tokens) of %d; the service granted %.0f, returned %.0f, charged %.0f (clamped %.0f)",
				res.admitted, used, res.offered, granted, returned, charged, clamped)
			if bound := limit + debt + clamped; used > bound {
				t.Errorf("answers used %.0f tokens > limit + max_debt + clamped = %.0f", used, bound)
			}
			if used > booked {
				t.Errorf("answers used %.0f tokens, the service booked %.0f: a cost went uncounted", used, booked)
			}
			if stranded := booked - used; stranded > 3*chargedLeaseMax {
				t.Errorf("%.0f booked tokens never used: more than the leases outstanding", stranded)
			}
			if used < limit-3*chargedLeaseMax {
				t.Errorf("answers used %.0f of the day's %.0f tokens", used, limit)
			}
		})
	}
}
