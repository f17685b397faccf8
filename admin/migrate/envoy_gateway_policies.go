package migrate

// The converter of Envoy Gateway's rate limits (envoy_gateway.go): the
// requests each policy applies to, and its Sluice policies.

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// egScope is the requests of one target, as conditions.
type egScope struct {
	label   string         // names its rules: the target's name
	cond    map[string]any // nil: every request of the Gateway
	gateway string         // a Gateway (namespace/name): a counter per Envoy route unless shared
	route   string         // a route not given: the prefix of its Envoy routes' names
	key     string         // a route given: its kind/namespace/name
	shown   string         // the target in notes: "HTTPRoute shop/api"
}

// httpMatchPath reads an HTTPRoute match's path as Envoy Gateway routes
// it: PathPrefix (the default, "/") by whole segments, Exact, or a
// RegularExpression matching the whole path. all: every path.
func (g *egConverter) httpMatchPath(m yval) (re, exact string, all bool, err error) {
	pv, ok, err := g.read.lookup(m, "path")
	if err != nil || !ok {
		return "", "", true, err
	}
	typ, value := "PathPrefix", "/"
	if t, err := g.read.lookupText(pv, "type"); err != nil {
		return "", "", false, err
	} else if t != "" {
		typ = t
	}
	if v, err := g.read.lookupText(pv, "value"); err != nil {
		return "", "", false, err
	} else if v != "" {
		value = v
	}
	switch typ {
	case "PathPrefix":
		p := strings.TrimRight(value, "/")
		if p == "" {
			return "", "", true, nil
		}
		return "^" + regexpQuote(p) + "(?:/.*)?$", "", false, nil
	case "Exact":
		return "", value, false, nil
	case "RegularExpression":
		if _, err := regexp.Compile(value); err != nil {
			return "", "", false, pv.errorf("%q: %v", value, err)
		}
		return "^(?:" + value + ")$", "", false, nil
	}
	return "", "", false, pv.errorf("type %q: want PathPrefix, Exact or RegularExpression", typ)
}

// grpcMatchPath reads a GRPCRoute match's method as the path of the
// calls it matches (/<service>/<method>).
func (g *egConverter) grpcMatchPath(m yval) (re string, all bool, err error) {
	mv, ok, err := g.read.lookup(m, "method")
	if err != nil || !ok {
		return "", true, err
	}
	typ, err := g.read.lookupText(mv, "type")
	if err != nil {
		return "", false, err
	}
	svc, err := g.read.lookupText(mv, "service")
	if err != nil {
		return "", false, err
	}
	method, err := g.read.lookupText(mv, "method")
	if err != nil {
		return "", false, err
	}
	if svc == "" && method == "" {
		return "", true, nil
	}
	part := func(s string) string {
		if s == "" {
			return "[^/]+"
		}
		if typ == "RegularExpression" {
			return "(?:" + s + ")"
		}
		return regexpQuote(s)
	}
	switch typ {
	case "", "Exact", "RegularExpression":
	default:
		return "", false, mv.errorf("type %q: want Exact or RegularExpression", typ)
	}
	re = "^/" + part(svc) + "/" + part(method) + "$"
	if _, err := regexp.Compile(re); err != nil {
		return "", false, mv.errorf("%v", err)
	}
	return re, false, nil
}

// pathUnion is one condition for paths that match any of exact and res
// (regular expressions).
func pathUnion(exact, res []string) any {
	slices.Sort(exact)
	exact = slices.Compact(exact)
	switch {
	case len(res) == 0 && len(exact) == 1:
		return exact[0]
	case len(res) == 0:
		return map[string]any{"in": exact}
	}
	res = slices.Clone(res)
	for _, e := range exact {
		res = append(res, "^"+regexpQuote(e)+"$")
	}
	slices.Sort(res)
	res = slices.Compact(res)
	if len(res) == 1 {
		return map[string]any{"regex": res[0]}
	}
	return map[string]any{"regex": "(?:" + strings.Join(res, "|") + ")"}
}

// pathParts splits path conditions into exact values and regular
// expressions; ok is false when one of them is every path.
func pathParts(conds []any) (exact, res []string, ok bool) {
	for _, c := range conds {
		switch c := c.(type) {
		case nil:
			return nil, nil, false
		case string:
			exact = append(exact, c)
		case map[string]any:
			if in, ok := c["in"].([]string); ok {
				exact = append(exact, in...)
			} else if re, ok := c["regex"].(string); ok {
				res = append(res, re)
			}
		}
	}
	return exact, res, true
}

// resolve finds the requests of a policy's targets. quiet: for the
// precedence of another policy, without notes.
func (g *egConverter) resolve(b *egBTP, quiet bool) []egScope {
	note := func(format string, args ...any) {
		if !quiet {
			g.noteOnce(fmt.Sprintf(format, args...))
		}
	}
	var out []egScope
	for _, t := range b.targets {
		path := fmt.Sprintf("%s: target %s %s", b.shown(), t.kind, t.name)
		switch t.kind {
		case "Gateway":
			s := egScope{label: t.name, gateway: b.ns + "/" + t.name}
			if t.section != "" {
				gw := g.gateways[s.gateway]
				host, known := (*string)(nil), false
				if gw != nil {
					host, known = gw.listeners[t.section]
				}
				if known && host != nil {
					cond, all, err := hostCondition(t.v, []string{*host})
					if err == nil && !all {
						s.cond = map[string]any{"host": cond}
					}
				} else {
					note("%s, listener %s: the rules apply to every request of the Gateway (give the Gateway, whose listener has a hostname, to match it)", path, t.section)
				}
				s.label = t.name + "-" + t.section
			}
			out = append(out, s)
			note("%s: its rules apply to every request the filter sees: attach Sluice to that Gateway (EnvoyExtensionPolicy, docs/kubernetes.md)", path)
		case "HTTPRoute", "GRPCRoute":
			out = append(out, g.routeScope(b, t.kind, t.name, t.section, path, note))
		default:
			note("%s: not an HTTP route: its rate limits are not converted", path)
		}
	}
	for i, sel := range b.selectors {
		path := fmt.Sprintf("%s: targetSelectors[%d]", b.shown(), i)
		var found []egScope
		for _, key := range slices.Sorted(maps.Keys(g.routes)) {
			r := g.routes[key]
			if r.kind == sel.kind && r.ns == b.ns && hasLabels(r.labels, sel.labels) {
				found = append(found, g.routeScope(b, r.kind, r.name, "", path, note))
			}
		}
		for _, key := range slices.Sorted(maps.Keys(g.gateways)) {
			gw := g.gateways[key]
			if sel.kind == "Gateway" && gw.ns == b.ns && hasLabels(gw.labels, sel.labels) {
				found = append(found, egScope{label: gw.name, gateway: key})
			}
		}
		if len(found) == 0 {
			note("%s selects none of the objects given (%s with labels %v); give them to convert its rules", path, sel.kind, sel.labels)
		}
		out = append(out, found...)
	}
	return out
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// routeScope is the requests of a route: its hostnames and paths when
// the stream holds it, else its Envoy routes by the names Envoy Gateway
// gives them (<kind>/<namespace>/<name>/rule/<i>/match/<j>/<host>).
func (g *egConverter) routeScope(b *egBTP, kind, name, section, path string, note func(string, ...any)) egScope {
	s := egScope{label: name, shown: kind + " " + b.ns + "/" + name}
	prefix := strings.ToLower(kind) + "/" + b.ns + "/" + name + "/"
	r := g.routes[kind+"/"+b.ns+"/"+name]
	if r == nil {
		s.route = prefix
		s.cond = map[string]any{"route": map[string]any{"prefix": prefix}}
		note("%s is not in the input (%s): its rules match the Envoy routes Envoy Gateway makes of it (route names starting %s), where Sluice runs in that Envoy Gateway; give the %s to match its hostnames and paths instead", s.shown, path, prefix, kind)
		if section != "" {
			note("%s: rule %s: without the %s, the rules apply to all of its rules", path, section, kind)
		}
		return s
	}
	s.key = kind + "/" + b.ns + "/" + name
	rules := r.rules
	if section != "" {
		i := slices.IndexFunc(rules, func(rr egRouteRule) bool { return rr.name == section })
		if i < 0 {
			note("%s: the %s has no rule named %s: the rules apply to all of its rules", path, kind, section)
		} else {
			rules = rules[i : i+1]
			s.label = name + "-" + section
		}
	}
	var conds []any
	for _, rr := range rules {
		conds = append(conds, rr.path)
	}
	s.cond = map[string]any{}
	if r.hosts != nil {
		s.cond["host"] = r.hosts
	}
	if exact, res, ok := pathParts(conds); ok {
		s.cond["path"] = pathUnion(exact, res)
	}
	if len(r.ignored) > 0 {
		note("%s %s/%s: its matches' %s are not part of the rules' conditions: they apply to every request for its hostnames and paths", kind, r.ns, r.name, strings.Join(r.ignored, ", "))
	}
	if r.hosts != nil {
		note("a host condition compares the request's host as sent, port included; list host:port too where clients send one")
	}
	return s
}

// build makes the policies of every BackendTrafficPolicy with a rate
// limit: one per rule.
func (g *egConverter) build() error {
	for _, b := range g.btps {
		if !b.limits {
			continue
		}
		scopes := g.resolve(b, false)
		if len(scopes) == 0 {
			g.note("%s: none of its targets converts; its rate limits are left out", b.shown())
			continue
		}
		both := len(b.local) > 0 && len(b.global) > 0
		for _, blk := range []struct {
			rules []*egRule
			infix string
		}{{b.local, "-local"}, {b.global, "-global"}} {
			infix := ""
			if both {
				infix = blk.infix
			}
			for _, r := range blk.rules {
				if err := g.rulePolicy(b, scopes, r, blk.rules, b.ns+"-"+b.name+infix); err != nil {
					return err
				}
			}
		}
		if b.merge {
			g.noteOnce("a policy with mergeType is merged into its Gateway's: both limit the route's requests, as the converted policies do")
		}
	}
	if len(g.out) == 0 {
		return fmt.Errorf("config: nothing to convert: no rate limit rule of the BackendTrafficPolicies limits a request (see the notes)")
	}
	return nil
}

// rulePolicy makes the policy of one rule.
func (g *egConverter) rulePolicy(b *egBTP, scopes []egScope, r *egRule, siblings []*egRule, label string) error {
	name := fmt.Sprintf("%s-rule-%d", label, r.index)
	isDefault := !r.global && !r.selected
	if isDefault {
		name = label + "-default"
	}
	if r.never {
		g.note("%s: no request can match it, or it counts nothing; left out", r.v.path)
		return nil
	}
	p := outPolicy{Name: g.pols.take(name)}
	if err := g.exclusions(b, scopes, &p); err != nil {
		return err
	}
	if isDefault {
		// Envoy's local_ratelimit takes the default bucket only for the
		// requests no other rule's descriptor matches.
		for _, o := range siblings {
			if !o.selected || o.never {
				continue
			}
			match := maps.Clone(o.match)
			if err := addConds(match, o.present, o.v.path); err != nil {
				return err
			}
			p.Rules = append(p.Rules, outRule{Name: g.rules.take(fmt.Sprintf("%s-rule-%d", p.Name, o.index)), Action: policy.ActionUnlimited, Match: nilIfEmpty(match)})
		}
		g.noteOnce("a local rule without clientSelectors is the route's default bucket, which Envoy takes only for the requests no other local rule matches: its policy starts with an unlimited rule for each of them")
	}
	merged := g.sharedScopes(r, scopes)
	for _, s := range merged {
		rule, err := g.limitRule(r, s, len(merged) > 1, p.Name)
		if err != nil {
			return err
		}
		p.Rules = append(p.Rules, rule)
	}
	g.out = append(g.out, p)
	return nil
}

// sharedScopes merges the scopes of a shared rule into one where their
// conditions allow: the routes of a shared rule share one counter.
func (g *egConverter) sharedScopes(r *egRule, scopes []egScope) []egScope {
	if !r.shared || len(scopes) < 2 {
		return scopes
	}
	var prefixes []string
	for _, s := range scopes {
		if s.route == "" {
			g.note("%s: shared across several targets, with one counter each here: Sluice's rules cannot share a counter across different hosts and paths (match the routes' hosts and paths by hand in one rule)", r.v.path)
			return scopes
		}
		prefixes = append(prefixes, "^"+regexpQuote(s.route))
	}
	re := "(?:" + strings.Join(prefixes, "|") + ")"
	return []egScope{{label: "shared", cond: map[string]any{"route": map[string]any{"regex": re}}}}
}

// limitRule is a rule's limit on the requests of one scope.
func (g *egConverter) limitRule(r *egRule, s egScope, several bool, pname string) (outRule, error) {
	name := pname
	if several {
		name += "-" + s.label
	}
	rule := outRule{Name: g.rules.take(name)}
	match := maps.Clone(r.match)
	for _, src := range slices.Sorted(maps.Keys(s.cond)) {
		if _, own := match[src]; own {
			g.note("%s: its own %s condition is kept and the target's left out (Sluice takes one condition per source)", r.v.path, src)
			continue
		}
		match[src] = s.cond[src]
	}
	keys := slices.Clone(r.keys)
	if s.gateway != "" && !r.shared {
		keys = append([]string{"route"}, keys...)
		g.noteOnce(`a rule on a Gateway that is not shared counts each Envoy route apart, as Envoy Gateway does: its limit_keys start with "route", the Envoy route's name, which Envoy Gateway gives every route (without route names, as under another proxy, such a rule limits nothing: drop "route" for one counter)`)
	}
	if len(keys) == 0 {
		keys = []string{"all"}
	}
	if r.shadow {
		rule.Mode = "shadow"
	}
	switch r.headers {
	case "Off":
		g.headers.off = true
	default:
		g.headers.on = true
	}
	if r.requests == 0 {
		// Envoy Gateway's limit of 0 refuses every request it counts.
		if err := addConds(match, r.present, r.v.path); err != nil {
			return rule, err
		}
		rule.Action, rule.DenyStatus, rule.Match = policy.ActionDeny, 429, nilIfEmpty(match)
		g.note("%s: requests: 0 refuses every request it applies to: an \"action\": \"deny\" rule answering 429", r.v.path)
		return rule, nil
	}
	rule.Match, rule.LimitKeys = nilIfEmpty(match), keys
	if err := g.algorithm(r, &rule); err != nil {
		return rule, err
	}
	if r.global && g.opt.Scope == "global" {
		rule.Scope = "global"
		g.global = true
	}
	g.anyGlobal = g.anyGlobal || r.global
	g.anyLocal = g.anyLocal || !r.global
	return rule, nil
}

func nilIfEmpty(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	return m
}

// egCost is what a request costs, in an algorithm_config.
type egCost struct {
	CostSource string `json:"cost_source,omitempty"`
	FixedCost  int64  `json:"fixed_cost,omitempty"`
}

type egBucket struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           int64   `json:"burst"`
	egCost
}

type egWindow struct {
	Limit         int64 `json:"limit"`
	WindowSeconds int64 `json:"window_seconds"`
	egCost
}

type egQuota struct {
	Limit  int64  `json:"limit"`
	Period string `json:"period"`
	egCost
}

// algorithm sets a rule's limit: a local rule's token bucket of requests,
// refilled over the unit; a global rule's window of the unit; a month or
// a year, a calendar quota; a limit charged from the answer, a bucket
// (second, minute) or a quota (hour and longer).
func (g *egConverter) algorithm(r *egRule, rule *outRule) error {
	cost := egCost{CostSource: r.costSource, FixedCost: r.fixedCost}
	if r.fixedCost > r.requests {
		return r.v.errorf("a request costs %d, more than limit.requests %d: every request would be refused; write a deny rule for that", r.fixedCost, r.requests)
	}
	secs := egUnitSeconds[r.unit]
	fromAnswer := strings.HasPrefix(r.costSource, "response_")
	switch {
	case r.unit == "month" || r.unit == "year" || fromAnswer && secs >= answerQuotaFromSeconds:
		rule.Algorithm, rule.AlgorithmConfig = "quota", egQuota{Limit: r.requests, Period: r.unit, egCost: cost}
		if r.unit == "month" || r.unit == "year" {
			g.noteOnce(fmt.Sprintf("a limit per %s is a quota of the calendar %s (UTC); Envoy Gateway's %s is %d days from the Unix epoch", r.unit, r.unit, r.unit, secs/86400))
		}
		if r.unit == "week" {
			g.noteOnce(noteAnswerWeek)
		}
	case fromAnswer:
		rule.Algorithm, rule.AlgorithmConfig = policy.AlgorithmTokenBucket, egBucket{TokensPerSecond: perSecond(r.requests, int(secs)), Burst: r.requests, egCost: cost}
		g.noteOnce(noteAnswerBucket)
	case r.global:
		rule.Algorithm, rule.AlgorithmConfig = policy.AlgorithmFixedWindow, egWindow{Limit: r.requests, WindowSeconds: secs, egCost: cost}
	default:
		rule.Algorithm, rule.AlgorithmConfig = policy.AlgorithmTokenBucket, egBucket{TokensPerSecond: perSecond(r.requests, int(secs)), Burst: r.requests, egCost: cost}
	}
	return nil
}

// exclusions start a Gateway's policy with an unlimited rule for each
// route whose own BackendTrafficPolicy replaces the Gateway's in Envoy
// Gateway (one without mergeType).
func (g *egConverter) exclusions(b *egBTP, scopes []egScope, p *outPolicy) error {
	gws := map[string]bool{}
	for _, s := range scopes {
		if s.gateway != "" {
			gws[s.gateway] = true
		}
	}
	if len(gws) == 0 {
		return nil
	}
	seen := map[string]bool{}
	for _, o := range g.btps {
		if o == b || o.merge {
			continue
		}
		for _, s := range g.resolve(o, true) {
			if s.gateway != "" || seen[s.key+s.route] || !g.attached(s, gws) {
				continue
			}
			seen[s.key+s.route] = true
			p.Rules = append(p.Rules, outRule{Name: g.rules.take(p.Name + "-" + s.label + "-own-policy"),
				Action: policy.ActionUnlimited, Match: nilIfEmpty(maps.Clone(s.cond))})
			g.noteOnce(fmt.Sprintf("%s has a BackendTrafficPolicy of its own (%s), which replaces its Gateway's for its requests in Envoy Gateway: the Gateway's policies stop them first with an unlimited rule (%s)", s.shown, o.shown(), condText(s)))
		}
	}
	return nil
}

// condText says how a scope's requests are told, for a note.
func condText(s egScope) string {
	if s.route != "" {
		return "by the names of its Envoy routes, " + s.route + "..."
	}
	return "by its hostnames and paths"
}

// attached tells whether a route scope may be of one of the Gateways:
// a route given says so by its parentRefs; one not given may be.
func (g *egConverter) attached(s egScope, gws map[string]bool) bool {
	r := g.routes[s.key]
	if r == nil {
		return true
	}
	for _, p := range r.parents {
		if gws[p.ns+"/"+p.name] {
			return true
		}
	}
	return false
}

type egOutput struct {
	Fleet         *outFleet   `json:"fleet,omitempty"`
	LegacyHeaders string      `json:"legacy_headers,omitempty"`
	Policies      []outPolicy `json:"policies"`
}

// result writes the policy, with the notes on what differs.
func (g *egConverter) result() (Result, error) {
	out := egOutput{Policies: g.out}
	if g.headers.on {
		out.LegacyHeaders = "x-ratelimit"
		if g.headers.off {
			g.noteOnce(`xRateLimitHeaders: Off on some rules: Sluice sends its X-RateLimit- fields ("legacy_headers": "x-ratelimit") for every rule, or for none`)
		}
	}
	if g.global {
		out.Fleet = &outFleet{Cluster: g.opt.FleetCluster}
		g.noteOnce(fmt.Sprintf(`the rules of rateLimit.global are "scope": "global", counted across every Envoy as in Envoy Gateway's rate limit service: run the admin as the rate limit service (docs/fleet.md), with that Redis as its -redis-addrs, and give Envoy the cluster %q`, g.opt.FleetCluster))
	} else if g.opt.Scope == "local" {
		g.noteOnce("the rules of rateLimit.global are local: each Envoy process counts on its own, where Envoy Gateway counted across every Envoy")
	}
	if g.usesAddr {
		g.noteOnce("sourceCIDR is Sluice's ip:address: set xff_trusted_hops to the numTrustedHops of the ClientTrafficPolicy's clientIPDetection so both read the same client address")
	}
	if g.anyGlobal {
		g.noteOnce("a request one policy rejects takes nothing from the others; Envoy Gateway's rate limit service counts every global rule a request matches, rejected or not")
	}
	if g.anyLocal {
		g.noteOnce("local rules are token buckets per Envoy process, as Envoy's local_ratelimit keeps them, refilled continuously; Envoy takes a token from each rule a request matches until one refuses, Sluice none when one policy rejects")
	}
	g.noteOnce("rejections are 429 with Sluice's JSON body (Envoy answers local_rate_limited, or nothing from the rate limit service): set reject_body where clients read it")
	return g.policyOf(out)
}
