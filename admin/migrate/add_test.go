package migrate

import (
	"strings"
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
	doc, _, err := AddTo([]byte(current), res.Policy)
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
	doc, _, err = AddTo([]byte(withFleet), res.Policy)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := policy.Parse(doc); err != nil || cfg.Fleet.Cluster != "my_rls" || len(cfg.Policies) != 3 {
		t.Errorf("%v: %s", err, doc)
	}
}

func TestAddToCarriesTheConvertedSettings(t *testing.T) {
	converted := []byte(`{"reject_body": "{\"message\":\"API rate limit exceeded\"}", "legacy_headers": true, "reject_status": 503,
	  "rules": [{"name": "kong-minute", "limit_keys": ["ip:address"], "algorithm": "fixed_window", "algorithm_config": {"limit": 10, "window_seconds": 60}},
	    {"name": "kong-own", "reject_body": "own", "limit_keys": ["header:x-k"], "algorithm": "fixed_window", "algorithm_config": {"limit": 1, "window_seconds": 1}}]}`)
	// A policy without those settings takes them.
	doc, notes, err := AddTo([]byte(`{"rules": [{"name": "a", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10}}]}`), converted)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := policy.Parse(doc)
	if err != nil || len(notes) != 0 || cfg.RejectStatus != 503 || cfg.LegacyHeaders != policy.LegacyRateLimit || cfg.Reply == nil || cfg.Reply.Body != `{"message":"API rate limit exceeded"}` ||
		len(cfg.Policies) != 2 || cfg.Policies[1].Name != "converted" {
		t.Fatalf("%v, notes %v:\n%s", err, notes, doc)
	}
	// One with its own keeps them: the body moves onto the converted rules
	// that have none, the status is named in a note.
	doc, notes, err = AddTo([]byte(`{"reject_status": 429, "reject_body": "slow down", "policies": [{"name": "converted", "rules": [
	  {"name": "a", "limit_keys": ["ip:address"], "algorithm": "token_bucket", "algorithm_config": {"rps": 5, "burst": 10}}]}]}`), converted)
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err = policy.Parse(doc); err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	minute, own := cfg.RuleByName("kong-minute"), cfg.RuleByName("kong-own")
	if cfg.RejectStatus != 429 || cfg.Reply.Body != "slow down" || minute.Reply == nil || minute.Reply.Body != `{"message":"API rate limit exceeded"}` ||
		own.Reply.Body != "own" || cfg.Policies[1].Name != "converted-2" || cfg.LegacyHeaders != policy.LegacyRateLimit {
		t.Errorf("merged:\n%s", doc)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "reject_status: the current policy's 429 is kept; the converted configuration's was 503") {
		t.Errorf("notes %q", notes)
	}
}
