package simulate_test

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policy/policytest"
	"github.com/sluice-rl/sluice/shared/simulate"
)

// TestRulesWarnedUnreachableNeverApply: over random configurations and
// requests, a rule policy.Config.Warnings says never applies does not
// apply to any request.
func TestRulesWarnedUnreachableNeverApply(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, policytest.Seed(t)))
	warned := 0
	for c := 0; c < 400 && warned < 20; c++ {
		cfg, err := policy.Parse([]byte(policytest.Config(rng)))
		if err != nil {
			t.Fatal(err)
		}
		never := map[string]string{}
		for _, w := range cfg.Warnings() {
			if strings.HasPrefix(w.Message, "never applies") {
				never[w.Rule] = w.Message
			}
		}
		if len(never) == 0 {
			continue
		}
		warned++
		for range 40 {
			res := simulate.Run(cfg, policytest.Request(rng, cfg.ShadowHeader), simulate.Options{Now: 1e9})
			for _, p := range res.Policies {
				for _, r := range p.Rules {
					if msg, ok := never[r.Name]; ok && r.Applies {
						t.Fatalf("rule %q applied, but the warning says: %s", r.Name, msg)
					}
				}
			}
		}
	}
	if warned < 20 {
		t.Errorf("only %d random configurations had an unreachable rule: the check exercised too little", warned)
	}
}
