package scenario

// Per-identity overrides: a rule with 10,000 overrides (a contract table)
// gives each listed API key its own limits and every other key the rule's;
// RateLimit-Policy shows the limits that applied. An override keeps the
// identity's bucket: when the override changes, the stored level carries
// over, cut down to a lowered burst, never refilled by the change.

import (
	"strconv"
	"strings"
	"testing"
)

func init() {
	register(
		Case{Name: "OverridesGiveIdentitiesTheirOwnLimits", Run: overridesGiveIdentitiesTheirOwnLimits},
		Case{Name: "TimedOverridesApplyOnlyInTheirTime", Run: timedOverridesApplyOnlyInTheirTime},
		Case{Name: "ScheduledOverridesApplyInTheirWeeklyWindows", Run: scheduledOverridesApplyInTheirWindows},
	)
}

// overridesConfig is a per-key rule (burst 5) with n overrides
// "customer-<i>" (burst 10 + i%7) and extra ones appended.
func overridesConfig(n int, extra string) string {
	var b strings.Builder
	b.WriteString(`{"rules": [{"name": "plans", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	  "algorithm_config": {"tokens_per_second": 0.01, "burst": 5}, "overrides": [`)
	for i := range n {
		b.WriteString(`{"key": "customer-` + strconv.Itoa(i) + `", "algorithm_config": {"burst": ` + strconv.Itoa(10+i%7) + `}},`)
	}
	b.WriteString(extra + `]}]}`)
	return b.String()
}

func overridesGiveIdentitiesTheirOwnLimits(t *testing.T, start Starter) {
	h := startConfig(t, start, overridesConfig(10000,
		`{"key": "acme", "algorithm_config": {"tokens_per_second": 1, "burst": 50}},
		 {"key": "gamma", "algorithm_config": {"burst": 100}}`))
	key := func(k string) Request { return req("x-api-key", k) }

	for _, c := range []struct {
		key    string
		n, adm int
		policy string
	}{
		{"acme", 60, 50, `"plans";q=50;w=50`},
		{"customer-9999", 20, 10 + 9999%7, `"plans";q=` + strconv.Itoa(10+9999%7) + `;w=` + strconv.Itoa(100*(10+9999%7))},
		{"customer-3", 20, 13, `"plans";q=13;w=1300`},
		{"not-a-customer", 20, 5, `"plans";q=5;w=500`},
	} {
		res := do(t, h, key(c.key))
		wantHeaders(t, c.key, res.ResponseHeaders, "ratelimit-policy", c.policy)
		if got := admitted(t, h, c.n-1, key(c.key)) + 1; got != c.adm {
			t.Errorf("%s: %d of %d admitted, want %d", c.key, got, c.n, c.adm)
		}
	}
	wantMetrics(t, h, map[string]uint64{"sluice.rule.plans.overridden": 100})

	// gamma uses 95 of its 100: 5 left.
	if got := admitted(t, h, 95, key("gamma")); got != 95 {
		t.Fatalf("gamma: %d of 95 admitted", got)
	}
	// Its override lowered to 20 (in a shorter table; customer-9999 has
	// none now): the level (5) carries over, no refill.
	if err := h.Reconfigure([]byte(overridesConfig(10, `{"key": "gamma", "algorithm_config": {"burst": 20}}`))); err != nil {
		t.Fatal(err)
	}
	if got := admitted(t, h, 10, key("gamma")); got != 5 {
		t.Errorf("gamma after lowering its burst: %d of 10 admitted, want the 5 it had left", got)
	}
	// Raised again, or removed: still empty; the change refills nothing.
	if err := h.Reconfigure([]byte(overridesConfig(10, `{"key": "gamma", "algorithm_config": {"burst": 1000}}`))); err != nil {
		t.Fatal(err)
	}
	res := do(t, h, key("gamma"))
	if !res.Rejected {
		t.Error("gamma's empty bucket was refilled by raising its override")
	}
	wantHeaders(t, "gamma raised", res.ResponseHeaders, "ratelimit-policy", `"plans";q=1000;w=100000`)
	// An override with a bad key is refused with its path.
	if err := h.Reconfigure([]byte(overridesConfig(10, `{"key": "a|b", "algorithm_config": {"burst": 20}}`))); err == nil {
		t.Error("an override key with two values for one limit key was accepted")
	}
	if logsContaining(h, `rules[0].overrides[10].key: "a|b" has 2 values joined by |, but the rule has 1 limit_keys`) == 0 {
		t.Error("the bad override key is not logged with its path")
	}
	noRecoveredPanics(t, h)
}

// An override with from and until gives its identity its own limits from
// from (inclusive) until until (exclusive), on the proxy's clock, with no
// new configuration: the filter decides each request of these policy
// tests, before, at and after both bounds, as the simulator does.
func timedOverridesApplyOnlyInTheirTime(t *testing.T, start Starter) {
	got := replayPolicyTests(t, start, []byte(`{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"],
	  "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60},
	  "overrides": [
	    {"key": "acme", "algorithm_config": {"limit": 5}, "from": "2026-12-24T10:01:00Z", "until": "2026-12-24T10:02:00Z"},
	    {"key": "globex", "algorithm_config": {"limit": 4}, "until": "2026-12-24T10:00:30.5Z"}]}]}`), []byte(`
tests:
  - name: acme has 5 a minute only from 10:01 until 10:02
    start: 2026-12-24T10:00:00Z
    request: {headers: {x-api-key: acme}}
    steps:
      - repeat: 2
        expect: {status: 200}
      - expect: {status: 429, rule: api}
      - wait: 59.999s
        expect: {status: 429, rule: api}
      - wait: 1ms
        repeat: 5
        expect: {status: 200}
      - expect: {status: 429, rule: api}
      - wait: 60s
        repeat: 2
        expect: {status: 200}
      - expect: {status: 429, rule: api}
  - name: globex has 4 a minute until 10:00:30.5
    start: 2026-12-24T10:00:00Z
    request: {headers: {x-api-key: globex}}
    steps:
      - repeat: 3
        expect: {status: 200}
      - wait: 30.499s
        expect: {status: 200}
      - wait: 1ms
        expect: {status: 429, rule: api}
      - wait: 29.5s
        repeat: 2
        expect: {status: 200}
      - expect: {status: 429, rule: api}
`))
	if got.requests != 21 || got.rejected != 6 {
		t.Fatalf("replayed %+v", got)
	}
}

// An override with a schedule gives its identity its own limits in its
// weekly windows only, in its time zone: 24 December 2026 is a Thursday,
// and the window is Thursdays 11:01 to 11:02 in Berlin (10:01 to 10:02
// UTC). The filter decides each request as the simulator does.
func scheduledOverridesApplyInTheirWindows(t *testing.T, start Starter) {
	got := replayPolicyTests(t, start, []byte(`{"rules": [{"name": "api", "limit_keys": ["header:x-api-key"],
	  "algorithm": "fixed_window", "algorithm_config": {"limit": 2, "window_seconds": 60},
	  "overrides": [
	    {"key": "acme", "algorithm_config": {"limit": 5},
	     "schedule": {"days": ["thu"], "from": "11:01", "until": "11:02", "time_zone": "Europe/Berlin"}}]}]}`), []byte(`
tests:
  - name: acme has 5 a minute in its Thursday window only
    start: 2026-12-24T10:00:00Z
    request: {headers: {x-api-key: acme}}
    steps:
      - repeat: 2
        expect: {status: 200}
      - wait: 59.999s
        expect: {status: 429, rule: api}
      - wait: 1ms
        repeat: 5
        expect: {status: 200}
      - expect: {status: 429, rule: api}
      - wait: 60s
        repeat: 2
        expect: {status: 200}
      - expect: {status: 429, rule: api}
  - name: the next day at the same time acme has the rule's 2
    start: 2026-12-25T10:01:00Z
    request: {headers: {x-api-key: acme}}
    steps:
      - repeat: 2
        expect: {status: 200}
      - expect: {status: 429, rule: api}
`))
	if got.requests != 15 || got.rejected != 4 {
		t.Fatalf("replayed %+v", got)
	}
}
