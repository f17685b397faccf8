package policy

import (
	"strings"
	"testing"
)

func TestBlockSeconds(t *testing.T) {
	checkTokenBucketInt(t, "rules[0].algorithm_config.block_seconds", func(tb *TokenBucket) int { return tb.BlockSeconds }, []intCase{
		{`{"rps":5,"burst":10}`, 0, ""},
		{`{"rps":5,"burst":10,"block_seconds":0}`, 0, ""},
		{`{"rps":5,"burst":10,"block_seconds":600}`, 600, ""},
		{`{"rps":1,"burst":5,"cost_source":"response_status:401","block_seconds":900}`, 900, ""},
		{`{"rps":5,"burst":10,"block_seconds":604800}`, 604800, ""},
		{`{"rps":5,"burst":10,"block_seconds":604801}`, 0, "out of range"},
		{`{"rps":5,"burst":10,"block_seconds":-1}`, 0, "out of range"},
		{`{"rps":5,"burst":10,"block_seconds":1.5}`, 0, "not an integer"},
		{`{"rps":5,"burst":10,"block_seconds":"60"}`, 0, "must be an integer"},
		{`{"rps":5,"burst":10,"block_seconds":60,"max_delay_ms":100}`, 0, "use one or the other"},
	})
}

// A windowed rule has no block_seconds, nor a rule with one identity for
// every request, which one refusal would shut. A global token bucket has
// one: the rate limit service keeps the block for the whole fleet.
func TestBlockSecondsOnlyOnTokenBucketsOfSeveralIdentities(t *testing.T) {
	wantError(t, strings.Replace(withTB(`{"rps":5,"burst":10,"block_seconds":60}`), `"limit_keys":["ip:address"]`, `"limit_keys":["all"]`, 1),
		"rules[0].algorithm_config.block_seconds", `a rule keyed by "all" has one identity`)
	wantError(t, withAlg("fixed_window", `{"limit":10,"window_seconds":60,"block_seconds":60}`),
		"rules[0].algorithm_config.block_seconds", "unknown field")
	cfg, err := Parse([]byte(`{"fleet":{"cluster":"rls"},"rules":[` + strings.Replace(globalRule, `"burst":20`, `"burst":20,"block_seconds":60`, 1) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if r := cfg.Policies[0].Rules[0]; !r.Global || r.TokenBucket.BlockSeconds != 60 {
		t.Errorf("global rule with a block: global %v, block_seconds %d", r.Global, r.TokenBucket.BlockSeconds)
	}
	wantError(t, `{"fleet":{"cluster":"rls"},"rules":[`+strings.Replace(globalRule, `"burst":20`, `"burst":20,"block_seconds":60,"max_delay_ms":50`, 1)+`]}`,
		"rules[0].algorithm_config.block_seconds", "use one or the other")
}

// A block changes the normalized form, and an override keeps the rule's.
func TestBlockSecondsNormalizedAndKeptByOverrides(t *testing.T) {
	cfg, err := Parse([]byte(strings.Replace(withTB(`{"rps":5,"burst":10,"block_seconds":300}`), `"algorithm":`,
		`"overrides":[{"key":"vip","algorithm_config":{"rps":50,"burst":100}}],"algorithm":`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := cfg.MarshalJSON()
	if !strings.Contains(string(b), `"block_seconds":300`) {
		t.Errorf("normalized: %s", b)
	}
	if o := cfg.Policies[0].Rules[0].Overrides; len(o) != 1 || o[0].TokenBucket.BlockSeconds != 300 {
		t.Errorf("the override's bucket: %+v", o)
	}
}

// An override sets its identity's own block_seconds: 0 never blocks it, on
// a rule that blocks the others, on a local or a global rule.
func TestOverridesSetTheirOwnBlock(t *testing.T) {
	doc := strings.Replace(withTB(`{"rps":1,"burst":3,"block_seconds":600}`), `"algorithm":`,
		`"overrides":[{"key":"partner","algorithm_config":{"block_seconds":0}},{"key":"bot","algorithm_config":{"rps":0.1,"burst":1,"block_seconds":3600}}],"algorithm":`, 1)
	cfg, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	o := cfg.Policies[0].Rules[0].Overrides
	if len(o) != 2 || o[0].TokenBucket.BlockSeconds != 0 || o[0].TokenBucket.Burst != 3 || o[1].TokenBucket.BlockSeconds != 3600 {
		t.Errorf("overrides %+v, %+v", o[0].TokenBucket, o[1].TokenBucket)
	}
	wantError(t, strings.Replace(doc, `"block_seconds":0}`, `"block_seconds":-1}`, 1),
		"rules[0].overrides[0].algorithm_config.block_seconds", "out of range")
	global, err := Parse([]byte(`{"fleet":{"cluster":"rls"},"rules":[` + strings.Replace(globalRule, `"algorithm":`,
		`"overrides":[{"key":"k","algorithm_config":{"block_seconds":60}}],"algorithm":`, 1) + `]}`))
	if err != nil {
		t.Fatal(err)
	}
	if o := global.Policies[0].Rules[0].Overrides; len(o) != 1 || o[0].TokenBucket.BlockSeconds != 60 {
		t.Errorf("a global rule's override: %+v", o)
	}
	wantError(t, withAlg("fixed_window", `{"limit":10,"window_seconds":60},"overrides":[{"key":"k","algorithm_config":{"block_seconds":60}}]`),
		"rules[0].overrides[0].algorithm_config.block_seconds", "unknown field")
}
