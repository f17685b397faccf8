package bench

import (
	"fmt"
	"strings"
)

// trialBase is a configuration a shadow trial is pushed over: an open
// limit on x-api-key (the benchmarks' request is allowed) and a closed one
// on x-deny, as a "policies" list.
const trialBase = `{"policies": [{"name": "limits", "rules": [
  {"name": "open", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e6, "burst": 1e9}},
  {"name": "closed", "limit_keys": ["header:x-deny"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}%s]}`

// TrialConfig is trialBase plus what the admin adds during a shadow trial
// (admin/trial.Merge): a policy "trial-tiers" of n rules "trial-tier<i>" in
// shadow mode without marking ("shadow_mark": false) whose match (on the
// field matchOn) never holds for the benchmark's request, so each costs its
// match check only.
func TrialConfig(n int, matchOn string) string {
	if n == 0 {
		return fmt.Sprintf(trialBase, "")
	}
	rules := make([]string, n)
	for i := range rules {
		rules[i] = fmt.Sprintf(`{"name": "trial-tier%d", "mode": "shadow", "shadow_mark": false, "match": {"%s": "tier%d"},
   "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket", "algorithm_config": {"rps": 1, "burst": 1}}`, i, matchOn, i)
	}
	return fmt.Sprintf(trialBase, `, {"name": "trial-tiers", "rules": [`+strings.Join(rules, ",")+`]}`)
}
