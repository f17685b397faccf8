package policy

import "testing"

func globalRuleWithOverrides(alg, cfg, overrides string) string {
	return `{"fleet":{"cluster":"rls"},"rules":[{"name":"g","scope":"global","limit_keys":["header:x-api-key"],` +
		`"algorithm":"` + alg + `","algorithm_config":` + cfg + `,"overrides":` + overrides + `}]}`
}

func TestGlobalRulesTakeOverrides(t *testing.T) {
	for _, tc := range []struct{ alg, cfg, ov string }{
		{"token_bucket", `{"rps":10,"burst":20}`, `{"tokens_per_second":200,"burst":400}`},
		{"fixed_window", `{"limit":100,"window_seconds":60}`, `{"limit":1000}`},
		{"rolling_window", `{"limit":100,"window_seconds":60,"period_seconds":10,"max_per_period":40}`, `{"limit":1000,"max_per_period":400}`},
		{"quota", `{"limit":10000,"period":"month"}`, `{"limit":50000}`},
	} {
		cfg, err := Parse([]byte(globalRuleWithOverrides(tc.alg, tc.cfg, `[{"key":"acme","algorithm_config":`+tc.ov+`}]`)))
		if err != nil {
			t.Errorf("%s: %v", tc.alg, err)
			continue
		}
		r := cfg.Policies[0].Rules[0]
		if !r.Global || len(r.Overrides) != 1 || r.Overrides[0].Key != "acme" {
			t.Errorf("%s: global %v, overrides %+v", tc.alg, r.Global, r.Overrides)
		}
	}
}

// A global window counts whole requests across the fleet: an override's
// limit below one is refused like the rule's own, on the well-formed
// entries the parser reads on its fast path too.
func TestGlobalWindowOverridesCountWholeRequests(t *testing.T) {
	const c = "rules[0].overrides[1].algorithm_config."
	ok := `{"key":"fine","algorithm_config":{"limit":50}}`
	for _, tc := range []struct{ alg, cfg, ov, field string }{
		{"fixed_window", `{"limit":100,"window_seconds":60}`, `{"limit":0.5}`, "limit"},
		{"sliding_window", `{"limit":100,"window_seconds":60}`, `{"limit":0.9}`, "limit"},
		{"rolling_window", `{"limit":100,"window_seconds":60,"period_seconds":10,"max_per_period":40}`, `{"max_per_period":0.5}`, "max_per_period"},
		{"quota", `{"limit":10000,"period":"month"}`, `{"limit":0.25}`, "limit"},
	} {
		in := globalRuleWithOverrides(tc.alg, tc.cfg, `[`+ok+`,{"key":"acme","algorithm_config":`+tc.ov+`}]`)
		wantError(t, in, c+tc.field, "is below 1")
		// The same override on a local rule is fine.
		local := `{"rules":[{"name":"g","limit_keys":["header:x-api-key"],"algorithm":"` + tc.alg +
			`","algorithm_config":` + tc.cfg + `,"overrides":[` + ok + `,{"key":"acme","algorithm_config":` + tc.ov + `}]}]}`
		if _, err := Parse([]byte(local)); err != nil {
			t.Errorf("%s: the override is refused on a local rule too: %v", tc.alg, err)
		}
	}
}
