package policy

import (
	"reflect"
	"strings"
	"testing"
)

// The examples of the Fairvisor token bucket (the token bucket), verbatim.

// fairvisorConfiguration is the "Configuration" fragment: a rule's algorithm
// and algorithm_config.
const fairvisorConfiguration = `{
"algorithm": "token_bucket",
"algorithm_config": {
"tokens_per_second": 100,
"burst": 200,
"cost_source": "fixed",
"fixed_cost": 1,
"default_cost": 1
}
}`

// fairvisorVariableCost is the "Variable cost" fragment.
const fairvisorVariableCost = `{
"algorithm_config": {
"tokens_per_second": 100,
"burst": 1000,
"cost_source": "header:x-request-weight",
"default_cost": 1
}
}`

// fairvisorGlobalRPS is the "Global rate limit with IP partitioning" rule.
const fairvisorGlobalRPS = `{
"name": "global-rps",
"limit_keys": ["ip:address"],
"algorithm": "token_bucket",
"algorithm_config": {
"rps": 5,
"burst": 10
}
}`

// fairvisorTiered is the "Per-API-key tiered limits" configuration.
const fairvisorTiered = `{
"rules": [
{
"name": "enterprise",
"limit_keys": ["header:x-api-key"],
"algorithm": "token_bucket",
"algorithm_config": { "rps": 1000, "burst": 2000 },
"match": { "jwt:plan": "enterprise" }
},
{
"name": "free",
"limit_keys": ["header:x-api-key"],
"algorithm": "token_bucket",
"algorithm_config": { "rps": 10, "burst": 20 }
}
]
}`

// configurationExample is the configuration example of the configuration reference.
const configurationExample = `{
  "mode": "enforce",
  "policies": [
    {"name": "tiers", "rules": [
      {"name": "enterprise", "limit_keys": ["header:x-api-key"],
       "match": {"jwt:plan": "enterprise"},
       "algorithm": "token_bucket", "algorithm_config": {"rps": 1000, "burst": 2000}},
      {"name": "free", "limit_keys": ["header:x-api-key"],
       "algorithm": "token_bucket",
       "algorithm_config": {"tokens_per_second": 10, "burst": 20,
                            "cost_source": "header:x-request-weight", "default_cost": 1}}
    ]},
    {"name": "per-ip", "rules": [
      {"name": "global-rps", "limit_keys": ["ip:address"], "algorithm": "token_bucket",
       "algorithm_config": {"rps": 5, "burst": 10}}
    ]}
  ]
}`

// fragmentRule embeds the fields of a Fairvisor fragment (an object literal) into
// a rule that has the other required fields.
func fragmentRule(fragment, extra string) string {
	body := strings.TrimSpace(fragment)
	body = strings.TrimSuffix(strings.TrimPrefix(body, "{"), "}")
	return `{"rules": [{` + extra + "," + body + `}]}`
}

func mustParse(t *testing.T, src string) *Config {
	t.Helper()
	c, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse failed:\n%v\ninput:\n%s", err, src)
	}
	if c == nil {
		t.Fatal("Parse returned nil config and nil error")
	}
	checkInvariants(t, c)
	return c
}

func TestFairvisorTiered(t *testing.T) {
	c := mustParse(t, fairvisorTiered)
	if len(c.Policies) != 1 || c.Policies[0].Name != "default" {
		t.Fatalf("policies = %+v, want one policy named default", c.Policies)
	}
	rs := c.Policies[0].Rules
	if len(rs) != 2 || rs[0].Name != "enterprise" || rs[1].Name != "free" {
		t.Fatalf("rules = %+v", rs)
	}
	ent := rs[0]
	if ent.Policy != "default" || ent.Mode != ModeEnforce || ent.Algorithm != AlgorithmTokenBucket {
		t.Errorf("enterprise = %+v", ent)
	}
	if want := []KeySource{{Kind: SourceHeader, Name: "x-api-key"}}; !equalKeys(ent.Keys, want) {
		t.Errorf("enterprise keys = %v, want %v", ent.Keys, want)
	}
	if len(ent.Match) != 1 || !reflect.DeepEqual(ent.Match[0], Matcher{Source: KeySource{Kind: SourceJWT, Name: "plan"}, Cond: Condition{Value: "enterprise"}}) {
		t.Errorf("enterprise match = %+v", ent.Match)
	}
	if *ent.TokenBucket != (TokenBucket{TokensPerSecond: 1000, Burst: 2000, FixedCost: 1, DefaultCost: 1}) {
		t.Errorf("enterprise bucket = %+v", *ent.TokenBucket)
	}
	free := rs[1]
	if len(free.Match) != 0 {
		t.Errorf("free match = %+v, want none", free.Match)
	}
	if *free.TokenBucket != (TokenBucket{TokensPerSecond: 10, Burst: 20, FixedCost: 1, DefaultCost: 1}) {
		t.Errorf("free bucket = %+v", *free.TokenBucket)
	}
}

func TestFairvisorGlobalRPS(t *testing.T) {
	c := mustParse(t, `{"rules": [`+fairvisorGlobalRPS+`]}`)
	r := c.RuleByName("global-rps")
	if r == nil {
		t.Fatal("rule global-rps not found")
	}
	if !equalKeys(r.Keys, []KeySource{{Kind: SourceIP}}) {
		t.Errorf("keys = %v", r.Keys)
	}
	if r.TokenBucket.TokensPerSecond != 5 || r.TokenBucket.Burst != 10 {
		t.Errorf("bucket = %+v", *r.TokenBucket)
	}
}

func TestFairvisorFragments(t *testing.T) {
	c := mustParse(t, fragmentRule(fairvisorConfiguration, `"name": "r", "limit_keys": ["ip:address"]`))
	tb := c.Policies[0].Rules[0].TokenBucket
	if *tb != (TokenBucket{TokensPerSecond: 100, Burst: 200, Cost: CostSource{Kind: CostFixed}, FixedCost: 1, DefaultCost: 1}) {
		t.Errorf("configuration fragment: bucket = %+v", *tb)
	}

	c = mustParse(t, fragmentRule(fairvisorVariableCost, `"name": "r", "limit_keys": ["ip:address"], "algorithm": "token_bucket"`))
	tb = c.Policies[0].Rules[0].TokenBucket
	want := TokenBucket{TokensPerSecond: 100, Burst: 1000, Cost: CostSource{Kind: CostHeader, Name: "x-request-weight"}, FixedCost: 1, DefaultCost: 1}
	if *tb != want {
		t.Errorf("variable cost fragment: bucket = %+v, want %+v", *tb, want)
	}
}

func TestConfigurationExample(t *testing.T) {
	c := mustParse(t, configurationExample)
	if c.Mode != ModeEnforce || len(c.Policies) != 2 {
		t.Fatalf("config = %+v", c)
	}
	if c.Policies[0].Name != "tiers" || c.Policies[1].Name != "per-ip" {
		t.Errorf("policy names = %q, %q", c.Policies[0].Name, c.Policies[1].Name)
	}
	free := c.RuleByName("free")
	if free == nil || free.Policy != "tiers" {
		t.Fatalf("free = %+v", free)
	}
	if free.TokenBucket.Cost != (CostSource{Kind: CostHeader, Name: "x-request-weight"}) || free.TokenBucket.DefaultCost != 1 {
		t.Errorf("free bucket = %+v", *free.TokenBucket)
	}
	if g := c.RuleByName("global-rps"); g == nil || g.Policy != "per-ip" {
		t.Errorf("global-rps = %+v", g)
	}
	if c.RuleByName("nope") != nil {
		t.Error("RuleByName(nope) != nil")
	}
}

func equalKeys(a, b []KeySource) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
