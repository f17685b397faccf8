package migrate

// The converter of nginx configurations (nginx.go): servers and their names,
// as host conditions in the order nginx looks a host up.

import (
	"regexp"
	"slices"
	"strings"
)

// ngxHost is a host condition: any of its names (none: any host).
type ngxHost struct {
	exact    []string
	suffixes []string // *.example.com as ".example.com"
	prefixes []string // www.example.* as "www.example."
	regexes  []string // ~regex, matched case-insensitively
	res      []*regexp.Regexp
}

func (h *ngxHost) any() bool {
	return len(h.exact)+len(h.suffixes)+len(h.prefixes)+len(h.regexes) == 0
}

func (h *ngxHost) matches(host string) bool {
	return slices.Contains(h.exact, host) ||
		slices.ContainsFunc(h.suffixes, func(s string) bool { return strings.HasSuffix(host, s) }) ||
		slices.ContainsFunc(h.prefixes, func(p string) bool { return strings.HasPrefix(host, p) }) ||
		slices.ContainsFunc(h.res, func(re *regexp.Regexp) bool { return re.MatchString(host) })
}

func (h *ngxHost) disjoint(o *ngxHost) bool {
	if h == o || h.any() || o.any() {
		return false
	}
	for _, e := range h.exact {
		if o.matches(e) {
			return false
		}
	}
	for _, e := range o.exact {
		if h.matches(e) {
			return false
		}
	}
	hPatterns, oPatterns := len(h.suffixes)+len(h.prefixes)+len(h.regexes), len(o.suffixes)+len(o.prefixes)+len(o.regexes)
	switch {
	case hPatterns == 0 || oPatterns == 0:
		return true
	case len(h.regexes) > 0 || len(o.regexes) > 0:
		return false
	case len(h.suffixes) > 0 && len(o.prefixes) > 0, len(h.prefixes) > 0 && len(o.suffixes) > 0:
		return false
	}
	nested := func(as, bs []string, has func(string, string) bool) bool {
		for _, a := range as {
			for _, b := range bs {
				if has(a, b) || has(b, a) {
					return true
				}
			}
		}
		return false
	}
	return !nested(h.suffixes, o.suffixes, strings.HasSuffix) && !nested(h.prefixes, o.prefixes, strings.HasPrefix)
}

func (h *ngxHost) covers(o *ngxHost) bool {
	switch {
	case h == o || h.any():
		return true
	case o.any():
		return false
	}
	for _, e := range o.exact {
		if !h.matches(e) {
			return false
		}
	}
	for _, s := range o.suffixes {
		if !slices.ContainsFunc(h.suffixes, func(x string) bool { return strings.HasSuffix(s, x) }) {
			return false
		}
	}
	for _, p := range o.prefixes {
		if !slices.ContainsFunc(h.prefixes, func(x string) bool { return strings.HasPrefix(p, x) }) {
			return false
		}
	}
	for _, re := range o.regexes {
		if !slices.Contains(h.regexes, re) {
			return false
		}
	}
	return true
}

func (h *ngxHost) union(o *ngxHost) ngxHost {
	if h.any() || o.any() {
		return ngxHost{}
	}
	return ngxHost{
		exact: append(slices.Clip(h.exact), o.exact...), suffixes: append(slices.Clip(h.suffixes), o.suffixes...),
		prefixes: append(slices.Clip(h.prefixes), o.prefixes...), regexes: append(slices.Clip(h.regexes), o.regexes...),
		res: append(slices.Clip(h.res), o.res...),
	}
}

// condition is the host condition in policy syntax; nil for any host.
func (h *ngxHost) condition() any {
	patterns := len(h.suffixes) + len(h.prefixes) + len(h.regexes)
	switch {
	case h.any():
		return nil
	case patterns == 0 && len(h.exact) == 1:
		return h.exact[0]
	case patterns == 0:
		return map[string]any{"in": h.exact}
	case len(h.exact) == 0 && patterns == 1 && len(h.suffixes) == 1:
		return map[string]any{"suffix": h.suffixes[0]}
	case len(h.exact) == 0 && patterns == 1 && len(h.prefixes) == 1:
		return map[string]any{"prefix": h.prefixes[0]}
	}
	var alts []string
	if len(h.exact) > 0 {
		q := make([]string, len(h.exact))
		for i, e := range h.exact {
			q[i] = regexp.QuoteMeta(e)
		}
		alts = append(alts, "^(?:"+strings.Join(q, "|")+")$")
	}
	for _, s := range h.suffixes {
		alts = append(alts, regexp.QuoteMeta(s)+"$")
	}
	for _, p := range h.prefixes {
		alts = append(alts, "^"+regexp.QuoteMeta(p))
	}
	for _, re := range h.regexes {
		alts = append(alts, "(?i:"+re+")")
	}
	return map[string]any{"regex": strings.Join(alts, "|")}
}

// ngxGroup is a server with the host names that reach it at its place in
// the rules.
type ngxGroup struct {
	server *ngxServer
	host   ngxHost
}

func (g *ngxGroup) label() string {
	h := &g.host
	var l string
	switch {
	case len(h.exact) > 0:
		l = h.exact[0]
	case len(h.suffixes) > 0:
		l = "wildcard" + h.suffixes[0]
	case len(h.prefixes) > 0:
		l = h.prefixes[0] + "wildcard"
	case len(h.regexes) > 0:
		l = h.regexes[0]
	case len(g.server.names) > 0:
		l = g.server.names[0]
	}
	if l = ngxSlug(l); l == "" {
		return "default"
	}
	return l
}

// ngxName is a server name as nginx reads it.
type ngxName struct {
	kind byte // 'e' exact, 's' *.suffix, 'p' prefix.*, 'r' regex
	key  string
	s    *ngxServer
}

// ngxNames classifies a server's names; ".example.com" is both
// example.com and *.example.com.
func ngxNames(s *ngxServer) []ngxName {
	var out []ngxName
	for _, n := range s.names {
		if strings.HasPrefix(n, "~") {
			out = append(out, ngxName{'r', n[1:], s})
			continue
		}
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		switch {
		case n == "" || n == "_" || strings.HasPrefix(n, "$"):
		case strings.HasPrefix(n, "*."):
			out = append(out, ngxName{'s', n[1:], s})
		case strings.HasPrefix(n, "."):
			out = append(out, ngxName{'e', n[1:], s}, ngxName{'s', n, s})
		case strings.HasSuffix(n, ".*"):
			out = append(out, ngxName{'p', n[:len(n)-1], s})
		case strings.Contains(n, "*"):
		default:
			out = append(out, ngxName{'e', n, s})
		}
	}
	return out
}

// hostGroups orders the servers' names as nginx looks a host up: exact
// names, then the longest *.suffix, then the longest prefix.*, then the
// regular expressions in order; the default server last, for any host.
// A name of two servers belongs to the first (a server that only
// redirects yields it: Sluice does not tell listen ports apart).
func (b *ngxBuilder) hostGroups() ([]*ngxGroup, error) {
	servers := b.r.servers
	def := ngxDefaultServer(servers)
	owner := map[string]*ngxServer{}
	for _, redirects := range []bool{false, true} {
		for _, s := range servers {
			if s.redirect() != redirects {
				continue
			}
			for _, n := range ngxNames(s) {
				k := string(n.kind) + n.key
				if o := owner[k]; o != nil && o != s {
					if n.kind != 'r' {
						b.c.note("server name %s is in %s and %s: converted as %s's (nginx picks the first of one address and port; Sluice does not tell ports apart)", n.key, o, s, o)
					}
					continue
				}
				owner[k] = s
			}
		}
	}
	var exact, lead, trail, rx []*ngxGroup
	for _, s := range servers {
		var names []string
		for _, n := range ngxNames(s) {
			if owner[string(n.kind)+n.key] != s {
				continue
			}
			switch n.kind {
			case 'e':
				if !slices.Contains(names, n.key) {
					names = append(names, n.key)
				}
			case 's':
				lead = append(lead, &ngxGroup{server: s, host: ngxHost{suffixes: []string{n.key}}})
			case 'p':
				trail = append(trail, &ngxGroup{server: s, host: ngxHost{prefixes: []string{n.key}}})
			case 'r':
				re, err := regexp.Compile("(?i:" + n.key + ")")
				if err != nil {
					return nil, lineErr(s.line, "server_name ~%s is not RE2 syntax (%v): rewrite it (Sluice's regular expressions have no look-around or back-references)", n.key, err)
				}
				rx = append(rx, &ngxGroup{server: s, host: ngxHost{regexes: []string{n.key}, res: []*regexp.Regexp{re}}})
			}
		}
		if len(names) > 0 {
			exact = append(exact, &ngxGroup{server: s, host: ngxHost{exact: names}})
		}
	}
	longest := func(key func(*ngxGroup) string) func(a, b *ngxGroup) int {
		return func(a, b *ngxGroup) int { return len(key(b)) - len(key(a)) }
	}
	slices.SortStableFunc(lead, longest(func(g *ngxGroup) string { return g.host.suffixes[0] }))
	slices.SortStableFunc(trail, longest(func(g *ngxGroup) string { return g.host.prefixes[0] }))
	gs := slices.Concat(exact, lead, trail, rx, []*ngxGroup{{server: def}})
	return compactGroups(gs), nil
}

// ngxDefaultServer is the server of a listen ... default_server, else the
// first; a server that only redirects only when all do.
func ngxDefaultServer(servers []*ngxServer) *ngxServer {
	for _, pick := range []func(*ngxServer) bool{
		func(s *ngxServer) bool { return s.def && !s.redirect() },
		func(s *ngxServer) bool { return !s.redirect() },
		func(s *ngxServer) bool { return s.def },
	} {
		if i := slices.IndexFunc(servers, pick); i >= 0 {
			return servers[i]
		}
	}
	return servers[0]
}

// compactGroups drops a group whose requests reach a later group of the
// same server anyway, and joins a group to an earlier one of its server
// when no group between them could take its requests.
func compactGroups(gs []*ngxGroup) []*ngxGroup {
	for i := len(gs) - 2; i >= 0; i-- {
		g := gs[i]
		for _, later := range gs[i+1:] {
			if g.host.disjoint(&later.host) {
				continue
			}
			if later.server == g.server && later.host.covers(&g.host) {
				gs = slices.Delete(gs, i, i+1)
			}
			break
		}
	}
	for j := 1; j < len(gs); j++ {
		for i := j - 1; i >= 0; i-- {
			if gs[i].server == gs[j].server {
				gs[i].host = gs[i].host.union(&gs[j].host)
				gs = slices.Delete(gs, j, j+1)
				j--
				break
			}
			if !gs[i].host.disjoint(&gs[j].host) {
				break
			}
		}
	}
	return gs
}
