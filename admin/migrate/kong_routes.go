package migrate

// The converter of Kong's configurations (kong.go): route conditions.

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// kongOp is how one alternative of a condition compares.
type kongOp uint8

const (
	kongExact     kongOp = iota
	kongPrefix           // Kong's plain paths, hosts ending in *
	kongSuffix           // hosts starting with *
	kongRegex            // Kong's ~ paths: anchored at the start
	kongFold             // header values: compared lower-cased by Kong
	kongFoldRegex        // header values ~*: unanchored, lower-cased
)

type kongAlt struct {
	op kongOp
	v  string
}

// kongConds are conditions by key source: every source must hold, and
// for one source any of its alternatives.
type kongConds map[string][]kongAlt

// routeConds are the conditions a request must meet for Kong's
// traditional router to send it to route r (kong/router/transform.lua:
// paths are prefixes or, with ~, regular expressions anchored at the
// start; hosts exact or with a leading or trailing *; header values
// compared lower-cased, or ~* regular expressions), and Kong's priority of
// the route.
func (k *kongConv) routeConds(path string, r *kongRoute) (kongConds, uint64, error) {
	if r.Expression != "" {
		return nil, 0, fmt.Errorf("%s.expression: Kong's expressions router is not converted; write the rule's match by hand", path)
	}
	c := kongConds{}
	var paths []kongAlt
	whole, regexURL, maxLen := false, false, 0
	for i, p := range r.Paths {
		a, err := k.pathAlt(fmt.Sprintf("%s.paths[%d]", path, i), p)
		if err != nil {
			return nil, 0, err
		}
		switch {
		case a.op == kongRegex:
			regexURL = true
		case a.v == "/" || a.v == "":
			whole = true
		default:
			maxLen = max(maxLen, len(a.v))
		}
		paths = kongAddAlt(paths, a)
	}
	if len(paths) > 0 && !whole {
		c["path"] = paths
	}
	plainHosts := len(r.Hosts) > 0
	for i, h := range r.Hosts {
		h = strings.ToLower(h)
		a := kongAlt{kongExact, h}
		switch {
		case strings.HasPrefix(h, "*"):
			a = kongAlt{kongSuffix, h[1:]}
		case strings.HasSuffix(h, "*"):
			a = kongAlt{kongPrefix, h[:len(h)-1]}
		}
		if a.v == "" || strings.Contains(a.v, "*") {
			return nil, 0, fmt.Errorf("%s.hosts[%d]: %q; Kong takes a * only at the start or the end", path, i, h)
		}
		plainHosts = plainHosts && a.op == kongExact
		c["host"] = kongAddAlt(c["host"], a)
	}
	for _, m := range r.Methods {
		c["method"] = kongAddAlt(c["method"], kongAlt{kongExact, strings.ToUpper(m)})
	}
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		if !headerToken.MatchString(name) || strings.EqualFold(name, "host") {
			return nil, 0, fmt.Errorf("%s.headers: %q is not a header Kong routes on", path, name)
		}
		src := "header:" + strings.ToLower(name)
		for i, v := range r.Headers[name] {
			a := kongAlt{kongFold, v}
			if re, ok := strings.CutPrefix(v, "~*"); ok {
				if _, err := regexp.Compile(re); err != nil {
					return nil, 0, fmt.Errorf("%s.headers.%s[%d]: %q is not a regular expression Sluice reads (RE2): %v", path, name, i, v, err)
				}
				a = kongAlt{kongFoldRegex, re}
			}
			c[src] = kongAddAlt(c[src], a)
		}
	}
	return c, kongPriority(r, len(c["method"]) > 0, plainHosts, regexURL, maxLen), nil
}

// pathAlt reads one route path: ~ starts a regular expression; in a 1.1
// or 2.1 file a path with characters other than letters, digits and
// .-_~/% is one, as Kong 3 migrates them (migrate_path_280_300.lua).
func (k *kongConv) pathAlt(field, p string) (kongAlt, error) {
	re, isRegex := strings.CutPrefix(p, "~")
	if k.legacyPaths && !isRegex && !kongPlainPath.MatchString(p) {
		re, isRegex = p, true
		k.noteOnce("_format_version 1.1 or 2.1: paths with characters other than letters, digits and .-_~/% are read as regular expressions, as Kong 3 reads such a file")
	}
	if !isRegex {
		return kongAlt{kongPrefix, p}, nil
	}
	if _, err := regexp.Compile("^(?:" + re + ")"); err != nil {
		return kongAlt{}, fmt.Errorf("%s: %q is not a regular expression Sluice reads (RE2: no look-around, no back-references): %v; write the rule's match by hand", field, p, err)
	}
	return kongAlt{kongRegex, re}, nil
}

var kongPlainPath = regexp.MustCompile(`^[a-zA-Z0-9.\-_~/%]*$`)

// kongPriority approximates Kong's order of routes (transform.lua,
// get_priority): more kinds of criteria first, then plain hosts, then
// regular expressions, more headers, regex_priority, a longer prefix.
func kongPriority(r *kongRoute, methods, plainHosts, regexURL bool, maxLen int) uint64 {
	weight := 0
	for _, set := range []bool{methods, len(r.Hosts) > 0, len(r.Headers) > 0, len(r.Paths) > 0, len(r.SNIs) > 0, len(r.Sources) > 0, len(r.Destinations) > 0} {
		if set {
			weight++
		}
	}
	p := uint64(weight) << 61
	if plainHosts {
		p |= 1 << 60
	}
	p |= uint64(min(len(r.Headers), 255)) << 52
	if regexURL {
		p |= 1 << 51
		p |= uint64(min(max(r.RegexPriority, 0), 1<<32-1)) << 19
	}
	return p | uint64(min(maxLen, 0x7FFFF))
}

// kongAddAlt adds an alternative to a union, leaving out what a prefix
// already holds (/orders holds /orders/admin).
func kongAddAlt(alts []kongAlt, a kongAlt) []kongAlt {
	for _, b := range alts {
		if b == a || kongHolds(b, a) {
			return alts
		}
	}
	alts = slices.DeleteFunc(alts, func(b kongAlt) bool { return kongHolds(a, b) })
	return append(alts, a)
}

// kongHolds: every value alternative b admits, a admits.
func kongHolds(a, b kongAlt) bool {
	switch {
	case a.op == kongPrefix && (b.op == kongPrefix || b.op == kongExact):
		return strings.HasPrefix(b.v, a.v)
	case a.op == kongSuffix && (b.op == kongSuffix || b.op == kongExact):
		return strings.HasSuffix(b.v, a.v)
	}
	return false
}

func (c kongConds) clone() kongConds {
	out := make(kongConds, len(c))
	for s, alts := range c {
		out[s] = slices.Clone(alts)
	}
	return out
}

// signature writes the conditions but source skip's, as a map key.
func (c kongConds) signature(skip string) string {
	var b strings.Builder
	for _, s := range slices.Sorted(maps.Keys(c)) {
		if s == skip {
			continue
		}
		alts := slices.Clone(c[s])
		slices.SortFunc(alts, func(x, y kongAlt) int {
			if x.op != y.op {
				return int(x.op) - int(y.op)
			}
			return strings.Compare(x.v, y.v)
		})
		fmt.Fprintf(&b, "%q:", s)
		for _, a := range alts {
			fmt.Fprintf(&b, "%d%q,", a.op, a.v)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// kongMerge writes the union of route condition sets with as few sets as
// it can: two sets that differ in one source only are one set whose
// alternatives for that source are both sets' (a set without the source
// matches any value of it).
func kongMerge(sets []kongTarget) []kongTarget {
	for changed := true; changed && len(sets) > 1; {
		changed = false
		var sources []string
		for _, t := range sets {
			for s := range t.conds {
				if !slices.Contains(sources, s) {
					sources = append(sources, s)
				}
			}
		}
		slices.Sort(sources)
		for _, s := range sources {
			n := len(sets)
			sets = kongMergeOn(sets, s)
			changed = changed || len(sets) < n
		}
		// Identical sets, with no source to differ in.
		n := len(sets)
		sets = kongMergeOn(sets, "")
		changed = changed || len(sets) < n
	}
	return sets
}

func kongMergeOn(sets []kongTarget, s string) []kongTarget {
	var out []kongTarget
	at := map[string]int{}
	for _, t := range sets {
		sig := t.conds.signature(s)
		i, seen := at[sig]
		if !seen {
			at[sig] = len(out)
			out = append(out, kongTarget{conds: t.conds.clone(), prio: t.prio})
			continue
		}
		m := &out[i]
		m.prio = max(m.prio, t.prio)
		mine, ok1 := m.conds[s]
		theirs, ok2 := t.conds[s]
		if !ok1 || !ok2 {
			delete(m.conds, s)
			continue
		}
		for _, a := range theirs {
			mine = kongAddAlt(mine, a)
		}
		m.conds[s] = mine
	}
	return out
}

// admits reports whether a path value meets the path alternatives.
func kongAdmits(alts []kongAlt, v string) bool {
	for _, a := range alts {
		switch a.op {
		case kongExact:
			if v == a.v {
				return true
			}
		case kongPrefix:
			if strings.HasPrefix(v, a.v) {
				return true
			}
		case kongRegex:
			if re, err := regexp.Compile("^(?:" + a.v + ")"); err == nil && re.MatchString(v) {
				return true
			}
		}
	}
	return false
}

// json writes the conditions as a rule's match.
func (c kongConds) json() (map[string]any, error) {
	if len(c) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	for _, s := range slices.Sorted(maps.Keys(c)) {
		v, err := kongCondition(s, c[s])
		if err != nil {
			return nil, err
		}
		m[s] = v
	}
	return m, nil
}

// kongCondition writes one source's alternatives: a value, an in list,
// a prefix or suffix, else one regular expression.
func kongCondition(src string, alts []kongAlt) (any, error) {
	exact := true
	values := make([]string, len(alts))
	for i, a := range alts {
		values[i] = a.v
		caseless := a.op == kongFold && strings.ToLower(a.v) == strings.ToUpper(a.v)
		exact = exact && (a.op == kongExact || caseless)
	}
	switch {
	case exact && len(values) == 1:
		return values[0], nil
	case exact && len(values) > policy.MaxListItems:
		return nil, fmt.Errorf("%d values of %s, more than the %d a condition holds", len(values), src, policy.MaxListItems)
	case exact:
		return map[string]any{"in": values}, nil
	case len(alts) == 1 && alts[0].op == kongPrefix:
		return map[string]any{"prefix": alts[0].v}, nil
	case len(alts) == 1 && alts[0].op == kongSuffix:
		return map[string]any{"suffix": alts[0].v}, nil
	}
	parts := make([]string, len(alts))
	for i, a := range alts {
		q := regexp.QuoteMeta(a.v)
		switch a.op {
		case kongExact:
			parts[i] = q + "$"
		case kongPrefix:
			parts[i] = q
		case kongSuffix:
			parts[i] = ".*" + q + "$"
		case kongRegex:
			parts[i] = "(?:" + a.v + ")"
		case kongFold:
			parts[i] = "(?i:" + q + ")$"
		case kongFoldRegex:
			parts[i] = ".*(?i:" + a.v + ")"
		}
	}
	re := "^(?:" + strings.Join(parts, "|") + ")"
	if len(re) > policy.MaxRegexLen {
		return nil, fmt.Errorf("the condition on %s is a regular expression of %d bytes, more than the %d Sluice compiles", src, len(re), policy.MaxRegexLen)
	}
	return map[string]any{"regex": re}, nil
}
