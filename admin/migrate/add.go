package migrate

import (
	"bytes"
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
// after its own, and notes on the settings it could not carry. A
// document written with a top-level "rules" has them moved into a policy
// named as the parser names it. converted's other top-level settings
// (reject_status, reject_body, legacy_headers, xff_trusted_hops, fleet,
// ...) are added where doc has none; where doc has another value, doc's is
// kept: a rejection body moves onto each converted rule (rules take their
// own), and any other setting is named in a note. Everything else of doc
// stays as written.
func AddTo(doc, converted []byte) ([]byte, []string, error) {
	cur, err := policyedit.ParseObject(doc)
	if err != nil {
		return nil, nil, fmt.Errorf("the current policy: %w", err)
	}
	add, err := policyedit.ParseObject(converted)
	if err != nil {
		return nil, nil, fmt.Errorf("the converted policy: %w", err)
	}
	var pols, added []json.RawMessage
	if raw, ok := cur.Get("policies"); ok {
		if err := json.Unmarshal(raw, &pols); err != nil {
			return nil, nil, fmt.Errorf("the current policy's policies: %w", err)
		}
	}
	if raw, ok := cur.Get("rules"); ok {
		p, err := json.Marshal(struct {
			Name  string          `json:"name"`
			Rules json.RawMessage `json:"rules"`
		}{policy.DefaultPolicyName, raw})
		if err != nil {
			return nil, nil, err
		}
		pols = append(pols, p)
		cur.Delete("rules")
	}
	if added, err = convertedPolicies(add, append(Names(doc), policy.DefaultPolicyName)); err != nil {
		return nil, nil, err
	}
	var notes []string
	for _, m := range add {
		if m.Key == "policies" || m.Key == "rules" {
			continue
		}
		have, ok := cur.Get(m.Key)
		switch {
		case !ok:
			cur.Set(m.Key, m.Value)
		case bytes.Equal(compact(have), compact(m.Value)):
		case m.Key == "reject_body" || m.Key == "reject_content_type":
			if added, err = setOnRules(added, m.Key, m.Value); err != nil {
				return nil, nil, err
			}
		case m.Key == "fleet":
			notes = append(notes, "the current policy's fleet block is kept; the converted global rules use its cluster")
		default:
			notes = append(notes, fmt.Sprintf("%s: the current policy's %s is kept; the converted configuration's was %s", m.Key, have, m.Value))
		}
	}
	cur.Set("policies", append(pols, added...))
	out, err := json.Marshal(cur)
	return out, notes, err
}

// convertedPolicies are a converted document's policies; top-level
// "rules" are one policy, named "converted" unless taken.
func convertedPolicies(add policyedit.Object, taken []string) ([]json.RawMessage, error) {
	var out []json.RawMessage
	if raw, ok := add.Get("policies"); ok {
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, fmt.Errorf("the converted policy's policies: %w", err)
		}
		return out, nil
	}
	raw, _ := add.Get("rules")
	p, err := json.Marshal(struct {
		Name  string          `json:"name"`
		Rules json.RawMessage `json:"rules"`
	}{newNameSet(taken).take("converted"), raw})
	return []json.RawMessage{p}, err
}

// setOnRules sets key to v on every limit or deny rule of pols that has
// none of its own.
func setOnRules(pols []json.RawMessage, key string, v json.RawMessage) ([]json.RawMessage, error) {
	out := make([]json.RawMessage, len(pols))
	for i, raw := range pols {
		p, err := policyedit.ParseObject(raw)
		if err != nil {
			return nil, err
		}
		var rules []json.RawMessage
		rr, _ := p.Get("rules")
		if err := json.Unmarshal(rr, &rules); err != nil {
			return nil, err
		}
		for j, r := range rules {
			o, err := policyedit.ParseObject(r)
			if err != nil {
				return nil, err
			}
			if _, has := o.Get(key); has || o.String("action") == policy.ActionUnlimited {
				continue
			}
			o.Set(key, v)
			if rules[j], err = json.Marshal(o); err != nil {
				return nil, err
			}
		}
		p.Set("rules", rules)
		if out[i], err = json.Marshal(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func compact(raw json.RawMessage) []byte {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}
