package scenario

// Resets: the admin pushes a configuration carrying "resets", and each
// Envoy process forgets the named identity's state in the named rule once,
// whichever of its VMs loads the configuration first: a blocked client is
// let back in, a spent window or quota starts over. Later pushes that
// still carry the reset do not apply it again.

import (
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

func init() {
	register(
		Case{Name: "ResetLetsABlockedIdentityBackInOnce", Run: resetLiftsABlock},
		Case{Name: "ResetForgetsWindowsAndQuotasInBothStorageModes", Run: resetForgetsWindows},
		Case{Name: "ResetDropsAGlobalRulesLeasePool", Run: resetDropsAPool},
	)
}

// withResets is config with a top-level "resets" member of entries.
func withResets(config string, entries ...string) []byte {
	i := strings.LastIndexByte(config, '}')
	return []byte(config[:i] + `, "resets": [` + strings.Join(entries, ", ") + `]}`)
}

func resetLiftsABlock(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(blockConfig), Start: noon, VMs: 2})
	erin, frank := req("x-user", "erin"), req("x-user", "frank")
	admitted(t, h, 4, erin) // three, then the refusal that blocks her
	admitted(t, h, 4, frank)
	h.Advance(10 * time.Second)
	reset := `{"id": "r1", "rule": "login", "key": "erin"}`
	if err := h.Reconfigure(withResets(blockConfig, reset)); err != nil {
		t.Fatal(err)
	}
	if got := admittedAcross(t, h, 2, 4, erin); got != 3 {
		t.Errorf("erin after her reset: %d of 4 admitted on both VMs, want a full burst of 3", got)
	}
	wantRejection(t, "frank, blocked and not reset", do(t, h, frank), 429, `{"error":"rate_limited","rule":"login"...`)
	if n := metric(h, "sluice.resets_applied"); n != 1 {
		t.Errorf("resets applied: %d, want 1 (two VMs loaded the configuration)", n)
	}
	// erin's fourth request blocked her again; a later push that still
	// carries the reset (beside a new one, for frank) does not lift it.
	h.Advance(10 * time.Second)
	if err := h.Reconfigure(withResets(blockConfig, reset, `{"id": "r2", "rule": "login", "key": "frank"}`)); err != nil {
		t.Fatal(err)
	}
	wantRejection(t, "erin, blocked again after her reset", do(t, h, erin), 429, `{"error":"rate_limited","rule":"login"...`)
	wantAdmitted(t, h, "frank after his reset", frank)
	if n := metric(h, "sluice.resets_applied"); n != 2 {
		t.Errorf("resets applied: %d, want 2", n)
	}
	// Pushed again without resets, then with the first again: still
	// not applied twice.
	if err := h.Reconfigure([]byte(blockConfig)); err != nil {
		t.Fatal(err)
	}
	if err := h.Reconfigure(withResets(blockConfig, reset)); err != nil {
		t.Fatal(err)
	}
	if n := metric(h, "sluice.resets_applied"); n != 2 {
		t.Errorf("resets applied: %d, want still 2", n)
	}
	noRecoveredPanics(t, h)
}

// resetWindowsConfig has a bounded fixed window, an exact-mode quota and a
// two-key sliding window, keyed by API key, each in a policy of its own.
const resetWindowsConfig = `{"policies": [
  {"name": "per-minute", "rules": [{"name": "minute", "limit_keys": ["header:x-api-key"], "algorithm": "fixed_window",
   "algorithm_config": {"limit": 2, "window_seconds": 60}}]},
  {"name": "per-day", "rules": [{"name": "daily", "limit_keys": ["header:x-api-key"], "algorithm": "quota", "max_keys": 0,
   "algorithm_config": {"limit": 3, "period": "day"}}]},
  {"name": "per-method", "rules": [{"name": "per-method", "limit_keys": ["header:x-api-key", "method"], "algorithm": "sliding_window",
   "algorithm_config": {"limit": 4, "window_seconds": 3600}}]}]}`

func resetForgetsWindows(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(resetWindowsConfig), Start: noon})
	acme, beta := req("x-api-key", "acme"), req("x-api-key", "beta")
	if got := admitted(t, h, 3, acme); got != 2 {
		t.Fatalf("acme: %d of 3 admitted, want the window's 2", got)
	}
	admitted(t, h, 3, beta)
	h.Advance(61 * time.Second) // a new minute: the quota has one left each
	admitted(t, h, 2, acme)
	admitted(t, h, 2, beta)
	wantRejection(t, "acme, quota spent", do(t, h, acme), 429, `{"error":"rate_limited","rule":"daily"...`)
	if err := h.Reconfigure(withResets(resetWindowsConfig,
		`{"id": "q", "rule": "daily", "key": "acme"}`,
		`{"id": "m", "rule": "minute", "key": "acme"}`,
		`{"id": "s", "rule": "per-method", "key": "acme|GET"}`,
		`{"id": "nobody", "rule": "minute", "key": "never-seen"}`)); err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, h, 3, acme); got != 2 {
		t.Errorf("acme after the resets: %d of 3 admitted, want the window's 2 (the quota has 3 again)", got)
	}
	wantRejection(t, "beta, not reset", do(t, h, beta), 429, `{"error":"rate_limited","rule":"daily"...`)
	h.Advance(61 * time.Second)
	wantAdmitted(t, h, "acme, the quota's third", acme)
	wantRejection(t, "acme, the quota spent again", do(t, h, acme), 429, `{"error":"rate_limited","rule":"daily"...`)
	if n := metric(h, "sluice.resets_applied"); n != 4 {
		t.Errorf("resets applied: %d, want 4", n)
	}
	if n := metric(h, "sluice.resets_failed"); n != 0 {
		t.Errorf("resets failed: %d", n)
	}
	if n := logsContaining(h, "forgot an identity's state"); n != 3 {
		t.Errorf("%d logged resets that forgot a state, want 3 (never-seen had none)", n)
	}
	if n := logsContaining(h, "undecodable"); n != 0 {
		t.Errorf("%d log lines mention a corrupt value after the resets", n)
	}
	noRecoveredPanics(t, h)
}

// A global rule's identity refused by the rate limit service is refused
// at once while the refusal lasts, from its pool; a reset drops the pool
// (the admin makes the service forget the identity), so its next request
// asks the service again. Another identity keeps its cached refusal.
func resetDropsAPool(t *testing.T, start Starter) {
	const node = "node-a"
	config := fleetConfig("deny")
	h := mustStart(t, start, Options{NodeID: node, Config: []byte(config)})
	refuse := func(who string) {
		res := do(t, h, req("x-tenant", who))
		c := onlyCall(t, h, who+"'s ask")
		leaseAsk(t, rlsCall(t, c, node))
		answerRLS(t, h, c, "1", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OVER_LIMIT,
			DurationUntilReset: durationpb.New(time.Minute)})
		if !settled(t, who+", refused by the service", res).Rejected {
			t.Fatalf("%s: admitted after the service's refusal", who)
		}
	}
	refuse("acme")
	refuse("beta")
	if err := h.Reconfigure(withResets(config, `{"id": "r1", "rule": "g", "key": "acme"}`)); err != nil {
		t.Fatal(err)
	}
	if res := do(t, h, req("x-tenant", "beta")); !res.Rejected || res.Paused {
		t.Fatalf("beta, not reset: rejected %v paused %v, want refused from its pool", res.Rejected, res.Paused)
	}
	res := do(t, h, req("x-tenant", "acme"))
	if !res.Paused {
		t.Fatalf("acme after the reset: not paused for an ask (rejected %v)", res.Rejected)
	}
	c := onlyCall(t, h, "acme's ask after the reset")
	leaseAsk(t, rlsCall(t, c, node))
	answerRLS(t, h, c, "1", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 90})
	if settled(t, "acme's lease after the reset", res).Rejected {
		t.Fatal("acme: refused after a granted lease")
	}
	if n := metric(h, "sluice.resets_applied"); n != 1 {
		t.Errorf("resets applied: %d, want 1", n)
	}
	noRecoveredPanics(t, h)
}
