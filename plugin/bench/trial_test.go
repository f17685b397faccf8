package bench

import (
	"fmt"
	"strings"
	"testing"
)

// trialBase is limits as a "policies" list: the configuration a shadow
// trial is pushed over.
const trialBase = `{"policies": [{"name": "limits", "rules": [
  {"name": "open", "limit_keys": ["header:x-api-key"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e6, "burst": 1e9}},
  {"name": "closed", "limit_keys": ["header:x-deny"], "algorithm": "token_bucket",
   "algorithm_config": {"rps": 1e-9, "burst": 0.5}}]}%s]}`

// withTrial is trialBase plus what the admin adds during a shadow trial
// (admin/trial.Merge): a policy "trial-tiers" of n rules "trial-tier<i>" in
// shadow mode without marking ("shadow_mark": false) whose match (on the
// field matchOn) never holds for the benchmark's request, so each costs its
// match check only.
func withTrial(n int, matchOn string) string {
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

// BenchmarkTrial is the cost of a shadow trial on an allowed request whose
// trial rules do not match. "vs-empty" runs the configuration without and
// with the trial's rules against the empty plugin; "vs-no-trial" runs the
// plugin with the trial against the same plugin without it in one
// interleaved run, so its x-floor is the trial's own factor. The trial
// rules match on a header the current policy does not read (x-plan: one
// more header read per request) or on one it reads already (x-api-key).
// "marked" is a trial rule that marks the upstream request, as shadow
// rules do by default (one more host call per request: the shadow header
// is removed).
func BenchmarkTrial(b *testing.B) {
	req := same(Headers("x-api-key", "k1"))
	for _, n := range []int{0, 1, 4} {
		b.Run(fmt.Sprintf("vs-empty/trial-rules=%d", n), func(b *testing.B) {
			Run(b, Case{Wasm: pluginWasm(b), Floor: floorWasm(b), Config: withTrial(n, "header:x-plan"), Request: req, Rejected: &no})
		})
	}
	for _, match := range []string{"header:x-plan", "header:x-api-key"} {
		for _, n := range []int{1, 4} {
			b.Run(fmt.Sprintf("vs-no-trial/match=%s/trial-rules=%d", strings.TrimPrefix(match, "header:"), n), func(b *testing.B) {
				Run(b, Case{Wasm: pluginWasm(b), Floor: pluginWasm(b), Config: withTrial(n, match), FloorConfig: withTrial(0, match),
					Request: req, Rejected: &no})
			})
		}
	}
	b.Run("vs-no-trial/match=x-plan/marked/trial-rules=1", func(b *testing.B) {
		marked := strings.Replace(withTrial(1, "header:x-plan"), `"shadow_mark": false, `, "", 1)
		Run(b, Case{Wasm: pluginWasm(b), Floor: pluginWasm(b), Config: marked, FloorConfig: withTrial(0, ""), Request: req, Rejected: &no})
	})
}
