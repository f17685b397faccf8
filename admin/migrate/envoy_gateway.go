package migrate

// The converter of Envoy Gateway's rate limits: the rateLimit of
// BackendTrafficPolicies (gateway.envoyproxy.io/v1alpha1), with the
// HTTPRoutes, GRPCRoutes and Gateways they target. Its fields, defaults
// and behaviour follow Envoy Gateway's API (api/v1alpha1,
// ratelimit_types.go and backendtrafficpolicy_types.go) and how its
// translator makes Envoy's configuration of them: a local rule is a
// descriptor of Envoy's local_ratelimit on each route (a token bucket of
// requests per unit, refilled over the unit), the first local rule
// without clientSelectors the route's default bucket, taken only by the
// requests no other rule matches; a global rule is a descriptor of the
// rate limit service (a window of the unit, aligned on the epoch), keyed
// by the Envoy route unless the rule is shared. Every rule of a policy
// applies, each with its own counter; a rule's selectors must all hold;
// a Distinct header, query parameter or source CIDR counts each value
// apart. A policy on a route replaces the one on its Gateway for that
// route, unless it sets mergeType. docs/migrating.md ("Envoy Gateway")
// describes the mapping.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// EnvoyGatewayOptions are the choices a conversion of Envoy Gateway's
// rate limits cannot read from its objects.
type EnvoyGatewayOptions struct {
	// Scope is the scope of the rules of rateLimit.global: "global" (the
	// default: Envoy Gateway counts them in its rate limit service, across
	// every Envoy) or "local" (per Envoy process). The rules of
	// rateLimit.local are always local, as in Envoy Gateway.
	Scope string
	// FleetCluster is the fleet block's cluster of global rules (default
	// "sluice_rls", the cluster envoy.yaml and the chart define).
	FleetCluster string
	// Taken are rule and policy names the conversion must not use
	// (Options.Taken).
	Taken []string
}

// EnvoyGateway converts the rate limits of Envoy Gateway's
// BackendTrafficPolicies into a policy. doc is a YAML stream of
// Kubernetes objects (kubectl get backendtrafficpolicy,httproute,grpcroute,gateway -A -o yaml;
// Lists are opened, other kinds skipped). Each rule of a policy's
// rateLimit becomes a Sluice policy of its own (all of them apply, each
// with its own counter), whose rules match the requests of the policy's
// targets: a route's hostnames and paths when the route is in doc, else
// the names Envoy Gateway gives that route's Envoy routes. Errors name
// the object, the field and its line.
func EnvoyGateway(doc []byte, opt EnvoyGatewayOptions) (Result, error) {
	switch opt.Scope {
	case "":
		opt.Scope = "global"
	case "global", "local":
	default:
		return Result{}, &InputError{"scope", fmt.Errorf("scope %q: want global or local", opt.Scope)}
	}
	if opt.FleetCluster == "" {
		opt.FleetCluster = "sluice_rls"
	}
	if strings.IndexFunc(opt.FleetCluster, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return Result{}, &InputError{"fleet_cluster", fmt.Errorf("fleet_cluster %q: want an Envoy cluster name in printable ASCII", opt.FleetCluster)}
	}
	if len(doc) > maxInput {
		return Result{}, &InputError{"config", fmt.Errorf("config: %d bytes, more than the %d a conversion reads", len(doc), maxInput)}
	}
	c := newConverter(opt.Taken)
	g := &egConverter{converter: c, opt: opt, read: &higressConverter{converter: c},
		routes: map[string]*egRoute{}, gateways: map[string]*egGateway{}}
	if err := g.readStream(doc); err != nil {
		return Result{}, &InputError{"config", err}
	}
	if err := g.build(); err != nil {
		return Result{}, &InputError{"config", err}
	}
	res, err := g.result()
	if err != nil {
		return Result{}, &InputError{"config", err}
	}
	return res, nil
}

// egConverter accumulates one conversion.
type egConverter struct {
	*converter
	opt EnvoyGatewayOptions
	// read holds the YAML readers shared with the Higress converter: each
	// value read is counted (aliases cannot make the work unbounded) and
	// errors name the field and its line.
	read     *higressConverter
	btps     []*egBTP
	routes   map[string]*egRoute   // by kind/namespace/name
	gateways map[string]*egGateway // by namespace/name
	out      []outPolicy
	global   bool // a rule is "scope": "global"
	// anyGlobal and anyLocal: rules of rateLimit.global, of rateLimit.local.
	anyGlobal, anyLocal bool
	headers             struct{ on, off bool }
	usesAddr            bool
}

// egObject is the identity of an object of the stream.
type egObject struct {
	kind, ns, name string
	labels         map[string]string
	v              yval
}

func (o egObject) shown() string { return o.kind + " " + o.ns + "/" + o.name }

// readStream reads the objects of the stream.
func (g *egConverter) readStream(doc []byte) error {
	roots, err := g.read.documents(doc)
	if err != nil {
		return err
	}
	if len(roots) == 0 {
		return fmt.Errorf("config: empty; give BackendTrafficPolicies (kubectl get backendtrafficpolicy,httproute,grpcroute,gateway -A -o yaml)")
	}
	if !isObjectStream(roots) {
		return roots[0].errorf("want Kubernetes objects (BackendTrafficPolicies, with their HTTPRoutes, GRPCRoutes and Gateways), each with its kind")
	}
	for _, r := range roots {
		if err := g.object(r); err != nil {
			return err
		}
	}
	if len(g.btps) == 0 {
		return fmt.Errorf("config: no BackendTrafficPolicy with a rateLimit to convert")
	}
	return nil
}

// object reads one object, opening Lists; kinds the conversion does not
// read are skipped.
func (g *egConverter) object(v yval) error {
	kind, err := g.read.lookupText(v, "kind")
	if err != nil {
		return err
	}
	if strings.HasSuffix(kind, "List") { // List, or a kind's own (BackendTrafficPolicyList)
		items, ok, err := g.read.lookup(v, "items")
		if err != nil || !ok {
			return err
		}
		list, err := g.read.list(items)
		if err != nil {
			return err
		}
		for _, it := range list {
			if err := g.object(it); err != nil {
				return err
			}
		}
		return nil
	}
	switch kind {
	case "BackendTrafficPolicy", "HTTPRoute", "GRPCRoute", "Gateway":
	default:
		return nil
	}
	o, err := g.identity(kind, v)
	if err != nil {
		return err
	}
	spec, ok, err := g.read.lookup(v, "spec")
	if err != nil {
		return err
	}
	if !ok {
		spec = yval{v.path + ".spec", v.n}
	}
	spec.path = o.shown() + ": spec"
	switch kind {
	case "BackendTrafficPolicy":
		return g.backendTrafficPolicy(o, spec, ok)
	case "Gateway":
		return g.gateway(o, spec)
	}
	return g.route(o, spec)
}

// identity reads an object's kind, namespace, name and labels.
func (g *egConverter) identity(kind string, v yval) (egObject, error) {
	o := egObject{kind: kind, v: v, ns: "default"}
	meta, ok, err := g.read.lookup(v, "metadata")
	if err != nil {
		return o, err
	}
	if !ok {
		return o, v.errorf("%s without metadata", kind)
	}
	if o.name, err = g.read.lookupText(meta, "name"); err != nil {
		return o, err
	}
	if o.name == "" {
		return o, meta.errorf("%s without a name", kind)
	}
	ns, err := g.read.lookupText(meta, "namespace")
	if err != nil {
		return o, err
	}
	o.ns = cmp.Or(ns, o.ns)
	if l, ok, err := g.read.lookup(meta, "labels"); err != nil {
		return o, err
	} else if ok {
		f, err := g.read.mapping(l, nil)
		if err != nil {
			return o, err
		}
		o.labels = map[string]string{}
		for k, lv := range f {
			if lv.n.Kind != yaml.ScalarNode || lv.isNull() {
				continue
			}
			o.labels[k] = lv.n.Value
		}
	}
	return o, nil
}

// egRoute is an HTTPRoute or GRPCRoute: the requests it serves, as
// conditions on the host and the path, and where it attaches.
type egRoute struct {
	egObject
	hosts any // the host condition; nil for every host
	// rules are each rule's path condition (nil: every path; never is
	// set when a rule has no path Sluice can write) and its name.
	rules   []egRouteRule
	parents []egParentRef
	// ignored lists what of its matches the conditions leave out
	// (methods, headers, query parameters), for a note.
	ignored []string
}

type egRouteRule struct {
	name string
	path any
}

// egParentRef is a route's parentRef to a Gateway.
type egParentRef struct {
	ns, name, section string
}

// egGateway is a Gateway: its listeners' hostnames, for a policy that
// targets one listener (sectionName).
type egGateway struct {
	egObject
	listeners map[string]*string // listener name -> hostname (nil: any)
}

func (g *egConverter) gateway(o egObject, spec yval) error {
	gw := &egGateway{egObject: o, listeners: map[string]*string{}}
	ls, ok, err := g.read.lookup(spec, "listeners")
	if err != nil {
		return err
	}
	if ok {
		list, err := g.read.list(ls)
		if err != nil {
			return err
		}
		for _, l := range list {
			name, err := g.read.lookupText(l, "name")
			if err != nil {
				return err
			}
			host, err := g.read.lookupText(l, "hostname")
			if err != nil {
				return err
			}
			if host == "" {
				gw.listeners[name] = nil
			} else {
				gw.listeners[name] = &host
			}
		}
	}
	g.gateways[o.ns+"/"+o.name] = gw
	return nil
}

// route reads what an HTTPRoute or GRPCRoute serves: its hostnames and
// the paths of its rules' matches.
func (g *egConverter) route(o egObject, spec yval) error {
	r := &egRoute{egObject: o}
	if hv, ok, err := g.read.lookup(spec, "hostnames"); err != nil {
		return err
	} else if ok {
		hosts, err := g.read.texts(hv)
		if err != nil {
			return err
		}
		if len(hosts) > 0 {
			cond, all, err := hostCondition(hv, hosts)
			if err != nil {
				return err
			}
			if !all {
				r.hosts = cond
			}
		}
	}
	if pv, ok, err := g.read.lookup(spec, "parentRefs"); err != nil {
		return err
	} else if ok {
		list, err := g.read.list(pv)
		if err != nil {
			return err
		}
		for _, p := range list {
			kind, err := g.read.lookupText(p, "kind")
			if err != nil {
				return err
			}
			if kind != "" && kind != "Gateway" {
				continue
			}
			ref := egParentRef{ns: o.ns}
			if ref.name, err = g.read.lookupText(p, "name"); err != nil {
				return err
			}
			ns, err := g.read.lookupText(p, "namespace")
			if err != nil {
				return err
			}
			ref.ns = cmp.Or(ns, ref.ns)
			if ref.section, err = g.read.lookupText(p, "sectionName"); err != nil {
				return err
			}
			r.parents = append(r.parents, ref)
		}
	}
	rv, ok, err := g.read.lookup(spec, "rules")
	if err != nil {
		return err
	}
	var rules []yval
	if ok {
		if rules, err = g.read.list(rv); err != nil {
			return err
		}
	}
	if len(rules) == 0 {
		r.rules = []egRouteRule{{}}
	}
	for _, rule := range rules {
		rr, err := g.routeRule(r, rule)
		if err != nil {
			return err
		}
		r.rules = append(r.rules, rr)
	}
	g.routes[o.kind+"/"+o.ns+"/"+o.name] = r
	return nil
}

// routeRule reads the paths of one rule's matches, as one condition.
func (g *egConverter) routeRule(r *egRoute, rule yval) (egRouteRule, error) {
	var out egRouteRule
	var err error
	if out.name, err = g.read.lookupText(rule, "name"); err != nil {
		return out, err
	}
	mv, ok, err := g.read.lookup(rule, "matches")
	if err != nil || !ok {
		return out, err // no matches: every request of the hostnames
	}
	matches, err := g.read.list(mv)
	if err != nil || len(matches) == 0 {
		return out, err
	}
	var exact, res []string
	for _, m := range matches {
		for _, k := range []string{"headers", "queryParams"} {
			if _, ok, err := g.read.lookup(m, k); err != nil {
				return out, err
			} else if ok && !slices.Contains(r.ignored, k) {
				r.ignored = append(r.ignored, k)
			}
		}
		var re, ex string
		var all bool
		if r.kind == "GRPCRoute" {
			re, all, err = g.grpcMatchPath(m)
		} else {
			if _, ok, err := g.read.lookup(m, "method"); err != nil {
				return out, err
			} else if ok && !slices.Contains(r.ignored, "method") {
				r.ignored = append(r.ignored, "method")
			}
			re, ex, all, err = g.httpMatchPath(m)
		}
		switch {
		case err != nil:
			return out, err
		case all:
			return out, nil // one match takes every path: the rule does
		case ex != "":
			exact = append(exact, ex)
		default:
			res = append(res, re)
		}
	}
	out.path = pathUnion(exact, res)
	if m, ok := out.path.(map[string]any); ok && len(fmt.Sprint(m["regex"])) > policy.MaxRegexLen {
		re := fmt.Sprint(m["regex"])
		return out, mv.errorf("the paths make a regular expression of %d bytes, more than %d; convert the rules by hand", len(re), policy.MaxRegexLen)
	}
	return out, nil
}
