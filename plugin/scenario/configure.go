package scenario

// Configuration: an invalid configuration is refused by on_configure, at
// start (the host does not start) and on a reconfiguration (the update
// fails, every problem is logged at its JSON path, sluice.config_rejected
// counts it, and the previous configuration keeps limiting with its
// buckets). A valid reconfiguration keeps bucket and window state, applies
// new limits to it (a lower burst caps the stored tokens), and a renamed
// rule starts afresh.

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/policy"
)

func init() {
	register(
		Case{Name: "InvalidConfigurationRefusedOldOneKeepsLimiting", Run: invalidConfigurationRefused},
		Case{Name: "ReconfigureKeepsBucketState", Run: reconfigureKeepsBucketState},
	)
}

// invalidConfigs are refused by the parser; the first is the invalid
// example of docs/configuration.md.
var invalidConfigs = []string{
	`{"rules": [
	  {"name": "free", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
	   "algorithm_config": {"tokens_per_second": 10, "burst": 5}},
	  {"name": "free", "limit_keys": ["form:session"], "algorithm": "leaky_bucket",
	   "algorithm_config": {"rps": 1, "burst": 1}}]}`,
	`{"rules": [`,
	``,
	`[1,2]`,
	`{"rules": []}`,
	`{"bogus": 1, "rules": [{"name": "a", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
	`{"rules": [{"name": "a", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1, "burts": 2}}]}`,
	`{"rules": [{"name": "a", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 0, "burst": 1}}]}`,
	`{"rules": [{"name": "a", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1, "cost_source": "cookie:x"}}]}`,
	`{"mode": "dry-run", "rules": [{"name": "a", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
	`{"reject_status": 200, "rules": [{"name": "a", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
	`{"rules": [{"name": "w", "limit_keys": ["ip:address"], "algorithm": "rolling_window", "algorithm_config": {"limit": 10, "window_seconds": 60, "period_seconds": 7}}]}`,
	`{"rules": [{"name": "g", "scope": "global", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
	`{"telemetry": {"cluster": "admin"}, "rules": [{"name": "a", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`,
	`{"rules": [{"name": "q", "limit_keys": ["ip:address"], "algorithm": "quota", "algorithm_config": {"limit": 10, "period": "month", "time_zone": "Europe/Berlinn"}}]}`,
	`{"rules": [{"name": "q", "limit_keys": ["ip:address"], "algorithm": "quota", "algorithm_config": {"limit": 10, "period": "fortnight"}}]}`,
	`{"rules": [{"name": "f", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 10, "window_seconds": 60, "cost_source": "response_header:x-cost"}}]}`,
	`{"rules": [{"name": "t", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1, "max_debt": 5}}]}`,
	// Not UTF-8 (a Latin-1 "café"): read as U+FFFD it would match another value.
	"{\"rules\": [{\"name\": \"m\", \"match\": {\"header:x-plan\": \"caf\xe9\"}, \"limit_keys\": [\"ip:address\"], \"algorithm\": \"token_bucket\", \"algorithm_config\": {\"rps\": 1, \"burst\": 1}}]}",
}

func invalidConfigurationRefused(t *testing.T, start Starter) {
	// At start: the host refuses to start.
	for i, cfg := range invalidConfigs {
		if _, perr := policy.Parse([]byte(cfg)); perr == nil {
			t.Fatalf("config %d: the parser accepts it; the scenario needs an invalid one", i)
		}
		if i%3 != 0 { // starting a host is the slow part: a sample suffices here
			continue
		}
		if h, err := start(t, Options{Config: []byte(cfg)}); err == nil {
			_ = h.Close()
			t.Errorf("config %d: the host started with an invalid configuration: %s", i, cfg)
		}
	}

	// On a reconfiguration of two VMs with a bucket 2 tokens down.
	h := mustStart(t, start, Options{VMs: 2, Config: []byte(`{"rules": [{"name": "keep", "limit_keys": ["header:x-api-key"],
	  "algorithm": "token_bucket", "algorithm_config": {"rps": 0.001, "burst": 3}}]}`)})
	if got := admitted(t, h, 2, req("x-api-key", "k")); got != 2 {
		t.Fatalf("%d of 2 admitted", got)
	}
	rejectedBefore := metric(h, "sluice.config_rejected")
	for i, cfg := range invalidConfigs {
		before := len(h.Logs())
		if err := h.Reconfigure([]byte(cfg)); err == nil {
			t.Errorf("config %d: Reconfigure accepted an invalid configuration", i)
			continue
		}
		logs := h.Logs()[before:]
		_, perr := policy.Parse([]byte(cfg))
		for _, problem := range strings.Split(perr.Error(), "\n") {
			if !containsLine(logs, "sluice: invalid configuration: "+problem) {
				t.Errorf("config %d: problem %q not logged; logs: %q", i, problem, logs)
			}
		}
	}
	// The documented messages of the example, verbatim.
	for _, problem := range []string{
		"rules[0].algorithm_config.burst: 5 is below tokens_per_second 10; burst must be >= tokens_per_second",
		`rules[1].name: duplicate rule name "free" (also at rules[0].name)`,
		`rules[1].limit_keys[0]: "form:session" is not a known source`,
		`rules[1].algorithm: unknown algorithm "leaky_bucket"`,
	} {
		if logsContaining(h, problem) == 0 {
			t.Errorf("not logged: %q", problem)
		}
	}
	if got := metric(h, "sluice.config_rejected") - rejectedBefore; got < uint64(len(invalidConfigs)) {
		t.Errorf("sluice.config_rejected grew by %d for %d refused updates", got, len(invalidConfigs))
	}
	// The old configuration still limits, with its bucket: 1 token left,
	// seen by both VMs.
	if ok := admittedAcross(t, h, 2, 4, req("x-api-key", "k")); ok != 1 {
		t.Fatalf("after the refused updates %d admitted, want 1", ok)
	}
}

func containsLine(lines []string, sub string) bool {
	for _, l := range lines {
		if strings.Contains(l, sub) {
			return true
		}
	}
	return false
}

// reconfigureKeepsBucketState: a token bucket and a fixed window, each part
// spent, keep their state across updates on two VMs; a bigger limit adds
// to what is left, a lower burst caps it; a renamed rule starts full.
func reconfigureKeepsBucketState(t *testing.T, start Starter) {
	cfg := func(name string, burst, limit int, extra string) []byte {
		return []byte(fmt.Sprintf(`{"policies": [
		  {"name": "p1", "rules": [{"name": %q, "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
		    "algorithm_config": {"rps": 0.001, "burst": %d}}]},
		  {"name": "p2", "rules": [{"name": "quota", "limit_keys": ["header:x-user"], "algorithm": "fixed_window",
		    "algorithm_config": {"limit": %d, "window_seconds": 86400}}]}%s]}`, name, burst, limit, extra))
	}
	h := mustStart(t, start, Options{VMs: 2, Start: alignedStart.Add(time.Hour), Config: cfg("keep", 5, 4, "")})
	if got := admitted(t, h, 3, req("x-api-key", "k")); got != 3 {
		t.Fatalf("keep: %d of 3 admitted", got)
	}
	if got := admitted(t, h, 3, req("x-user", "u")); got != 3 {
		t.Fatalf("quota: %d of 3 admitted", got)
	}

	// A bigger burst and limit, and a new policy: 2 tokens are left of the
	// old 5 (not a full 50), and the window has 6 - 3 left.
	extra := `, {"name": "p3", "rules": [{"name": "other", "limit_keys": ["header:x-other"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}]}`
	if err := h.Reconfigure(cfg("keep", 50, 6, extra)); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	res := doOn(t, h, 1, req("x-api-key", "k"))
	if res.Rejected {
		t.Fatal("the kept bucket refused its fourth request")
	}
	wantHeaders(t, "after the update", res.ResponseHeaders, "ratelimit", `"keep";r=1;t=49000`, "ratelimit-policy", `"keep";q=50;w=50000`)
	if ok := admittedAcross(t, h, 2, 4, req("x-api-key", "k")); ok != 1 {
		t.Fatalf("after the update %d more admitted on two VMs, want 1 (5 - 3 - 1 left)", ok)
	}
	if got := admitted(t, h, 5, req("x-user", "u")); got != 3 {
		t.Fatalf("quota after the update: %d admitted, want 3 (limit 6, 3 used)", got)
	}

	// An hour refills 3.6 tokens; a burst lowered to 1 caps them.
	h.Advance(time.Hour)
	if err := h.Reconfigure(cfg("keep", 1, 6, "")); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	if got := admitted(t, h, 3, req("x-api-key", "k")); got != 1 {
		t.Fatalf("with burst 1: %d admitted, want 1", got)
	}
	// A renamed rule starts afresh: a full bucket of 5.
	if err := h.Reconfigure(cfg("renamed", 5, 6, "")); err != nil {
		t.Fatalf("Reconfigure: %v", err)
	}
	if got := admitted(t, h, 7, req("x-api-key", "k")); got != 5 {
		t.Fatalf("renamed rule: %d admitted, want a fresh 5", got)
	}
	noRecoveredPanics(t, h)
}
