package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// Scope is the policies an account may change: policy names, or prefixes
// ending in "*" ("payments-*"). The empty Scope allows every policy and
// the configuration's top-level settings, as for an account without a
// scope.
//
// An account with a scope may add, change, reorder, remove and roll back
// the policies it names, and nothing else: a change to another policy or
// to a top-level setting (mode, telemetry, fleet...) is refused with a
// *ScopeError naming it. A policy's name decides which account owns it,
// so renaming a policy is removing one and adding another, and both names
// must be in scope.
type Scope []string

// MaxScopePatterns bounds a scope's patterns.
const MaxScopePatterns = 64

var scopePattern = regexp.MustCompile(`^([A-Za-z0-9_.-]{1,64}|[A-Za-z0-9_.-]{0,63}\*)$`)

// ParseScope reads a scope written as names and prefixes separated by
// commas or spaces ("" is the empty scope). The result is sorted, without
// duplicates.
func ParseScope(s string) (Scope, error) { return NewScope(SplitScope(s)) }

// SplitScope splits a scope's text into its patterns, unchecked.
func SplitScope(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
}

// NewScope checks patterns and returns them as a Scope.
func NewScope(patterns []string) (Scope, error) {
	if len(patterns) > MaxScopePatterns {
		return nil, &InputError{Field: "policies", Message: fmt.Sprintf("%d patterns; the limit is %d", len(patterns), MaxScopePatterns)}
	}
	out := make(Scope, 0, len(patterns))
	for _, p := range patterns {
		if !scopePattern.MatchString(p) {
			return nil, &InputError{Field: "policies", Message: fmt.Sprintf(
				"%q is not a policy name or a prefix ending in * (letters, digits, '_', '.', '-'; at most 64)", p)}
		}
		out = append(out, p)
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// String writes the scope as ParseScope reads it.
func (sc Scope) String() string { return strings.Join(sc, ",") }

// Restricted reports whether the scope limits anything.
func (sc Scope) Restricted() bool { return len(sc) > 0 }

// Allows reports whether the scope lets its account change the policy
// named name.
func (sc Scope) Allows(name string) bool {
	if !sc.Restricted() {
		return true
	}
	for _, p := range sc {
		if prefix, ok := strings.CutSuffix(p, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if p == name {
			return true
		}
	}
	return false
}

// ScopeError is a change outside the account's scope: nothing was saved.
type ScopeError struct {
	Scope   Scope
	Changes []string // each change refused, naming the policy or setting
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("outside your scope (%s): %s; nothing was saved", e.Scope, strings.Join(e.Changes, "; "))
}

// CheckScope returns a *ScopeError when after changes something of
// before (both normalized configurations, as Validate returns them; a nil
// before is the empty configuration) that sc does not allow.
func CheckScope(sc Scope, before, after []byte) error {
	if !sc.Restricted() {
		return nil
	}
	settings, policies, err := changesOf(before, after)
	if err != nil {
		return err
	}
	var changes []string
	for _, k := range settings {
		changes = append(changes, fmt.Sprintf("the top-level setting %q changed; only an account without a scope may change it", k))
	}
	for _, c := range policies {
		if !sc.Allows(c.name) {
			changes = append(changes, fmt.Sprintf("policy %q %s", c.name, c.what))
		}
	}
	if len(changes) > 0 {
		return &ScopeError{Scope: sc, Changes: changes}
	}
	return nil
}

// policyChange is a policy added, removed or changed between two
// configurations.
type policyChange struct{ name, what string }

// changesOf lists the top-level settings and the policies that differ
// between before and after (normalized configurations; nil is the empty
// one).
func changesOf(before, after []byte) (settings []string, policies []policyChange, err error) {
	b, err := splitConfig(before)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the base version: %w", err)
	}
	a, err := splitConfig(after)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the new configuration: %w", err)
	}
	for _, k := range unionKeys(b.settings, a.settings) {
		if !bytes.Equal(b.settings[k], a.settings[k]) {
			settings = append(settings, k)
		}
	}
	for _, name := range unionKeys(b.policies, a.policies) {
		old, inBefore := b.policies[name]
		cur, inAfter := a.policies[name]
		switch {
		case !inBefore:
			policies = append(policies, policyChange{name, "added"})
		case !inAfter:
			policies = append(policies, policyChange{name, "removed"})
		case !bytes.Equal(old, cur):
			policies = append(policies, policyChange{name, "changed"})
		}
	}
	return settings, policies, nil
}

// splitDoc holds a normalized configuration's top-level settings and its
// policies, each by name as JSON. Normalized JSON is written one way (no
// spaces, fields in one order), so equal bytes are equal values.
type splitDoc struct {
	settings map[string][]byte
	policies map[string][]byte
}

func splitConfig(doc []byte) (splitDoc, error) {
	d := splitDoc{settings: map[string][]byte{}, policies: map[string][]byte{}}
	if len(doc) == 0 {
		return d, nil
	}
	top, ps, err := topAndPolicies(doc)
	if err != nil {
		return d, err
	}
	for k, v := range top {
		if k != "policies" {
			d.settings[k] = v
		}
	}
	for _, p := range ps {
		d.policies[p.name] = p.doc
	}
	return d, nil
}

func unionKeys(a, b map[string][]byte) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// RestoreInScope returns current with the policies sc allows as they are
// in old: changed back, added back or removed again. Every other policy
// and the top-level settings stay as in current. Both are normalized
// configurations; the result is to be validated again.
func RestoreInScope(sc Scope, current, old []byte) ([]byte, error) {
	top, cur, err := topAndPolicies(current)
	if err != nil {
		return nil, err
	}
	_, was, err := topAndPolicies(old)
	if err != nil {
		return nil, err
	}
	oldByName := map[string]json.RawMessage{}
	for _, p := range was {
		oldByName[p.name] = p.doc
	}
	var out []json.RawMessage
	kept := map[string]bool{}
	for _, p := range cur {
		switch doc, inOld := oldByName[p.name]; {
		case !sc.Allows(p.name):
			out = append(out, p.doc)
		case inOld:
			out = append(out, doc)
		}
		kept[p.name] = true
	}
	for _, p := range was {
		if sc.Allows(p.name) && !kept[p.name] {
			out = append(out, p.doc)
		}
	}
	if out == nil {
		out = []json.RawMessage{}
	}
	if top["policies"], err = json.Marshal(out); err != nil {
		return nil, err
	}
	return json.Marshal(top)
}

// topAndPolicies reads a configuration's top-level fields and its
// policies in order.
func topAndPolicies(doc []byte) (map[string]json.RawMessage, []namedPolicy, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(doc, &top); err != nil {
		return nil, nil, err
	}
	ps, err := namedPolicies(top["policies"])
	return top, ps, err
}

type namedPolicy struct {
	name string
	doc  json.RawMessage
}

func namedPolicies(raw json.RawMessage) ([]namedPolicy, error) {
	var ps []json.RawMessage
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &ps); err != nil {
			return nil, err
		}
	}
	out := make([]namedPolicy, 0, len(ps))
	for _, p := range ps {
		var named struct {
			Name string `json:"name"`
		}
		if err := json.Unmarshal(p, &named); err != nil {
			return nil, err
		}
		out = append(out, namedPolicy{named.Name, p})
	}
	return out, nil
}
