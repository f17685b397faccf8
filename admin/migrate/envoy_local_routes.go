package migrate

// The converter of Envoy's local_ratelimit configurations (envoy_local.go):
// route matches as Sluice conditions.

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// elAddCond adds a condition on src to a match, refusing a second one.
func elAddCond(m map[string]any, src string, cond any, path string) error {
	old, ok := m[src]
	if !ok || reflect.DeepEqual(old, cond) {
		m[src] = cond
		return nil
	}
	both, holds, known := elBoth(old, cond)
	switch {
	case !known:
		return fmt.Errorf("%s: a second condition on %s; Sluice takes one condition per source: write the rule by hand", path, src)
	case !holds:
		return fmt.Errorf("%s: %w on %s", path, errElNever, src)
	}
	m[src] = both
	return nil
}

// errElNever: two conditions on one source that no value meets.
var errElNever = errors.New("conditions no request meets")

// elBoth is one condition meaning both a and b, when one is an exact
// value (the other must hold for it) or a presence (which the other's
// value implies); holds is false when no value meets both.
func elBoth(a, b any) (both any, holds, known bool) {
	if _, ok := b.(string); ok {
		a, b = b, a
	}
	if v, ok := a.(string); ok {
		h, k := elHolds(b, v)
		return a, h, k
	}
	pa, aok := elPresence(a)
	pb, bok := elPresence(b)
	switch {
	case aok && bok:
		return a, pa == pb, true
	case aok && pa:
		return b, true, elImpliesPresence(b)
	case bok && pb:
		return a, true, elImpliesPresence(a)
	}
	return nil, false, false
}

func elPresence(c any) (present, ok bool) {
	m, isMap := c.(map[string]any)
	p, isBool := m["present"].(bool)
	return p, isMap && isBool && len(m) == 1
}

// elImpliesPresence: every value the condition holds for is present.
func elImpliesPresence(c any) bool {
	m, ok := c.(map[string]any)
	if !ok {
		return true
	}
	_, not := m["not"]
	p, isPresence := elPresence(c)
	return !not && (!isPresence || p)
}

// elHolds evaluates a condition of this file's making on a value.
func elHolds(c any, v string) (holds, known bool) {
	if s, ok := c.(string); ok {
		return s == v, true
	}
	m, _ := c.(map[string]any)
	if len(m) != 1 {
		return false, false
	}
	for op, arg := range m {
		switch op {
		case "prefix":
			return strings.HasPrefix(v, arg.(string)), true
		case "suffix":
			return strings.HasSuffix(v, arg.(string)), true
		case "present":
			return arg.(bool) == (v != ""), true
		case "regex":
			re, err := regexp.Compile(arg.(string))
			return err == nil && re.MatchString(v), err == nil
		case "not":
			h, k := elHolds(arg, v)
			return !h, k
		}
	}
	return false, false
}

func elNegate(cond any) any {
	if m, ok := cond.(map[string]any); ok {
		if p, ok := m["present"].(bool); ok && len(m) == 1 {
			return map[string]any{"present": !p}
		}
	}
	return map[string]any{"not": cond}
}

// vhostCond says which hosts a virtual host serves, when its route
// configuration has others (Envoy picks the virtual host by host first).
func (c *elConv) vhostCond(vh *elVhost) map[string]any {
	rc := vh.rc
	if vh.domains == nil || len(rc.vhosts) == 1 && slices.Equal(vh.domains, []string{"*"}) {
		return map[string]any{}
	}
	if len(rc.vhosts) > 1 && slices.ContainsFunc(rc.vhosts, func(o *elVhost) bool {
		return slices.ContainsFunc(o.domains, func(d string) bool { return d != "*" && strings.Contains(d, "*") })
	}) {
		c.noteOnce("virtual hosts with wildcard domains: the host conditions keep each virtual host's domains, not Envoy's preference for the most specific domain among virtual hosts")
	}
	if !slices.Contains(vh.domains, "*") {
		return map[string]any{"host": map[string]any{"regex": elDomainsRegex(vh.domains)}}
	}
	var others []string
	for _, o := range rc.vhosts {
		if o != vh && o.domains != nil && !slices.Contains(o.domains, "*") {
			others = append(others, o.domains...)
		}
	}
	if len(others) == 0 {
		return map[string]any{}
	}
	return map[string]any{"host": map[string]any{"not": map[string]any{"regex": elDomainsRegex(others)}}}
}

// elDomainsRegex matches a host (lower case, with or without a port) that
// a virtual host's domains name.
func elDomainsRegex(domains []string) string {
	alts := make([]string, 0, len(domains))
	for _, d := range domains {
		var re string
		switch {
		case strings.HasPrefix(d, "*"):
			re = ".+" + regexp.QuoteMeta(d[1:])
		case strings.HasSuffix(d, "*"):
			re = regexp.QuoteMeta(d[:len(d)-1]) + ".+"
		default:
			re = regexp.QuoteMeta(d)
		}
		if !strings.Contains(d, ":") {
			re += "(?::[0-9]+)?"
		}
		alts = append(alts, re)
	}
	return "^(?:" + strings.Join(alts, "|") + ")$"
}

// routeCond is the match of the requests Envoy may route to r: its name
// when it has one of its own, else its virtual host's hosts and its match.
func (c *elConv) routeCond(r *elRoute) (map[string]any, error) {
	if r.byName {
		return map[string]any{"route": r.name}, nil
	}
	if cond, ok := c.conds[r]; ok {
		return cond, nil
	}
	m, mp := r.match, elJoin(r.path, "match")
	if m == nil {
		return nil, fmt.Errorf("%s: match: missing", elAt(nil, r.path))
	}
	cond := maps.Clone(c.vhostCond(r.vh))
	ci, err := elCaseInsensitive(m, mp)
	if err != nil {
		return nil, err
	}
	for _, kv := range elPairs(m) {
		k, v := elSnakeCase(kv[0].Value), kv[1]
		if err := elMatchField(cond, k, v, elJoin(mp, k), ci); err != nil {
			return nil, err
		}
	}
	c.conds[r] = cond
	return cond, nil
}

func elCaseInsensitive(m *yaml.Node, path string) (bool, error) {
	v := elWrapped(elField(m, "case_sensitive"))
	if v == nil {
		return false, nil
	}
	cs, err := elBoolOf(v, elJoin(path, "case_sensitive"))
	return !cs, err
}

func elMatchField(cond map[string]any, k string, v *yaml.Node, p string, ci bool) error {
	var c any
	switch k {
	case "case_sensitive":
		return nil
	case "prefix":
		s := elStr(v)
		switch {
		case s == "" || s == "/":
			return nil
		case ci:
			c = map[string]any{"regex": "(?i)^" + regexp.QuoteMeta(s)}
		default:
			c = map[string]any{"prefix": s}
		}
	case "path":
		s := elStr(v)
		switch {
		case s == "":
			return fmt.Errorf("%s: empty", elAt(v, p))
		case ci:
			c = map[string]any{"regex": "(?i)^" + regexp.QuoteMeta(s) + "$"}
		default:
			c = s
		}
	case "path_separated_prefix":
		re := "^" + regexp.QuoteMeta(elStr(v)) + "(?:/|$)"
		if ci {
			re = "(?i)" + re
		}
		c = map[string]any{"regex": re}
	case "safe_regex":
		re, err := elFullRegex(elField(v, "regex"), elJoin(p, "regex"))
		if err != nil {
			return err
		}
		c = map[string]any{"regex": re}
	case "headers":
		return elMatchList(cond, v, p, elHeaderMatcher)
	case "query_parameters":
		return elMatchList(cond, v, p, elQueryMatcher)
	case "grpc":
		return elAddCond(cond, "header:content-type", map[string]any{"prefix": "application/grpc"}, p)
	default:
		return fmt.Errorf("%s: not converted (Sluice has no such condition); name the route and match it by name, or write the rule by hand", elAt(v, p))
	}
	return elAddCond(cond, "path", c, p)
}

func elMatchList(cond map[string]any, v *yaml.Node, p string, matcher func(*yaml.Node, string) (string, any, error)) error {
	for i, h := range elItems(v) {
		hp := elIndex(p, i)
		src, c, err := matcher(h, hp)
		if err != nil {
			return err
		}
		if err := elAddCond(cond, src, c, hp); err != nil {
			return err
		}
	}
	return nil
}

// elFullRegex is an Envoy regular expression (matching the whole value) as
// a Sluice one (matching anywhere unless anchored).
func elFullRegex(n *yaml.Node, path string) (string, error) {
	s := elStr(n)
	if _, err := regexp.Compile(s); err != nil || s == "" {
		return "", fmt.Errorf("%s: %q is not a regular expression Sluice reads (RE2): %v", elAt(n, path), s, err)
	}
	re := "^(?:" + s + ")$"
	if len(re) > policy.MaxRegexLen {
		return "", fmt.Errorf("%s: longer than the %d bytes of a Sluice regular expression", elAt(n, path), policy.MaxRegexLen)
	}
	return re, nil
}

// elHeaderMatcher reads a route.v3.HeaderMatcher.
func elHeaderMatcher(h *yaml.Node, path string) (string, any, error) {
	name := strings.ToLower(elStr(elField(h, "name")))
	src, err := elHeaderSource(name, elJoin(path, "name"))
	if err != nil || src == "path" {
		return "", nil, fmt.Errorf("%s: header %q: not converted (match the path with prefix, path or safe_regex)", elAt(h, path), name)
	}
	var cond any = map[string]any{"present": true}
	for _, kv := range elPairs(h) {
		k, v := elSnakeCase(kv[0].Value), kv[1]
		p := elJoin(path, k)
		switch k {
		case "name", "invert_match", "treat_missing_header_as_empty":
		case "exact_match":
			cond, err = elExactCond(v, p, false)
		case "prefix_match":
			cond = elPrefixCond(elStr(v), false)
		case "suffix_match":
			cond = map[string]any{"suffix": elStr(v)}
		case "contains_match":
			cond = map[string]any{"regex": regexp.QuoteMeta(elStr(v))}
		case "safe_regex_match":
			var re string
			re, err = elFullRegex(elField(v, "regex"), elJoin(p, "regex"))
			cond = map[string]any{"regex": re}
		case "present_match":
			var b bool
			b, err = elBoolOf(v, p)
			cond = map[string]any{"present": b}
		case "string_match":
			cond, err = elStringMatcher(v, p)
		default:
			err = fmt.Errorf("%s: not converted; write the rule by hand", elAt(v, p))
		}
		if err != nil {
			return "", nil, err
		}
	}
	invert, err := elBoolOf(elField(h, "invert_match"), elJoin(path, "invert_match"))
	if invert {
		cond = elNegate(cond)
	}
	return src, cond, err
}

// elQueryMatcher reads a route.v3.QueryParameterMatcher.
func elQueryMatcher(q *yaml.Node, path string) (string, any, error) {
	name := elStr(elField(q, "name"))
	if !elQueryName.MatchString(name) {
		return "", nil, fmt.Errorf("%s: name %q: want a parameter name without spaces, &, = or #", elAt(q, path), name)
	}
	var cond any = map[string]any{"present": true}
	var err error
	if v := elField(q, "string_match"); v != nil {
		cond, err = elStringMatcher(v, elJoin(path, "string_match"))
	}
	if v := elField(q, "present_match"); v != nil {
		var b bool
		b, err = elBoolOf(v, elJoin(path, "present_match"))
		cond = map[string]any{"present": b}
	}
	return "query:" + name, cond, err
}

// elStringMatcher reads a type.matcher.v3.StringMatcher.
func elStringMatcher(n *yaml.Node, path string) (any, error) {
	ic, err := elBoolOf(elField(n, "ignore_case"), elJoin(path, "ignore_case"))
	if err != nil {
		return nil, err
	}
	i := ""
	if ic {
		i = "(?i)"
	}
	for _, kv := range elPairs(n) {
		k, v := elSnakeCase(kv[0].Value), kv[1]
		p := elJoin(path, k)
		s := elStr(v)
		switch k {
		case "ignore_case":
		case "exact":
			return elExactCond(v, p, ic)
		case "prefix":
			return elPrefixCond(s, ic), nil
		case "suffix":
			if ic {
				return map[string]any{"regex": i + regexp.QuoteMeta(s) + "$"}, nil
			}
			return map[string]any{"suffix": s}, nil
		case "contains":
			return map[string]any{"regex": i + regexp.QuoteMeta(s)}, nil
		case "safe_regex":
			re, err := elFullRegex(elField(v, "regex"), elJoin(p, "regex"))
			return map[string]any{"regex": re}, err
		default:
			return nil, fmt.Errorf("%s: not converted; write the rule by hand", elAt(v, p))
		}
	}
	return nil, fmt.Errorf("%s: no matcher (exact, prefix, suffix, contains or safe_regex)", elAt(n, path))
}

func elExactCond(v *yaml.Node, p string, ic bool) (any, error) {
	s := elStr(v)
	switch {
	case s == "":
		return nil, fmt.Errorf("%s: an empty value: Sluice reads an empty value as missing; write the rule by hand", elAt(v, p))
	case ic:
		return map[string]any{"regex": "(?i)^" + regexp.QuoteMeta(s) + "$"}, nil
	}
	return s, nil
}

func elPrefixCond(s string, ic bool) any {
	switch {
	case s == "":
		return map[string]any{"present": true}
	case ic:
		return map[string]any{"regex": "(?i)^" + regexp.QuoteMeta(s)}
	}
	return map[string]any{"prefix": s}
}

// elPathSpec is what a route's path match is, for telling whether two
// routes may take the same request.
func elPathSpec(m *yaml.Node) (kind, value string) {
	ci, _ := elCaseInsensitive(m, "")
	for _, k := range []string{"prefix", "path_separated_prefix", "path"} {
		if v := elField(m, k); v != nil {
			s := elStr(v)
			if ci {
				s = strings.ToLower(s)
			}
			if k == "path" {
				return "exact", s
			}
			return "prefix", s
		}
	}
	return "other", ""
}

// elMayOverlap tells whether a request might match both routes (false
// only when their paths cannot both hold, or their virtual hosts differ).
func elMayOverlap(a, b *elRoute) bool {
	if a.vh != b.vh {
		return a.vh.domains == nil || b.vh.domains == nil
	}
	ka, va, kb, vb := a.specKind, a.spec, b.specKind, b.spec
	switch {
	case ka == "other" || kb == "other":
		return true
	case ka == "prefix" && kb == "prefix":
		return strings.HasPrefix(va, vb) || strings.HasPrefix(vb, va)
	case ka == "exact" && kb == "exact":
		return va == vb
	case ka == "exact":
		return strings.HasPrefix(va, vb)
	}
	return strings.HasPrefix(vb, va)
}
