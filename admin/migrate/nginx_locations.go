package migrate

// The converter of nginx configurations (nginx.go): where nginx's location
// selection ends, as path conditions in the order that selects them.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ngxPath is a path condition: exact, or a literal prefix and maybe a
// regular expression (a regex location nginx tests when a request's
// longest prefix location is the prefix).
type ngxPath struct {
	exact   string
	isExact bool
	prefix  string // "" for none ("/" is none: every path starts with it)
	regex   string
	re      *regexp.Regexp
	loc     *ngxLoc // the regex location, for errors
	// not is a regular expression the path must not match: the regex
	// locations of an identical limit later in the policy, whose requests
	// go on to it.
	nots  []string
	not   string
	notRe *regexp.Regexp
}

// ngxAlternation is a regular expression matching what any of res
// matches, each in a group of its own so that its flags stay in it.
func ngxAlternation(res []string) string {
	if len(res) == 1 {
		return res[0]
	}
	return "(?:" + strings.Join(res, ")|(?:") + ")"
}

// maybe reports whether the condition may hold for path.
func (p *ngxPath) maybe(path string) bool {
	switch {
	case p.isExact:
		return path == p.exact
	case !strings.HasPrefix(path, p.prefix):
		return false
	case p.notRe != nil && p.notRe.MatchString(path):
		return false
	case p.regex != "" && p.re != nil:
		return p.re.MatchString(path)
	}
	return true
}

// holds reports whether the condition surely holds for path.
func (p *ngxPath) holds(path string) bool {
	return p.maybe(path) && (p.isExact || p.regex == "" || p.re != nil)
}

func (p *ngxPath) disjoint(o *ngxPath) bool {
	switch {
	case p.isExact && o.isExact:
		return p.exact != o.exact
	case p.isExact:
		return !o.maybe(p.exact)
	case o.isExact:
		return !p.maybe(o.exact)
	}
	return !strings.HasPrefix(p.prefix, o.prefix) && !strings.HasPrefix(o.prefix, p.prefix)
}

// covers reports whether every path o holds for, p holds for.
func (p *ngxPath) covers(o *ngxPath) bool {
	switch {
	case p.isExact:
		return o.isExact && o.exact == p.exact
	case o.isExact:
		return p.holds(o.exact)
	case !strings.HasPrefix(o.prefix, p.prefix):
		return false
	}
	return (p.regex == "" || p.regex == o.regex) && (p.not == "" || p.not == o.not)
}

func (p *ngxPath) addTo(m map[string]any) {
	var cond any
	switch {
	case p.isExact:
		m["path"] = p.exact
		return
	case p.regex != "":
		cond = map[string]any{"regex": p.regex}
	case p.not != "":
		cond = map[string]any{"not": map[string]any{"regex": p.not}}
	case p.prefix != "":
		m["path"] = map[string]any{"prefix": p.prefix}
	}
	if cond != nil {
		m["path"] = cond
		if p.prefix != "" {
			m["path_prefix"] = p.prefix
		}
	}
}

var ngxSlugUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.]+`)

func ngxSlug(s string) string { return strings.Trim(ngxSlugUnsafe.ReplaceAllString(s, "-"), "-._") }

func (p *ngxPath) label() string {
	var parts []string
	switch {
	case p.isExact:
		parts = append(parts, p.exact)
	case p.prefix != "":
		parts = append(parts, p.prefix)
	}
	if p.regex != "" {
		parts = append(parts, p.loc.path)
	}
	var out []string
	for _, s := range parts {
		if s = ngxSlug(s); s != "" {
			out = append(out, s)
		}
	}
	if len(out) == 0 && (p.isExact || p.prefix != "") {
		return "root"
	}
	return strings.Join(out, "-")
}

// ngxSpot is where nginx's location selection ends for the requests a
// path condition holds for, given the conditions before it.
type ngxSpot struct {
	path ngxPath
	loc  *ngxLoc // nil: no location matches, the server's own configuration
}

// ngxMaxRules bounds the rules the conversion considers.
const ngxMaxRules = 5000

// serverSpots lists a server's spots in an order whose first match is
// nginx's selection (ngx_http_core_find_location): at each level the exact
// locations, then the longest prefix location, whose nested locations are
// looked at first; then the regex locations nested in it, then those of
// the levels above it (each level's only when the prefix found at that
// level is not ^~); then the prefix location itself. A top-level prefix
// location with no regex or exact location inside, which extends no prefix
// location kept before the regexes, is put after the server's regex
// locations, which then need no prefix condition of their own.
func (b *ngxBuilder) serverSpots(s *ngxServer) ([]ngxSpot, error) {
	var out []ngxSpot
	late := lateLocations(s.locs)
	out = append(out, exactSpots(s.locs)...)
	for _, y := range prefixesLongestFirst(s.locs) {
		if late[y] {
			continue
		}
		var tail [][]*ngxLoc
		if y.mod != "^~" {
			tail = [][]*ngxLoc{s.locs}
		}
		out = b.block(out, y, tail)
	}
	out = b.regexSpots(out, s.locs, "")
	for _, y := range prefixesLongestFirst(s.locs) {
		if late[y] {
			out = b.block(out, y, nil)
		}
	}
	out = append(out, ngxSpot{})
	if len(out) > ngxMaxRules {
		return nil, lineErr(s.line, "%s: its locations make more than %d rules; convert fewer servers or locations at a time", s, ngxMaxRules)
	}
	return out, nil
}

// block adds the spots of the requests whose longest prefix location at
// its level is y; tail holds the levels whose regex locations nginx tests
// after y's own, nearest first.
func (b *ngxBuilder) block(out []ngxSpot, y *ngxLoc, tail [][]*ngxLoc) []ngxSpot {
	if len(out) > ngxMaxRules {
		return out
	}
	out = append(out, exactSpots(y.kids)...)
	for _, z := range prefixesLongestFirst(y.kids) {
		zt := tail
		if z.mod != "^~" {
			zt = append([][]*ngxLoc{y.kids}, tail...)
		}
		out = b.block(out, z, zt)
	}
	prefix := ngxPrefix(y.path)
	out = b.regexSpots(out, y.kids, prefix)
	for _, level := range tail {
		out = b.regexSpots(out, level, prefix)
	}
	return append(out, ngxSpot{path: ngxPath{prefix: prefix}, loc: y})
}

func ngxPrefix(p string) string {
	if p == "/" {
		return ""
	}
	return p
}

func exactSpots(locs []*ngxLoc) []ngxSpot {
	var out []ngxSpot
	for _, l := range locs {
		if l.exact() {
			out = append(out, ngxSpot{path: ngxPath{exact: l.path, isExact: true}, loc: l})
		}
	}
	return out
}

func (b *ngxBuilder) regexSpots(out []ngxSpot, level []*ngxLoc, prefix string) []ngxSpot {
	for _, l := range level {
		if !l.regex() || len(out) > ngxMaxRules {
			continue
		}
		src := l.path
		if l.mod == "~*" {
			src = "(?i)" + src
		}
		b.nestedInRegex(l)
		out = append(out, ngxSpot{path: ngxPath{prefix: prefix, regex: src, re: l.re, loc: l}, loc: l})
	}
	return out
}

// nestedInRegex notes the locations inside a regex location that limit
// differently: a rule's path has room for one regular expression.
func (b *ngxBuilder) nestedInRegex(l *ngxLoc) {
	var differs func([]*ngxLoc) bool
	differs = func(kids []*ngxLoc) bool {
		for _, k := range kids {
			if !ngxSameLimits(&k.eff, &l.eff) || differs(k.kids) {
				return true
			}
		}
		return false
	}
	if differs(l.kids) {
		b.c.noteOnce(fmt.Sprintf("%s: the locations nested in %s limit differently from it, and are converted as it (a rule's path holds one regular expression)", l.line, l))
	}
}

func ngxSameLimits(a, b *ngxEff) bool {
	return slices.Equal(a.reqs, b.reqs) && slices.Equal(a.conns, b.conns) && a.returns == b.returns &&
		a.reqStatus == b.reqStatus && a.reqDry == b.reqDry && a.connStatus == b.connStatus && a.connDry == b.connDry
}

func prefixesLongestFirst(locs []*ngxLoc) []*ngxLoc {
	var out []*ngxLoc
	for _, l := range locs {
		if l.prefix() {
			out = append(out, l)
		}
	}
	slices.SortStableFunc(out, func(a, b *ngxLoc) int { return len(b.path) - len(a.path) })
	return out
}

// lateLocations are the top-level prefix locations whose spots can follow
// the server's regex locations (see serverSpots).
func lateLocations(top []*ngxLoc) map[*ngxLoc]bool {
	late := map[*ngxLoc]bool{}
	ps := prefixesLongestFirst(top)
	slices.Reverse(ps)
	var early []string
	for _, y := range ps {
		if y.mod == "" && !hasRegexOrExact(y.kids) && !slices.ContainsFunc(early, func(x string) bool { return strings.HasPrefix(y.path, x) }) {
			late[y] = true
		} else {
			early = append(early, y.path)
		}
	}
	return late
}

func hasRegexOrExact(locs []*ngxLoc) bool {
	for _, l := range locs {
		if !l.prefix() || hasRegexOrExact(l.kids) {
			return true
		}
	}
	return false
}
