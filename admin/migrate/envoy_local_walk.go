package migrate

// The converter of Envoy's local_ratelimit configurations (envoy_local.go):
// what the walk through the input finds.

import (
	"math"
	"strings"

	"gopkg.in/yaml.v3"
)

type elFilter struct {
	name, path string
	unit       int
	hcm        *elHCM // nil outside an HTTP connection manager
	cfg        *elConfig
	disabled   bool // the http filter's "disabled": it runs only on routes with a config of their own
	implicit   bool // no filter in the input: per-route configurations only
	rcs        []*elRouteConfig
}

// elHCM is an HTTP connection manager.
type elHCM struct {
	path      string
	unit      int
	filters   []*elFilter
	rds       string // rds.route_config_name
	useRemote bool
	detection bool // original_ip_detection_extensions: the client address is theirs
	xffHops   int
}

type elRouteConfig struct {
	name, path string
	unit       int
	hcm        *elHCM // the connection manager it is inline in
	per        []elEntry
	vhosts     []*elVhost
	synthetic  bool // built from EnvoyFilter patches
}

type elVhost struct {
	name, path string
	rc         *elRouteConfig
	domains    []string // nil: unknown (an EnvoyFilter patch)
	per        []elEntry
	rateLimits *yaml.Node
	rlPath     string
	routes     []*elRoute
}

type elRoute struct {
	name, path string
	vh         *elVhost
	match      *yaml.Node
	per        []elEntry
	rateLimits *yaml.Node // the route action's rate_limits
	rlPath     string
	includeVh  bool
	cluster    string
	byName     bool // named, and the only route of its route configuration with that name
	label      string
	seq        int
	specKind   string // the path match: "prefix", "exact" or "other"
	spec       string
}

// elEntry is one typed_per_filter_config entry.
type elEntry struct {
	key  string
	node *yaml.Node
	path string
}

// elWalkCtx is where the walk is: the document (or EnvoyFilter) and the
// HTTP connection manager around the node.
type elWalkCtx struct {
	unit int
	hcm  *elHCM
}

// elConv accumulates one conversion.
type elConv struct {
	*converter
	unit     int
	filters  []*elFilter
	rcs      []*elRouteConfig
	istio    map[int]*elRouteConfig // per EnvoyFilter, the route configuration its patches build
	implicit map[string]*elFilter
	configs  map[string]*elConfig
	pers     map[string]*elPer
	limits   map[string][]elRateLimit
	conds    map[*elRoute]map[string]any
	made     []outPolicy
	madeBy   []*elConfig // the configuration each of made comes from
	current  *elConfig   // the configuration being converted (convertGroup)
	limiting []*elConfig // the configurations converted, for the top-level fields
	hops     []string    // xff_trusted_hops choices, as "N: why"
	steps    int         // comparisons made, against elMaxSteps
	ruleN    int         // rules made, against elMaxRules
	hcmsUsed map[string]bool
}

func newElConv(opt LocalOptions) *elConv {
	c := &elConv{
		converter: newConverter(opt.Taken),
		istio:     map[int]*elRouteConfig{}, implicit: map[string]*elFilter{},
		configs: map[string]*elConfig{}, pers: map[string]*elPer{}, limits: map[string][]elRateLimit{},
		conds: map[*elRoute]map[string]any{}, hcmsUsed: map[string]bool{},
	}
	return c
}

// walk looks through any tree for what it knows: EnvoyFilter patches,
// HTTP connection managers, route configurations, local_ratelimit filters.
func (c *elConv) walk(n *yaml.Node, path string, ctx elWalkCtx, top bool) error {
	n = elDeref(n)
	switch {
	case n == nil:
	case n.Kind == yaml.SequenceNode:
		for i, item := range n.Content {
			if err := c.walk(item, elIndex(path, i), ctx, false); err != nil {
				return err
			}
		}
	case n.Kind == yaml.MappingNode:
		return c.walkMapping(n, path, ctx, top)
	}
	return nil
}

func (c *elConv) walkMapping(n *yaml.Node, path string, ctx elWalkCtx, top bool) error {
	if elStr(elField(n, "kind")) == "EnvoyFilter" {
		c.unit++
		ctx.unit = c.unit
		c.noteEnvoyFilter(n)
	}
	switch {
	case elField(n, "apply_to") != nil && elField(n, "patch") != nil:
		return c.patch(n, path, ctx)
	case elIsSequence(elField(n, "http_filters")):
		return c.hcm(n, path, ctx)
	case elIsSequence(elField(n, "virtual_hosts")):
		_, err := c.routeConfig(n, path, ctx, nil)
		return err
	case elIsLocalFilter(n, path):
		return c.addFilter(n, path, ctx, nil)
	case top && elIsBareConfig(n, path):
		return c.addBare(n, path, ctx)
	}
	for _, kv := range elPairs(n) {
		if err := c.walk(kv[1], elJoin(path, kv[0].Value), ctx, false); err != nil {
			return err
		}
	}
	return nil
}

func elIsLocalFilter(n *yaml.Node, path string) bool {
	tc := elField(n, "typed_config")
	if tc == nil {
		return false
	}
	t, _, _ := elTypeOf(tc, path)
	return elIsType(t, elLocalRateLimitType)
}

// elIsBareConfig: a LocalRateLimit alone, with its @type or without.
func elIsBareConfig(n *yaml.Node, path string) bool {
	if t, _, _ := elTypeOf(n, path); t != "" {
		return elIsType(t, elLocalRateLimitType)
	}
	if elField(n, "stat_prefix") == nil {
		return false
	}
	for _, k := range []string{"token_bucket", "descriptors", "filter_enabled", "filter_enforced", "status"} {
		if elField(n, k) != nil {
			return true
		}
	}
	return false
}

func (c *elConv) noteEnvoyFilter(n *yaml.Node) {
	meta, spec := elField(n, "metadata"), elField(n, "spec")
	name := elStr(elField(meta, "name"))
	if ns := elStr(elField(meta, "namespace")); ns != "" {
		name = ns + "/" + name
	}
	labels := elField(elField(spec, "workload_selector"), "labels")
	var sel []string
	for _, kv := range elPairs(labels) {
		sel = append(sel, kv[0].Value+"="+elStr(kv[1]))
	}
	if len(sel) > 0 {
		c.note("EnvoyFilter %s applies to the workloads labelled %s: load the policy with a WasmPlugin of the same selector", name, strings.Join(sel, ","))
	} else if elField(spec, "target_refs") != nil {
		c.note("EnvoyFilter %s applies to its targetRefs: load the policy with a WasmPlugin of the same targetRefs", name)
	}
}

func (c *elConv) hcm(n *yaml.Node, path string, ctx elWalkCtx) error {
	h := &elHCM{path: path, unit: ctx.unit, rds: elStr(elField(elField(n, "rds"), "route_config_name")),
		detection: len(elItems(elField(n, "original_ip_detection_extensions"))) > 0}
	var err error
	if h.useRemote, err = elBoolOf(elField(n, "use_remote_address"), elJoin(path, "use_remote_address")); err != nil {
		return err
	}
	if v := elField(n, "xff_num_trusted_hops"); v != nil {
		if h.xffHops, err = elIntOf(v, elJoin(path, "xff_num_trusted_hops"), 0, math.MaxUint32); err != nil {
			return err
		}
	}
	ctx.hcm = h
	for i, f := range elItems(elField(n, "http_filters")) {
		fp := elIndex(elJoin(path, "http_filters"), i)
		switch {
		case elIsLocalFilter(f, fp):
			if err := c.addFilter(f, fp, ctx, h); err != nil {
				return err
			}
		case elField(f, "config_discovery") != nil && strings.Contains(elStr(elField(f, "name")), "ratelimit"):
			c.note("%s: a filter whose configuration comes from discovery (ECDS) is not read; give its LocalRateLimit in the input", fp)
		}
	}
	if rc := elField(n, "route_config"); rc != nil {
		_, err := c.routeConfig(rc, elJoin(path, "route_config"), ctx, h)
		return err
	}
	return nil
}

func (c *elConv) addFilter(n *yaml.Node, path string, ctx elWalkCtx, h *elHCM) error {
	name := elStr(elField(n, "name"))
	if name == "" {
		name = elDefaultLocalName
	}
	disabled, err := elBoolOf(elField(n, "disabled"), elJoin(path, "disabled"))
	if err != nil {
		return err
	}
	_, v, vp := elTypeOf(elField(n, "typed_config"), elJoin(path, "typed_config"))
	cfg, err := c.parseConfig(v, vp, false)
	if err != nil {
		return err
	}
	f := &elFilter{name: name, path: path, unit: ctx.unit, hcm: h, cfg: cfg, disabled: disabled}
	c.filters = append(c.filters, f)
	if h != nil {
		h.filters = append(h.filters, f)
	}
	return nil
}

func (c *elConv) addBare(n *yaml.Node, path string, ctx elWalkCtx) error {
	cfg, err := c.parseConfig(n, path, false)
	if err != nil {
		return err
	}
	c.filters = append(c.filters, &elFilter{name: elDefaultLocalName, path: path, unit: ctx.unit, cfg: cfg})
	return nil
}

func elPerEntries(n *yaml.Node, path string) []elEntry {
	var out []elEntry
	for _, kv := range elPairs(n) {
		out = append(out, elEntry{key: kv[0].Value, node: kv[1], path: elJoin(path, kv[0].Value)})
	}
	return out
}

func (c *elConv) routeConfig(n *yaml.Node, path string, ctx elWalkCtx, h *elHCM) (*elRouteConfig, error) {
	rc := &elRouteConfig{name: elStr(elField(n, "name")), path: path, unit: ctx.unit, hcm: h,
		per: elPerEntries(elField(n, "typed_per_filter_config"), elJoin(path, "typed_per_filter_config"))}
	for i, v := range elItems(elField(n, "virtual_hosts")) {
		c.addVhost(rc, v, elIndex(elJoin(path, "virtual_hosts"), i))
	}
	c.rcs = append(c.rcs, rc)
	return rc, nil
}

func (c *elConv) addVhost(rc *elRouteConfig, n *yaml.Node, path string) *elVhost {
	vh := &elVhost{name: elStr(elField(n, "name")), path: path, rc: rc, domains: []string{},
		per:        elPerEntries(elField(n, "typed_per_filter_config"), elJoin(path, "typed_per_filter_config")),
		rateLimits: elField(n, "rate_limits"), rlPath: elJoin(path, "rate_limits")}
	for _, d := range elItems(elField(n, "domains")) {
		vh.domains = append(vh.domains, strings.ToLower(elStr(d)))
	}
	for j, r := range elItems(elField(n, "routes")) {
		vh.routes = append(vh.routes, c.route(r, elIndex(elJoin(path, "routes"), j), vh))
	}
	rc.vhosts = append(rc.vhosts, vh)
	return vh
}

func (c *elConv) route(n *yaml.Node, path string, vh *elVhost) *elRoute {
	r := &elRoute{name: elStr(elField(n, "name")), path: path, vh: vh, match: elDeref(elField(n, "match")),
		per: elPerEntries(elField(n, "typed_per_filter_config"), elJoin(path, "typed_per_filter_config"))}
	if ra := elField(n, "route"); elIsMapping(ra) {
		r.rateLimits, r.rlPath = elField(ra, "rate_limits"), elJoin(path, "route.rate_limits")
		r.includeVh = elStr(elField(ra, "include_vh_rate_limits")) == "true"
		r.cluster = elStr(elField(ra, "cluster"))
		for _, wc := range elItems(elField(elField(ra, "weighted_clusters"), "clusters")) {
			if elField(wc, "typed_per_filter_config") != nil {
				c.noteOnce("the typed_per_filter_config of weighted clusters is not read")
			}
		}
	}
	return r
}

// patch reads one of an EnvoyFilter's configPatches: a filter to insert,
// or what it merges into routes, virtual hosts and route configurations,
// which build the EnvoyFilter's own route configuration.
func (c *elConv) patch(n *yaml.Node, path string, ctx elWalkCtx) error {
	applyTo := elStr(elField(n, "apply_to"))
	p := elField(n, "patch")
	op := elStr(elField(p, "operation"))
	val, vp := elDeref(elField(p, "value")), elJoin(elJoin(path, "patch"), "value")
	if op == "REMOVE" || val == nil {
		return nil
	}
	vhm := elField(elField(elField(n, "match"), "route_configuration"), "vhost")
	vhName, routeName := elStr(elField(vhm, "name")), elStr(elField(elField(vhm, "route"), "name"))
	merge := op == "" || op == "MERGE"
	switch applyTo {
	case "HTTP_ROUTE":
		vh := c.istioVhost(ctx, vhName)
		switch {
		case !merge:
			vh.routes = append(vh.routes, c.route(val, vp, vh))
		case routeName != "":
			c.mergeRoute(vh, routeName, val, vp)
		default:
			vh.per = append(vh.per, elPerEntries(elField(val, "typed_per_filter_config"), elJoin(vp, "typed_per_filter_config"))...)
			if rl := elField(elField(val, "route"), "rate_limits"); rl != nil {
				vh.rateLimits, vh.rlPath = rl, elJoin(vp, "route.rate_limits")
			}
			c.note("%s: the patch merges into every route of virtual host %q; converted as one configuration for all of them, where Envoy gives each route buckets of its own", path, vhName)
		}
	case "VIRTUAL_HOST":
		if !merge {
			c.addVhost(c.istioRC(ctx), val, vp).domains = nil
			return nil
		}
		vh := c.istioVhost(ctx, vhName)
		vh.per = append(vh.per, elPerEntries(elField(val, "typed_per_filter_config"), elJoin(vp, "typed_per_filter_config"))...)
		if rl := elField(val, "rate_limits"); rl != nil {
			vh.rateLimits, vh.rlPath = rl, elJoin(vp, "rate_limits")
		}
	case "ROUTE_CONFIGURATION":
		rc := c.istioRC(ctx)
		rc.per = append(rc.per, elPerEntries(elField(val, "typed_per_filter_config"), elJoin(vp, "typed_per_filter_config"))...)
		for i, v := range elItems(elField(val, "virtual_hosts")) {
			c.addVhost(rc, v, elIndex(elJoin(vp, "virtual_hosts"), i)).domains = nil
		}
	default:
		return c.walk(val, vp, ctx, false)
	}
	return nil
}

// mergeRoute adds what a patch merges into the route named name.
func (c *elConv) mergeRoute(vh *elVhost, name string, val *yaml.Node, vp string) {
	var r *elRoute
	for _, x := range vh.routes {
		if x.name == name {
			r = x
		}
	}
	if r == nil {
		r = &elRoute{name: name, path: vp, vh: vh}
		vh.routes = append(vh.routes, r)
	}
	r.per = append(r.per, elPerEntries(elField(val, "typed_per_filter_config"), elJoin(vp, "typed_per_filter_config"))...)
	if rl := elField(elField(val, "route"), "rate_limits"); rl != nil {
		r.rateLimits, r.rlPath = rl, elJoin(vp, "route.rate_limits")
	}
}

func (c *elConv) istioRC(ctx elWalkCtx) *elRouteConfig {
	rc := c.istio[ctx.unit]
	if rc == nil {
		rc = &elRouteConfig{path: "configPatches", unit: ctx.unit, synthetic: true}
		c.istio[ctx.unit] = rc
		c.rcs = append(c.rcs, rc)
	}
	return rc
}

func (c *elConv) istioVhost(ctx elWalkCtx, name string) *elVhost {
	rc := c.istioRC(ctx)
	for _, vh := range rc.vhosts {
		if vh.name == name {
			return vh
		}
	}
	vh := &elVhost{name: name, path: rc.path, rc: rc}
	rc.vhosts = append(rc.vhosts, vh)
	return vh
}
