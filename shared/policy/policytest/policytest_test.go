package policytest

import (
	"math/rand/v2"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Every configuration Config makes is one the filter accepts: a
// comparison that fails on an invalid one tests the generator, not the
// filter.
func TestConfigsAreValid(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		doc := Config(rng)
		if _, err := policy.Parse([]byte(doc)); err != nil {
			t.Fatalf("configuration %d: %v\n%s", i, err, doc)
		}
	}
}
