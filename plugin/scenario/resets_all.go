package scenario

// A reset of every identity of a rule ("all": true): the VM that claims it
// walks the rule's groups and empties them, 2048 groups at a time, the
// first as the configuration loads and the rest on its ticks; every
// identity's next request then starts as a new one's, in every VM. The
// other rules keep their state.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

func init() {
	register(
		Case{Name: "AResetOfEveryIdentityStartsTheRuleOver", Run: resetEveryIdentity},
		Case{Name: "AResetOfEveryIdentityOfAGlobalRuleDropsItsPools", Run: resetEveryPool},
	)
}

// resetAllConfig: a burst of 2 per user that barely refills, in a table of
// 40,000 identities (10,000 groups: five turns of the walk), and a rule
// of its own per team that the reset leaves alone.
const resetAllConfig = `{"policies": [
  {"name": "users", "rules": [{"name": "per-user", "limit_keys": ["header:x-user"], "algorithm": "token_bucket", "max_keys": 40000,
   "algorithm_config": {"rps": 0.001, "burst": 2}}]},
  {"name": "teams", "rules": [{"name": "per-team", "limit_keys": ["header:x-team"], "algorithm": "fixed_window",
   "algorithm_config": {"limit": 1, "window_seconds": 3600}}]}]}`

func resetEveryIdentity(t *testing.T, start Starter) {
	h := mustStart(t, start, Options{Config: []byte(resetAllConfig), Start: noon, VMs: 2})
	user := func(i int) Request { return req("x-user", fmt.Sprintf("user-%d", i)) }
	const users = 40
	admitted(t, h, 2, req("x-team", "ops")) // the team's window of 1 is spent
	for i := range users {
		if got := admittedAcross(t, h, 2, 3, user(i)); got != 2 {
			t.Fatalf("user-%d: %d of 3 admitted, want the burst of 2", i, got)
		}
	}
	if err := h.Reconfigure(withResets(resetAllConfig, `{"id": "all-1", "rule": "per-user", "all": true}`)); err != nil {
		t.Fatal(err)
	}
	// The walk has done its first 2048 groups of 10,000; four ticks end it.
	for i := range 4 {
		if n := metric(h, "sluice.resets_applied"); n != 0 {
			t.Fatalf("resets applied after %d turns of the walk: %d, want 0 (the walk goes on)", i+1, n)
		}
		step(t, h, 10*time.Millisecond)
	}
	if n := metric(h, "sluice.resets_applied"); n != 1 {
		t.Fatalf("resets applied after the walk's ticks: %d, want 1", n)
	}
	for i := range users {
		if got := admittedAcross(t, h, 2, 3, user(i)); got != 2 {
			t.Errorf("user-%d after the reset: %d of 3 admitted on both VMs, want a full burst of 2", i, got)
		}
	}
	// The team's window is another rule's: still spent.
	wantRejection(t, "the team, another rule", do(t, h, req("x-team", "ops")), 429, `{"error":"rate_limited","rule":"per-team"...`)
	if n := logsContaining(h, "forgot every identity's state"); n != 1 {
		t.Errorf("%d log lines say the rule forgot every identity, want 1: %q", n, h.Logs())
	}
	// A later push still carrying it does not walk again.
	if err := h.Reconfigure(withResets(resetAllConfig, `{"id": "all-1", "rule": "per-user", "all": true}`)); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		step(t, h, 10*time.Millisecond)
	}
	if got := admitted(t, h, 1, user(0)); got != 0 {
		t.Error("user-0 admitted after spending the burst again: the reset applied twice")
	}
	if n := metric(h, "sluice.resets_applied"); n != 1 || metric(h, "sluice.resets_failed") != 0 {
		t.Errorf("resets applied %d, failed %d; want 1 and 0", n, metric(h, "sluice.resets_failed"))
	}
	noRecoveredPanics(t, h)
}

// Two identities of a global rule refused by the service are refused from
// their pools while the refusal lasts; a reset of every identity drops
// every pool of the rule, so both ask the service again.
func resetEveryPool(t *testing.T, start Starter) {
	const node = "node-a"
	// 16 groups: the walk is done as the configuration loads.
	config := strings.Replace(fleetConfig("deny"), `"algorithm": "token_bucket"`, `"algorithm": "token_bucket", "max_keys": 64`, 1)
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
		if res := do(t, h, req("x-tenant", who)); !res.Rejected || res.Paused {
			t.Fatalf("%s right after: rejected %v paused %v, want refused from its pool", who, res.Rejected, res.Paused)
		}
	}
	refuse("acme")
	refuse("beta")
	if err := h.Reconfigure(withResets(config, `{"id": "r-all", "rule": "g", "all": true}`)); err != nil {
		t.Fatal(err)
	}
	for _, who := range []string{"acme", "beta"} {
		res := do(t, h, req("x-tenant", who))
		if !res.Paused {
			t.Fatalf("%s after the reset: not paused for an ask (rejected %v)", who, res.Rejected)
		}
		c := onlyCall(t, h, who+"'s ask after the reset")
		leaseAsk(t, rlsCall(t, c, node))
		answerRLS(t, h, c, "1", &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK, LimitRemaining: 90})
		if settled(t, who+"'s lease after the reset", res).Rejected {
			t.Fatalf("%s: refused after a granted lease", who)
		}
	}
	if n := metric(h, "sluice.resets_applied"); n != 1 {
		t.Errorf("resets applied: %d, want 1", n)
	}
	noRecoveredPanics(t, h)
}
