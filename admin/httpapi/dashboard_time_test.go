package httpapi

import (
	"context"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/admin/policies"
	"github.com/sluice-rl/sluice/admin/telemetry"
)

// A rule for a time says on its dashboard card when it applies and
// whether it does now, so that a card without traffic outside its time
// does not look broken; a rule that always applies says nothing of time.
func TestDashboardSaysWhenARuleForATimeApplies(t *testing.T) {
	te := newTelEnv(t, nil)
	rule := func(name, extra string) string {
		return `{"name":"` + name + `","limit_keys":["ip:address"],"algorithm":"token_bucket","algorithm_config":{"rps":1,"burst":2}` + extra + `}`
	}
	doc := `{"policies":[` +
		`{"name":"a","rules":[` + rule("ended", `,"until":"2000-01-01T00:00:00Z"`) + `,` + rule("later", `,"from":"2199-01-01T00:00:00Z"`) + `]},` +
		`{"name":"b","rules":[` + rule("sale", `,"until":"2199-01-01T00:00:00Z"`) + `]},` +
		`{"name":"c","rules":[` + rule("weekly", `,"schedule":{"from":"00:00","until":"24:00","time_zone":"Europe/Berlin"}`) + `]},` +
		`{"name":"d","rules":[` + rule("always", "") + `]}]}`
	if _, err := te.env.svc.Save(context.Background(), policies.SaveRequest{Base: 1, JSON: []byte(doc), Author: "ops"}); err != nil {
		t.Fatal(err)
	}
	var counters []telemetry.RuleCounters
	for _, name := range []string{"ended", "later", "sale", "weekly", "always"} {
		counters = append(counters, telemetry.RuleCounters{Rule: name, Allowed: 1})
	}
	postRuleCounters(t, te, counters...)
	page := get(t, login(t, te.env, "ops"), te.srv.URL+"/dashboard?fragment=1")
	for _, c := range []struct{ rule, want string }{
		{"ended", `data-time-now="false">For a time: ended 2000-01-01 00:00:00 UTC (not now`},
		{"later", `data-time-now="false">For a time: starts 2199-01-01 00:00:00 UTC (not now`},
		{"sale", `data-time-now="true">For a time: until 2199-01-01 00:00:00 UTC </p>`},
		{"weekly", `data-time-now="true">For a time: weekly every day 00:00-24:00 Europe/Berlin, this window until`},
	} {
		if card := ruleCard(t, page, c.rule); !strings.Contains(strings.Join(strings.Fields(card), " "), c.want) {
			t.Errorf("%s: lacks %s:\n%s", c.rule, c.want, card)
		}
	}
	if card := ruleCard(t, page, "always"); strings.Contains(card, "rule-time") {
		t.Errorf("always: a time line:\n%s", card)
	}
}
