package policy_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/sluice-rl/sluice/shared/policy"
	"github.com/sluice-rl/sluice/shared/policy/policytest"
)

// The JSON Schema the admin serves accepts every configuration the parser
// accepts: random ones (every algorithm, action, mode, match operator and
// key source, costs, overrides), as written and as the admin stores them
// normalized, checked by a JSON Schema validator that is not the project's
// own, as an editor using the schema would check them.
func TestSchemaAcceptsRandomValidConfigurations(t *testing.T) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(policy.JSONSchema()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(policy.SchemaID, doc); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile(policy.SchemaID)
	if err != nil {
		t.Fatalf("the schema does not compile: %v", err)
	}
	if bad, _ := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(`{"policies":"all"}`))); schema.Validate(bad) == nil {
		t.Fatal("the schema accepts policies that are not a list: the validator checks nothing")
	}
	rng := rand.New(rand.NewPCG(23, policytest.Seed(t)))
	for i := range 1000 {
		cfg := policytest.Config(rng)
		parsed, err := policy.Parse([]byte(cfg))
		if err != nil {
			t.Fatalf("configuration %d does not parse: %v", i, err)
		}
		normalized, err := parsed.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		for what, doc := range map[string][]byte{"as written": []byte(cfg), "normalized (as the admin stores it)": normalized} {
			inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
			if err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(inst); err != nil {
				t.Fatalf("configuration %d %s: the parser accepts it, the schema refuses it: %v\n%s", i, what, err, doc)
			}
		}
	}
}
