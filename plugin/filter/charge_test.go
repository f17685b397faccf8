package filter_test

import (
	"context"
	"math"
	"testing"

	"github.com/sluice-rl/sluice/plugin/wasmhost"
	"github.com/sluice-rl/sluice/shared/policy"
)

// TestResponseChargeRetriesCASThenFailsOpenCounted: a charge re-reads and
// retries on CAS mismatches (counted in cas_retries), so every reported
// cost lands when other writers interleave; when it keeps losing, or
// shared data fails, it gives up after a bounded number of attempts, the
// request is unaffected (fail open) and response_cost_failed counts it.
func TestResponseChargeRetriesCASThenFailsOpenCounted(t *testing.T) {
	const cfg = `{"rules": [{"name": "llm", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 0.000001, "burst": 1000, "cost_source": "response_header:x-tokens-used"}}]}`
	reporting := func(cost string) *wasmhost.Request {
		r := rq("x-api-key", "k")
		r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"x-tokens-used", cost}}
		return r
	}
	const n = 20
	for _, c := range []struct {
		name        string
		faults      wasmhost.Faults
		wantTokens  float64 // after the first charge (10) and n more
		wantFailed  uint64
		wantRetries uint64 // exact, or 0 for "some"
		someRetries bool
	}{
		{"half the writes lose their CAS", wasmhost.Faults{CASMismatchRate: 0.5, Seed: 3}, 1000 - 10*(n+1), 0, 0, true},
		{"every update loses its CAS", wasmhost.Faults{CASMismatchRate: 1}, 1000 - 10, n, 32 * n, false},
		{"shared data refuses every write", wasmhost.Faults{SetFailRate: 1}, 1000 - 10, n, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := start(t, cfg, 1)
			if res := f.doOn(0, reporting("10")); res.Rejected { // creates the bucket
				t.Fatal("first request rejected")
			}
			f.h.SharedData().InjectFaults(c.faults)
			for i := 0; i < n; i++ {
				if res := f.doOn(0, reporting("10")); res.Rejected {
					t.Fatalf("request %d rejected: a failed charge must not refuse anything", i)
				}
			}
			f.h.SharedData().InjectFaults(wasmhost.Faults{})
			if got := f.tokens("llm", "k"); math.Abs(got-c.wantTokens) > 1e-3 {
				t.Errorf("bucket holds %v tokens, want %v", got, c.wantTokens)
			}
			if got := f.metric("sluice.rule.llm.response_cost_failed"); got != c.wantFailed {
				t.Errorf("response_cost_failed = %d, want %d", got, c.wantFailed)
			}
			if got := f.metric("sluice.rule.llm.response_cost_charged"); got != uint64(n+1)-c.wantFailed {
				t.Errorf("response_cost_charged = %d, want %d", got, uint64(n+1)-c.wantFailed)
			}
			retries := f.metric("sluice.rule.llm.cas_retries")
			if c.someRetries && retries == 0 || !c.someRetries && retries != c.wantRetries {
				t.Errorf("cas_retries = %d, want %d (some: %v)", retries, c.wantRetries, c.someRetries)
			}
		})
	}
}

// TestResponseChargeAfterItsPlaceWasTaken: in bounded storage an admitted
// request's identity holds no bucket until it is charged; when every way of
// its group is taken by active buckets before its response arrives, the
// charge lands on the group's overflow bucket (counted in overflowed) and
// the identity's next request is decided there.
func TestResponseChargeAfterItsPlaceWasTaken(t *testing.T) {
	f := start(t, `{"rules": [{"name": "llm", "max_keys": 4, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 0.000001, "burst": 100, "cost_source": "response_header:x-tokens-used"}}]}`, 1)
	vm := f.h.VM(0)
	ctx := context.Background()
	s, err := vm.NewStream(ctx, wasmhost.Properties{"source.address": []byte("10.0.0.1:5555")})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := s.RequestHeaders([]wasmhost.Header{{":path", "/"}, {"x-api-key", "late"}}, true); err != nil || res.Local != nil {
		t.Fatalf("late request: %v, local reply %v", err, res.Local)
	}
	for _, k := range []string{"a", "b", "c", "d"} { // four active buckets fill the group
		r := rq("x-api-key", k)
		r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"x-tokens-used", "30"}}
		if res := f.doOn(0, r); res.Rejected {
			t.Fatalf("key %s rejected", k)
		}
	}
	if got := f.metric("sluice.rule.llm.overflowed"); got != 0 {
		t.Fatalf("overflowed %d before the late charge", got)
	}
	if _, err := s.ResponseHeaders([]wasmhost.Header{{":status", "200"}, {"x-tokens-used", "150"}}, true); err != nil {
		t.Fatal(err)
	}
	if err := s.Finish(); err != nil {
		t.Fatal(err)
	}
	if got := f.metric("sluice.rule.llm.overflowed"); got != 1 {
		t.Fatalf("overflowed = %d, want the late charge decided on the overflow bucket", got)
	}
	if got := f.metric("sluice.rule.llm.response_cost_charged"); got != 5 {
		t.Fatalf("response_cost_charged = %d, want 5", got)
	}
	// The overflow bucket is 50 in debt (100 - 150): the late identity, still
	// without a way, is refused there.
	if res := f.do("x-api-key", "late"); !res.Rejected {
		t.Fatal("the late identity was admitted by an overflow bucket in debt")
	}
}

// TestOverriddenIdentityIsChargedDownToTheRulesMaxDebt: an override that
// raises the burst of a response-charged rule whose max_debt is left at its
// default keeps the rule's max_debt (the rule's burst), as the policy
// parses it: a reported cost beyond it is clamped there.
func TestOverriddenIdentityIsChargedDownToTheRulesMaxDebt(t *testing.T) {
	const cfg = `{"rules": [{"name": "llm", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"rps": 0.000001, "burst": 10, "cost_source": "response_header:x-tokens-used"},
	  "overrides": [{"key": "big", "algorithm_config": {"burst": 400}}]}]}`
	parsed, err := policy.Parse([]byte(cfg))
	if err != nil {
		t.Fatal(err)
	}
	debt := parsed.Policies[0].Rules[0].Overrides[0].TokenBucket.MaxDebt
	f := start(t, cfg, 1)
	r := rq("x-api-key", "big")
	r.ResponseHeaders = []wasmhost.Header{{":status", "200"}, {"x-tokens-used", "1000"}}
	if res := f.doOn(0, r); res.Rejected {
		t.Fatal("the overridden identity's first request was rejected")
	}
	if got := f.tokens("llm", "big"); math.Abs(got-(-debt)) > 1e-3 || debt != 10 {
		t.Errorf("bucket holds %v tokens after a cost of 1000 on burst 400, want -%v (the rule's max_debt, parsed as %v)", got, 10, debt)
	}
	if got := f.metric("sluice.rule.llm.response_cost_clamped"); got != 1 {
		t.Errorf("response_cost_clamped = %d, want 1", got)
	}
	if got := f.metric("sluice.rule.llm.overridden"); got == 0 {
		t.Error("the override did not decide the request")
	}
}
