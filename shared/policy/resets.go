package policy

import "strconv"

// Resets ("resets", top level): identities whose stored state the filter
// forgets, so that their next request starts as a new identity's would
// (a full bucket, an empty window, nothing of a quota used, no debt, no
// block). The admin writes them into the configuration it pushes, as the
// only channel to every Envoy's shared data; a saved policy holds none.
// Each Envoy process applies a reset once, by its id, however many pushes
// carry it.

// Reset is one entry of "resets": one identity's state (Key), or every
// identity's (All), under one rule.
type Reset struct {
	ID   string // "id": 1 to 64 characters of A-Z a-z 0-9 _ . -, unique in the list
	Rule string // "rule": a limit rule with state per identity (not concurrency)
	Key  string // "key": the identity, written as an override's key ("" with All)
	// All is "all": true, instead of "key": every identity of the rule
	// starts over. Only in bounded storage (max_keys > 0), whose
	// shared-data keys the filter can list.
	All bool
}

// MaxResets bounds "resets".
const MaxResets = 256

var resetFields = []string{"id", "rule", "key", "all"}

// resets parses "resets"; the rules they name are checked once every
// rule is known (checkResets).
func (p *parser) resets(path string, v *jvalue) []Reset {
	if v.kind != jArray {
		p.errorf(path, `must be an array such as [{"id": "r1", "rule": "per-key", "key": "alice"}], got `, v.kind.String())
		return nil
	}
	if len(v.arr) > MaxResets {
		p.errorf(path, "has ", strconv.Itoa(len(v.arr)), " entries; at most ", strconv.Itoa(MaxResets))
		return nil
	}
	out := make([]Reset, 0, len(v.arr))
	ids := make(map[string]int, len(v.arr))
	for i, rv := range v.arr {
		at := index(path, i)
		if rv.kind != jObject {
			p.errorf(at, `must be an object such as {"id": "r1", "rule": "per-key", "key": "alice"}, got `, rv.kind.String())
			continue
		}
		f := p.object(at, rv, resetFields)
		r, ok := Reset{}, true
		if r.ID, ok = p.resetID(at+".id", f["id"]); ok {
			if j, dup := ids[r.ID]; dup {
				p.errorf(at+".id", quoteShort(r.ID), " is also the id of ", index(path, j), "; ids are unique")
				ok = false
			}
			ids[r.ID] = i
		}
		var rok, kok bool
		r.Rule, rok = p.requiredString(at+".rule", f["rule"], "the name of the rule whose state is reset")
		if r.All, kok = p.resetAll(at, f["all"], f["key"] != nil); !r.All && kok {
			r.Key, kok = p.requiredString(at+".key", f["key"], `the identity, written as an override's key (or "all": true for every identity)`)
		}
		if ok && rok && kok {
			out = append(out, r)
		}
	}
	return out
}

// resetAll reads "all" of the reset at path: true, or absent (false).
// hasKey: the reset names a key too, which "all" excludes.
func (p *parser) resetAll(path string, v *jvalue, hasKey bool) (bool, bool) {
	switch {
	case v == nil:
		return false, true
	case v.kind != jBool || !v.b:
		got := v.kind.String()
		if v.kind == jBool {
			got = "false"
		}
		p.errorf(path+".all", `must be true (every identity of the rule starts over) or left out, got `, got)
		return false, false
	case hasKey:
		p.errorf(path+".key", `must be left out with "all": true, which resets every identity of the rule; give one or the other`)
		return false, false
	}
	return true, true
}

// resetID checks a reset's id: a rule name's characters.
func (p *parser) resetID(path string, v *jvalue) (string, bool) {
	return p.nameLike(path, v, "a reset id", "every reset needs an id ("+nameChars+"), by which each Envoy applies it once")
}

// requiredString reads a string field that must be present.
func (p *parser) requiredString(path string, v *jvalue, what string) (string, bool) {
	switch {
	case v == nil:
		p.errorf(path, "missing; give ", what)
		return "", false
	case v.kind != jString:
		p.errorf(path, "must be a string (", what, "), got ", v.kind.String())
		return "", false
	}
	return v.s, true
}

// checkResets checks that each reset names a rule with state per identity
// and an identity that rule can build.
func (p *parser) checkResets(cfg *Config) {
	rules := map[string]*Rule{}
	for i := range cfg.Policies {
		for j := range cfg.Policies[i].Rules {
			r := &cfg.Policies[i].Rules[j]
			rules[r.Name] = r
		}
	}
	for i, rs := range cfg.Resets {
		at := index("resets", i)
		r := rules[rs.Rule]
		if msg := resettable(r, rs.Rule); msg != "" {
			p.errorf(at+".rule", msg)
			continue
		}
		switch {
		case rs.All && r.MaxKeys == 0:
			p.errorf(at+".all", quoteShort(rs.Rule), ` keeps exact storage ("max_keys": 0), a key per identity, which cannot be listed to reset them all; reset identities one by one, or give the rule a new name to start it over`)
		case rs.All:
		default:
			if msg := checkOverrideKey(rs.Key, len(r.Keys)); msg != "" {
				p.errorf(at+".key", msg)
			}
		}
	}
}

// resettable says why rule r (named name; nil: no such rule) has no state
// a reset could forget, or "".
func resettable(r *Rule, name string) string {
	switch {
	case r == nil:
		return quoteShort(name) + " is not a rule of this configuration"
	case r.Action != ActionLimit:
		return quoteShort(name) + ` has "action": "` + r.Action + `" and keeps no state`
	case r.Algorithm == AlgorithmConcurrency:
		return quoteShort(name) + " counts requests in flight; forgetting them would admit more than its limit while they run"
	}
	return ""
}
