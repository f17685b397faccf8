package migrate

import (
	"encoding/json"
	"fmt"

	"github.com/sluice-rl/sluice/admin/policyedit"
	"github.com/sluice-rl/sluice/shared/policy"
)

// Names returns the policy and rule names of a policy document, for
// Options.Taken (none for a document the parser refuses).
func Names(doc []byte) []string {
	cfg, err := policy.Parse(doc)
	if err != nil {
		return nil
	}
	var out []string
	for _, p := range cfg.Policies {
		out = append(out, p.Name)
		for _, r := range p.Rules {
			out = append(out, r.Name)
		}
	}
	return out
}

// AddTo returns doc, a policy document, with the policies of converted (a
// conversion made with Options.Taken = Names(doc), so no name collides)
// after its own, and converted's fleet block when doc has none. A
// document written with a top-level "rules" has them moved into a policy
// named as the parser names it. Everything else of doc stays as written.
func AddTo(doc, converted []byte) ([]byte, error) {
	cur, err := policyedit.ParseObject(doc)
	if err != nil {
		return nil, fmt.Errorf("the current policy: %w", err)
	}
	add, err := policyedit.ParseObject(converted)
	if err != nil {
		return nil, fmt.Errorf("the converted policy: %w", err)
	}
	var pols, added []json.RawMessage
	if raw, ok := cur.Get("policies"); ok {
		if err := json.Unmarshal(raw, &pols); err != nil {
			return nil, fmt.Errorf("the current policy's policies: %w", err)
		}
	}
	if raw, ok := cur.Get("rules"); ok {
		p, err := json.Marshal(struct {
			Name  string          `json:"name"`
			Rules json.RawMessage `json:"rules"`
		}{policy.DefaultPolicyName, raw})
		if err != nil {
			return nil, err
		}
		pols = append(pols, p)
		cur.Delete("rules")
	}
	raw, _ := add.Get("policies")
	if err := json.Unmarshal(raw, &added); err != nil {
		return nil, fmt.Errorf("the converted policy's policies: %w", err)
	}
	cur.Set("policies", append(pols, added...))
	if _, ok := cur.Get("fleet"); !ok {
		if f, ok := add.Get("fleet"); ok {
			cur.Set("fleet", f)
		}
	}
	return json.Marshal(cur)
}
