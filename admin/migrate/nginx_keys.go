package migrate

// The converter of nginx configurations (nginx.go): a zone's key as
// limit_keys, and the conditions its map and geo blocks make.

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// ngxKey is what a zone's key becomes: the rule's limit_keys and the
// conditions (from map and geo) under which nginx's key is not empty.
type ngxKey struct {
	sources []string
	match   map[string]any
	never   string // why nginx's key is always empty: the zone limits nothing
}

// key converts a zone's key. nginx does not account a request whose key
// is empty; a Sluice rule does not apply to a request that lacks a value
// of its limit_keys.
func (b *ngxBuilder) key(z *ngxZone) (ngxKey, error) {
	vars, literal, err := ngxKeyVariables(z.key)
	if err != nil {
		return ngxKey{}, lineErr(z.line, "%s %s: key %q: %v", z.directive(), z.name, z.key, err)
	}
	k := ngxKey{match: map[string]any{}}
	if len(vars) == 0 {
		if literal == "" {
			k.never = "its key is empty"
			return k, nil
		}
		k.sources = []string{"all"} // a constant: one state for every request
		return k, nil
	}
	for _, v := range vars {
		src, cond, never, err := b.keyVariable(z, v)
		if err != nil {
			return k, err
		}
		if never != "" {
			k.never = never
			return k, nil
		}
		if !slices.Contains(k.sources, src) {
			k.sources = append(k.sources, src)
		}
		if cond != nil {
			if _, dup := k.match[cond.source]; dup {
				return k, lineErr(z.line, "%s %s: key %q sets two conditions on %s; not converted", z.directive(), z.name, z.key, cond.source)
			}
			k.match[cond.source] = cond.cond
		}
	}
	if len(k.sources) > 1 {
		b.c.note("zone %s keys on %s: Sluice limits a request only when it has every one of them, where nginx counts a request lacking some under the others", z.name, strings.Join(k.sources, ", "))
	}
	return k, nil
}

// ngxKeyVariables splits a key into its variables ($name, ${name}) and
// the rest.
func ngxKeyVariables(key string) (vars []string, literal string, err error) {
	var lit strings.Builder
	for i := 0; i < len(key); {
		if key[i] != '$' {
			lit.WriteByte(key[i])
			i++
			continue
		}
		var name string
		if strings.HasPrefix(key[i+1:], "{") {
			end := strings.IndexByte(key[i+2:], '}')
			if end < 0 {
				return nil, "", fmt.Errorf("unterminated ${")
			}
			name, i = key[i+2:i+2+end], i+3+end
		} else {
			j := i + 1
			for j < len(key) && (key[j] == '_' || key[j] >= '0' && key[j] <= '9' || key[j]|0x20 >= 'a' && key[j]|0x20 <= 'z') {
				j++
			}
			name, i = key[i+1:j], j
		}
		if name == "" {
			return nil, "", fmt.Errorf("$ without a variable name")
		}
		vars = append(vars, strings.ToLower(name))
	}
	return vars, lit.String(), nil
}

type ngxCond struct {
	source string
	cond   any
}

// ngxDirectSource is the Sluice source of one of nginx's request
// variables, "" for none.
func (b *ngxBuilder) ngxDirectSource(name string) string {
	switch name {
	case "binary_remote_addr", "remote_addr", "realip_remote_addr":
		note := "nginx's $remote_addr is the address of the peer"
		if b.r.realIP {
			note = "nginx's $remote_addr is the address the realip module takes from the client's header (set_real_ip_from, real_ip_header)"
		}
		b.c.noteOnce(note + "; Sluice's ip:address is the peer's address unless xff_trusted_hops says how many proxies append to X-Forwarded-For: set it so both read the same client")
		return "ip:address"
	case "host", "http_host", "server_name":
		if name == "server_name" {
			b.c.noteOnce("$server_name is a server's first name, one state for all its names in nginx; Sluice's host is the name the request carries, one bucket per name")
		}
		return "host"
	case "uri", "document_uri", "request_uri":
		if name == "request_uri" {
			b.c.noteOnce("$request_uri includes the query string, so nginx gives each query its own state; Sluice's path has none: requests differing only in their query share a bucket")
		}
		return "path"
	case "request_method":
		return "method"
	}
	for prefix, kind := range map[string]string{"http_": "header:", "arg_": "query:", "cookie_": "cookie:", "jwt_claim_": "jwt:"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && rest != "" {
			if kind == "header:" {
				return kind + strings.ReplaceAll(rest, "_", "-")
			}
			if kind == "cookie:" {
				b.c.noteOnce("nginx compares cookie names ignoring case (and its variable names are lower-case); Sluice's cookie: sources compare them exactly: check that the cookie's name is written as browsers send it")
			}
			if kind == "jwt:" {
				b.c.noteOnce("$jwt_claim_ variables are claims NGINX Plus verified; Sluice's jwt: sources are not verified: put Envoy's jwt_authn before Sluice, or key on the claims it writes to the metadata (docs/configuration.md)")
			}
			return kind + rest
		}
	}
	return ""
}

// keyVariable converts one variable of a key: a request variable, or a
// map (maybe of a geo) whose values are empty or one request variable.
func (b *ngxBuilder) keyVariable(z *ngxZone, name string) (src string, cond *ngxCond, never string, err error) {
	if src := b.ngxDirectSource(name); src != "" {
		return src, nil, "", nil
	}
	where := fmt.Sprintf("%s %s: key variable $%s", z.directive(), z.name, name)
	def := b.r.vars[name]
	switch {
	case def == nil && b.r.sets[name].known():
		return "", nil, "", lineErr(z.line, "%s is assigned with set (%s); not converted: key the zone on a request variable", where, b.r.sets[name])
	case def == nil:
		return "", nil, "", lineErr(z.line, "%s has no Sluice source (Sluice keys on $remote_addr, $http_<header>, $arg_<name>, $cookie_<name>, $host, $uri, $request_method; a map or geo of its own must be in the input)", where)
	case def.kind == "geo":
		return "", nil, "", lineErr(z.line, "%s is a geo (%s) of fixed values: every client with one value shares one nginx state; not converted", where, def.line)
	}
	return b.mapKey(z, where, def)
}

// mapKey converts a key that is a map's variable. Each of the map's
// values must be "" (nginx then does not limit the request) or one request
// variable, the same everywhere; the map's source becomes a condition on
// when it is not empty.
func (b *ngxBuilder) mapKey(z *ngxZone, where string, m *ngxVarDef) (string, *ngxCond, string, error) {
	if m.refuse != "" {
		return "", nil, "", lineErr(m.line, "map $%s (the key of zone %s): %s", m.name, z.name, m.refuse)
	}
	target := ""
	limited := func(value string) (bool, error) {
		value = strings.TrimSpace(value)
		if value == "" {
			return false, nil
		}
		vars, literal, err := ngxKeyVariables(value)
		if err != nil || len(vars) != 1 || literal != "" {
			return false, fmt.Errorf("value %q is neither empty nor one variable: requests with it would share one nginx state", value)
		}
		if target != "" && vars[0] != target {
			return false, fmt.Errorf("values $%s and $%s differ", target, vars[0])
		}
		target = vars[0]
		return true, nil
	}
	defLimited, err := limited(m.def)
	if err != nil {
		return "", nil, "", lineErr(m.line, "map $%s (the key of zone %s): default %v; not converted", m.name, z.name, err)
	}
	outcomes := make([]bool, len(m.entries))
	for i, e := range m.entries {
		if outcomes[i], err = limited(e.value); err != nil {
			return "", nil, "", lineErr(e.line, "map $%s (the key of zone %s): %v; not converted", m.name, z.name, err)
		}
	}
	if target == "" {
		return "", nil, fmt.Sprintf("map $%s (%s) is empty for every request", m.name, m.line), nil
	}
	src := b.ngxDirectSource(target)
	if src == "" {
		return "", nil, "", lineErr(m.line, "map $%s (the key of zone %s): $%s is not a request variable Sluice reads; not converted", m.name, z.name, target)
	}
	if defLimited && !slices.Contains(outcomes, false) {
		return src, nil, "", nil // the map is the variable itself
	}
	cond, err := b.mapCondition(z, m, outcomes, defLimited)
	if err != nil {
		return "", nil, "", err
	}
	b.c.note("zone %s keys on map $%s (%s): the requests for which it is empty are not limited by nginx, and are left out by the rules' match (%s)", z.name, m.name, m.line, cond.source)
	return src, cond, "", nil
}

// mapCondition is the condition on the map's source under which the map
// gives its variable (limited), as nginx looks a value up: exact keys
// (case-insensitive) first, then regular expressions in order, then the
// default.
func (b *ngxBuilder) mapCondition(z *ngxZone, m *ngxVarDef, outcomes []bool, defLimited bool) (*ngxCond, error) {
	vars, literal, err := ngxKeyVariables(m.source)
	if err != nil || len(vars) != 1 || literal != "" {
		return nil, lineErr(m.line, "map $%s (the key of zone %s): its source %q is not one variable; not converted", m.name, z.name, m.source)
	}
	refuse := func(line ngxPos, why string, args ...any) error {
		return lineErr(line, "map $%s (the key of zone %s): %s; not converted", m.name, z.name, fmt.Sprintf(why, args...))
	}
	if g := b.r.vars[vars[0]]; g != nil {
		if g.kind != "geo" {
			return nil, refuse(m.line, "its source $%s is a map of its own", g.name)
		}
		return b.geoCondition(m, g, outcomes, defLimited, refuse)
	}
	src := b.ngxDirectSource(vars[0])
	switch src {
	case "":
		return nil, refuse(m.line, "its source $%s is not a request variable Sluice reads", vars[0])
	case "host", "path":
		return nil, refuse(m.line, "a condition on %s would take the place of the server's or location's", src)
	}
	var exacts, alts []string
	var res []*regexp.Regexp
	var plain []ngxVarEntry // exact keys with the default's outcome
	defaultRegex := false
	for i, e := range m.entries {
		switch {
		case e.key == "" && !e.regex:
			return nil, refuse(e.line, "an entry for the empty value")
		case !e.regex && outcomes[i] != defLimited:
			exacts = append(exacts, e.key)
		case !e.regex:
			plain = append(plain, e)
		case outcomes[i] == defLimited:
			defaultRegex = true
		case defaultRegex:
			return nil, refuse(e.line, "a regular expression after one with the other outcome")
		default:
			re := e.key
			if e.caseless {
				re = "(?i:" + re + ")"
			}
			compiled, err := regexp.Compile(re)
			if err != nil {
				return nil, refuse(e.line, "~%s is not RE2 syntax (%v)", e.key, err)
			}
			alts, res = append(alts, "(?:"+re+")"), append(res, compiled)
		}
	}
	for _, e := range plain { // an exact key wins over the regular expressions
		if slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(e.key) }) {
			return nil, refuse(e.line, "%q is kept out of a regular expression of the other outcome", e.key)
		}
	}
	var cond any
	if src == "ip:address" && len(alts) == 0 {
		cond = map[string]any{"in": exacts}
	} else {
		if len(exacts) > 0 {
			q := make([]string, len(exacts))
			for i, e := range exacts {
				q[i] = regexp.QuoteMeta(e)
			}
			alts = append([]string{"(?i:^(?:" + strings.Join(q, "|") + ")$)"}, alts...)
		}
		cond = map[string]any{"regex": strings.Join(alts, "|")}
	}
	if defLimited {
		cond = map[string]any{"not": cond}
	}
	return &ngxCond{source: src, cond: cond}, nil
}

// geoCondition is the condition on a geo's address under which a map of
// the geo's values gives its variable: the geo's blocks, looked up as
// nginx does (the longest matching block, else the default).
func (b *ngxBuilder) geoCondition(m, g *ngxVarDef, outcomes []bool, defLimited bool, refuse func(ngxPos, string, ...any) error) (*ngxCond, error) {
	lookup := func(v string) bool {
		for i, e := range m.entries {
			if !e.regex && strings.EqualFold(e.key, v) {
				return outcomes[i]
			}
		}
		for i, e := range m.entries {
			if e.regex {
				src := e.key
				if e.caseless {
					src = "(?i)" + src
				}
				if re, err := regexp.Compile(src); err == nil && re.MatchString(v) {
					return outcomes[i]
				}
			}
		}
		return defLimited
	}
	if g.refuse != "" {
		return nil, refuse(g.line, "geo $%s: %s", g.name, g.refuse)
	}
	src := "ip:address"
	if g.source != "" {
		vars, literal, err := ngxKeyVariables(g.source)
		if err != nil || len(vars) != 1 || literal != "" {
			return nil, refuse(g.line, "geo $%s reads %q", g.name, g.source)
		}
		if src = b.ngxDirectSource(vars[0]); src == "" || src == "host" || src == "path" || src == "method" {
			return nil, refuse(g.line, "geo $%s reads $%s", g.name, vars[0])
		}
	}
	var yes, no []ngxVarEntry
	for _, e := range g.entries {
		if lookup(e.value) {
			yes = append(yes, e)
		} else {
			no = append(no, e)
		}
	}
	for _, y := range yes {
		for _, n := range no {
			if y.cidr.Overlaps(n.cidr) {
				return nil, refuse(n.line, "geo $%s: %s and %s (%s) nest with different outcomes", g.name, n.key, y.key, y.line)
			}
		}
	}
	blocks := func(es []ngxVarEntry) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.cidr.String()
		}
		return out
	}
	switch {
	case lookup(g.def) && len(no) == 0:
		return nil, nil
	case lookup(g.def):
		return &ngxCond{source: src, cond: map[string]any{"not": map[string]any{"cidr": blocks(no)}}}, nil
	case len(yes) == 0:
		return nil, refuse(g.line, "it is empty for every address")
	}
	return &ngxCond{source: src, cond: map[string]any{"cidr": blocks(yes)}}, nil
}
