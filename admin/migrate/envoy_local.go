package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// LocalOptions are the choices a conversion of Envoy's local_ratelimit
// cannot read from its input.
type LocalOptions struct {
	// Taken are rule and policy names the conversion must not use: those
	// of the policy its output is added to (AddTo).
	Taken []string
}

// Type URLs and names the conversion recognises.
const (
	elLocalRateLimitType = "envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit"
	elFilterConfigType   = "envoy.config.route.v3.FilterConfig"
	elDefaultLocalName   = "envoy.filters.http.local_ratelimit"
	// elLocalRejectBody is the body of local_ratelimit's local reply
	// (its decodeHeaders' sendLocalReply), which clients may read.
	elLocalRejectBody = "local_rate_limited"
	// elMaxLocalNodes bounds the YAML nodes a conversion reads, aliases
	// expanded: a small file of aliases can be a huge tree.
	elMaxLocalNodes = 200000
	// elMaxSkippable bounds the skip_if_absent actions of one rate_limits
	// entry: each doubles the descriptors it can build.
	elMaxSkippable = 4
	// elMaxSteps bounds the comparisons of one conversion (route with
	// route, descriptor with rate_limits entry), elMaxRules its rules:
	// each route can need a rule in the policies of the routes after it.
	elMaxSteps = 2000000
	elMaxRules = 50000
)

// EnvoyLocalRatelimit converts Envoy's HTTP local rate limit filter
// (envoy.filters.http.local_ratelimit) into a policy of local rules, per
// Envoy process like the filter's buckets. doc is the Envoy configuration
// as a user has it, YAML or JSON: a bootstrap, a listener or route
// configuration (LDS, RDS), an HTTP connection manager, or Istio
// EnvoyFilters (a stream of Kubernetes objects). The walk finds each
// local_ratelimit filter, the routes, virtual hosts and route
// configurations whose typed_per_filter_config has an entry named after
// it, and the rate_limits actions that build its descriptors. Each
// configuration that decides some requests becomes policies: one per
// rate_limits entry (its descriptors as rules, the most specific first)
// and one for its default bucket, each starting with unlimited rules that
// keep out the requests of routes configured otherwise
// (docs/migrating.md, "Envoy local_ratelimit"). Errors name the field,
// by its path and line.
func EnvoyLocalRatelimit(doc []byte, opt LocalOptions) (Result, error) {
	res, err := convertEnvoyLocal(doc, opt)
	if err != nil {
		return Result{}, &InputError{Input: "config", Err: err}
	}
	return res, nil
}

func convertEnvoyLocal(doc []byte, opt LocalOptions) (Result, error) {
	if len(doc) > maxInput {
		return Result{}, fmt.Errorf("config: %d bytes, more than the %d a conversion reads", len(doc), maxInput)
	}
	docs, err := elReadLocalDocs(doc)
	if err != nil {
		return Result{}, err
	}
	budget := elMaxLocalNodes
	for _, d := range docs {
		if err := elCountNodes(d, &budget); err != nil {
			return Result{}, err
		}
	}
	c := newElConv(opt)
	for i, d := range docs {
		root := ""
		if len(docs) > 1 {
			root = fmt.Sprintf("documents[%d]", i)
		}
		c.unit++
		if err := c.walk(d, root, elWalkCtx{unit: c.unit}, true); err != nil {
			return Result{}, err
		}
	}
	if err := c.link(); err != nil {
		return Result{}, err
	}
	if len(c.filters) == 0 {
		return Result{}, fmt.Errorf("config: no local_ratelimit filter (typed_config %s) and no per-route configuration for one; give the bootstrap, listener, HTTP connection manager or route configuration that holds them, or the EnvoyFilters", elLocalRateLimitType)
	}
	for _, f := range c.filters {
		if err := c.convertFilter(f); err != nil {
			return Result{}, err
		}
	}
	return c.result()
}

// elReadLocalDocs parses every document of a YAML (or JSON) stream.
func elReadLocalDocs(doc []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var docs []*yaml.Node
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("config: document %d: %s", i, yamlError(err))
		}
		docs = append(docs, &n)
	}
	if len(docs) == 0 {
		return nil, fmt.Errorf("config: empty; give the Envoy configuration (bootstrap, listener, HTTP connection manager or route configuration) or the Istio EnvoyFilters")
	}
	return docs, nil
}

// elCountNodes counts the nodes of a tree with its aliases expanded, against
// budget.
func elCountNodes(n *yaml.Node, budget *int) error {
	if n == nil {
		return nil
	}
	if *budget--; *budget < 0 {
		return fmt.Errorf("config: more than %d YAML nodes once aliases are expanded; convert a smaller part of the configuration", elMaxLocalNodes)
	}
	if n.Kind == yaml.AliasNode {
		return elCountNodes(n.Alias, budget)
	}
	for _, k := range n.Content {
		if err := elCountNodes(k, budget); err != nil {
			return err
		}
	}
	return nil
}

// elPer is a configuration of the filter for routes: a LocalRateLimit, or
// the filter turned off.
type elPer struct {
	cfg  *elConfig
	off  bool
	path string
}

// Where a configuration applies.
const (
	elLevelRoute = iota
	elLevelVhost
	elLevelRouteConfig
	elLevelFilter
)

// elGroup is one configuration and the routes it decides.
type elGroup struct {
	cfg    *elConfig
	off    bool
	level  int
	routes []*elRoute
	vh     *elVhost
	label  string
	path   string
}

// elBlock is a set of requests with the same descriptors: its match, the
// unlimited rules that keep out the requests of other routes, the key of
// its own bucket and the rate_limits entries that build descriptors.
type elBlock struct {
	label string
	cond  map[string]any
	stops []elStop
	route *elRoute // the block's route, nil for a wider container
	lists []elRateLimit
}

type elStop struct {
	name  string
	match map[string]any
}

type elBucket struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           int     `json:"burst"`
	FixedCost       int     `json:"fixed_cost,omitempty"`
	CostSource      string  `json:"cost_source,omitempty"` // a hits_addend format's
}

// routes are the filter's routes in Envoy's order.
func (f *elFilter) routes() []*elRoute {
	var out []*elRoute
	for _, rc := range f.rcs {
		for _, vh := range rc.vhosts {
			for _, r := range vh.routes {
				r.seq = len(out)
				out = append(out, r)
			}
		}
	}
	return out
}

// convertFilter makes the policies of one filter: for each configuration
// deciding some requests, in route order, then the filter's own.
func (c *elConv) convertFilter(f *elFilter) error {
	routes := f.routes()
	groups, of, err := c.groups(f, routes)
	if err != nil {
		return err
	}
	for _, g := range groups {
		if g.off || g.cfg == nil {
			continue
		}
		if err := c.convertGroup(f, g, routes, of); err != nil {
			return err
		}
	}
	return nil
}

// groups puts each route with the configuration that decides it: its own
// entry, else its virtual host's, else its route configuration's, else
// the filter's.
func (c *elConv) groups(f *elFilter, routes []*elRoute) ([]*elGroup, map[*elRoute]*elGroup, error) {
	top := &elGroup{cfg: f.cfg, level: elLevelFilter, path: f.path}
	switch {
	case f.cfg == nil:
		top.off = true
	case f.disabled:
		top.off = true
		c.note("%s: the filter is disabled: true, so its own configuration limits nothing; only routes with a configuration of their own are limited", f.path)
	default:
		top.off = f.cfg.enabled == 0
		top.label = f.cfg.statPrefix
		if top.off && (f.cfg.bucket != nil || len(f.cfg.descriptors) > 0) {
			c.note("%s: filter_enabled is %s, so its own configuration limits nothing; only routes with a configuration of their own are limited", f.cfg.path, elEnabledWords(f.cfg))
		}
	}
	byPath := map[string]*elGroup{}
	var out []*elGroup
	of := map[*elRoute]*elGroup{}
	for _, r := range routes {
		e, level := elLookupEntry(f.name, r)
		if e == nil {
			of[r] = top
			top.routes = append(top.routes, r)
			continue
		}
		g := byPath[e.path]
		if g == nil {
			per, err := c.perConfig(f, *e)
			if err != nil {
				return nil, nil, err
			}
			g = &elGroup{cfg: per.cfg, off: per.off, level: level, vh: r.vh, path: e.path, label: elGroupLabel(level, r)}
			byPath[e.path] = g
			out = append(out, g)
			if g.off {
				c.note("%s: %s; the requests it decides are not limited by this filter", e.path, elOffWords(per))
			}
		}
		of[r] = g
		g.routes = append(g.routes, r)
	}
	return append(out, top), of, nil
}

func elEnabledWords(cfg *elConfig) string {
	if !cfg.enabledSet {
		return "absent (Envoy's default is 0%)"
	}
	return "0%"
}

func elOffWords(per *elPer) string {
	if per.cfg == nil {
		return "the filter is disabled here"
	}
	return "filter_enabled is " + elEnabledWords(per.cfg)
}

func elGroupLabel(level int, r *elRoute) string {
	switch level {
	case elLevelRoute:
		return r.label
	case elLevelVhost:
		if r.vh.name != "" {
			return r.vh.name
		}
		return "virtual-host"
	}
	if r.vh.rc.name != "" {
		return r.vh.rc.name
	}
	return "route-configuration"
}

// elLookupEntry finds the most specific entry named name for a route.
// As the filter resolves its configuration
// (resolveMostSpecificPerFilterConfig), the route's entry replaces the
// virtual host's, which replaces the route configuration's, which
// replaces the filter's own.
func elLookupEntry(name string, r *elRoute) (*elEntry, int) {
	for level, es := range [][]elEntry{r.per, r.vh.per, r.vh.rc.per} {
		var found *elEntry
		for i := range es {
			if es[i].key == name {
				found = &es[i]
			}
		}
		if found != nil {
			return found, level
		}
	}
	return nil, elLevelFilter
}

// perConfig reads an entry: a LocalRateLimit, or a FilterConfig that
// holds one or turns the filter off.
func (c *elConv) perConfig(f *elFilter, e elEntry) (*elPer, error) {
	if per := c.pers[e.path]; per != nil {
		return per, nil
	}
	t, v, vp := elTypeOf(e.node, e.path)
	if elIsType(t, elFilterConfigType) {
		off, err := elBoolOf(elField(v, "disabled"), elJoin(vp, "disabled"))
		if err != nil {
			return nil, err
		}
		if off {
			per := &elPer{off: true, path: e.path}
			c.pers[e.path] = per
			return per, nil
		}
		if elField(v, "config") == nil {
			return nil, fmt.Errorf("%s: a FilterConfig without config runs the filter with its own configuration here; not converted: give the LocalRateLimit in config", elAt(v, vp))
		}
		t, v, vp = elTypeOf(elField(v, "config"), elJoin(vp, "config"))
	}
	if !elIsType(t, elLocalRateLimitType) {
		return nil, fmt.Errorf("%s: %q is not a LocalRateLimit, which the filter %s named %q takes", elAt(e.node, e.path), t, f.path, f.name)
	}
	cfg, err := c.parseConfig(v, vp, true)
	if err != nil {
		return nil, err
	}
	per := &elPer{cfg: cfg, off: cfg.enabled == 0, path: e.path}
	c.pers[e.path] = per
	return per, nil
}

// convertGroup makes the policies of one configuration: one per
// rate_limits entry building descriptors, and one for its default bucket.
func (c *elConv) convertGroup(f *elFilter, g *elGroup, routes []*elRoute, of map[*elRoute]*elGroup) error {
	cfg := g.cfg
	c.current = cfg
	c.configNotes(f, cfg)
	cond, stops, err := c.container(g, routes, of)
	if err != nil {
		return err
	}
	var route *elRoute
	if g.level == elLevelRoute {
		route = g.routes[0]
	}
	blocks, err := c.blocks(g, cond, stops, route, routes)
	if err != nil {
		return err
	}
	used := map[int]int{}
	var descRules []outRule
	for _, b := range blocks {
		for _, l := range b.lists {
			rules, err := c.slotRules(f, g, b, l, used)
			if err != nil {
				return err
			}
			if len(rules) == 0 {
				continue
			}
			descRules = append(descRules, rules...)
			if err := c.addPolicy(b.label+"-"+elActionKeys(l), append(c.stopRules(b.stops), rules...)); err != nil {
				return err
			}
		}
	}
	c.unusedDescriptors(cfg, used, len(blocks) > 0)
	if cfg.bucket != nil {
		rules := c.stopRules(stops)
		if !cfg.alwaysConsume {
			rules = append(rules, c.instead(descRules)...)
		}
		r := outRule{Name: c.ruleName(g.label), Mode: cfg.mode(), LimitKeys: perConnection(cfg, []string{c.scopeKey(route)}),
			Algorithm: policy.AlgorithmTokenBucket, AlgorithmConfig: c.bucketOf(cfg.bucket, elJoin(cfg.path, "token_bucket"))}
		if len(cond) > 0 {
			r.Match = cond
		}
		if err := c.addPolicy(g.label, append(rules, r)); err != nil {
			return err
		}
	} else if len(descRules) == 0 {
		c.note("%s: no token_bucket and no descriptor a rate_limits entry builds: it limits nothing", cfg.path)
		return nil
	}
	c.limiting = append(c.limiting, cfg)
	if f.hcm != nil {
		c.hcmsUsed[f.hcm.path] = true
	} else {
		c.hcmsUsed[fmt.Sprint("unit ", f.unit)] = true
	}
	return nil
}

// container is the match of the requests a configuration decides and the
// unlimited rules that first keep out those it does not: for a route's
// own configuration, the earlier routes that may take some of its
// requests; for a wider one, the routes inside it configured otherwise.
func (c *elConv) container(g *elGroup, routes []*elRoute, of map[*elRoute]*elGroup) (map[string]any, []elStop, error) {
	if g.level == elLevelRoute {
		r := g.routes[0]
		cond, err := c.routeCond(r)
		if err != nil {
			return nil, nil, err
		}
		stops, err := c.routeStops(r, routes)
		return cond, stops, err
	}
	var cond map[string]any
	if g.level == elLevelVhost {
		cond = c.vhostCond(g.vh)
	}
	var stops []elStop
	for _, x := range routes {
		if of[x] == g || !c.inside(g, x) {
			continue
		}
		m, err := c.routeCond(x)
		if err != nil {
			return nil, nil, fmt.Errorf("route %s has a configuration of its own, and its match is needed to keep its requests out of %s's rules: %w", x.path, g.label, err)
		}
		if !x.byName {
			for _, y := range routes[:x.seq] {
				if err := c.step(); err != nil {
					return nil, nil, err
				}
				if of[y] == g && elMayOverlap(y, x) {
					return nil, nil, fmt.Errorf("%s: route %s, limited by %s, comes before this route, which has a configuration of its own, and may take some of its requests: give this route a name (its rules then match it by name), or reorder the routes", x.path, y.path, g.label)
				}
			}
		}
		suffix := "-own-limits"
		if of[x].off {
			suffix = "-unlimited"
		}
		stops = append(stops, elStop{name: x.label + suffix, match: m})
	}
	return cond, stops, nil
}

// inside tells whether route x is among the requests of g's container.
func (c *elConv) inside(g *elGroup, x *elRoute) bool {
	switch g.level {
	case elLevelVhost:
		return x.vh == g.vh
	case elLevelRouteConfig:
		return x.vh.rc == g.routes[0].vh.rc
	}
	return true
}

// routeStops keep out of an unnamed route's rules the requests of the
// routes before it that may take them.
func (c *elConv) routeStops(r *elRoute, routes []*elRoute) ([]elStop, error) {
	if r.byName {
		return nil, nil
	}
	var stops []elStop
	for _, y := range routes[:r.seq] {
		if err := c.step(); err != nil {
			return nil, err
		}
		if !elMayOverlap(y, r) {
			continue
		}
		m, err := c.routeCond(y)
		if err != nil {
			return nil, fmt.Errorf("route %s comes before route %s and may take some of its requests, so its match is needed (or give route %s a name): %w", y.path, r.path, r.path, err)
		}
		stops = append(stops, elStop{name: y.label + "-other-route", match: m})
	}
	return stops, nil
}

func (c *elConv) ruleName(name string) string { return c.rules.take(name) }

// step counts one comparison against elMaxSteps.
func (c *elConv) step() error {
	if c.steps++; c.steps > elMaxSteps {
		return fmt.Errorf("config: more than %d comparisons of routes and descriptors; convert fewer routes at a time", elMaxSteps)
	}
	return nil
}

// addPolicy adds a policy, within elMaxRules rules in all.
func (c *elConv) addPolicy(name string, rules []outRule) error {
	if c.ruleN += len(rules); c.ruleN > elMaxRules {
		return fmt.Errorf("config: the policy would have more than %d rules (each route configured on its own needs rules in the policies around it); convert fewer routes at a time, or name the routes", elMaxRules)
	}
	c.made = append(c.made, outPolicy{Name: c.pols.take(name), Rules: rules})
	c.madeBy = append(c.madeBy, c.current)
	return nil
}

func (c *elConv) stopRules(stops []elStop) []outRule {
	out := make([]outRule, 0, len(stops))
	for _, s := range stops {
		r := outRule{Name: c.ruleName(s.name), Action: policy.ActionUnlimited}
		if len(s.match) > 0 {
			r.Match = s.match
		}
		out = append(out, r)
	}
	return out
}

// perConnection keys a configuration's buckets by connection first when it
// has local_rate_limit_per_downstream_connection, as Envoy keeps each of
// them per connection ("all" then adds nothing).
func perConnection(cfg *elConfig, keys []string) []string {
	if !cfg.perConnection {
		return keys
	}
	out := []string{"connection"}
	for _, k := range keys {
		if k != "all" {
			out = append(out, k)
		}
	}
	return out
}

// scopeKey keys a bucket Envoy keeps for all the requests of a route (nil
// for a wider container): the route's name, else the host.
func (c *elConv) scopeKey(r *elRoute) string {
	if r != nil && r.byName {
		return "route"
	}
	return "all" // one bucket for every request of the listener, virtual host or route
}

// blocks are the sets of requests of a configuration with the same
// rate_limits entries: its container when every route builds the same
// descriptors, else each route.
func (c *elConv) blocks(g *elGroup, cond map[string]any, stops []elStop, route *elRoute, routes []*elRoute) ([]elBlock, error) {
	whole := elBlock{label: g.label, cond: cond, stops: stops, route: route}
	if g.cfg.hasOwn {
		whole.lists = elEnabledLists(g.cfg.own, -1)
		return []elBlock{whole}, nil
	}
	lists := make([][]elRateLimit, len(g.routes))
	same := true
	for i, r := range g.routes {
		l, err := c.listsFor(g.cfg, r)
		if err != nil {
			return nil, err
		}
		lists[i] = l
		same = same && elListsSig(l) == elListsSig(lists[0])
	}
	if len(g.routes) == 0 || len(lists[0]) == 0 && same {
		return nil, nil
	}
	if same {
		whole.lists = lists[0]
		return []elBlock{whole}, nil
	}
	var out []elBlock
	for i, r := range g.routes {
		if len(lists[i]) == 0 {
			continue
		}
		rc, err := c.routeCond(r)
		if err != nil {
			return nil, fmt.Errorf("route %s builds descriptors other routes of %s do not, so its rules need its match: %w", r.path, g.label, err)
		}
		rs, err := c.routeStops(r, routes)
		if err != nil {
			return nil, err
		}
		out = append(out, elBlock{label: r.label, cond: rc, stops: rs, route: r, lists: lists[i]})
	}
	if len(out) > 1 {
		c.note("%s: its routes build different descriptors, so each route's descriptors are rules of its own: a descriptor bucket Envoy shares between routes is one per route here", g.path)
	}
	return out, nil
}

// listsFor are the rate_limits entries that build a route's descriptors
// under cfg: the route's of cfg's stage, and its virtual host's as
// vh_rate_limits says.
// As the filter populates descriptors: the route's entries of its stage,
// the virtual host's by vh_rate_limits (OVERRIDE, the default: only when
// the route has none; INCLUDE, or the route's include_vh_rate_limits;
// IGNORE).
func (c *elConv) listsFor(cfg *elConfig, r *elRoute) ([]elRateLimit, error) {
	route, err := c.rateLimitList(r.rateLimits, r.rlPath)
	if err != nil {
		return nil, err
	}
	vh, err := c.rateLimitList(r.vh.rateLimits, r.vh.rlPath)
	if err != nil {
		return nil, err
	}
	option := cfg.vhOption
	if r.includeVh {
		option = "INCLUDE"
	}
	out := elEnabledLists(route, cfg.stage)
	switch {
	case option == "INCLUDE", option == "OVERRIDE" && len(route) == 0:
		out = append(out, elEnabledLists(vh, cfg.stage)...)
	}
	return c.resolve(out, r)
}

// elEnabledLists are the entries of a stage (any for -1) without a
// disable_key, which local_ratelimit skips.
func elEnabledLists(rls []elRateLimit, stage int) []elRateLimit {
	var out []elRateLimit
	for _, rl := range rls {
		if !rl.disabled && (stage < 0 || rl.stage == stage) {
			out = append(out, rl)
		}
	}
	return out
}

// resolve fixes what depends on the route: destination_cluster is its
// cluster. A route without a single one (weighted_clusters, cluster_header,
// an EnvoyFilter patch) picks it per request: the cluster source reads the
// one picked (xds.cluster_name, the cluster Envoy's action names too).
func (c *elConv) resolve(rls []elRateLimit, r *elRoute) ([]elRateLimit, error) {
	out := make([]elRateLimit, len(rls))
	for i, rl := range rls {
		rl.acts = slices.Clone(rl.acts)
		for j, a := range rl.acts {
			if a.kind != elActDestination {
				continue
			}
			if r.cluster == "" {
				rl.acts[j] = elAct{kind: elActSource, key: a.key, source: "cluster", path: a.path}
				continue
			}
			rl.acts[j] = elAct{kind: elActFixed, key: a.key, value: r.cluster, path: a.path}
		}
		out[i] = rl
	}
	return out, nil
}

// elListsSig says what the entries build, wherever they are written.
func elListsSig(rls []elRateLimit) string {
	var b strings.Builder
	for _, rl := range rls {
		fmt.Fprintf(&b, "[%d", rl.hits)
		for _, a := range rl.acts {
			fmt.Fprintf(&b, " %d:%q:%q:%q:%v:%v", a.kind, a.key, a.source, a.value, a.conds, a.skip)
		}
		b.WriteString("]")
	}
	return b.String()
}

func elActionKeys(l elRateLimit) string {
	keys := make([]string, len(l.acts))
	for i, a := range l.acts {
		keys[i] = a.key
	}
	return strings.Join(keys, "-")
}

// elVariant is a descriptor an entry can build: its actions with a value,
// and the sources skip_if_absent left out.
type elVariant struct {
	acts   []elAct
	absent []string
}

func elVariantsOf(l elRateLimit) ([]elVariant, error) {
	var skip []int
	for i, a := range l.acts {
		if a.skip {
			skip = append(skip, i)
		}
	}
	if len(skip) > elMaxSkippable {
		return nil, fmt.Errorf("%s: more than %d actions with skip_if_absent; write the rules by hand", l.path, elMaxSkippable)
	}
	var out []elVariant
	for mask := 0; mask < 1<<len(skip); mask++ {
		var v elVariant
		for i, a := range l.acts {
			if k := slices.Index(skip, i); k >= 0 && mask&(1<<k) != 0 {
				v.absent = append(v.absent, a.source)
				continue
			}
			v.acts = append(v.acts, a)
		}
		if len(v.acts) > 0 {
			out = append(out, v)
		}
	}
	return out, nil
}

// elFits tells whether a descriptor matches what a variant builds.
func elFits(d elDesc, v elVariant) bool {
	if len(d.entries) != len(v.acts) {
		return false
	}
	for i, a := range v.acts {
		e := d.entries[i]
		if e.key != a.key || (a.kind == elActFixed || a.kind == elActCond) && e.value != "" && e.value != a.value {
			return false
		}
	}
	return true
}

// For each descriptor a request builds, local_ratelimit takes the bucket of
// the configured descriptor with exactly its entries, else of one whose
// empty values match any value (a bucket per value, kept in an LRU of
// max_dynamic_descriptors); a request takes a token from every such
// bucket, and from the default one unless
// always_consume_default_token_bucket is false and a descriptor matched.
//
// slotRules are the rules of one rate_limits entry: for each descriptor
// it can match, Envoy's exact ones first (unless a rule with keys takes
// them as overrides), then those with wildcards, the most specific first.
func (c *elConv) slotRules(f *elFilter, g *elGroup, b elBlock, l elRateLimit, used map[int]int) ([]outRule, error) {
	vs, err := elVariantsOf(l)
	if err != nil {
		return nil, err
	}
	var out []outRule
	for _, v := range vs {
		var exact, wild []int
		for i, d := range g.cfg.descriptors {
			if err := c.step(); err != nil {
				return nil, err
			}
			if !elFits(d, v) {
				continue
			}
			if used[i]++; used[i] == 2 {
				c.note("%s: more than one rate_limits entry builds it: Envoy charges its bucket for each, Sluice keeps a bucket per entry", d.path)
			}
			if d.exact() {
				exact = append(exact, i)
			} else {
				wild = append(wild, i)
			}
		}
		slices.SortStableFunc(wild, func(a, b int) int { return g.cfg.descriptors[b].valued() - g.cfg.descriptors[a].valued() })
		rules, err := c.variantRules(f, g, b, l, v, exact, wild)
		if err != nil {
			return nil, err
		}
		out = append(out, rules...)
	}
	return out, nil
}

func (c *elConv) variantRules(f *elFilter, g *elGroup, b elBlock, l elRateLimit, v elVariant, exact, wild []int) ([]outRule, error) {
	ds := g.cfg.descriptors
	all := -1 // the descriptor whose every source is a wildcard: it takes overrides
	if n := len(wild); n > 0 && elHasSource(v) && elAllWild(ds[wild[n-1]], v) {
		all = wild[n-1]
	}
	var out, tail []outRule
	var folded []int
	for _, i := range exact {
		if all >= 0 && elFoldable(ds[i], ds[all], wild[:len(wild)-1], v, ds) {
			folded = append(folded, i)
			continue
		}
		r, err := c.descRule(f, g, b, l, v, ds[i])
		if errors.Is(err, errElNever) {
			c.note("%s: left out: %v", ds[i].path, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	for _, i := range wild {
		r, err := c.descRule(f, g, b, l, v, ds[i])
		if errors.Is(err, errElNever) {
			c.note("%s: left out: %v", ds[i].path, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		if i == all {
			if r.Overrides, err = c.overrides(ds, folded, v, l); err != nil {
				return nil, err
			}
		}
		tail = append(tail, r)
	}
	return append(out, tail...), nil
}

func elHasSource(v elVariant) bool {
	return slices.ContainsFunc(v.acts, func(a elAct) bool { return a.kind == elActSource })
}

func elAllWild(d elDesc, v elVariant) bool {
	for i, a := range v.acts {
		if a.kind == elActSource && d.entries[i].value != "" {
			return false
		}
	}
	return true
}

// elFoldable tells whether exact descriptor d can be an override of the
// all-wildcard rule: same mode, and no wildcard rule before it takes d's
// requests.
func elFoldable(d, all elDesc, before []int, v elVariant, ds []elDesc) bool {
	if d.shadow != all.shadow {
		return false
	}
	for _, j := range before {
		p := ds[j]
		takes := true
		for i, a := range v.acts {
			if a.kind == elActSource && p.entries[i].value != "" && p.entries[i].value != d.entries[i].value {
				takes = false
			}
		}
		if takes {
			return false
		}
	}
	return true
}

// overrides are the exact descriptors folded into the all-wildcard rule,
// keyed by their values in the order of its limit_keys.
func (c *elConv) overrides(ds []elDesc, folded []int, v elVariant, l elRateLimit) ([]outOverride, error) {
	var out []outOverride
	for _, i := range folded {
		var vals []string
		for k, a := range v.acts {
			if a.kind == elActSource {
				vals = append(vals, escapeKey(ds[i].entries[k].value))
			}
		}
		bc := c.bucketOf(ds[i].bucket, elJoin(ds[i].path, "token_bucket"))
		if err := elCheckCost(l, bc, ds[i].path); err != nil {
			return nil, err
		}
		out = append(out, outOverride{Key: strings.Join(vals, "|"), AlgorithmConfig: *bc})
	}
	return out, nil
}

// descRule is the rule of descriptor d for a variant: its values are
// conditions, its wildcards the limit keys.
func (c *elConv) descRule(f *elFilter, g *elGroup, b elBlock, l elRateLimit, v elVariant, d elDesc) (outRule, error) {
	match := maps.Clone(b.cond)
	if match == nil {
		match = map[string]any{}
	}
	for _, src := range v.absent {
		if err := elAddCond(match, src, map[string]any{"present": false}, l.path); err != nil {
			return outRule{}, err
		}
	}
	var keys, valued []string
	name := []string{b.label}
	for i, a := range v.acts {
		val := d.entries[i].value
		name = append(name, a.key)
		if val != "" {
			name = append(name, val)
		}
		var err error
		switch a.kind {
		case elActSource:
			if slices.Contains(keys, a.source) || slices.Contains(valued, a.source) {
				return outRule{}, fmt.Errorf("%s: reads %s a second time; write the rule by hand", a.path, a.source)
			}
			if val == "" {
				keys = append(keys, a.source)
			} else {
				valued = append(valued, a.source)
				err = elAddCond(match, a.source, val, d.path)
			}
			if a.source == "ip:address" {
				c.addressHops(f)
			}
		case elActCond:
			for _, src := range slices.Sorted(maps.Keys(a.conds)) {
				if err = elAddCond(match, src, a.conds[src], a.path); err != nil {
					break
				}
			}
		}
		if err != nil {
			return outRule{}, err
		}
	}
	perClient := len(keys) > 0
	switch {
	case perClient:
	case len(valued) > 0:
		keys = valued // every source fixed by the match: one bucket
	default:
		keys = []string{c.scopeKey(b.route)}
	}
	keys = perConnection(g.cfg, keys)
	perClient = perClient || g.cfg.perConnection // a bucket per connection is one per client too
	mode, share := g.cfg.mode(), (*float64)(nil)
	switch {
	case d.shadow:
		mode = string(policy.ModeShadow)
	case perClient && g.cfg.partial():
		// A bucket per client: enforced on filter_enforced's share of the
		// clients (one bucket is all or none, so it stays in shadow mode).
		mode, share = string(policy.ModeEnforce), &g.cfg.enforced
	}
	bc := c.bucketOf(d.bucket, elJoin(d.path, "token_bucket"))
	if err := elCheckCost(l, bc, d.path); err != nil {
		return outRule{}, err
	}
	if l.hitsSrc != "" { // Envoy ignores the descriptor of a request without it
		if err := requireCost(match, l.hitsSrc, l.path+".hits_addend.format"); err != nil {
			return outRule{}, err
		}
		bc.CostSource = l.hitsSrc
		c.noteOnce("a hits_addend format becomes the rules' cost_source, each rule applying only to requests that carry the value (Envoy ignores the descriptor of a request without it); a value that is not a positive number costs one token in Sluice, where Envoy ignores the descriptor")
	}
	r := outRule{Name: c.ruleName(strings.Join(name, "-")), Mode: mode, EnforcePercent: share, LimitKeys: keys,
		Algorithm: policy.AlgorithmTokenBucket, AlgorithmConfig: bc}
	if err := networkConds(match, d.path); err != nil { // a masked address's value: a CIDR match on the address
		return outRule{}, err
	}
	if len(match) > 0 {
		r.Match = match
	}
	return r, nil
}

// elCheckCost sets a rate_limits entry's hits_addend as the bucket's cost.
func elCheckCost(l elRateLimit, bc *elBucket, path string) error {
	if l.hits <= 1 {
		return nil // one token, the default (hits_addend 0 is one too)
	}
	if l.hits > bc.Burst {
		return fmt.Errorf("%s: hits_addend %d is more than the burst %d of %s: no request could pass; write the rule by hand", l.path, l.hits, bc.Burst, path)
	}
	bc.FixedCost = l.hits
	return nil
}

// instead are unlimited copies of descriptor rules: without
// always_consume_default_token_bucket, a request a descriptor matches
// takes nothing from the default bucket.
func (c *elConv) instead(rules []outRule) []outRule {
	out := make([]outRule, 0, len(rules))
	for _, r := range rules {
		if r.Action != "" {
			continue
		}
		out = append(out, outRule{Name: c.ruleName(r.Name + "-no-default"), Action: policy.ActionUnlimited, Match: r.Match, LimitKeys: r.LimitKeys})
	}
	return out
}

func (c *elConv) unusedDescriptors(cfg *elConfig, used map[int]int, anyLists bool) {
	if len(cfg.descriptors) > 0 && !anyLists {
		c.note("%s: descriptors, but no rate_limits entry builds descriptors for the requests it decides: they limit nothing", cfg.path)
		return
	}
	for i, d := range cfg.descriptors {
		if used[i] == 0 {
			c.note("%s: no rate_limits entry builds its entries, so Envoy never matches it; left out", d.path)
		}
	}
}

// bucketOf is a token bucket's Sluice configuration: the refill as a
// rate, max_tokens as the burst (raised to the rate, which Sluice
// requires). local_ratelimit's buckets start full and, since Envoy 1.31,
// refill continuously at tokens_per_fill (default 1) per fill_interval,
// as Sluice's do.
func (c *elConv) bucketOf(b *elEnvoyBucket, path string) *elBucket {
	tps := float64(b.perFill) * float64(time.Second) / float64(b.interval)
	burst := b.maxTokens
	if float64(burst) < tps {
		burst = int(math.Ceil(tps))
		c.note("%s: max_tokens %d is less than the %g tokens a second it refills; Sluice's burst is at least the rate, so it is %d", path, b.maxTokens, tps, burst)
	}
	return &elBucket{TokensPerSecond: tps, Burst: burst}
}

// configNotes say what of a configuration the policy does not keep.
func (c *elConv) configNotes(f *elFilter, cfg *elConfig) {
	p := cfg.path
	if cfg.enabled < 100 {
		c.note("%s: filter_enabled %g%%: the rules limit every request, not a sample", p, cfg.enabled)
	}
	switch {
	case cfg.enforced == 0:
		c.note("%s: filter_enforced is 0%% or absent (Envoy's default): the rules are in shadow mode, which counts and marks but never rejects", p)
	case cfg.partial():
		c.note("%s: filter_enforced %g%%: the rules with a bucket per client are enforced on %g%% of their clients (enforce_percent: Sluice chooses clients, each always or never refused, where Envoy draws requests); the others, one bucket each, are in shadow mode", p, cfg.enforced, cfg.enforced)
	}
	if len(cfg.runtimeKeys) > 0 {
		c.note("%s: the runtime keys %s are not read: the rules follow their default_value", p, strings.Join(cfg.runtimeKeys, ", "))
	}
	if cfg.perConnection {
		c.note(`%s: local_rate_limit_per_downstream_connection: the rules are keyed by "connection" first, a bucket per downstream connection as in Envoy; a closed connection's bucket is given to a new identity once it has refilled, not freed at once`, p)
	}
	if cfg.clusterShared {
		c.note(`%s: local_cluster_rate_limit shares the limit among the local cluster's Envoys; Sluice's local rules hold per Envoy process (for one limit across Envoys, make the rules "scope": "global" with a fleet, docs/fleet.md)`, p)
	}
	if cfg.maxDynamic > 0 {
		c.note("%s: max_dynamic_descriptors %d: Sluice keeps max_keys (default 65536) clients per rule, and beyond that shares buckets rather than forgetting them", p, cfg.maxDynamic)
	}
	if len(cfg.reqHeaders) > 0 && cfg.mode() == string(policy.ModeShadow) {
		c.note("%s: request_headers_to_add_when_not_enforced: Sluice adds %s to a request a shadow rule would have refused, with the rules' names as its value", p, cfg.reqHeaders[0])
	}
}

// addressHops works out the xff_trusted_hops that reads the client
// address Envoy's remote_address does, from the connection manager.
func (c *elConv) addressHops(f *elFilter) {
	h := f.hcm
	if h == nil {
		c.noteOnce("remote_address is Sluice's ip:address: set the policy's xff_trusted_hops from the HTTP connection manager's use_remote_address and xff_num_trusted_hops (docs/configuration.md) so both read the same client address")
		return
	}
	if h.detection {
		c.noteOnce("remote_address is Sluice's ip:address, which reads X-Forwarded-For or the peer: the connection manager's original_ip_detection_extensions choose Envoy's client address otherwise; check the policy's xff_trusted_hops")
		return
	}
	// As Envoy's connection manager finds the client address
	// (conn_manager_utility.cc): with use_remote_address, the
	// xff_num_trusted_hops-th address from the right of X-Forwarded-For
	// before Envoy appends the peer (so one more after, which Sluice
	// sees), or the peer without trusted hops; without it, the
	// (xff_num_trusted_hops+1)-th from the right.
	hops := h.xffHops + 1
	if h.useRemote && h.xffHops == 0 {
		hops = 0
	}
	c.hops = append(c.hops, fmt.Sprintf("%d:%s: use_remote_address %v, xff_num_trusted_hops %d", hops, h.path, h.useRemote, h.xffHops))
}

type elOut struct {
	RejectStatus     int               `json:"reject_status,omitempty"`
	RejectGRPCStatus string            `json:"reject_grpc_status"`
	RejectBody       string            `json:"reject_body"`
	RejectHeaders    map[string]string `json:"reject_headers,omitempty"`
	LegacyHeaders    string            `json:"legacy_headers,omitempty"`
	ShadowHeader     string            `json:"shadow_header,omitempty"`
	TrustedHops      int               `json:"xff_trusted_hops,omitempty"`
	Policies         []outPolicy       `json:"policies"`
}

func (c *elConv) result() (Result, error) {
	if len(c.made) == 0 {
		why := "no local_ratelimit configuration here limits a request"
		if len(c.notes) > 0 {
			why += ": " + strings.Join(c.notes, "; ")
		}
		return Result{}, fmt.Errorf("config: nothing to convert: %s", why)
	}
	out := elOut{RejectBody: elLocalRejectBody, Policies: c.made}
	out.RejectStatus = c.rejectStatus()
	out.RejectGRPCStatus = c.agree("rate_limited_as_resource_exhausted", func(cfg *elConfig) any {
		if cfg.exhausted {
			return "resource_exhausted"
		}
		return "unavailable"
	}).(string)
	if c.agree("enable_x_ratelimit_headers", func(cfg *elConfig) any { return cfg.xHeaders }).(bool) {
		out.LegacyHeaders = "x-ratelimit"
		c.noteOnce(`enable_x_ratelimit_headers DRAFT_VERSION_03 is "legacy_headers": "x-ratelimit": X-RateLimit-Limit, -Remaining and -Reset, besides the draft-10 RateLimit and RateLimit-Policy Sluice always sends; X-RateLimit-Limit is the burst alone, without Envoy's quota policy ("10, 10;w=60")`)
	}
	out.RejectHeaders = c.rejectHeaders()
	out.ShadowHeader = c.shadowHeader()
	out.TrustedHops = c.trustedHops()
	if len(c.hcmsUsed) > 1 {
		c.noteOnce("the filters of several HTTP connection managers (listeners, or EnvoyFilters) are converted: every policy applies to every request a Sluice filter loading this policy sees; give each listener's (or workload's) Sluice filter its own policies")
	}
	if len(c.made) > 1 {
		c.noteOnce("a request one policy rejects takes nothing from the others, where local_ratelimit takes a token from each matching descriptor's bucket, the lowest refill first, until one refuses, and from the default bucket last")
	}
	return c.policyOf(out)
}

// agree is a top-level setting every converted configuration should
// share: the first one's, with a note when others differ.
func (c *elConv) agree(name string, value func(*elConfig) any) any {
	first := value(c.limiting[0])
	for _, cfg := range c.limiting[1:] {
		if v := value(cfg); v != first {
			c.note("%s: %s differs from %s's; the policy has one for every rule: %v", cfg.path, name, c.limiting[0].path, first)
		}
	}
	return first
}

// rejectStatus is the status of the most configurations (on a tie the
// default, 0 for 429, else the first's), the top-level reject_status; the
// limit rules of a configuration with another status reject with their
// own.
func (c *elConv) rejectStatus() int {
	count := map[int]int{}
	for _, cfg := range c.limiting {
		count[cfg.status]++
	}
	first := c.limiting[0].status
	for _, cfg := range c.limiting {
		if n := count[cfg.status]; n > count[first] || n == count[first] && cfg.status == 0 {
			first = cfg.status
		}
	}
	c.eachLimitRule(func(cfg *elConfig, r *outRule) {
		switch {
		case cfg.status == first:
		case cfg.status == 0:
			r.RejectStatus = policy.DefaultRejectStatus
		default:
			r.RejectStatus = cfg.status
		}
	})
	return first
}

// eachLimitRule calls set with every limit rule made and the
// configuration it was made from.
func (c *elConv) eachLimitRule(set func(cfg *elConfig, r *outRule)) {
	for i := range c.made {
		for j := range c.made[i].Rules {
			if r := &c.made[i].Rules[j]; r.Action == "" {
				set(c.madeBy[i], r)
			}
		}
	}
}

// rejectHeaders is response_headers_to_add, which Envoy adds to the
// responses of rate-limited requests: Sluice's reject_headers, for every
// rule when every configuration has the same, else on the limit rules of
// each configuration that has some (Envoy's per-route configuration
// replaces the filter's, fields included). A field Sluice sends itself, or
// cannot send as written, is left out and noted.
func (c *elConv) rejectHeaders() map[string]string {
	of := map[*elConfig]map[string]string{}
	same := true
	for _, cfg := range c.limiting {
		of[cfg] = c.fieldsOf(cfg)
		same = same && maps.Equal(of[cfg], of[c.limiting[0]])
	}
	if same {
		return of[c.limiting[0]]
	}
	c.eachLimitRule(func(cfg *elConfig, r *outRule) {
		if fields := of[cfg]; len(fields) > 0 {
			r.RejectHeaders = fields
		}
	})
	return nil
}

// fieldsOf is cfg's response_headers_to_add as reject_headers, nil when
// it has none Sluice can send.
func (c *elConv) fieldsOf(cfg *elConfig) map[string]string {
	var out map[string]string
	for _, h := range cfg.respHeaders {
		if msg := policy.CheckRejectHeader(h[0], h[1]); msg != "" {
			c.note("%s: response_headers_to_add: %s is left out: %s", cfg.path, h[0], msg)
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[h[0]] = h[1]
	}
	return out
}

func (c *elConv) shadowHeader() string {
	for _, cfg := range c.limiting {
		if len(cfg.reqHeaders) > 0 && cfg.mode() == string(policy.ModeShadow) && elHeaderToken.MatchString(cfg.reqHeaders[0]) {
			return cfg.reqHeaders[0]
		}
	}
	return ""
}

func (c *elConv) trustedHops() int {
	if len(c.hops) == 0 {
		return 0
	}
	slices.Sort(c.hops)
	c.hops = slices.Compact(c.hops)
	first, why, _ := strings.Cut(c.hops[0], ":")
	hops, _ := strconv.Atoi(first)
	if hops > policy.MaxTrustedHops {
		c.note("%s: Envoy's client address is %d hops into X-Forwarded-For; Sluice reads at most %d: set xff_trusted_hops by hand", why, hops, policy.MaxTrustedHops)
		return 0
	}
	c.note("remote_address is Sluice's ip:address with xff_trusted_hops %d, which reads the client address Envoy's does (%s)", hops, why)
	if len(c.hops) > 1 {
		c.note("connection managers with other X-Forwarded-For settings (%s): the policy has one xff_trusted_hops", strings.Join(c.hops[1:], "; "))
	}
	return hops
}
