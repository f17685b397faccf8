package policy

import (
	"testing"
)

func quotaOverrides(cfg, overrides string) string {
	return withAlg("quota", cfg+`,"overrides":`+overrides)
}

func TestQuotaOverridesChangeOnlyTheLimit(t *testing.T) {
	cfg, err := Parse([]byte(quotaOverrides(`{"limit":1000,"period":"month","time_zone":"Europe/Berlin","fixed_cost":2}`,
		`[{"key":"1.2.3.4","algorithm_config":{"limit":50000}},{"key":"5.6.7.8","algorithm_config":{"limit":10}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	r := cfg.Policies[0].Rules[0]
	if len(r.Overrides) != 2 {
		t.Fatalf("overrides = %+v", r.Overrides)
	}
	for i, want := range []float64{50000, 10} {
		q := r.Overrides[i].Quota
		switch {
		case q == nil:
			t.Fatalf("override %d has no quota: %+v", i, r.Overrides[i])
		case q.Limit != want:
			t.Errorf("override %d limit = %v, want %v", i, q.Limit, want)
		case q.Period != PeriodMonth || q.TimeZone != "Europe/Berlin" || q.Location != r.Quota.Location || q.FixedCost != 2:
			t.Errorf("override %d does not keep the rule's period, zone and cost: %+v", i, q)
		}
	}
	if r.Quota.Limit != 1000 {
		t.Errorf("the rule's own limit changed to %v", r.Quota.Limit)
	}
}

func TestQuotaOverrideKeepsTheRulesMaxDebt(t *testing.T) {
	cfg, err := Parse([]byte(quotaOverrides(`{"limit":1000,"period":"day","cost_source":"response_header:x-cost"}`,
		`[{"key":"a","algorithm_config":{"limit":50}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Policies[0].Rules[0].Overrides[0].Quota; q.Limit != 50 || q.MaxDebt != 1000 {
		t.Errorf("max_debt = %v for limit %v, want the rule's default 1000", q.MaxDebt, q.Limit)
	}
	cfg, err = Parse([]byte(quotaOverrides(`{"limit":1000,"period":"day","cost_source":"response_header:x-cost"}`,
		`[{"key":"a","algorithm_config":{"limit":50}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Policies[0].Rules[0].Overrides[0].Quota; q.Limit != 50 || q.MaxDebt != 1000 {
		t.Errorf("max_debt = %v for limit %v, want the rule's default 1000", q.MaxDebt, q.Limit)
	}
	cfg, err = Parse([]byte(quotaOverrides(`{"limit":1000,"period":"day","cost_source":"response_header:x-cost","max_debt":7}`,
		`[{"key":"a","algorithm_config":{"limit":50}}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if q := cfg.Policies[0].Rules[0].Overrides[0].Quota; q.MaxDebt != 7 {
		t.Errorf("max_debt = %v, want the rule's 7", q.MaxDebt)
	}
}

func TestQuotaOverrideRefusesTheSharedFieldsByName(t *testing.T) {
	const base = `{"limit":100,"period":"day","fixed_cost":5}`
	const c = "rules[0].overrides[0].algorithm_config."
	for _, tc := range []struct{ ov, path, msg string }{
		{`{"period":"month"}`, c + "period", "every identity of a quota rule shares its period and time zone"},
		{`{"limit":10,"time_zone":"Asia/Tokyo"}`, c + "time_zone", "every identity of a quota rule shares its period and time zone"},
		{`{"limit":10,"fixed_cost":1}`, c + "fixed_cost", "the rule's costs apply to every identity"},
		{`{"burst":10}`, c + "burst", "allowed fields here: limit"},
		{`{"limit":2}`, c + "fixed_cost", "exceeds limit 2"},
		{`{"limit":-1}`, c + "limit", "limit"},
	} {
		wantError(t, quotaOverrides(base, `[{"key":"1.2.3.4","algorithm_config":`+tc.ov+`}]`), tc.path, tc.msg)
	}
}

// The filter reads well-formed entries on a fast path; it must give what
// the full checks give.
func TestQuotaOverrideFastPathAgreesWithTheFullChecks(t *testing.T) {
	for _, cfg := range []string{
		`{"limit":1000,"period":"month","time_zone":"Europe/Berlin","fixed_cost":2}`,
		`{"limit":1000,"period":"day","cost_source":"response_header:x-cost"}`,
		`{"limit":1000,"period":"week","cost_source":"response_trailer:x-cost","default_cost":3,"max_debt":0}`,
	} {
		c, err := Parse([]byte(withAlg("quota", cfg)))
		if err != nil {
			t.Fatal(err)
		}
		r := c.Policies[0].Rules[0]
		rcfg, _ := decodeJSON([]byte(cfg))
		ov, _ := decodeJSON([]byte(`{"key":"1.2.3.4","algorithm_config":{"limit":40}}`))
		fast, ok := fastOverride(ov, &r, 1)
		if !ok {
			t.Fatalf("%s: a well-formed entry left the fast path", cfg)
		}
		p := &parser{}
		full, ok := p.override("overrides", 0, ov, &r, rcfg, quotaOverrideFields, map[string]int{})
		if !ok || fast.Quota == nil || full.Quota == nil {
			t.Fatalf("%s: full checks %v (%v), fast %+v", cfg, ok, p.errs, fast)
		}
		f, g := *fast.Quota, *full.Quota
		if f.Location.String() != g.Location.String() {
			t.Errorf("%s: zones %v and %v", cfg, f.Location, g.Location)
		}
		f.Location, g.Location = nil, nil // loaded twice: equal, not the same pointer
		if f.Limit != 40 || f != g {
			t.Errorf("%s: fast path %+v, full checks %+v", cfg, f, g)
		}
	}
}
