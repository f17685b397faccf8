package policy

// rollout parses a limit rule's "enforce_percent" (gradual enforcement):
// the rule, in enforce mode, enforces its limit on that percentage of its
// identities and treats the others as a shadow rule would (counted, marked
// unless "shadow_mark": false, never refused). The identities are chosen
// by a hash of the identity (request.Enforced), the same in every Envoy.
func (p *parser) rollout(path string, v *jvalue, r *Rule) {
	path = join(path, "enforce_percent")
	x, lit, ok := p.number(path, v)
	switch {
	case !ok:
		return
	case x < 0 || x > 100:
		p.errorf(path, lit, " is out of range; must be a percentage from 0 to 100 (the share of the rule's identities whose requests it refuses when over the limit)")
		return
	case r.Mode == ModeShadow:
		p.errorf(path, "applies to a rule in enforce mode; this rule is in shadow mode, which refuses no identity. Remove enforce_percent or set \"mode\": \"enforce\"")
		return
	case onlyAll(r.Keys): // one identity: a share of it is all or none
		p.errorf(path, `picks a share of the rule's identities, and a rule keyed by "all" has one; use "mode": "shadow" until the limit can be enforced`)
		return
	}
	r.EnforcePercent = &x
}

// onlyAll reports whether keys are the "all" source alone.
func onlyAll(keys []KeySource) bool {
	return len(keys) == 1 && keys[0].Kind == SourceAll
}

// Marks reports whether the rule names itself in the shadow header when
// it lets through a request it would refuse: a shadow rule, or one that
// spares some identities, unless "shadow_mark": false. The filter owns
// that header while some rule marks.
func (r *Rule) Marks() bool {
	return (r.Mode == ModeShadow || r.Partial()) && !r.Unmarked
}

// Partial reports whether the rule enforces its limit on some of its
// identities only (an "enforce_percent" under 100, in enforce mode).
func (r *Rule) Partial() bool {
	return r.EnforcePercent != nil && *r.EnforcePercent < 100 && r.Mode == ModeEnforce
}
