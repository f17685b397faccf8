package scenario

// Gradual enforcement: a rule with "enforce_percent" refuses only the
// identities the shared hash chooses (request.Enforced, the same in every
// Envoy and in the admin's simulator); over the limit, the others are
// treated as by a shadow rule: let through, counted as shadow_rejected
// and named in the shadow header (unless "shadow_mark": false).

import (
	"fmt"
	"strconv"
	"testing"

	"github.com/sluice-rl/sluice/shared/request"
)

func init() {
	register(Case{Name: "RuleEnforcedOnAShareOfIdentitiesRefusesOnlyThoseAndMarksTheRest", Run: rolloutShare})
	register(Case{Name: "UnmarkedRuleEnforcedOnAShareLeavesTheSparedRequestsAsSent", Run: rolloutUnmarked})
	register(Case{Name: "GlobalRuleEnforcedOnAShareDeniesOnlyThoseWhenTheBackendIsDown", Run: rolloutGlobalBackendDown})
}

// rolloutKeys is how many API keys the cases send: enough that a share of
// 30% or 50% chooses some and spares some.
const rolloutKeys = 40

func rolloutConfig(extra string) string {
	return `{"rules": [{"name": "ramp", "enforce_percent": 30,` + extra + ` "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 1}}]}`
}

func rolloutShare(t *testing.T, start Starter) {
	h := startConfig(t, start, rolloutConfig(""))
	enforced := 0
	for i := range rolloutKeys {
		key := "k" + strconv.Itoa(i)
		// A client's own shadow header never gets through: the filter
		// owns it while a rule may mark.
		first := do(t, h, req("x-api-key", key, "x-sluice-shadow", "forged"))
		if first.Rejected {
			t.Fatalf("key %s: the first request, within the limit, was rejected", key)
		}
		wantHeaders(t, "within the limit", first.UpstreamHeaders, "x-sluice-shadow", "-")
		second := do(t, h, req("x-api-key", key))
		if request.Enforced(key, 30) {
			enforced++
			if !second.Rejected || second.Status != 429 {
				t.Fatalf("key %s is enforced: over the limit it got %+v, want 429", key, second)
			}
			continue
		}
		if second.Rejected {
			t.Fatalf("key %s is spared: over the limit it was rejected (%d)", key, second.Status)
		}
		wantHeaders(t, "spared, over the limit", second.UpstreamHeaders, "x-sluice-shadow", "ramp")
	}
	if enforced == 0 || enforced == rolloutKeys {
		t.Fatalf("%d of %d keys enforced at 30%%: the case needs both kinds", enforced, rolloutKeys)
	}
	wantMetrics(t, h, map[string]uint64{
		"sluice.rule.ramp.allowed": rolloutKeys, "sluice.rule.ramp.rejected": uint64(enforced),
		"sluice.rule.ramp.shadow_rejected": uint64(rolloutKeys - enforced),
	})
}

func rolloutUnmarked(t *testing.T, start Starter) {
	h := startConfig(t, start, rolloutConfig(` "shadow_mark": false,`))
	spared := 0
	for i := range rolloutKeys {
		key := "k" + strconv.Itoa(i)
		do(t, h, req("x-api-key", key))
		res := do(t, h, req("x-api-key", key, "x-sluice-shadow", "client-value"))
		if request.Enforced(key, 30) {
			if !res.Rejected {
				t.Fatalf("key %s is enforced: over the limit it was let through", key)
			}
			continue
		}
		spared++
		if res.Rejected {
			t.Fatalf("key %s is spared: over the limit it was rejected", key)
		}
		// Nothing marks: the header reaches upstream as the client sent it.
		wantHeaders(t, "spared, unmarked", res.UpstreamHeaders, "x-sluice-shadow", "client-value")
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.ramp.shadow_rejected": uint64(spared)})
	if logsContaining(h, "shadow rule ramp would have rejected") == 0 {
		t.Errorf("a spared refusal is not logged: %q", h.Logs())
	}
}

// A global rule enforced on a share: with the backend down and
// "on_backend_down": "deny", the identities it enforces on are refused
// and the others let through, marked.
func rolloutGlobalBackendDown(t *testing.T, start Starter) {
	h := startConfig(t, start, `{"fleet": {"cluster": "rls", "timeout_ms": 50, "sync_interval_ms": 100, "lease_ttl_ms": 1000, "lease_max": 40,
	  "on_backend_down": "deny"},
	 "rules": [{"name": "g", "scope": "global", "enforce_percent": 50, "limit_keys": ["header:x-tenant"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 100, "burst": 100}}]}`)
	enforced, spared := KeyAt(50, true), KeyAt(50, false)
	res := do(t, h, req("x-tenant", enforced))
	if !res.Paused {
		t.Fatalf("the first request of a global rule was not paused for a lease (rejected %v)", res.Rejected)
	}
	failCall(t, h, onlyCall(t, h, "the first ask"))
	if final := settled(t, "the enforced tenant's first request", res); !final.Rejected || final.Status != 429 {
		t.Fatalf("the enforced tenant, backend down: rejected %v, status %d; want 429", final.Rejected, final.Status)
	}
	res = do(t, h, req("x-tenant", spared))
	if res.Paused {
		res = settled(t, "the spared tenant's request", res)
	}
	if res.Rejected {
		t.Fatalf("the spared tenant, backend down: rejected (%d)", res.Status)
	}
	wantHeaders(t, "spared, backend down", res.UpstreamHeaders, "x-sluice-shadow", "g")
	if res := do(t, h, req("x-tenant", enforced)); !res.Rejected {
		t.Fatal("the enforced tenant's second request was let through while the backend is down")
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.g.rejected": 2, "sluice.rule.g.shadow_rejected": 1})
}

// KeyAt is the first of k0, k1, ... that a rule keyed by it alone,
// enforced on percent of its identities, enforces on (enforced) or
// spares; percent is between 0 and 100, exclusive.
func KeyAt(percent float64, enforced bool) string {
	for i := range 1_000_000 {
		if k := "k" + strconv.Itoa(i); request.Enforced(k, percent) == enforced {
			return k
		}
	}
	panic(fmt.Sprintf("no key among a million is %v at %v%%", map[bool]string{true: "enforced", false: "spared"}[enforced], percent))
}
