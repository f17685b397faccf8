package scenario

// A global token bucket charged from the response: the request is admitted
// while the identity's pool holds tokens and takes nothing; the answer's
// cost is paid from the pool, and what the pool cannot pay is owed to the
// rate limit service as a charge (sluice_op "charge"), sent ahead of the
// identity's next ask in the same call, or with the VM's next tick. A
// failed call keeps its charges for later.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

func init() {
	register(Case{Name: "GlobalBudgetChargedFromResponses", Run: globalBudgetChargedFromResponses})
	register(Case{Name: "GlobalDailyQuotaChargedFromResponses", Run: globalQuotaChargedFromResponses})
	register(Case{Name: "ChargesAnOlderAdminRefusesAreHeldWhileItsAsksGoOn", Run: chargesRefusedByAnOlderAdmin})
}

const fleetChargeConfig = `{"fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000, "lease_max": 40},
 "rules": [{"name": "g", "scope": "global", "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 100, "burst": 100, "cost_source": "response_header:x-tokens",
     "default_cost": 5, "max_debt": 200}}]}`

// costing is a request of tenant whose answer reports cost in x-tokens
// ("" reports nothing).
func costing(tenant, cost string) Request {
	r := req("x-tenant", tenant)
	r.ResponseHeaders = []Header{{":status", "200"}}
	if cost != "" {
		r.ResponseHeaders = append(r.ResponseHeaders, Header{"x-tokens", cost})
	}
	return r
}

// chargeOf returns the tokens a charge descriptor carries, or -1 for
// another descriptor. A charge names rule g (or w) and a 32-hex sluice_id.
func chargeOf(t testing.TB, d *ratelimitv3.RateLimitDescriptor) int64 {
	t.Helper()
	es := d.GetEntries()
	if len(es) != 3 || es[2].Key != "sluice_op" || es[2].Value != "charge" {
		return -1
	}
	if es[0].Key != "sluice_rule" || (es[0].Value != "g" && es[0].Value != "w") || es[1].Key != "sluice_id" || !isHex(es[1].Value, 32) {
		t.Fatalf("charge descriptor entries %v", es)
	}
	return int64(d.GetHitsAddend().GetValue())
}

func okStatus() *rlsv3.RateLimitResponse_DescriptorStatus {
	return &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
}

func globalBudgetChargedFromResponses(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetChargeConfig)})

	// The first request asks for a lease (one sync interval's share, 10
	// tokens) and is admitted; its answer costs 30: the lease pays 10, 20
	// are owed, and the RateLimit field shows nothing left.
	res := do(t, h, costing("acme", "30"))
	if !res.Paused {
		t.Fatalf("first request not paused for a lease (rejected %v)", res.Rejected)
	}
	c := onlyCall(t, h, "first lease")
	lease := leaseAsk(t, rlsCall(t, c, node))
	answerRLS(t, h, c, "1", okStatus())
	final := settled(t, "first request", res)
	if final.Rejected {
		t.Fatal("first request rejected with a lease granted")
	}
	if field := header(final.ResponseHeaders, "ratelimit"); !strings.Contains(field, ";r=0;") {
		t.Fatalf("RateLimit %q after an answer costing more than the lease of %d, want r=0", field, lease)
	}
	if n := len(pending(t, h)); n != 0 {
		t.Fatalf("%d calls right after the answer; the charge waits for the next ask or tick", n)
	}

	// The next request finds the pool empty and asks: the charge goes
	// first in the same call, so the service decides the ask after it.
	res = do(t, h, costing("acme", "1"))
	if !res.Paused {
		t.Fatal("an empty pool did not ask")
	}
	c = onlyCall(t, h, "ask after the answer")
	r := rlsCall(t, c, node)
	if len(r.Descriptors) != 2 || chargeOf(t, r.Descriptors[0]) != 30-int64(lease) || chargeOf(t, r.Descriptors[1]) != -1 {
		t.Fatalf("descriptors %v; want the charge of %d, then the ask", r.Descriptors, 30-lease)
	}
	answerRLS(t, h, c, "1", okStatus(), &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT,
		LimitRemaining: 50, DurationUntilReset: durationpb.New(80 * time.Millisecond)})
	if final := settled(t, "ask after the debt", res); !final.Rejected || final.Status != 429 {
		t.Fatalf("after the service refused the ask: rejected %v status %d", final.Rejected, final.Status)
	}

	// Later: a new lease; an answer without x-tokens is charged
	// default_cost (5) from the pool, nothing owed.
	h.Advance(100 * time.Millisecond)
	res = do(t, h, costing("acme", ""))
	c = onlyCall(t, h, "lease after the refusal")
	lease2 := leaseAsk(t, rlsCall(t, c, node)) // one descriptor: the charge is not sent twice
	if lease2 < 5 {
		t.Fatalf("a lease of %d after a refusal that left 50; the scenario needs 5", lease2)
	}
	answerRLS(t, h, c, "1", okStatus())
	final = settled(t, "request after the refusal", res)
	if final.Rejected {
		t.Fatal("rejected with a fresh lease")
	}
	if field := header(final.ResponseHeaders, "ratelimit"); !strings.Contains(field, fmt.Sprintf(";r=%d;", lease2-5)) {
		t.Fatalf("RateLimit %q after default_cost 5 from a lease of %d", field, lease2)
	}

	// An answer of 50 leaves most of it owed; the VM's next tick sends it
	// in a call of its own. The call fails: the charge is kept and goes
	// out again once the service answers.
	res = do(t, h, costing("acme", "50"))
	if res.Paused {
		grantAll(t, h, node)
	}
	if settled(t, "request of 50", res).Rejected {
		t.Fatal("request of 50 rejected with a lease granted")
	}
	step(t, h, 100*time.Millisecond)
	var owed int64
	for _, c := range pending(t, h) {
		r := rlsCall(t, c, node)
		if len(r.Descriptors) == 1 && chargeOf(t, r.Descriptors[0]) > 0 {
			owed = chargeOf(t, r.Descriptors[0])
			failCall(t, h, c)
			continue
		}
		failCall(t, h, c) // the sync's refill fails too
	}
	if owed <= 0 || owed > 50 {
		t.Fatalf("the tick's charge: %d tokens, want the part of 50 the pool could not pay", owed)
	}
	for i := 0; i < 3 && metric(h, "sluice.rule.g.global_charged") == uint64(30-lease); i++ {
		step(t, h, 100*time.Millisecond)
		for _, c := range pending(t, h) {
			r := rlsCall(t, c, node)
			var st []*rlsv3.RateLimitResponse_DescriptorStatus
			for _, d := range r.Descriptors {
				if n := chargeOf(t, d); n > 0 && n != owed {
					t.Fatalf("the charge went out again as %d tokens, want %d", n, owed)
				}
				st = append(st, okStatus())
			}
			answerRLS(t, h, c, "1", st...)
		}
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.g.global_charged":        30 - lease + uint64(owed),
		"sluice.rule.g.response_cost_charged": 3,
		"sluice.rule.g.response_cost_default": 1,
	})
	noRecoveredPanics(t, h)
}

// globalQuotaChargedFromResponses: a global daily quota charged from the
// response. The lease counts in the service's current day and ends with
// it; what an answer costs beyond the lease is charged without naming a
// window (it counts in the day current when it arrives, as a local quota
// charges at the answer); the RateLimit field's reset is the day's end.
func globalQuotaChargedFromResponses(t *testing.T, start Starter) {
	const node = "node-a"
	config := fleetWindowConfig("quota", `{"limit": 1000, "period": "day", "cost_source": "response_header:x-tokens",
	  "default_cost": 100, "max_debt": 500}`)
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(config), Start: alignedStart.Add(23 * time.Hour)})
	dayLeft := time.Hour

	res := do(t, h, costing("acme", "300"))
	if !res.Paused {
		t.Fatalf("first request not paused for a lease (rejected %v)", res.Rejected)
	}
	c := onlyCall(t, h, "first lease")
	r := rlsCall(t, c, node)
	if len(r.Descriptors) != 1 || r.Descriptors[0].GetHitsAddend().GetValue() != 4 || r.Descriptors[0].GetLimit() != nil {
		t.Fatalf("first ask %v; want default_cost (100) within lease_max, 4, and no rate override", r.Descriptors)
	}
	answerRLS(t, h, c, "1", windowStatus(rlsv3.RateLimitResponse_OK, 900, dayLeft))
	final := settled(t, "first request", res)
	if final.Rejected {
		t.Fatal("first request rejected with a lease granted")
	}
	if field := header(final.ResponseHeaders, "ratelimit"); !strings.HasSuffix(field, ";r=0;t=3600") {
		t.Fatalf("RateLimit %q after 300 on a lease of 4; want r=0 and the day's end, t=3600", field)
	}

	res = do(t, h, costing("acme", "1"))
	if !res.Paused {
		t.Fatal("an empty pool did not ask")
	}
	c = onlyCall(t, h, "ask after the answer")
	r = rlsCall(t, c, node)
	if len(r.Descriptors) != 2 || chargeOf(t, r.Descriptors[0]) != 296 || chargeOf(t, r.Descriptors[1]) != -1 {
		t.Fatalf("descriptors %v; want the charge of 296 (no sluice_window), then the ask", r.Descriptors)
	}
	answerRLS(t, h, c, "1", windowStatus(rlsv3.RateLimitResponse_OK, 400, dayLeft),
		windowStatus(rlsv3.RateLimitResponse_OVER_LIMIT, 0, dayLeft))
	final = settled(t, "ask after the charge", res)
	if !final.Rejected || final.Status != 429 {
		t.Fatalf("after the service refused the ask: rejected %v status %d", final.Rejected, final.Status)
	}
	// Refused for the rest of the day: no call until it ends.
	h.Advance(30 * time.Minute)
	if res := do(t, h, costing("acme", "1")); !res.Rejected || res.Paused {
		t.Fatalf("half an hour later: rejected %v paused %v; the day's refusal holds", res.Rejected, res.Paused)
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.w.global_charged": 296, "sluice.rule.w.response_cost_charged": 1})
	noRecoveredPanics(t, h)
}

// chargesRefusedByAnOlderAdmin: mid rolling upgrade, an admin that does not
// know the charge operation refuses the whole call carrying one (gRPC
// INVALID_ARGUMENT naming sluice_op "charge"). The ask of that call goes
// out again at once without the charge, for the same waiting request, and
// the backend is not taken for down; charges are held for a minute (asks
// go out without them), then sent again.
func chargesRefusedByAnOlderAdmin(t *testing.T, start Starter) {
	const node = "node-a"
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(fleetChargeConfig)})
	res := do(t, h, costing("acme", "30"))
	c := onlyCall(t, h, "first lease")
	lease := leaseAsk(t, rlsCall(t, c, node))
	answerRLS(t, h, c, "1", okStatus())
	if settled(t, "first request", res).Rejected {
		t.Fatal("first request rejected with a lease granted")
	}
	owed := 30 - int64(lease)

	// The next ask carries the charge; the older admin refuses the call.
	res = do(t, h, costing("acme", "1"))
	c = onlyCall(t, h, "ask with the charge")
	if r := rlsCall(t, c, node); len(r.Descriptors) != 2 || chargeOf(t, r.Descriptors[0]) != owed {
		t.Fatalf("descriptors %v, want the charge of %d and the ask", r.Descriptors, owed)
	}
	refused := []Header{{":status", "200"}, {"content-type", "application/grpc"}, {"grpc-status", "3"},
		{"grpc-message", `descriptors[0].entries[2]: sluice_op "charge": the only operation is "return"`}}
	if err := h.Respond(c.ID, refused, nil); err != nil {
		t.Fatal(err)
	}
	if res.Stream == nil {
		t.Fatal("the request was not waiting for the ask")
	}
	c = onlyCall(t, h, "the ask again, without the charge")
	if r := rlsCall(t, c, node); len(r.Descriptors) != 1 || chargeOf(t, r.Descriptors[0]) != -1 {
		t.Fatalf("descriptors %v, want the ask alone", r.Descriptors)
	}
	answerRLS(t, h, c, "1", okStatus())
	if settled(t, "the request of the refused call", res).Rejected {
		t.Fatal("the request of the refused call was rejected")
	}
	if logsContaining(h, "refuses charges") != 1 {
		t.Errorf("the refusal is not logged once: %q", h.Logs())
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.backend_errors": 0, "sluice.rule.g.fallback_local": 0,
		"sluice.rule.g.global_charged": 0})

	// For a minute the charge is held: ticks and asks carry none.
	for i := 0; i < 5; i++ {
		step(t, h, 100*time.Millisecond)
		for _, c := range pending(t, h) {
			r := rlsCall(t, c, node)
			var st []*rlsv3.RateLimitResponse_DescriptorStatus
			for _, d := range r.Descriptors {
				if chargeOf(t, d) > 0 {
					t.Fatalf("a charge went out %d ms after the refusal", (i+1)*100)
				}
				st = append(st, okStatus())
			}
			answerRLS(t, h, c, "1", st...)
		}
	}
	// An ask in that minute (the lease lapsed) goes without it too.
	h.Advance(time.Second)
	res = do(t, h, costing("acme", "1"))
	if res.Paused {
		c := onlyCall(t, h, "an ask while charges are held")
		r := rlsCall(t, c, node)
		for _, d := range r.Descriptors {
			if chargeOf(t, d) > 0 {
				t.Fatal("a charge went ahead of an ask while charges are held")
			}
		}
		answerRLS(t, h, c, "1", okStatus())
		res = settled(t, "the ask while charges are held", res)
	}
	if res.Rejected {
		t.Fatal("a request while charges are held was rejected")
	}
	// Then it is sent again, whole.
	h.Advance(time.Minute)
	var sent int64
	for i := 0; i < 3 && sent == 0; i++ {
		step(t, h, 100*time.Millisecond)
		for _, c := range pending(t, h) {
			r := rlsCall(t, c, node)
			var st []*rlsv3.RateLimitResponse_DescriptorStatus
			for _, d := range r.Descriptors {
				if n := chargeOf(t, d); n > 0 {
					sent += n
				}
				st = append(st, okStatus())
			}
			answerRLS(t, h, c, "1", st...)
		}
	}
	if sent != owed {
		t.Fatalf("after a minute %d tokens were charged, want the %d held", sent, owed)
	}
	noRecoveredPanics(t, h)
}
