package policyedit

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policy/policytest"
)

// Opening any rule of any valid policy in the form and applying it
// unchanged leaves the policy as it was: the same configuration, as the
// filter parses it. And the list describes every rule's limit in words.
func TestApplyingAnUnchangedFormChangesNothing(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, policytest.Seed(t)))
	for c := range 300 {
		doc := policytest.Config(rng)
		want := normalized(t, []byte(doc))
		d, err := ParseDoc([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		for p := range d.Policies() {
			rules, _ := d.Rules(p)
			for i := range rules {
				ref := Ref{p, i}
				o, err := d.Rule(ref)
				if err != nil {
					t.Fatal(err)
				}
				if s := Summarize(o, ""); strings.Contains(s.Limit, "unknown") || strings.Contains(s.Limit, "?") {
					t.Fatalf("policy %d, rule %v: the list says %q for %s", c, ref, s.Limit, o.String("name"))
				}
				n, errs := FormOf(o).Apply(o)
				if errs != nil {
					t.Fatalf("policy %d, rule %v: the unchanged form does not apply: %v\n%s", c, ref, errs, doc)
				}
				if err := d.SetRule(ref, n); err != nil {
					t.Fatal(err)
				}
				if got := normalized(t, d.JSON()); got != want {
					t.Fatalf("policy %d, rule %v: applying the unchanged form changed the policy\nbefore %s\nafter  %s", c, ref, want, got)
				}
			}
		}
	}
}

// normalized is the configuration as the filter reads it, written out.
func normalized(t *testing.T, doc []byte) string {
	t.Helper()
	cfg, err := policy.Parse(doc)
	if err != nil {
		t.Fatalf("%v\n%s", err, doc)
	}
	b, err := cfg.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
