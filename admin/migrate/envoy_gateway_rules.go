package migrate

// The converter of Envoy Gateway's rate limits (envoy_gateway.go): a
// BackendTrafficPolicy's targets and its rateLimit's rules.

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"regexp"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

// egBTP is a BackendTrafficPolicy: its targets, and its rules when it
// has a rateLimit. One without is kept too: on a route it replaces the
// Gateway's policy, rate limits included.
type egBTP struct {
	egObject
	targets   []egTargetRef
	selectors []egTargetSelector
	merge     bool // mergeType: merged into the Gateway's policy instead of replacing it
	limits    bool // it has a rateLimit
	local     []*egRule
	global    []*egRule
}

// egTargetRef is a targetRef: a Gateway (or one of its listeners), an
// HTTPRoute or a GRPCRoute (or one of its rules), in the policy's
// namespace.
type egTargetRef struct {
	kind, name, section string
	v                   yval
}

// egTargetSelector is a targetSelector: the objects of a kind with
// labels.
type egTargetSelector struct {
	kind   string
	labels map[string]string
	v      yval
}

// egRule is one rate limit rule, read.
type egRule struct {
	v        yval
	index    int
	global   bool
	selected bool           // it has clientSelectors
	match    map[string]any // the selectors' conditions
	keys     []string       // the Distinct sources: a counter per value
	present  map[string]any // the Distinct sources present: when its descriptor exists
	never    bool           // no request can match it, or it counts nothing
	requests int64
	unit     string // second, minute, hour, day, week, month, year
	shadow   bool
	shared   bool
	headers  string // xRateLimitHeaders: "", "Off" or "DraftVersion03"
	// What a request costs: fixedCost at the request (0: the default, 1),
	// or costSource (request metadata, or the answer's usage).
	fixedCost  int64
	costSource string
}

// egUnitSeconds are Envoy Gateway's units (its month 30 days, its year
// 365).
var egUnitSeconds = map[string]int64{"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800,
	"month": 2592000, "year": 31536000}

var egUnits = []string{"Second", "Minute", "Hour", "Day", "Week", "Month", "Year"}

// aiGatewayMetadata is the dynamic metadata namespace Envoy AI Gateway
// writes a call's token counts to (AIGatewayRoute llmRequestCosts), and
// aiGatewayUsage the place of each count in the OpenAI-style answer it
// sends the client, which Sluice reads itself.
const aiGatewayMetadata = "io.envoy.ai_gateway"

var aiGatewayUsage = map[string]string{
	"llm_input_token":        "usage.prompt_tokens",
	"llm_output_token":       "usage.completion_tokens",
	"llm_total_token":        "usage.total_tokens",
	"llm_cached_input_token": "usage.prompt_tokens_details.cached_tokens",
}

// backendTrafficPolicy reads a BackendTrafficPolicy's targets and rate
// limits; its other fields are not read.
func (g *egConverter) backendTrafficPolicy(o egObject, spec yval, hasSpec bool) error {
	if !hasSpec {
		return o.v.errorf("BackendTrafficPolicy %s/%s without a spec", o.ns, o.name)
	}
	b := &egBTP{egObject: o}
	if err := g.targets(b, spec); err != nil {
		return err
	}
	if mt, ok, err := g.read.lookup(spec, "mergeType"); err != nil {
		return err
	} else if ok {
		b.merge = true
		if _, err := g.read.text(mt); err != nil {
			return err
		}
	}
	rl, ok, err := g.read.lookup(spec, "rateLimit")
	if err != nil {
		return err
	}
	if ok {
		b.limits = true
		if err := g.rateLimit(b, rl); err != nil {
			return err
		}
	}
	g.btps = append(g.btps, b)
	return nil
}

// targets reads targetRef, targetRefs and targetSelectors.
func (g *egConverter) targets(b *egBTP, spec yval) error {
	var refs []yval
	if one, ok, err := g.read.lookup(spec, "targetRef"); err != nil {
		return err
	} else if ok {
		refs = append(refs, one)
	}
	if many, ok, err := g.read.lookup(spec, "targetRefs"); err != nil {
		return err
	} else if ok {
		list, err := g.read.list(many)
		if err != nil {
			return err
		}
		refs = append(refs, list...)
	}
	for _, r := range refs {
		f, err := g.read.mapping(r, []string{"group", "kind", "name", "sectionName"})
		if err != nil {
			return err
		}
		var t egTargetRef
		t.v = r
		for _, fd := range []struct {
			k   string
			dst *string
		}{{"kind", &t.kind}, {"name", &t.name}, {"sectionName", &t.section}} {
			if fv, ok := f[fd.k]; ok {
				if *fd.dst, err = g.read.text(fv); err != nil {
					return err
				}
			}
		}
		if t.kind == "" || t.name == "" {
			return r.errorf("a target needs its kind and name")
		}
		b.targets = append(b.targets, t)
	}
	if sels, ok, err := g.read.lookup(spec, "targetSelectors"); err != nil {
		return err
	} else if ok {
		list, err := g.read.list(sels)
		if err != nil {
			return err
		}
		for _, s := range list {
			f, err := g.read.mapping(s, []string{"group", "kind", "matchLabels", "matchExpressions"})
			if err != nil {
				return err
			}
			sel := egTargetSelector{v: s, labels: map[string]string{}}
			if kv, ok := f["kind"]; ok {
				if sel.kind, err = g.read.text(kv); err != nil {
					return err
				}
			}
			if _, ok := f["matchExpressions"]; ok {
				return s.errorf("matchExpressions: not converted; list the targets in targetRefs, or select them by matchLabels")
			}
			if ml, ok := f["matchLabels"]; ok {
				labels, err := g.read.mapping(ml, nil)
				if err != nil {
					return err
				}
				for _, k := range slices.Sorted(maps.Keys(labels)) {
					if sel.labels[k], err = g.read.text(labels[k]); err != nil {
						return err
					}
				}
			}
			b.selectors = append(b.selectors, sel)
		}
	}
	if len(b.targets)+len(b.selectors) == 0 {
		return spec.errorf("no targetRef, targetRefs or targetSelectors: Envoy Gateway applies the policy to nothing")
	}
	return nil
}

// rateLimit reads the rules of rateLimit.local and rateLimit.global (the
// older type field names the one Envoy Gateway reads).
func (g *egConverter) rateLimit(b *egBTP, v yval) error {
	f, err := g.read.mapping(v, []string{"type", "global", "local"})
	if err != nil {
		return err
	}
	typ := ""
	if tv, ok := f["type"]; ok && !tv.isNull() {
		if typ, err = g.read.text(tv); err != nil {
			return err
		}
		if typ != "Global" && typ != "Local" {
			return tv.errorf("%q: want Global or Local", typ)
		}
	}
	for _, blk := range []struct {
		name   string
		global bool
	}{{"local", false}, {"global", true}} {
		bv, ok := f[blk.name]
		if !ok || bv.isNull() {
			if strings.EqualFold(typ, blk.name) {
				return v.errorf("type %s without %s: Envoy Gateway refuses it", typ, blk.name)
			}
			continue
		}
		if typ != "" && !strings.EqualFold(typ, blk.name) {
			g.note("%s: type %s: Envoy Gateway reads rateLimit.%s alone, and so does the conversion; %s is left out", v.path, typ, strings.ToLower(typ), blk.name)
			continue
		}
		bf, err := g.read.mapping(bv, []string{"rules"})
		if err != nil {
			return err
		}
		var rules []yval
		if rv, ok := bf["rules"]; ok {
			if rules, err = g.read.list(rv); err != nil {
				return err
			}
		}
		if len(rules) == 0 {
			if blk.global {
				return bv.errorf("rules: missing; a global rate limit needs at least one rule")
			}
			continue
		}
		if len(rules) > 256 {
			return bv.errorf("%d rules, more than the 256 Envoy Gateway takes", len(rules))
		}
		defaults := 0
		for i, rv := range rules {
			r, err := g.rule(rv, i, blk.global)
			if err != nil {
				return err
			}
			if !blk.global && !r.selected {
				if defaults++; defaults > 1 {
					return rv.errorf("a second rule without clientSelectors: Envoy Gateway refuses a local rate limit with more than one")
				}
			}
			if blk.global {
				b.global = append(b.global, r)
			} else {
				b.local = append(b.local, r)
			}
		}
	}
	return nil
}

var egRuleFields = []string{"clientSelectors", "limit", "cost", "shared", "shadowMode", "xRateLimitHeaders"}

// rule reads one rule.
func (g *egConverter) rule(v yval, index int, global bool) (*egRule, error) {
	f, err := g.read.mapping(v, egRuleFields)
	if err != nil {
		return nil, err
	}
	r := &egRule{v: v, index: index, global: global, match: map[string]any{}, present: map[string]any{}}
	lv, ok := f["limit"]
	if !ok {
		return nil, v.errorf("limit: missing")
	}
	if err := g.limit(r, lv); err != nil {
		return nil, err
	}
	for _, k := range []string{"shared", "shadowMode"} {
		if fv, ok := f[k]; ok && !fv.isNull() {
			b, err := g.read.flag(fv)
			if err != nil {
				return nil, err
			}
			if k == "shared" {
				r.shared = b
			} else {
				r.shadow = b
			}
		}
	}
	if hv, ok := f["xRateLimitHeaders"]; ok && !hv.isNull() {
		if r.headers, err = g.read.text(hv); err != nil {
			return nil, err
		}
		if r.headers != "Off" && r.headers != "DraftVersion03" {
			return nil, hv.errorf("%q: want Off or DraftVersion03", r.headers)
		}
	}
	if sv, ok := f["clientSelectors"]; ok {
		sels, err := g.read.list(sv)
		if err != nil {
			return nil, err
		}
		for _, s := range sels {
			if err := g.selector(r, s); err != nil {
				return nil, err
			}
		}
		r.selected = len(sels) > 0
	}
	if cv, ok := f["cost"]; ok && !cv.isNull() {
		if err := g.cost(r, cv); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// limit reads requests and unit; fromMetadata is noted: the rule keeps
// its requests, Envoy Gateway's default when the metadata is absent.
func (g *egConverter) limit(r *egRule, v yval) error {
	f, err := g.read.mapping(v, []string{"requests", "unit", "fromMetadata"})
	if err != nil {
		return err
	}
	rv, ok := f["requests"]
	if !ok {
		return v.errorf("requests: missing")
	}
	if r.requests, err = g.read.whole(rv); err != nil {
		return err
	}
	if r.requests < 0 || r.requests > math.MaxUint32 {
		return rv.errorf("%d: want a number of requests from 0 to 4294967295", r.requests)
	}
	uv, ok := f["unit"]
	if !ok {
		return v.errorf("unit: missing")
	}
	unit, err := g.read.text(uv)
	if err != nil {
		return err
	}
	if !slices.Contains(egUnits, unit) {
		return uv.errorf("%q: want one of %s", unit, strings.Join(egUnits, ", "))
	}
	r.unit = strings.ToLower(unit)
	if fm, ok := f["fromMetadata"]; ok && !fm.isNull() {
		if !r.global {
			return fm.errorf("fromMetadata is for global rate limits only (Envoy Gateway refuses it here)")
		}
		g.note("%s: the limit read from the request's metadata is not converted: the rule keeps requests: %d per %s, Envoy Gateway's limit when the metadata is absent; a per-identity limit is an override (docs/configuration.md)", fm.path, r.requests, r.unit)
	}
	return nil
}

var egSelectorFields = []string{"headers", "methods", "path", "sourceCIDR", "queryParams"}

// selector reads one clientSelector: each of its conditions must hold, as
// must those of the rule's other selectors.
func (g *egConverter) selector(r *egRule, v yval) error {
	f, err := g.read.mapping(v, egSelectorFields)
	if err != nil {
		return err
	}
	if len(f) == 0 {
		return v.errorf("a selector needs headers, methods, path, sourceCIDR or queryParams")
	}
	for _, k := range egSelectorFields {
		fv, ok := f[k]
		if !ok || fv.isNull() {
			continue
		}
		switch k {
		case "headers", "queryParams":
			items, err := g.read.list(fv)
			if err != nil {
				return err
			}
			for _, it := range items {
				if err := g.valueMatch(r, it, k == "queryParams"); err != nil {
					return err
				}
			}
		case "methods":
			if err := g.methods(r, fv); err != nil {
				return err
			}
		case "path":
			if err := g.pathMatch(r, fv); err != nil {
				return err
			}
		case "sourceCIDR":
			if err := g.sourceCIDR(r, fv); err != nil {
				return err
			}
		}
	}
	return nil
}

// addCond adds a condition to the rule's match; two on one source must
// make one (an exact value, a presence) or the rule is refused.
func (r *egRule) addCond(v yval, src string, cond any) error {
	if err := elAddCond(r.match, src, cond, fmt.Sprintf("%s (line %d)", v.path, v.n.Line)); err != nil {
		if strings.Contains(err.Error(), errElNever.Error()) {
			r.never = true
			return nil
		}
		return err
	}
	return nil
}

// addKey adds a Distinct source: a counter per value.
func (r *egRule) addKey(src string) {
	if !slices.Contains(r.keys, src) {
		r.keys = append(r.keys, src)
	}
	r.present[src] = map[string]any{"present": true}
}

// valueMatch reads a header or query parameter match: Exact (the
// default), RegularExpression or Distinct, inverted or not.
func (g *egConverter) valueMatch(r *egRule, v yval, query bool) error {
	f, err := g.read.mapping(v, []string{"name", "type", "value", "invert"})
	if err != nil {
		return err
	}
	nv, ok := f["name"]
	if !ok {
		return v.errorf("name: missing")
	}
	name, err := g.read.text(nv)
	if err != nil {
		return err
	}
	prefix, what := "header:", "header"
	if query {
		prefix, what = "query:", "query parameter"
	}
	key, ok := policy.ParseSource(prefix + name)
	if !ok {
		return nv.errorf("%q is not a %s name Sluice reads", name, what)
	}
	src := key.String()
	typ := "Exact"
	if tv, ok := f["type"]; ok && !tv.isNull() {
		if typ, err = g.read.text(tv); err != nil {
			return err
		}
	}
	invert, err := g.invert(f)
	if err != nil {
		return err
	}
	val, hasValue := f["value"]
	hasValue = hasValue && !val.isNull()
	switch typ {
	case "Distinct":
		switch {
		case hasValue:
			return val.errorf("a Distinct match takes no value: each value has its own counter")
		case invert:
			return f["invert"].errorf("a Distinct match cannot be inverted (Envoy Gateway refuses it)")
		}
		r.addKey(src)
		return nil
	case "Exact", "RegularExpression":
	default:
		return f["type"].errorf("%q: want Exact, RegularExpression or Distinct", typ)
	}
	if !hasValue {
		return v.errorf("value: missing (an %s match needs one)", typ)
	}
	value, err := g.read.text(val)
	if err != nil {
		return err
	}
	var cond any = value
	if typ == "RegularExpression" {
		if cond, err = fullMatch(val, value); err != nil {
			return err
		}
	}
	if invert {
		cond = map[string]any{"not": cond}
	}
	return r.addCond(v, src, cond)
}

func (g *egConverter) invert(f map[string]yval) (bool, error) {
	iv, ok := f["invert"]
	if !ok || iv.isNull() {
		return false, nil
	}
	return g.read.flag(iv)
}

// fullMatch is the condition of a regular expression Envoy matches
// against the whole value (RE2, as Sluice's).
func fullMatch(v yval, re string) (map[string]any, error) {
	if _, err := regexp.Compile(re); err != nil {
		return nil, v.errorf("%q: %v", re, err)
	}
	full := "^(?:" + re + ")$"
	if len(full) > policy.MaxRegexLen {
		return nil, v.errorf("a regular expression of %d bytes; Sluice takes at most %d", len(re), policy.MaxRegexLen-6)
	}
	return map[string]any{"regex": full}, nil
}

// methods reads the method matches: a request matches when its method
// matches one of them (each inverted or not).
func (g *egConverter) methods(r *egRule, v yval) error {
	items, err := g.read.list(v)
	if err != nil {
		return err
	}
	var in, notIn []string
	for _, it := range items {
		f, err := g.read.mapping(it, []string{"value", "invert"})
		if err != nil {
			return err
		}
		mv, ok := f["value"]
		if !ok {
			return it.errorf("value: missing")
		}
		m, err := g.read.text(mv)
		if err != nil {
			return err
		}
		if m == "" || strings.ToUpper(m) != m || strings.ContainsAny(m, " \t") {
			return mv.errorf("%q: want an HTTP method (GET, POST, ...)", m)
		}
		inv, err := g.invert(f)
		if err != nil {
			return err
		}
		if inv {
			notIn = append(notIn, m)
		} else {
			in = append(in, m)
		}
	}
	slices.Sort(in)
	in = slices.Compact(in)
	slices.Sort(notIn)
	notIn = slices.Compact(notIn)
	// One of: the method is in "in", or differs from one of "notIn".
	var cond any
	switch {
	case len(notIn) > 1: // differs from one of two methods: every method
		return nil
	case len(notIn) == 1 && slices.Contains(in, notIn[0]):
		return nil
	case len(notIn) == 1:
		cond = map[string]any{"not": notIn[0]}
	case len(in) == 1:
		cond = in[0]
	case len(in) > 1:
		cond = map[string]any{"in": in}
	default:
		return nil
	}
	return r.addCond(v, "method", cond)
}

// pathMatch reads the path match: PathPrefix (the default, by whole
// segments), Exact or RegularExpression, inverted or not.
func (g *egConverter) pathMatch(r *egRule, v yval) error {
	f, err := g.read.mapping(v, []string{"type", "value", "invert"})
	if err != nil {
		return err
	}
	typ, value := "PathPrefix", "/"
	if tv, ok := f["type"]; ok && !tv.isNull() {
		if typ, err = g.read.text(tv); err != nil {
			return err
		}
	}
	if pv, ok := f["value"]; ok && !pv.isNull() {
		if value, err = g.read.text(pv); err != nil {
			return err
		}
	}
	inv, err := g.invert(f)
	if err != nil {
		return err
	}
	var cond any
	switch typ {
	case "PathPrefix":
		if !strings.HasPrefix(value, "/") {
			return v.errorf("%q: a path prefix starts with /", value)
		}
		if p := strings.TrimRight(value, "/"); p != "" {
			cond = map[string]any{"regex": "^" + regexpQuote(p) + "(?:/.*)?$"}
		}
	case "Exact":
		if !strings.HasPrefix(value, "/") {
			return v.errorf("%q: a path starts with /", value)
		}
		cond = value
	case "RegularExpression":
		if cond, err = fullMatch(v, value); err != nil {
			return err
		}
	default:
		return f["type"].errorf("%q: want PathPrefix, Exact or RegularExpression", typ)
	}
	g.noteOnce("a path condition compares the path without its query string; Envoy Gateway compares :path, query included (an Exact /a does not match /a?x=1 there)")
	switch {
	case cond == nil && inv: // not under "/": no request
		r.never = true
		return nil
	case cond == nil:
		return nil
	case inv:
		cond = map[string]any{"not": cond}
	}
	return r.addCond(v, "path", cond)
}

// sourceCIDR reads the client address match: Exact (the default: one
// counter for the block) or Distinct (a counter per address).
func (g *egConverter) sourceCIDR(r *egRule, v yval) error {
	f, err := g.read.mapping(v, []string{"type", "value", "invert"})
	if err != nil {
		return err
	}
	typ := "Exact"
	if tv, ok := f["type"]; ok && !tv.isNull() {
		if typ, err = g.read.text(tv); err != nil {
			return err
		}
	}
	if typ != "Exact" && typ != "Distinct" {
		return f["type"].errorf("%q: want Exact or Distinct", typ)
	}
	vv, ok := f["value"]
	if !ok {
		return v.errorf("value: missing (a CIDR block, such as 192.168.0.0/16)")
	}
	s, err := g.read.text(vv)
	if err != nil {
		return err
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return vv.errorf("%q: want a CIDR block, such as 192.168.0.0/16 or 2001:db8::/64", s)
	}
	inv, err := g.invert(f)
	if err != nil {
		return err
	}
	g.usesAddr = true
	var cond any = map[string]any{"cidr": []string{p.Masked().String()}}
	if inv {
		cond = map[string]any{"not": cond}
	}
	if typ == "Distinct" {
		r.addKey("ip:address")
	}
	if p.Bits() == 0 && !inv { // every address: the condition says nothing
		if typ == "Distinct" {
			return nil
		}
		return r.addCond(v, "ip:address", map[string]any{"present": true})
	}
	return r.addCond(v, "ip:address", cond)
}

// cost reads what a request costs: a number or request metadata at the
// request; at the response, Envoy AI Gateway's token counts (read from
// the answer), a number (charged at the request here), or other metadata
// (left out).
func (g *egConverter) cost(r *egRule, v yval) error {
	f, err := g.read.mapping(v, []string{"request", "response"})
	if err != nil {
		return err
	}
	req, err := g.costSpec(f, "request")
	if err != nil {
		return err
	}
	resp, err := g.costSpec(f, "response")
	if err != nil {
		return err
	}
	if resp.set && !r.global {
		return f["response"].errorf("a response cost is for global rate limits only (Envoy Gateway refuses it here)")
	}
	if resp.key != "" {
		if path, ok := aiGatewayUsage[resp.key]; ok && resp.ns == aiGatewayMetadata {
			r.costSource = "response_json:" + path
			g.noteOnce(aiGatewayCostNote(r.costSource)) // envoy_ratelimit_stream_done.go
			switch {
			case req.key != "" || req.number != nil && *req.number > 0:
				g.note("%s: the request's own cost is left out: a rule charged from the answer charges its usage alone", f["request"].path)
			case req.number == nil:
				g.noteOnce("a rule charged from the answer does not count the request itself (Envoy Gateway adds 1 per request unless cost.request.number is 0, as the AI Gateway's examples set it)")
			}
			return nil
		}
		what := "metadata " + resp.ns + ":" + resp.key
		if resp.ns == aiGatewayMetadata {
			what = fmt.Sprintf("the AI Gateway's cost %s (a CEL expression or a name of its own; Sluice reads usage.prompt_tokens, usage.completion_tokens or usage.total_tokens from the answer with response_json:<path>)", resp.key)
		}
		g.note("%s: %s is not converted: the rule counts its requests instead, 1 each; set its cost_source by hand (docs/configuration.md, costs reported by the response)", f["response"].path, what)
	}
	if req.key != "" {
		r.costSource = "metadata:" + req.ns + ":" + req.key
		if resp.number != nil {
			g.note("%s: a response cost is not added to a cost read from the request's metadata; left out", f["response"].path)
		}
		return nil
	}
	// Envoy Gateway's default request cost is 1; so is each request's
	// where the response cost is left out.
	n := int64(1)
	if req.number != nil && resp.key == "" {
		n = *req.number
	}
	if resp.number != nil {
		n += *resp.number
		g.note("%s: a response cost of %d is charged with the request (%d in all): Sluice counts a request when it admits it", f["response"].path, *resp.number, n)
	}
	if n == 0 {
		r.never = true
		g.note("%s: a request cost of 0 counts nothing, and nothing is charged from the response: the rule limits nothing; left out", f["request"].path)
		return nil
	}
	if n != 1 {
		r.fixedCost = n
	}
	return nil
}

// egCostSpec is cost.request or cost.response: a number or a metadata
// namespace and key.
type egCostSpec struct {
	set     bool
	number  *int64
	ns, key string
}

// costSpec reads cost.request or cost.response. A request's metadata key
// is written as Sluice's metadata source writes it.
func (g *egConverter) costSpec(f map[string]yval, which string) (egCostSpec, error) {
	var out egCostSpec
	v, ok := f[which]
	if !ok || v.isNull() {
		return out, nil
	}
	out.set = true
	sf, err := g.read.mapping(v, []string{"from", "number", "metadata"})
	if err != nil {
		return out, err
	}
	fv, ok := sf["from"]
	if !ok {
		return out, v.errorf("from: missing (Number or Metadata)")
	}
	from, err := g.read.text(fv)
	if err != nil {
		return out, err
	}
	_, hasNumber := sf["number"]
	_, hasMeta := sf["metadata"]
	if hasNumber && hasMeta {
		return out, v.errorf("set one of number and metadata")
	}
	switch from {
	case "Number":
		nv, ok := sf["number"]
		if !ok {
			return out, v.errorf("number: missing (from: Number)")
		}
		n, err := g.read.whole(nv)
		if err != nil {
			return out, err
		}
		if n < 0 || n > 1e9 {
			return out, nv.errorf("%d: want a cost from 0 to 1000000000", n)
		}
		out.number = &n
		return out, nil
	case "Metadata":
		mv, ok := sf["metadata"]
		if !ok {
			return out, v.errorf("metadata: missing (from: Metadata)")
		}
		mf, err := g.read.mapping(mv, []string{"namespace", "key"})
		if err != nil {
			return out, err
		}
		for _, fd := range []struct {
			k   string
			dst *string
		}{{"namespace", &out.ns}, {"key", &out.key}} {
			kv, ok := mf[fd.k]
			if !ok {
				return out, mv.errorf("%s: missing", fd.k)
			}
			if *fd.dst, err = g.read.text(kv); err != nil {
				return out, err
			}
		}
		if out.ns == "" || out.key == "" || strings.Contains(out.ns, ":") {
			return out, mv.errorf("want a namespace (without ':') and a key")
		}
		if which == "request" {
			if strings.ContainsAny(out.key, ".:[]") {
				out.key = "[" + out.key + "]"
			}
			if _, ok := policy.ParseSource("metadata:" + out.ns + ":" + out.key); !ok {
				return out, mv.errorf("%s:%s is not a metadata key Sluice reads", out.ns, out.key)
			}
		}
		return out, nil
	}
	return out, fv.errorf("%q: want Number or Metadata", from)
}

var regexpQuote = regexp.QuoteMeta
