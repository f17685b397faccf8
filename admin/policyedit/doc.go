package policyedit

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Doc is a policy document being edited: its top-level object, and the
// rules either in the "rules" shorthand (one policy named "default") or in
// each of "policies".
type Doc struct {
	root      Object
	shorthand bool
	policies  []Object
}

// Ref names a rule: its policy's index and its index in that policy.
type Ref struct{ Policy, Rule int }

// ParseDoc reads a draft. It needs only the shape (an object with "rules"
// or "policies" arrays); the filter's parser judges the rest on save.
func ParseDoc(raw []byte) (*Doc, error) {
	root, err := ParseObject(raw)
	if err != nil {
		return nil, err
	}
	d := &Doc{root: root}
	if pv, ok := root.Get("policies"); ok {
		var ps []json.RawMessage
		if err := json.Unmarshal(pv, &ps); err != nil {
			return nil, errors.New(`"policies" is not an array`)
		}
		for i, p := range ps {
			o, err := ParseObject(p)
			if err != nil {
				return nil, fmt.Errorf("policies[%d]: %v", i, err)
			}
			d.policies = append(d.policies, o)
		}
		return d, nil
	}
	d.shorthand = true
	return d, nil
}

// JSON returns the document, indented.
func (d *Doc) JSON() []byte {
	root := append(Object(nil), d.root...)
	if !d.shorthand {
		ps := make([]json.RawMessage, len(d.policies))
		for i, p := range d.policies {
			ps[i], _ = p.MarshalJSON()
		}
		root.Set("policies", ps)
	}
	raw, _ := root.MarshalJSON()
	return []byte(Pretty(raw))
}

// Policies is the number of policies.
func (d *Doc) Policies() int {
	if d.shorthand {
		return 1
	}
	return len(d.policies)
}

// PolicyName returns a policy's name ("default" for the shorthand).
func (d *Doc) PolicyName(p int) string {
	if d.shorthand {
		return "default"
	}
	return d.policies[p].String("name")
}

func (d *Doc) holder(p int) (*Object, error) {
	if d.shorthand {
		if p != 0 {
			return nil, fmt.Errorf("there is no policy %d", p)
		}
		return &d.root, nil
	}
	if p < 0 || p >= len(d.policies) {
		return nil, fmt.Errorf("there is no policy %d", p)
	}
	return &d.policies[p], nil
}

// Rules returns a policy's rules as raw JSON.
func (d *Doc) Rules(p int) ([]json.RawMessage, error) {
	h, err := d.holder(p)
	if err != nil {
		return nil, err
	}
	var rs []json.RawMessage
	if v, ok := h.Get("rules"); ok {
		if err := json.Unmarshal(v, &rs); err != nil {
			return nil, fmt.Errorf("%s is not an array", d.policyPath(p)+"rules")
		}
	}
	return rs, nil
}

func (d *Doc) setRules(p int, rs []json.RawMessage) {
	h, _ := d.holder(p)
	if rs == nil {
		rs = []json.RawMessage{}
	}
	h.Set("rules", rs)
}

func (d *Doc) policyPath(p int) string {
	if d.shorthand {
		return ""
	}
	return "policies[" + strconv.Itoa(p) + "]."
}

// RulePath is the rule's JSON path as the filter's parser reports it.
func (d *Doc) RulePath(r Ref) string {
	return d.policyPath(r.Policy) + "rules[" + strconv.Itoa(r.Rule) + "]"
}

// Rule returns a rule's object.
func (d *Doc) Rule(r Ref) (Object, error) {
	rs, err := d.Rules(r.Policy)
	if err != nil {
		return nil, err
	}
	if r.Rule < 0 || r.Rule >= len(rs) {
		return nil, fmt.Errorf("there is no rule %d in policy %q", r.Rule, d.PolicyName(r.Policy))
	}
	o, err := ParseObject(rs[r.Rule])
	if err != nil {
		return nil, fmt.Errorf("%s: %v", d.RulePath(r), err)
	}
	return o, nil
}

// SetRule replaces a rule; Rule == the number of rules appends one.
func (d *Doc) SetRule(r Ref, o Object) error {
	rs, err := d.Rules(r.Policy)
	if err != nil {
		return err
	}
	raw, _ := o.MarshalJSON()
	switch {
	case r.Rule >= 0 && r.Rule < len(rs):
		rs[r.Rule] = raw
	case r.Rule == len(rs):
		rs = append(rs, raw)
	default:
		return fmt.Errorf("there is no rule %d in policy %q", r.Rule, d.PolicyName(r.Policy))
	}
	d.setRules(r.Policy, rs)
	return nil
}

// Move moves a rule up (delta -1) or down (+1) in its policy: the first
// rule that matches a request applies.
func (d *Doc) Move(r Ref, delta int) error {
	rs, err := d.Rules(r.Policy)
	if err != nil {
		return err
	}
	j := r.Rule + delta
	if r.Rule < 0 || r.Rule >= len(rs) || j < 0 || j >= len(rs) {
		return errors.New("the rule cannot move further")
	}
	rs[r.Rule], rs[j] = rs[j], rs[r.Rule]
	d.setRules(r.Policy, rs)
	return nil
}

// Delete removes a rule.
func (d *Doc) Delete(r Ref) error {
	rs, err := d.Rules(r.Policy)
	if err != nil {
		return err
	}
	if r.Rule < 0 || r.Rule >= len(rs) {
		return fmt.Errorf("there is no rule %d", r.Rule)
	}
	d.setRules(r.Policy, append(rs[:r.Rule], rs[r.Rule+1:]...))
	return nil
}

// Duplicate inserts a copy of a rule after it, named "<name>-copy" (or
// -copy2, ...) so names stay unique; it returns the copy's Ref.
func (d *Doc) Duplicate(r Ref) (Ref, error) {
	o, err := d.Rule(r)
	if err != nil {
		return r, err
	}
	cp := append(Object(nil), o...)
	cp.Set("name", d.freeName(o.String("name")+"-copy"))
	raw, _ := cp.MarshalJSON()
	rs, _ := d.Rules(r.Policy)
	rs = append(rs[:r.Rule+1], append([]json.RawMessage{raw}, rs[r.Rule+1:]...)...)
	d.setRules(r.Policy, rs)
	return Ref{r.Policy, r.Rule + 1}, nil
}

// NewRule appends a rule to a policy: per client address, 10 requests a
// second with a burst of 20, for the person to adjust.
func (d *Doc) NewRule(p int) (Ref, error) {
	rs, err := d.Rules(p)
	if err != nil {
		return Ref{}, err
	}
	o := Object{}
	o.Set("name", d.freeName("new-rule"))
	o.Set("limit_keys", []string{"ip:address"})
	o.Set("algorithm", "token_bucket")
	o.Set("algorithm_config", json.RawMessage(`{"tokens_per_second":10,"burst":20}`))
	ref := Ref{p, len(rs)}
	return ref, d.SetRule(ref, o)
}

func (d *Doc) names() map[string]bool {
	out := map[string]bool{}
	for p := 0; p < d.Policies(); p++ {
		rs, _ := d.Rules(p)
		for _, raw := range rs {
			if o, err := ParseObject(raw); err == nil {
				out[o.String("name")] = true
			}
		}
	}
	return out
}

func (d *Doc) freeName(base string) string {
	taken := d.names()
	if len(base) > 56 {
		base = base[:56]
	}
	name := base
	for i := 2; taken[name]; i++ {
		name = base + strconv.Itoa(i)
	}
	return strings.Trim(name, "-")
}
