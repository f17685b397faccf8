package filter_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/plugin/wasmhost/fleethosts"
)

// A global token bucket charged from the response: tokens per second
// across the fleet, each answer reporting what it cost in x-tokens.
func fleetChargeConfig(down string, leaseMax int) string {
	return `{"fleet":{"cluster":"rls","timeout_ms":50,"sync_interval_ms":100,"lease_ttl_ms":1000,"lease_max":` + strconv.Itoa(leaseMax) + `,
	  "on_backend_down":"` + down + `"},
	 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"token_bucket",
	   "algorithm_config":{"tokens_per_second":1000,"burst":1000,"cost_source":"response_header:x-tokens",
	     "default_cost":10,"max_debt":500}}]}`
}

// costly is a request of tenant whose answer reports cost tokens.
func costly(tenant string, cost int) *wasmhost.Request {
	r := fleethosts.Tenant(tenant)
	r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"x-tokens", strconv.Itoa(cost)}}
	return r
}

// TestFleetResponseCostsChargeTheGlobalBucket: three processes admit
// requests while their pools hold tokens, and every answer's cost ends up
// in the service's bucket, paid from a lease or charged into its debt.
// What the fleet admits stays within burst + rate x T + max_debt (plus what
// the service forgave beyond its debt limit), and nothing admitted goes
// uncounted: granted - returned + charged covers every answer's cost, and
// what it covers beyond is stranded in pools.
func TestFleetResponseCostsChargeTheGlobalBucket(t *testing.T) {
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 1000, burst: 1000, maxDebt: 500, fleetSize: "3",
		buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	fh := startFleet(t, clock, fleetChargeConfig("local_share", 200), serveRLS(t, fake), 3)

	const steps, cost = 150, 50 // 3 s; 400 answers/s of 50 tokens against 1000 tokens/s
	admitted := 0
	for range steps {
		for _, hv := range load {
			if fh.Send(hv[0], hv[1], costly("acme", cost)) {
				admitted++
			}
		}
		fh.Step(20 * time.Millisecond)
	}
	fh.Step(20 * time.Millisecond) // the last answers' charges go out
	fh.CheckNoTraps()
	fake.mu.Lock()
	defer fake.mu.Unlock()
	T := float64(steps) * 0.02
	used := float64(admitted * cost)
	booked := fake.granted - fake.returned + fake.charged + fake.forgiven
	t.Logf("admitted %d answers (%.0f tokens) in %.1fs; granted %.0f, returned %.0f, charged %.0f, forgiven %.0f; RLS calls %d",
		admitted, used, T, fake.granted, fake.returned, fake.charged, fake.forgiven, fake.calls)
	if bound := 1000 + 1000*T + 500 + fake.forgiven; used > bound {
		t.Fatalf("answers used %.0f tokens > burst + rate x T + max_debt + forgiven = %.0f", used, bound)
	}
	if used > booked {
		t.Fatalf("answers used %.0f tokens, the service booked %.0f: a cost went uncounted", used, booked)
	}
	if stranded := booked - used; stranded > 3*200 {
		t.Fatalf("%.0f booked tokens were never used (more than 3 x lease_max)", stranded)
	}
	if fake.charged == 0 {
		t.Fatal("no charge reached the service: answers of 50 tokens never outran a pool")
	}
	if used < 0.8*(1000+1000*T) {
		t.Fatalf("answers used %.0f tokens of the %.0f the limit allows", used, 1000+1000*T)
	}
	if got := fh.Metric("sluice.rule.g.global_charged"); float64(got) != fake.charged+fake.forgiven {
		t.Fatalf("global_charged %d, the service was charged %.0f", got, fake.charged+fake.forgiven)
	}
	if got := fh.Metric("sluice.rule.g.response_cost_charged"); got != uint64(admitted) {
		t.Fatalf("response_cost_charged %d, want one per admitted request (%d)", got, admitted)
	}
}

// TestFleetOwedChargeGoesAheadOfTheNextAsk: what an answer's cost leaves
// owed travels ahead of the next ask for the same identity, in the same
// call, so the service decides the ask after the debt: no tick between.
func TestFleetOwedChargeGoesAheadOfTheNextAsk(t *testing.T) {
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 1000, burst: 1000, maxDebt: 500, fleetSize: "1",
		buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	fh := startFleet(t, clock, fleetChargeConfig("local_share", 200), serveRLS(t, fake), 1)

	// The first ask leases default_cost, 10; the answer costs 1400: the
	// lease pays 10, 1390 are owed.
	if !fh.Send(0, 0, costly("acme", 1400)) {
		t.Fatal("first request refused with a full global bucket")
	}
	if fake.calls != 1 || fake.charged != 0 {
		t.Fatalf("after the first answer: %d calls, %.0f charged; want 1 and nothing (the charge waits)", fake.calls, fake.charged)
	}
	// The next request finds the pool empty and asks: the 1390 go first,
	// the bucket (1000 - 10 - 1390 = -400) refuses the ask.
	if fh.Send(0, 0, costly("acme", 1)) {
		t.Fatal("second request admitted: the ask was decided before the owed charge")
	}
	if fake.calls != 2 || fake.charged != 1390 {
		t.Fatalf("after the second request: %d calls, %.0f charged; want 2 and 1390", fake.calls, fake.charged)
	}
	if got := fh.Metric("sluice.rule.g.global_charged"); got != 1390 {
		t.Fatalf("global_charged %d, want 1390", got)
	}
	// Refilled past the debt (0.4 s) and a lease's worth, it admits again.
	clock.Advance(300 * time.Millisecond)
	if fh.Send(0, 0, costly("acme", 1)) {
		t.Fatal("admitted 0.3 s later, with the fleet's bucket still 100 tokens in debt")
	}
	clock.Advance(300 * time.Millisecond)
	if !fh.Send(0, 0, costly("acme", 1)) {
		t.Fatal("refused after the refill paid the debt back")
	}
	fh.CheckNoTraps()
}

// TestFleetResponseCostsOnTheLocalShare: with the service down, an answer's
// cost takes the local share into debt, down to its part of max_debt, and
// requests are refused until the share's refill pays it back; nothing is
// owed to the service for it.
func TestFleetResponseCostsOnTheLocalShare(t *testing.T) {
	clock := wasmhost.NewManualClock(t0)
	fake := &fakeRLS{clock: clock, rate: 1000, burst: 1000, maxDebt: 500, fleetSize: "2",
		buckets: map[string]*fakeBucket{}, nodes: map[string]bool{}}
	fake.down.Store(true)
	fh := startFleet(t, clock, `{"fleet":{"cluster":"rls","timeout_ms":50,"sync_interval_ms":100,"fleet_size":2},
	 "rules":[{"name":"g","scope":"global","limit_keys":["header:x-tenant"],"algorithm":"token_bucket",
	   "algorithm_config":{"tokens_per_second":1000,"burst":1000,"cost_source":"response_header:x-tokens","max_debt":500}}]}`,
		serveRLS(t, fake), 1)
	// The share: 500/s, burst 500, debt down to -250. The first request
	// finds the service down and falls back to it.
	if !fh.Send(0, 0, costly("acme", 700)) {
		t.Fatal("refused on a full local share")
	}
	// 500 - 700 = -200: refused until 0.4 s of refill.
	if fh.Send(0, 0, costly("acme", 1)) {
		t.Fatal("admitted while the local share is in debt")
	}
	clock.Advance(300 * time.Millisecond)
	if fh.Send(0, 0, costly("acme", 1)) {
		t.Fatal("admitted after 0.3 s: 150 of the 200 owed were paid back")
	}
	clock.Advance(150 * time.Millisecond)
	if !fh.Send(0, 0, costly("acme", 5000)) {
		t.Fatal("refused after the share's refill paid the debt")
	}
	// 25 - 5000: clamped at the share's debt limit, -250.
	if got := fh.Metric("sluice.rule.g.response_cost_clamped"); got != 1 {
		t.Fatalf("response_cost_clamped %d, want 1", got)
	}
	clock.Advance(490 * time.Millisecond)
	if fh.Send(0, 0, costly("acme", 1)) {
		t.Fatal("admitted 0.49 s after a clamped charge: the share's debt is 250, 0.5 s of refill")
	}
	clock.Advance(20 * time.Millisecond)
	if !fh.Send(0, 0, costly("acme", 1)) {
		t.Fatal("refused once the clamped debt was paid back")
	}
	if fh.Metric("sluice.rule.g.global_charged") != 0 {
		t.Fatal("a local share's charge was sent to the service")
	}
	fh.CheckNoTraps()
}
