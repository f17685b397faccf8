package fleet

import (
	"testing"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"

	"github.com/sluice-rl/sluice/shared/state"
)

const overridesPolicy = `{"fleet": {"cluster": "sluice_rls"}, "rules": [
  {"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"tokens_per_second": 0.001, "burst": 2},
   "overrides": [{"key": "acme", "algorithm_config": {"burst": 5}}]},
  {"name": "w", "scope": "global", "limit_keys": ["header:x-user", "method"], "algorithm": "fixed_window",
   "algorithm_config": {"limit": 2, "window_seconds": 3600},
   "overrides": [{"key": "acme|GET", "algorithm_config": {"limit": 4}}]}]}`

// The rate limit service holds an identity listed in a global rule's
// overrides to its own limit, found by the sluice_id the filter sends for
// it; every other identity has the rule's.
func TestGlobalOverridesHoldAnIdentityToItsOwnLimit(t *testing.T) {
	forEachBackend(t, testGlobalOverrides)
}

func testGlobalOverrides(t *testing.T, b Backend) {
	clock := newWindowClock()
	rules := &PolicyRules{}
	rules.Set(1, []byte(overridesPolicy))
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	acme, beta := state.SluiceIDOfKey("acme"), state.SluiceIDOfKey("beta")
	acmeGet, betaGet := state.SluiceIDOfKey("acme|GET"), state.SluiceIDOfKey("beta|GET")

	resp := s.mustCall(t, "n1", desc("g", acme, 5, false), desc("g", beta, 5, false), desc("g", beta, 2, false))
	checkStatus(t, "acme's burst of 5", resp.Statuses[0], OK, 0)
	checkStatus(t, "beta asks 5 of the rule's burst of 2", resp.Statuses[1], OVER, 2)
	checkStatus(t, "beta asks 2", resp.Statuses[2], OK, 0)

	resp = s.mustCall(t, "n1", desc("w", acmeGet, 4, false), desc("w", betaGet, 3, false), desc("w", betaGet, 2, false))
	checkStatus(t, "acme|GET's window of 4", resp.Statuses[0], OK, 0)
	checkStatus(t, "beta|GET asks 3 of the rule's 2", resp.Statuses[1], OVER, 2)
	checkStatus(t, "beta|GET asks 2", resp.Statuses[2], OK, 0)
	if cl := resp.Statuses[0].CurrentLimit; cl == nil || cl.RequestsPerUnit != 4 || cl.Unit != rlsv3.RateLimitResponse_RateLimit_HOUR {
		t.Errorf("acme|GET's current_limit %v, want its own 4 per HOUR", cl)
	}

	// A new version without the override: acme is back on the rule's
	// limit, from the state it has (a bucket is not refilled by the change).
	rules.Set(2, []byte(`{"fleet": {"cluster": "sluice_rls"}, "rules": [
	  {"name": "w", "scope": "global", "limit_keys": ["header:x-user", "method"], "algorithm": "fixed_window",
	   "algorithm_config": {"limit": 6, "window_seconds": 3600}}]}`))
	checkStatus(t, "acme|GET under the rule's 6 with 4 counted", s.mustCall(t, "n1", desc("w", acmeGet, 3, false)).Statuses[0], OVER, 2)
}

// The dashboard's overview counts a global rule's overrides.
func TestOverviewCountsTheOverridesOfAGlobalRule(t *testing.T) {
	rules := &PolicyRules{}
	rules.Set(1, []byte(overridesPolicy))
	s := NewServer(Options{Backend: &fakeBackend{}, Rules: rules, Timeout: time.Second})
	got := map[string]int{}
	for _, r := range s.Overview().Rules {
		got[r.Name] = r.Overrides
	}
	if got["g"] != 1 || got["w"] != 1 || len(got) != 2 {
		t.Errorf("overrides per rule %v", got)
	}
}

func TestPolicyRulesLeaveOutOverridesOfLocalRules(t *testing.T) {
	rules := &PolicyRules{}
	rules.Set(1, []byte(`{"fleet": {"cluster": "sluice_rls"}, "rules": [
	  {"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 2}},
	  {"name": "local", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 2},
	   "overrides": [{"key": "acme", "algorithm_config": {"burst": 5}}]}]}`))
	now := time.Now()
	if _, ok := rules.IdentityLimit("local", state.SluiceIDOfKey("acme"), now); ok {
		t.Error("a local rule's override is served as a global limit")
	}
	if l, ok := rules.IdentityLimit("g", state.SluiceIDOfKey("acme"), now); !ok || l.Burst != 2 {
		t.Errorf("acme on the global rule: %+v %v, want the rule's burst 2", l, ok)
	}
}

// An override with from and until holds its identity to its own limit
// only from from (inclusive) until until (exclusive), on the service's
// clock, with no new version: before and after, the rule's.
func TestGlobalOverridesApplyOnlyInTheirTime(t *testing.T) {
	forEachBackend(t, testTimedGlobalOverrides)
}

func testTimedGlobalOverrides(t *testing.T, b Backend) {
	clock := newWindowClock() // hour n, 10 s in
	hour := func(n int) string {
		return clock.base.Truncate(time.Hour).Add(time.Duration(n) * time.Hour).Format(time.RFC3339)
	}
	rules := &PolicyRules{}
	rules.Set(1, []byte(`{"fleet": {"cluster": "sluice_rls"}, "rules": [
	  {"name": "w", "scope": "global", "limit_keys": ["header:x-user", "method"], "algorithm": "fixed_window",
	   "algorithm_config": {"limit": 2, "window_seconds": 3600},
	   "overrides": [{"key": "acme|GET", "algorithm_config": {"limit": 4}, "from": "`+hour(1)+`", "until": "`+hour(2)+`"}]},
	  {"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 2},
	   "overrides": [{"key": "acme", "algorithm_config": {"burst": 5}, "until": "`+hour(1)+`"}]}]}`))
	s := startRLS(t, Options{Backend: b, Rules: rules, Timeout: time.Second, Now: clock.now})
	OK, OVER := rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT
	acmeGet := state.SluiceIDOfKey("acme|GET")
	for n, c := range []struct {
		ask  int64
		want rlsv3.RateLimitResponse_Code
		left uint32
		why  string
	}{
		{3, OVER, 2, "before from: the rule's 2"},
		{4, OK, 0, "from from: the override's 4"},
		{3, OVER, 2, "from until: the rule's 2 again"},
	} {
		clock.n.Store(int64(n))
		checkStatus(t, c.why, s.mustCall(t, "n1", desc("w", acmeGet, c.ask, false)).Statuses[0], c.want, c.left)
	}
	acme := state.SluiceIDOfKey("acme")
	for _, c := range []struct {
		at        time.Time
		wantBurst float64
	}{
		{clock.base, 5},
		{clock.base.Truncate(time.Hour).Add(time.Hour - time.Nanosecond), 5},
		{clock.base.Truncate(time.Hour).Add(time.Hour), 2},
	} {
		if l, ok := rules.IdentityLimit("g", acme, c.at); !ok || l.Burst != c.wantBurst {
			t.Errorf("acme's bucket at %s: burst %v (%v), want %v", c.at.Format(time.RFC3339Nano), l.Burst, ok, c.wantBurst)
		}
	}
}

// An override with a weekly schedule holds its identity to its own limit
// in its windows only, on the service's clock, in its time zone.
func TestGlobalOverridesApplyInTheirWeeklyWindows(t *testing.T) {
	rules := &PolicyRules{}
	rules.Set(1, []byte(`{"fleet": {"cluster": "sluice_rls"}, "rules": [
	  {"name": "g", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 1, "burst": 2},
	   "overrides": [{"key": "acme", "algorithm_config": {"burst": 5},
	     "schedule": {"days": ["mon", "tue", "wed", "thu", "fri"], "from": "09:00", "until": "18:00", "time_zone": "Europe/Berlin"}}]},
	  {"name": "q", "scope": "global", "limit_keys": ["header:x-api-key"], "algorithm": "quota",
	   "algorithm_config": {"limit": 10, "period": "day"},
	   "overrides": [{"key": "acme", "algorithm_config": {"limit": 50}, "schedule": {"days": ["sat", "sun"]}}]}]}`))
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	acme := state.SluiceIDOfKey("acme")
	for _, c := range []struct {
		at              time.Time
		burst, quotaCap float64
	}{
		{time.Date(2026, 12, 3, 9, 0, 0, 0, berlin), 5, 10},   // a Thursday, at 09:00
		{time.Date(2026, 12, 3, 8, 59, 59, 0, berlin), 2, 10}, // before its window
		{time.Date(2026, 12, 3, 18, 0, 0, 0, berlin), 2, 10},  // at its end
		{time.Date(2026, 12, 5, 12, 0, 0, 0, berlin), 2, 50},  // a Saturday: the quota's override
	} {
		if l, ok := rules.IdentityLimit("g", acme, c.at); !ok || l.Burst != c.burst {
			t.Errorf("acme's bucket at %s: burst %v (%v), want %v", c.at, l.Burst, ok, c.burst)
		}
		if w, ok := rules.IdentityWindow("q", acme, c.at); !ok || float64(w.Limit) != c.quotaCap {
			t.Errorf("acme's quota at %s: limit %v (%v), want %v", c.at, w.Limit, ok, c.quotaCap)
		}
	}
}
