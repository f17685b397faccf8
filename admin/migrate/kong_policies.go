package migrate

// The converter of Kong's configurations (kong.go): building the policies.

import (
	"fmt"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// targets are the condition sets of a plugin's rules: its route's, the
// union of its service's routes, or none (every request); a consumer's
// plugin also requires one of the consumer's keys.
func (k *kongConv) targets(rl *kongRL) ([]kongTarget, error) {
	var ts []kongTarget
	switch {
	case rl.lim.limitBy == "route" && rl.cons != nil:
		return nil, fmt.Errorf("%s: identifier route on a consumer's plugin is not converted; write the rule by hand", rl.path)
	case rl.lim.limitBy == "route" && rl.rt == nil:
		// A counter per route: the routes of the plugin's service, or
		// every route. Kong proxies no request that matches none.
		routes := k.allRoutes()
		if rl.svc != nil {
			routes = rl.svc.routes
		}
		for _, rt := range routes {
			rts, err := k.routeTargets([]*kongRt{rt})
			if err != nil {
				return nil, fmt.Errorf("%s (identifier route): %w", rl.path, err)
			}
			for i := range rts {
				rts[i].label = rt.name
			}
			ts = append(ts, rts...)
		}
		if len(ts) == 0 {
			k.note("%s: identifier route and no route in the file, so its plugin limits nothing; skipped", rl.path)
			return nil, nil
		}
	case rl.cons != nil && rl.rt != nil && !k.authenticated(rl.rt):
		k.note("%s: key-auth does not run on route %s, so Kong never knows consumer %s there and the plugin never applies; skipped", rl.path, rl.rt.name, rl.cons.name)
		return nil, nil
	case rl.cons != nil && rl.rt == nil:
		return k.consumerTargets(rl)
	case rl.rt != nil:
		if rl.rt.err != nil {
			return nil, fmt.Errorf("%s: %w", rl.path, rl.rt.err)
		}
		k.noteLost(rl.rt)
		ts = []kongTarget{{conds: rl.rt.conds, prio: rl.rt.prio}}
	case rl.svc != nil:
		var err error
		if ts, err = k.serviceTargets(rl.svc); err != nil {
			return nil, fmt.Errorf("%s: %w", rl.path, err)
		}
		if len(ts) == 0 {
			k.note("%s: service %s has no routes in the file, so its plugin limits nothing; skipped", rl.path, rl.svc.name)
			return nil, nil
		}
		if len(ts) > 1 {
			k.note("%s: the routes of service %s differ in more than one of paths, hosts, methods and headers, so its limits are %d rules, each counting its own routes' requests where Kong counts the service's together", rl.path, rl.svc.name, len(ts))
		}
	case rl.lim.limitBy == "service":
		for _, s := range k.services {
			st, err := k.serviceTargets(s)
			if err != nil {
				return nil, fmt.Errorf("%s (limit_by service): %w", rl.path, err)
			}
			for i := range st {
				st[i].label = s.name
			}
			ts = append(ts, st...)
		}
		// A request of no service's route: Kong counts it per address.
		ts = append(ts, kongTarget{conds: kongConds{}, byAddress: true})
	default:
		ts = []kongTarget{{conds: kongConds{}}}
	}
	if rl.cons == nil {
		k.checkAuthenticated(rl)
		return ts, nil
	}
	return k.withKeys(rl, ts)
}

// withKeys adds to a consumer's plugin's targets the condition that the
// consumer key is one of the consumer's keys.
func (k *kongConv) withKeys(rl *kongRL, ts []kongTarget) ([]kongTarget, error) {
	keys := make([]kongAlt, len(rl.cons.keys))
	for i, key := range rl.cons.keys {
		keys[i] = kongAlt{kongExact, key}
	}
	for i := range ts {
		if _, clash := ts[i].conds[k.consumerKey]; clash {
			return nil, fmt.Errorf("%s: its route requires a value of %s, which is also the consumer key; write the rule by hand", rl.path, k.consumerKey)
		}
		ts[i].conds = ts[i].conds.clone()
		ts[i].conds[k.consumerKey] = keys
	}
	return ts, nil
}

// consumerTargets are the targets of a consumer's plugin with no route:
// the routes key-auth runs on (of its service, for consumer and service),
// where Kong knows the consumer. Its counter is the consumer's across
// them, so routes that do not merge into one condition set are written
// as one broader set.
func (k *kongConv) consumerTargets(rl *kongRL) ([]kongTarget, error) {
	if rl.svc == nil && k.authEverywhere() {
		return k.withKeys(rl, []kongTarget{{conds: kongConds{}}})
	}
	var routes []*kongRt
	for _, s := range k.services {
		if rl.svc == nil || s == rl.svc {
			routes = append(routes, s.routes...)
		}
	}
	if rl.svc == nil {
		routes = append(routes, k.routes...)
	}
	routes = slices.DeleteFunc(routes, func(rt *kongRt) bool { return !k.authenticated(rt) })
	ts, err := k.routeTargets(routes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rl.path, err)
	}
	switch {
	case len(ts) == 0:
		k.note("%s: key-auth runs on none of the routes of consumer %s's plugin, so Kong never knows the consumer there; skipped", rl.path, rl.cons.name)
		return nil, nil
	case len(ts) > 1:
		ts = []kongTarget{kongBroaden(ts)}
		k.note("%s: the routes key-auth runs on differ in more than one of paths, hosts, methods and headers, so consumer %s's rules match each of their paths, hosts, methods and headers in any combination", rl.path, rl.cons.name)
	}
	return k.withKeys(rl, ts)
}

// kongBroaden is one condition set holding every set's requests: per
// source, every set's alternatives; none when a set has none.
func kongBroaden(ts []kongTarget) kongTarget {
	out := kongTarget{conds: ts[0].conds.clone()}
	for _, t := range ts {
		out.prio = max(out.prio, t.prio)
		for s, mine := range out.conds {
			theirs, ok := t.conds[s]
			if !ok {
				delete(out.conds, s)
				continue
			}
			for _, a := range theirs {
				mine = kongAddAlt(mine, a)
			}
			out.conds[s] = mine
		}
	}
	return out
}

// checkAuthenticated says where a plugin limiting by consumer meets
// requests whose consumer Kong does not know: Kong counts them per client
// address, as the rules do only for requests without the key.
func (k *kongConv) checkAuthenticated(rl *kongRL) {
	if !kongByConsumer(rl) || k.authEverywhere() {
		return
	}
	var routes []*kongRt
	switch {
	case rl.rt != nil:
		routes = []*kongRt{rl.rt}
	case rl.svc != nil:
		routes = rl.svc.routes
	default:
		k.note("%s: key-auth does not run on every route; where it does not, Kong counts limit_by %s per client address, the rules per key when a request has one", rl.path, rl.lim.limitBy)
		return
	}
	var without []string
	for _, rt := range routes {
		if !k.authenticated(rt) {
			without = append(without, rt.name)
		}
	}
	switch {
	case len(without) == len(routes):
		rl.byAddress = true
		k.note("%s: key-auth does not run on its routes, so Kong counts limit_by %s per client address, as its rules do", rl.path, rl.lim.limitBy)
	case len(without) > 0:
		k.note("%s: key-auth does not run on route %s; there Kong counts limit_by %s per client address, the rules per key when a request has one", rl.path, strings.Join(without, ", "), rl.lim.limitBy)
	}
}

func (k *kongConv) serviceTargets(s *kongSvc) ([]kongTarget, error) {
	return k.routeTargets(s.routes)
}

// routeTargets are the merged condition sets of routes.
func (k *kongConv) routeTargets(routes []*kongRt) ([]kongTarget, error) {
	ts := make([]kongTarget, 0, len(routes))
	for _, rt := range routes {
		if rt.err != nil {
			return nil, fmt.Errorf("route %s: %w", rt.name, rt.err)
		}
		k.noteLost(rt)
		ts = append(ts, kongTarget{conds: rt.conds, prio: rt.prio})
	}
	return kongMerge(ts), nil
}

func (k *kongConv) noteLost(rt *kongRt) {
	if rt.lost != "" {
		k.noteOnce(fmt.Sprintf("%s: route %s's %s are not converted: its rules match requests whatever their %s", rt.path, rt.name, rt.lost, rt.lost))
	}
}

// kongRule is a rule with its own rejection body, and the names Kong
// sends its numbers under.
type kongRule struct {
	outRule
	RejectBody   string            `json:"reject_body,omitempty"`
	LimitHeaders map[string]string `json:"limit_headers,omitempty"`
}

// kongPeriodHeaders are the fields rate-limiting sends for one period on
// every response: X-RateLimit-Limit-Minute and X-RateLimit-Remaining-Minute
// (Kong capitalizes the period; field names are case-insensitive).
func kongPeriodHeaders(period string) map[string]string {
	p := strings.ToUpper(period[:1]) + period[1:]
	return map[string]string{"limit": "X-RateLimit-Limit-" + p, "remaining": "X-RateLimit-Remaining-" + p}
}

type kongPolicy struct {
	Name  string     `json:"name"`
	Rules []kongRule `json:"rules"`
}

type kongQuota struct {
	Limit  int    `json:"limit"`
	Period string `json:"period"`
}

// buildDeclarative makes one policy per period, the rules of each level
// of Kong's precedence in turn.
func (k *kongConv) buildDeclarative() error {
	for _, rl := range k.limits {
		var err error
		if rl.targets, err = k.targets(rl); err != nil {
			return err
		}
	}
	routed := false
	for _, rl := range k.limits {
		routed = routed || rl.rt != nil || rl.svc != nil
	}
	for _, period := range k.periods() {
		p, err := k.periodPolicy(period)
		if err != nil {
			return err
		}
		if len(p.Rules) > 0 {
			p.Name = k.pols.take(period)
			k.out = append(k.out, p)
		}
	}
	if routed {
		k.noteOnce("Kong sends a request to one route and applies that route's plugin; the rules match what the routes match (host as written, port included; path; method; headers), most specific route first, so a request Kong would send to another route that overlaps (a longer path prefix) is limited by these rules too")
	}
	return nil
}

// periodPolicy is the policy of one period: per level, most specific
// first, each plugin's rules, a plugin without this period an unlimited
// rule (Kong applies only the most specific plugin, so none other limits
// its requests in this period either).
func (k *kongConv) periodPolicy(period string) (kongPolicy, error) {
	var p kongPolicy
	g := k.overrideTarget(period)
	var overrides []outOverride
	seen := map[string]bool{}
	main := -1
	for level := 1; level <= 8; level++ {
		for _, lt := range k.levelTargets(level, period) {
			if g != nil && level == 5 && k.overridable(lt.rl, g, period) {
				overrides = k.consumerOverrides(overrides, seen, lt.rl, g, period)
				continue
			}
			rules, err := k.targetRules(lt.rl, lt.t, period)
			if err != nil {
				return p, err
			}
			if lt.rl == g {
				main = len(p.Rules)
			}
			p.Rules = append(p.Rules, rules...)
		}
	}
	if len(overrides) > 0 && main >= 0 {
		p.Rules[main].Overrides = overrides
		k.noteOnce("consumers' own limits are overrides of the global rule, keyed by their key-auth keys: the policy holds the keys in clear (the admin masks key values where it shows them), so keep it as secret as Kong's configuration")
	}
	for len(p.Rules) > 0 && p.Rules[len(p.Rules)-1].Action == policy.ActionUnlimited {
		p.Rules = p.Rules[:len(p.Rules)-1] // nothing after it to stop
	}
	if slices.ContainsFunc(p.Rules, func(r kongRule) bool { return r.Action == policy.ActionUnlimited }) {
		k.noteOnce(`an "unlimited" rule stands for a plugin without that period: Kong applies only the most specific plugin to a request, so its requests have no such limit`)
	}
	return p, nil
}

type kongLevelTarget struct {
	rl *kongRL
	t  kongTarget
}

// levelTargets are the targets of one level's plugins of period's kind
// (inPeriod), the routes Kong tries first before the others.
func (k *kongConv) levelTargets(level int, period string) []kongLevelTarget {
	var out []kongLevelTarget
	for _, rl := range k.limits {
		if rl.level == level && inPeriod(rl, period) {
			for _, t := range rl.targets {
				out = append(out, kongLevelTarget{rl, t})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b kongLevelTarget) int {
		switch {
		case a.t.prio > b.t.prio:
			return -1
		case a.t.prio < b.t.prio:
			return 1
		}
		return 0
	})
	return out
}

// overrideTarget is the global plugin whose rule of this period can take
// consumers' limits as overrides: keyed by consumer, with nothing between
// the consumers' level and its own (no route or service plugin), and
// Kong knowing consumers on every route (an override holds on all).
func (k *kongConv) overrideTarget(period string) *kongRL {
	var g *kongRL
	for _, rl := range k.limits {
		if !inPeriod(rl, period) {
			continue
		}
		if rl.level == 6 || rl.level == 7 {
			return nil
		}
		if rl.level == 8 {
			g = rl
		}
	}
	if g == nil || !kongByConsumer(g) || len(g.targets) != 1 || !k.authEverywhere() {
		return nil
	}
	if _, ok := g.lim.limits[period]; !ok {
		return nil
	}
	return g
}

// overridable: a consumer's plugin is an override of the global rule
// when it has the period, keys by consumer like it, counts where it does
// and answers the same.
func (k *kongConv) overridable(rl, g *kongRL, period string) bool {
	_, ok := rl.lim.limits[period]
	return ok && kongByConsumer(rl) && rl.lim.global() == g.lim.global() && rl.lim.message == g.lim.message &&
		rl.lim.throttle == nil && g.lim.throttle == nil // an override sets a window's limit, not a throttled bucket's
}

func kongByConsumer(rl *kongRL) bool {
	return rl.lim.limitBy == "consumer" || rl.lim.limitBy == "credential"
}

func (k *kongConv) consumerOverrides(out []outOverride, seen map[string]bool, rl, g *kongRL, period string) []outOverride {
	n := rl.lim.limits[period]
	if n == g.lim.limits[period] {
		return out
	}
	for _, key := range rl.cons.keys {
		if !seen[key] {
			seen[key] = true
			out = append(out, outOverride{Key: escapeKey(key), AlgorithmConfig: windowConfig{Limit: n}})
		}
	}
	return out
}

// targetRules are a plugin's rules for one target and period: the rule
// keyed by its limit_by, then one keyed by the client address, Kong's
// identifier when the entity is missing (handler.lua, get_identifier).
func (k *kongConv) targetRules(rl *kongRL, t kongTarget, period string) ([]kongRule, error) {
	base := rl.label
	if t.label != "" {
		base += "-" + t.label
	}
	match, err := t.conds.json()
	if err != nil {
		return nil, fmt.Errorf("%s: %w; write the rule by hand", rl.path, err)
	}
	n, ok := rl.lim.limits[period]
	if !ok {
		return []kongRule{{outRule: outRule{Name: k.rules.take(base + "-" + period), Action: policy.ActionUnlimited, Match: match}}}, nil
	}
	limit := func(suffix string, keys []string, match map[string]any) kongRule {
		r := kongRule{outRule: outRule{Name: k.rules.take(base + suffix + "-" + period), Match: match, LimitKeys: keys}}
		if w, ok := rl.lim.windows[period]; ok && rl.lim.throttle != nil {
			r.Algorithm, r.AlgorithmConfig = policy.AlgorithmTokenBucket, &kongThrottledBucket{
				TokensPerSecond: perSecond(int64(n), w), Burst: n, MaxDelayMS: rl.lim.throttle.maxDelayMS(n, w)}
		} else if w, ok := rl.lim.windows[period]; ok && rl.lim.sliding {
			r.Algorithm, r.AlgorithmConfig = policy.AlgorithmSlidingWindow, &windowConfig{Limit: n, WindowSeconds: w}
		} else if w, ok := rl.lim.windows[period]; ok {
			r.Algorithm, r.AlgorithmConfig = policy.AlgorithmFixedWindow, &windowConfig{Limit: n, WindowSeconds: w}
		} else if w, ok := kongWindow[period]; ok {
			r.Algorithm, r.AlgorithmConfig = policy.AlgorithmFixedWindow, &windowConfig{Limit: n, WindowSeconds: w}
		} else {
			r.Algorithm, r.AlgorithmConfig = policy.AlgorithmQuota, &kongQuota{Limit: n, Period: period}
		}
		if rl.lim.global() {
			r.Scope = "global"
		}
		if rl.lim.message != k.body {
			r.RejectBody = kongBody(rl.lim.message)
		}
		if rl.lim.code != k.status {
			r.RejectStatus = rl.lim.code
		}
		if !rl.lim.advanced && !rl.lim.hide {
			r.LimitHeaders = kongPeriodHeaders(period)
		}
		return r
	}
	byAddress := func() kongRule { return limit("-address", []string{"ip:address"}, match) }
	switch {
	case t.byAddress:
		return []kongRule{byAddress()}, nil
	case rl.lim.limitBy == "ip" || rl.byAddress:
		return []kongRule{limit("", []string{"ip:address"}, match)}, nil
	case rl.lim.limitBy == "service", rl.lim.limitBy == "route":
		return []kongRule{limit("", []string{"all"}, match)}, nil // one counter for the service's (the route's) requests
	case rl.lim.limitBy == "header":
		r := limit("", []string{"header:" + rl.lim.header}, match)
		return []kongRule{r, byAddress()}, nil
	case rl.lim.limitBy == "path":
		pm, ok := kongPathMatch(t.conds, rl.lim.path)
		if !ok {
			k.note("%s: limit_by path %s is not a path of its routes, so only the per-address rule is written", rl.path, rl.lim.path)
			return []kongRule{byAddress()}, nil
		}
		r := limit("", []string{"path"}, pm)
		return []kongRule{r, byAddress()}, nil
	}
	if rl.lim.limitBy == "consumer" && slices.ContainsFunc(k.consumers, func(c *kongCons) bool { return len(c.keys) > 1 }) {
		k.noteOnce("limit_by consumer counts each key apart: a consumer with several keys gets the limit for each, where Kong counts the consumer's requests together")
	}
	r := limit("", []string{k.consumerKey}, match)
	if rl.cons != nil {
		return []kongRule{r}, nil // its requests always have the key
	}
	return []kongRule{r, byAddress()}, nil
}

// kongPathMatch is the match of a limit_by path rule: Kong counts the
// requests for exactly that path; none when the routes never send it.
func kongPathMatch(c kongConds, path string) (map[string]any, bool) {
	if alts, ok := c["path"]; ok && !kongAdmits(alts, path) {
		return nil, false
	}
	c = c.clone()
	c["path"] = []kongAlt{{kongExact, path}}
	m, err := c.json()
	return m, err == nil
}

// kongThrottledBucket is a throttled rate-limiting-advanced window: its
// limit per window as a bucket that holds requests over it.
type kongThrottledBucket struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           int     `json:"burst"`
	MaxDelayMS      int     `json:"max_delay_ms"`
}

// allRoutes are the top-level routes, then each service's, in the file's
// order.
func (k *kongConv) allRoutes() []*kongRt {
	out := slices.Clone(k.routes)
	for _, s := range k.services {
		out = append(out, s.routes...)
	}
	return out
}
