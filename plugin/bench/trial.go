package bench

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/plugin/scenario"
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

// BrowserHeaders are the 15 headers of a realistic allowed request
// (scenario.BrowserHeaders with a bearer token and apiKey as x-api-key),
// followed by filler more headers ("x-filler-<i>": "v<i>").
func BrowserHeaders(apiKey string, filler int) [][2]string {
	h := append([][2]string(nil), scenario.BrowserHeaders...)
	h = append(h, [2]string{"authorization", browserToken}, [2]string{"x-api-key", apiKey})
	for i := range filler {
		h = append(h, [2]string{"x-filler-" + strconv.Itoa(i), "v" + strconv.Itoa(i)})
	}
	return h
}

// browserToken is an OIDC-sized bearer token (its signature is not read).
const browserToken = "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0." +
	"eyJpc3MiOiJodHRwczovL2lkcC5leGFtcGxlIiwic3ViIjoidXNlci00MiIsImF1ZCI6InNob3AiLCJleHAiOjE3NjQwMDAwMDAsInBsYW4iOiJwcm8ifQ." +
	"c2lnbmF0dXJlLW5vdC1jaGVja2VkLWJ5LXRoZS1maWx0ZXI"
