package policy

import (
	"encoding/json"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// This file parses a rule's "match": an object from a key source to a
// condition. A condition is a string (the exact value) or an object with one
// operator:
//
//	{"exact": "x"}  {"prefix": "/api/"}  {"suffix": ".json"}
//	{"regex": "^/users/[0-9]+$"}  {"in": ["gold", "platinum"]}
//	{"cidr": ["10.0.0.0/8", "2001:db8::/32"]}  {"present": true}
//	{"not": <condition>}
//
// Every condition of a rule must hold. Conditions are evaluated by
// Condition.Holds, which the filter calls on the request path: it does not
// allocate for well-formed values.

// MatchOp is a condition's operator.
type MatchOp uint8

const (
	MatchExact   MatchOp = iota // the value equals Value
	MatchPrefix                 // the value starts with Value
	MatchSuffix                 // the value ends with Value
	MatchRegex                  // Regex matches the value (RE2, anchored as written)
	MatchIn                     // the value is one of Values
	MatchCIDR                   // the value is an IP address inside one of CIDRs
	MatchPresent                // the value is present (Present true) or missing (false)
	MatchNot                    // Not does not hold
)

// matchOps are the operator names, indexed by MatchOp.
var matchOps = []string{"exact", "prefix", "suffix", "regex", "in", "cidr", "present", "not"}

// String returns the operator's configuration name.
func (o MatchOp) String() string {
	if int(o) < len(matchOps) {
		return matchOps[o]
	}
	return "invalid"
}

// Condition is one parsed condition of a "match".
type Condition struct {
	Op      MatchOp
	Value   string         // exact, prefix, suffix; the source text of a regex
	Values  []string       // in, in the order written
	Regex   *regexp.Regexp // regex, compiled once by Parse
	CIDRs   []netip.Prefix // cidr, masked (10.1.2.3/8 becomes 10.0.0.0/8)
	Present bool           // present
	Not     *Condition     // not

	dfa *asciiDFA  // regex: its automaton for ASCII values (regexdfa.go), nil if none
	v4  []v4Prefix // cidr: the IPv4 blocks, for the common dotted-quad value
}

// v4Prefix is an IPv4 block as masked integers.
type v4Prefix struct{ net, mask uint32 }

// Matcher is one entry of a rule's "match": the condition on a source's
// value. PathPrefix marks the "path_prefix" shorthand (Source is path and
// Cond a prefix condition).
type Matcher struct {
	Source     KeySource
	Cond       Condition
	PathPrefix bool
}

// Bounds on match conditions.
const (
	MaxRegexLen  = 4096 // bytes of a regex's source
	MaxListItems = 10000
)

// Holds reports whether the condition holds for a value; ok is false when
// the value is missing (absent or empty). A missing value satisfies only
// {"present": false} and the negation of a condition it does not satisfy.
func (c *Condition) Holds(v string, ok bool) bool {
	switch c.Op {
	case MatchPresent:
		return ok == c.Present
	case MatchNot:
		return c.Not != nil && !c.Not.Holds(v, ok)
	}
	if !ok {
		return false
	}
	switch c.Op {
	case MatchExact:
		return v == c.Value
	case MatchPrefix:
		return strings.HasPrefix(v, c.Value)
	case MatchSuffix:
		return strings.HasSuffix(v, c.Value)
	case MatchRegex:
		if c.dfa != nil {
			if m, ok := c.dfa.match(v); ok {
				return m
			}
		}
		return c.Regex != nil && c.Regex.MatchString(v)
	case MatchIn:
		return slices.Contains(c.Values, v)
	case MatchCIDR:
		if ip, ok := parseDottedQuad(v); ok {
			for _, p := range c.v4 {
				if ip&p.mask == p.net {
					return true
				}
			}
			return false
		}
		a, ok := ParseAddress(v)
		if !ok {
			return false
		}
		for _, p := range c.CIDRs {
			if p.Contains(a) {
				return true
			}
		}
	}
	return false
}

// ParseAddress reads an IP address from a request value: "10.0.0.1",
// "2001:db8::1", with a port ("10.0.0.1:443", "[2001:db8::1]:443") or
// surrounding spaces. IPv4-mapped IPv6 addresses become IPv4. Values that
// cannot be an address are refused without calling the parser, so the
// common non-address value costs no allocation; zones are refused.
func ParseAddress(v string) (netip.Addr, bool) {
	v = strings.TrimSpace(v)
	if v == "" || len(v) > 64 {
		return netip.Addr{}, false
	}
	colons := 0
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= '0' && c <= '9', c == '.':
		case c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
		case c == ':':
			colons++
		case c == '[' || c == ']':
		default:
			return netip.Addr{}, false
		}
	}
	if v[0] == '[' { // [v6]:port or [v6]
		end := strings.IndexByte(v, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		v = v[1:end]
	} else if colons == 1 { // v4:port
		v = v[:strings.IndexByte(v, ':')]
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// parseDottedQuad reads "a.b.c.d" with an optional ":port" (decimal, no
// leading zeros beyond a lone 0, as netip reads them); anything else is
// left to ParseAddress.
func parseDottedQuad(v string) (uint32, bool) {
	if len(v) > len("255.255.255.255:65535") {
		return 0, false
	}
	var ip uint32
	part, digits, dots := uint32(0), 0, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c >= '0' && c <= '9':
			if digits > 0 && part == 0 { // a leading zero
				return 0, false
			}
			part = part*10 + uint32(c-'0')
			digits++
			if part > 255 {
				return 0, false
			}
		case c == '.' && digits > 0 && dots < 3:
			ip, part, digits = ip<<8|part, 0, 0
			dots++
		case c == ':' && digits > 0 && dots == 3:
			for j := i + 1; j < len(v); j++ {
				if v[j] < '0' || v[j] > '9' {
					return 0, false
				}
			}
			return ip<<8 | part, i+1 < len(v)
		default:
			return 0, false
		}
	}
	return ip<<8 | part, digits > 0 && dots == 3
}

// match parses a rule's "match" object.
func (p *parser) match(path string, v *jvalue) []Matcher {
	if v.kind != jObject {
		p.errorf(path, `must be an object mapping sources to conditions, e.g. {"jwt:plan": "enterprise", "path": {"prefix": "/api/"}}, got `, v.kind.String())
		return nil
	}
	var out []Matcher
	seenKeys := map[string]bool{}
	type slot struct {
		src    KeySource
		prefix bool
	}
	seen := map[slot]string{}
	for _, m := range v.obj {
		mpath := join(path, m.key)
		if seenKeys[m.key] {
			p.errorf(mpath, "duplicate field ", quoteShort(m.key), "; each field may appear only once")
			continue
		}
		seenKeys[m.key] = true
		var mt Matcher
		if m.key == "path_prefix" {
			mt = Matcher{Source: KeySource{Kind: SourcePath}, PathPrefix: true}
		} else {
			k, msg := parseSource(m.key)
			if msg != "" {
				p.errorf(mpath, msg, `; "path_prefix" is also accepted in match`)
				continue
			}
			if k.Kind == SourceAll {
				p.errorf(mpath, `"all" is the same for every request, so a condition on it decides nothing; use it in limit_keys (one bucket for every request the rule applies to)`)
				continue
			}
			if k.Kind == SourceConnection {
				p.errorf(mpath, `a connection's number is a key only (a bucket per connection); it says nothing about the request to match on`)
				continue
			}
			if k.Kind == SourceIPNetwork {
				p.errorf(mpath, `a network is a key only; to match client networks write "ip:address": {"cidr": ["203.0.113.0/24"]}`)
				continue
			}
			mt.Source = k
		}
		if mt.PathPrefix {
			if m.val.kind != jString {
				p.errorf(mpath, `must be a string (the path prefix, e.g. "/api/"), got `, m.val.kind.String(), `; for other conditions on the path write "path": {"prefix": ...}`)
				continue
			}
			if m.val.s == "" {
				p.errorf(mpath, `is empty; give the path prefix, e.g. "/api/"`)
				continue
			}
			mt.Cond = Condition{Op: MatchPrefix, Value: m.val.s}
		} else {
			c, ok := p.condition(mpath, m.val, mt.Source)
			if !ok {
				continue
			}
			mt.Cond = c
		}
		key := slot{mt.Source, mt.PathPrefix}
		if prev, dup := seen[key]; dup {
			p.errorf(mpath, "matches the same source as ", prev, " (header names are case-insensitive); keep one")
			continue
		}
		seen[key] = mpath
		out = append(out, mt)
	}
	sortMatchers(out)
	return out
}

// sortMatchers orders matchers by source name, path_prefix last.
func sortMatchers(ms []Matcher) {
	slices.SortStableFunc(ms, func(a, b Matcher) int {
		if c := strings.Compare(a.Source.String(), b.Source.String()); c != 0 {
			return c
		}
		switch {
		case a.PathPrefix == b.PathPrefix:
			return 0
		case a.PathPrefix:
			return 1
		}
		return -1
	})
}

// condition parses one condition on a value of source src.
func (p *parser) condition(path string, v *jvalue, src KeySource) (Condition, bool) {
	if v.kind == jString {
		s, ok := p.operand(path, v, src)
		return Condition{Op: MatchExact, Value: s}, ok
	}
	if v.kind != jObject {
		p.errorf(path, `must be a string (the exact value to match) or an object with one operator such as {"prefix": "/api/"}, got `, v.kind.String())
		return Condition{}, false
	}
	if len(v.obj) != 1 {
		names := make([]string, len(v.obj))
		for i, m := range v.obj {
			names[i] = quoteShort(m.key)
		}
		if len(v.obj) == 0 {
			p.errorf(path, "is an empty object; a condition has exactly one operator: ", strings.Join(matchOps, ", "))
		} else {
			p.errorf(path, "has ", strconv.Itoa(len(v.obj)), " operators (", strings.Join(names, ", "),
				"); a condition has exactly one (all conditions of a rule must hold, one per source)")
		}
		return Condition{}, false
	}
	m := v.obj[0]
	opath := join(path, m.key)
	op := slices.Index(matchOps, m.key)
	if op < 0 {
		msg := "unknown operator " + quoteShort(m.key)
		if s := suggest(m.key, matchOps); s != "" {
			msg += " (did you mean " + strconv.Quote(s) + "?)"
		}
		p.errorf(opath, msg, "; operators: ", strings.Join(matchOps, ", "))
		return Condition{}, false
	}
	c := Condition{Op: MatchOp(op)}
	switch c.Op {
	case MatchExact, MatchPrefix, MatchSuffix:
		s, ok := p.operand(opath, m.val, src)
		c.Value = s
		return c, ok
	case MatchRegex:
		return c, p.regex(opath, m.val, &c)
	case MatchIn:
		return c, p.inList(opath, m.val, src, &c)
	case MatchCIDR:
		return c, p.cidrs(opath, m.val, src, &c)
	case MatchPresent:
		if m.val.kind != jBool {
			p.errorf(opath, "must be true (the value is present) or false (it is absent or empty), got ", m.val.kind.String())
			return c, false
		}
		c.Present = m.val.b
		return c, true
	}
	inner, ok := p.condition(opath, m.val, src) // not
	c.Not = &inner
	return c, ok
}

// operand reads a non-empty string to compare with. Host values are
// lower-cased, like the request's host.
func (p *parser) operand(path string, v *jvalue, src KeySource) (string, bool) {
	switch {
	case v.kind != jString:
		p.errorf(path, "must be a string (the value to compare with), got ", v.kind.String())
		return "", false
	case v.s == "":
		p.errorf(path, `is empty; give the value to compare with (an empty value counts as absent: use {"present": false})`)
		return "", false
	}
	if src.Kind == SourceHost {
		return strings.ToLower(v.s), true
	}
	return v.s, true
}

func (p *parser) regex(path string, v *jvalue, c *Condition) bool {
	switch {
	case v.kind != jString:
		p.errorf(path, `must be a string holding an RE2 regular expression such as "^/users/[0-9]+$", got `, v.kind.String())
		return false
	case v.s == "":
		p.errorf(path, "is empty; give an RE2 regular expression (it matches anywhere in the value unless anchored with ^ and $)")
		return false
	case len(v.s) > MaxRegexLen:
		p.errorf(path, "is ", strconv.Itoa(len(v.s)), " bytes long; a regex may have at most ", strconv.Itoa(MaxRegexLen))
		return false
	}
	re, err := regexp.Compile(v.s)
	if err != nil {
		p.errorf(path, quoteShort(v.s), " is not a valid RE2 regular expression: ", strings.TrimPrefix(err.Error(), "error parsing regexp: "))
		return false
	}
	c.Value, c.Regex, c.dfa = v.s, re, buildDFA(v.s)
	return true
}

// list checks a non-empty array of at most MaxListItems strings.
func (p *parser) list(path string, v *jvalue, example string) bool {
	switch {
	case v.kind != jArray:
		p.errorf(path, "must be an array of strings such as ", example, ", got ", v.kind.String())
		return false
	case len(v.arr) == 0:
		p.errorf(path, "is empty; list at least one value, e.g. ", example)
		return false
	case len(v.arr) > MaxListItems:
		p.errorf(path, "has ", strconv.Itoa(len(v.arr)), " items; at most ", strconv.Itoa(MaxListItems), " are allowed")
		return false
	}
	return true
}

func (p *parser) inList(path string, v *jvalue, src KeySource, c *Condition) bool {
	if !p.list(path, v, `["gold", "platinum"]`) {
		return false
	}
	before := len(p.errs)
	seen := make(map[string]int, len(v.arr))
	for i, it := range v.arr {
		ipath := index(path, i)
		s, ok := p.operand(ipath, it, src)
		if !ok {
			continue
		}
		if j, dup := seen[s]; dup {
			p.errorf(ipath, "duplicate value ", quoteShort(s), " (also at ", index(path, j), ")")
			continue
		}
		seen[s] = i
		c.Values = append(c.Values, s)
	}
	return len(p.errs) == before
}

func (p *parser) cidrs(path string, v *jvalue, src KeySource, c *Condition) bool {
	switch src.Kind {
	case SourcePath, SourceMethod, SourceHost, SourceRoute, SourceCluster, SourcePeer:
		p.errorf(path, "cidr compares IP addresses; use it on \"ip:address\" or on a header, query parameter, claim or metadata value holding an address, not on ",
			strconv.Quote(src.String()))
		return false
	}
	if !p.list(path, v, `["10.0.0.0/8", "2001:db8::/32"]`) {
		return false
	}
	before := len(p.errs)
	for i, it := range v.arr {
		ipath := index(path, i)
		if it.kind != jString {
			p.errorf(ipath, `must be a string such as "10.0.0.0/8" or "2001:db8::/32", got `, it.kind.String())
			continue
		}
		pfx, msg := parseCIDR(it.s)
		if msg != "" {
			p.errorf(ipath, msg)
			continue
		}
		c.CIDRs = append(c.CIDRs, pfx)
		if pfx.Addr().Is4() {
			a := pfx.Addr().As4()
			mask := ^uint32(0) << (32 - pfx.Bits())
			if pfx.Bits() == 0 {
				mask = 0
			}
			c.v4 = append(c.v4, v4Prefix{net: uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]), mask: mask})
		}
	}
	return len(p.errs) == before
}

// parseCIDR parses "10.0.0.0/8", "2001:db8::/32" or a single address (a /32
// or /128). The host bits are cleared.
func parseCIDR(s string) (netip.Prefix, string) {
	if strings.Contains(s, "%") {
		return netip.Prefix{}, quoteShort(s) + " has an IPv6 zone; zones are not allowed in cidr"
	}
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, quoteShort(s) + ` is not an IP address or CIDR block; write e.g. "10.0.0.0/8", "192.168.1.7" or "2001:db8::/32"`
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), ""
	}
	pfx, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, quoteShort(s) + ` is not a CIDR block; write an address, "/" and a prefix length, e.g. "10.0.0.0/8" or "2001:db8::/32"`
	}
	if pfx.Addr().Is4In6() {
		if pfx.Bits() < 96 {
			return netip.Prefix{}, quoteShort(s) + " is an IPv4-mapped block shorter than /96; write the IPv4 block instead"
		}
		pfx = netip.PrefixFrom(pfx.Addr().Unmap(), pfx.Bits()-96)
	}
	return pfx.Masked(), ""
}

// conditionJSON renders a condition in its normalized form: an exact
// condition as a plain string, any other as its one-operator object.
func conditionJSON(c *Condition) any {
	switch c.Op {
	case MatchExact:
		return c.Value
	case MatchIn:
		return map[string]any{"in": c.Values}
	case MatchCIDR:
		s := make([]string, len(c.CIDRs))
		for i, p := range c.CIDRs {
			s[i] = p.String()
		}
		return map[string]any{"cidr": s}
	case MatchPresent:
		return map[string]any{"present": c.Present}
	case MatchNot:
		if c.Not == nil {
			return map[string]any{"not": nil}
		}
		return map[string]any{"not": conditionJSON(c.Not)}
	}
	return map[string]any{c.Op.String(): c.Value}
}

// String is the condition in its normalized form, as a configuration
// writes it: "gold", {"prefix":"/api/"}, {"not":{"cidr":["10.0.0.0/8"]}}.
func (c *Condition) String() string {
	b, err := json.Marshal(conditionJSON(c))
	if err != nil {
		return c.Op.String()
	}
	return string(b)
}
