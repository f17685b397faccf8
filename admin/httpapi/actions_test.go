package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/telemetry"
)

// TestDashboardShowsWhatActionsAndOverridesDecided: a rule card carries a
// line with the requests exempted, denied or decided by an override; a
// rule without any has none.
func TestDashboardShowsWhatActionsAndOverridesDecided(t *testing.T) {
	te := newTelEnv(t, nil)
	r := telemetry.Report{
		V: 1, Node: "envoy-1", VM: "a1", VMStartMS: 1763770000000, Seq: 1, SentAtMS: 1763770001000,
		IntervalMS: 1000, Buckets: []telemetry.Bucket{},
		Rules: []telemetry.RuleCounters{
			{Rule: "plans", Allowed: 2000, Overridden: 1204},
			{Rule: "health", Exempted: 31},
			{Rule: "blocked", Denied: 7},
			{Rule: "calm", Allowed: 3},
		},
	}
	b, _ := json.Marshal(r)
	if res, body := te.send(t, telToken, "application/json", string(b)); res.StatusCode != 204 {
		t.Fatalf("report: %d %v", res.StatusCode, body)
	}
	page := get(t, login(t, te.env, "ops"), te.srv.URL+"/dashboard?fragment=1")
	for rule, want := range map[string]string{
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
