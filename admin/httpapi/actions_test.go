package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluice-rl/sluice/shared/policy"

	"github.com/sluice-rl/sluice/admin/telemetry"
)

// TestDashboardShowsWhatActionsAndOverridesDecided: a rule card carries a
// line with the requests exempted, denied or decided by an override; a
// rule without any has none.
func TestDashboardShowsWhatActionsAndOverridesDecided(t *testing.T) {
	te := newTelEnv(t, nil)
	postRuleCounters(t, te,
		telemetry.RuleCounters{Rule: "plans", Allowed: 2000, Overridden: 1204},
		telemetry.RuleCounters{Rule: "health", Exempted: 31},
		telemetry.RuleCounters{Rule: "blocked", Denied: 7},
		telemetry.RuleCounters{Rule: "calm", Allowed: 3},
		telemetry.RuleCounters{Rule: "login", Rejected: 40, Blocked: 12},
	)
	page := get(t, login(t, te.env, "ops"), te.srv.URL+"/dashboard?fragment=1")
	for rule, want := range map[string]string{
		"login":   `>12 clients blocked (since`,
		"plans":   `<p class="rule-actions muted" data-actions>1,204 decided by an override (since the admin started)</p>`,
		"health":  `>31 exempted (since`,
		"blocked": `>7 denied (since`,
	} {
		if card := ruleCard(t, page, rule); !strings.Contains(card, want) {
			t.Errorf("%s lacks %s:\n%s", rule, want, card)
		}
	}
	if calm := ruleCard(t, page, "calm"); strings.Contains(calm, "rule-actions") {
		t.Errorf("calm: no actions line:\n%s", calm)
	}
}

// TestDashboardShowsResponseCostsAndWarnsWhenMostAreDefault: a rule
// charged from the response says how many responses it charged and how
// many of them at default_cost; when most were, the line is a warning
// that points at the cause.
func TestDashboardShowsResponseCostsAndWarnsWhenMostAreDefault(t *testing.T) {
	te := newTelEnv(t, nil)
	postRuleCounters(t, te,
		telemetry.RuleCounters{Rule: "llm", Allowed: 2000, ResponseCharged: 2000, ResponseDefault: 12},
		telemetry.RuleCounters{Rule: "broken", Allowed: 90, ResponseCharged: 90, ResponseDefault: 88, ResponseInvalid: 3},
		telemetry.RuleCounters{Rule: "calm", Allowed: 3},
	)
	page := get(t, login(t, te.env, "ops"), te.srv.URL+"/dashboard?fragment=1")
	if card := ruleCard(t, page, "llm"); !strings.Contains(card, `<p class="rule-response-costs muted" data-response-costs>2,000 responses charged, 12 of them default_cost (since the admin started)`) {
		t.Errorf("llm:\n%s", card)
	}
	if card := ruleCard(t, page, "broken"); !strings.Contains(card, `class="rule-response-costs warn"`) ||
		!strings.Contains(card, "88 of them default_cost (3 reported something that is not a cost)") || !strings.Contains(card, "check its cost_source") {
		t.Errorf("broken: no warning:\n%s", card)
	}
	if calm := ruleCard(t, page, "calm"); strings.Contains(calm, "rule-response-costs") {
		t.Errorf("calm: no response costs line:\n%s", calm)
	}
}

// TestDashboardWarnsOfARuleThatNeverFindsItsKey: a rule's card counts the
// requests it matched without a value for a limit key, and warns when the
// rule decided nothing: what it is keyed on never arrives (a metadata
// filter after Sluice, a header nobody sends).
func TestDashboardWarnsOfARuleThatNeverFindsItsKey(t *testing.T) {
	te := newTelEnv(t, nil)
	postRuleCounters(t, te,
		telemetry.RuleCounters{Rule: "per-user", KeyMissing: 1400},
		telemetry.RuleCounters{Rule: "per-key", Allowed: 90, KeyMissing: 12},
		telemetry.RuleCounters{Rule: "calm", Allowed: 3},
	)
	te.clock.Add(2 * time.Second) // the report's requests are in the window
	page := get(t, login(t, te.env, "ops"), te.srv.URL+"/dashboard?fragment=1")
	if card := ruleCard(t, page, "per-user"); !strings.Contains(card, `class="rule-key-missing warn"`) ||
		!strings.Contains(card, "1,400 matched without a value for a limit key") || !strings.Contains(card, "it decided no request in the window") {
		t.Errorf("per-user: no warning:\n%s", card)
	}
	if card := ruleCard(t, page, "per-key"); !strings.Contains(card, `<p class="rule-key-missing muted" data-key-missing>12 matched without a value for a limit key, skipped (since the admin started)`) {
		t.Errorf("per-key:\n%s", card)
	}
	if calm := ruleCard(t, page, "calm"); strings.Contains(calm, "rule-key-missing") {
		t.Errorf("calm: no key-missing line:\n%s", calm)
	}
}

// postRuleCounters sends one report of a VM of node envoy-1 holding the rules'
// counters.
func postRuleCounters(t *testing.T, te *telEnv, rules ...telemetry.RuleCounters) {
	t.Helper()
	r := telemetry.Report{
		V: 1, Node: "envoy-1", VM: "a1", VMStartMS: 1763770000000, Seq: 1, SentAtMS: 1763770001000,
		IntervalMS: 1000, Buckets: []telemetry.Bucket{}, Rules: rules,
	}
	b, _ := json.Marshal(r)
	if res, body := te.send(t, telToken, "application/json", string(b)); res.StatusCode != 204 {
		t.Fatalf("report: %d %v", res.StatusCode, body)
	}
}

// TestAPIOverridesMergesACSVIntoARule: the CSV lands in the named rule of
// the current version (or of a draft sent along), validated; the answer
// saves as is; bad CSV and invalid results are refused with where.
func TestAPIOverridesMergesACSVIntoARule(t *testing.T) {
	e := newEnv(t, nil)
	if resp, body := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":1,"policy":`+perIP+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("save: %d %v", resp.StatusCode, body)
	}
	csvBody := func(csv string) string { b, _ := json.Marshal(csv); return string(b) }

	resp, ans := e.apiJSON(t, "POST", "/api/v1/policy/overrides",
		`{"rule":"per-ip","csv":`+csvBody("key,tokens_per_second,burst\n10.0.0.1,50,100\n10.0.0.2,,20\n")+`}`)
	if resp.StatusCode != 200 || ans["base_version"] != 2.0 || ans["added"] != 2.0 || ans["replaced"] != 0.0 || ans["total"] != 2.0 {
		t.Fatalf("merge: %d %v", resp.StatusCode, ans)
	}
	merged, _ := json.Marshal(ans["policy"])
	cfg, err := policy.Parse(merged)
	if err != nil {
		t.Fatalf("the merged policy does not parse: %v\n%s", err, merged)
	}
	ov := cfg.RuleByName("per-ip").Overrides
	if len(ov) != 2 || ov[0].Key != "10.0.0.1" || ov[0].TokenBucket.Burst != 100 || ov[1].TokenBucket.TokensPerSecond != 5 || ov[1].TokenBucket.Burst != 20 {
		t.Errorf("overrides %+v", ov)
	}

	// Merging into that answer again: one replaced, one added.
	resp, ans = e.apiJSON(t, "POST", "/api/v1/policy/overrides",
		`{"rule":"per-ip","policy":`+string(merged)+`,"csv":`+csvBody("key,burst\n10.0.0.2,30\n10.0.0.3,40\n")+`}`)
	if resp.StatusCode != 200 || ans["added"] != 1.0 || ans["replaced"] != 1.0 || ans["total"] != 3.0 || ans["base_version"] != nil {
		t.Fatalf("second merge: %d %v", resp.StatusCode, ans)
	}
	merged, _ = json.Marshal(ans["policy"])
	if resp, body := e.apiJSON(t, "POST", "/api/v1/policy", `{"base_version":2,"policy":`+string(merged)+`}`); resp.StatusCode != http.StatusCreated {
		t.Fatalf("saving the answer: %d %v", resp.StatusCode, body)
	}

	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"rule":"nope","csv":` + csvBody("key,burst\na,1\n") + `}`, 400, `no rule named \"nope\"`},
		{`{"rule":"per-ip","csv":` + csvBody("key,cost\na,1\n") + `}`, 400, `line 1: unknown column \"cost\"`},
		{`{"rule":"per-ip","csv":` + csvBody("key,burst\na,1\na,2\n") + `}`, 400, `line 3: key \"a\" is also on line 2`},
		{`{"rule":"per-ip","csv":` + csvBody("key,burst\na,ten\n") + `}`, 400, `line 2: burst: \"ten\" is not a number`},
		// A Latin-1 "café" as raw bytes in the JSON body: the body's decoder
		// makes it U+FFFD, which is refused rather than imported as a key.
		{`{"rule":"per-ip","csv":"key,burst\ncaf` + "\xe9" + `,1\n"}`, 400, `line 2: key \"caf` + "\uFFFD" + `\" holds U+FFFD`},
		{`{"rule":"per-ip","csv":` + csvBody("key,burst\n10.0.0.9,2\n") + `}`, 422, `rules[0].overrides[3].algorithm_config.burst`},
		{`{"rule":"per-ip"}`, 400, `csv: required`},
	} {
		resp, body := e.apiJSON(t, "POST", "/api/v1/policy/overrides", c.body)
		if b, _ := json.Marshal(body); resp.StatusCode != c.status || !strings.Contains(string(b), c.want) {
			t.Errorf("%s: %d %s, want %d with %s", c.body, resp.StatusCode, b, c.status, c.want)
		}
	}
}
