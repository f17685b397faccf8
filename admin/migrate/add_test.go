package migrate

import (
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

func TestAddToKeepsThePolicyAndTakesNoNameItUses(t *testing.T) {
	const current = `{"xff_trusted_hops": 1, "rules": [
	  {"name": "api_key", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10}}]}`
	res, err := EnvoyRatelimit([]byte(guideConfig), []byte(guideActions), Options{Taken: Names([]byte(current))})
	if err != nil {
		t.Fatal(err)
	}
	doc, err := AddTo([]byte(current), res.Policy)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(doc)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	if cfg.TrustedHops != 1 || cfg.Fleet == nil || len(cfg.Policies) != 3 || cfg.Policies[0].Name != policy.DefaultPolicyName {
		t.Fatalf("merged: hops %d, fleet %+v, %d policies\n%s", cfg.TrustedHops, cfg.Fleet, len(cfg.Policies), doc)
	}
	if r := cfg.Policies[0].Rules[0]; r.Name != "api_key" || r.TokenBucket == nil {
		t.Errorf("the current rule changed: %+v", r)
	}
	if r := cfg.Policies[2].Rules[1]; r.Name != "api_key-2" || r.Window == nil || len(r.Overrides) != 1 {
		t.Errorf("the converted rule named like a current one: %+v", r)
	}

	// A policy that has a fleet block keeps it.
	const withFleet = `{"fleet": {"cluster": "my_rls"}, "policies": [{"name": "p", "rules": [
	  {"name": "r", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10}}]}]}`
	doc, err = AddTo([]byte(withFleet), res.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := policy.Parse(doc); err != nil || cfg.Fleet.Cluster != "my_rls" || len(cfg.Policies) != 3 {
		t.Errorf("%v: %s", err, doc)
	}
}
