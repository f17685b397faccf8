package migrate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// KongOptions are the choices a conversion of Kong's configuration cannot
// read from it.
type KongOptions struct {
	// ConsumerKey is the key source holding what Kong knew a consumer by,
	// its key-auth key: limit_by consumer and credential key on it, and a
	// consumer's own plugin applies to requests whose value is one of that
	// consumer's keyauth_credentials. Default "header:<the first key_names
	// of the first key-auth plugin in the file>", else "header:apikey"
	// (key-auth's default).
	ConsumerKey string
	// FleetCluster is the fleet block's cluster when a plugin counts in
	// Redis or Kong's database (policy redis or cluster; default
	// "sluice_rls", the cluster envoy.yaml and the chart define).
	FleetCluster string
	// Taken are rule and policy names the conversion must not use: those
	// of the policy its output is added to (AddTo).
	Taken []string
}

// Kong converts the rate-limiting plugins of Kong's declarative
// configuration (kong.yaml of DB-less Kong or decK, YAML or JSON:
// services with their routes and plugins, routes, consumers with their
// plugins and keyauth_credentials, plugins referring to them by name or
// id), or of a Kubernetes YAML stream of the Kong Ingress Controller's
// KongPlugin and KongClusterPlugin objects, into a policy
// (docs/migrating.md, "Kong rate-limiting"). Kong runs one rate-limiting
// instance per request, the most specific for its consumer, route and
// service; so each period (second to year) is one policy whose rules are
// ordered as Kong picks the instance, each matching its instance's routes
// (all requests for a global one, a consumer's keys for a consumer's).
// Errors name the field (services[0].plugins[1].config.minute).
func Kong(doc []byte, opt KongOptions) (Result, error) {
	const input = "config"
	if len(doc) > maxInput {
		return Result{}, &InputError{input, fmt.Errorf("config: %d bytes, more than the %d a conversion reads", len(doc), maxInput)}
	}
	if opt.FleetCluster == "" {
		opt.FleetCluster = "sluice_rls"
	}
	docs, err := kongDocuments(doc)
	if err != nil {
		return Result{}, &InputError{input, err}
	}
	k := &kongConv{
		converter: newConverter(opt.Taken),
		opts:      opt,
		svcByRef:  map[string]*kongSvc{}, rtByRef: map[string]*kongRt{}, consByRef: map[string]*kongCons{},
		scopes: map[string]string{},
	}
	kube := kongIsKubernetes(docs)
	if kube {
		err = k.readKubernetes(docs)
	} else {
		err = k.readDeclarative(docs)
	}
	if err != nil {
		return Result{}, &InputError{input, err}
	}
	if err := k.chooseConsumerKey(); err != nil {
		if k.opts.ConsumerKey != "" {
			return Result{}, &InputError{"consumer_key", err}
		}
		return Result{}, &InputError{input, err}
	}
	if len(k.limits) == 0 {
		return Result{}, &InputError{input, k.nothingToConvert()}
	}
	k.chooseReply()
	if kube {
		err = k.buildKubernetes()
	} else {
		err = k.buildDeclarative()
	}
	if err != nil {
		return Result{}, &InputError{input, err}
	}
	return k.result()
}

// ---- Input ----

// kongFile is the part of Kong's declarative configuration the conversion
// reads; other entities and fields are not read.
type kongFile struct {
	FormatVersion      string           `yaml:"_format_version"`
	Services           []kongService    `yaml:"services"`
	Routes             []kongRoute      `yaml:"routes"`
	Consumers          []kongConsumer   `yaml:"consumers"`
	Plugins            []kongPlugin     `yaml:"plugins"`
	KeyauthCredentials []kongCredential `yaml:"keyauth_credentials"`
	ConsumerGroups     []struct {
		Name    string       `yaml:"name"`
		Plugins []kongPlugin `yaml:"plugins"`
	} `yaml:"consumer_groups"`
}

type kongService struct {
	ID      string       `yaml:"id"`
	Name    string       `yaml:"name"`
	Routes  []kongRoute  `yaml:"routes"`
	Plugins []kongPlugin `yaml:"plugins"`
}

type kongRoute struct {
	ID            string              `yaml:"id"`
	Name          string              `yaml:"name"`
	Service       kongRef             `yaml:"service"`
	Paths         []string            `yaml:"paths"`
	Hosts         []string            `yaml:"hosts"`
	Methods       []string            `yaml:"methods"`
	Headers       map[string][]string `yaml:"headers"`
	SNIs          []string            `yaml:"snis"`
	Sources       []any               `yaml:"sources"`
	Destinations  []any               `yaml:"destinations"`
	Expression    string              `yaml:"expression"`
	RegexPriority int                 `yaml:"regex_priority"`
	Plugins       []kongPlugin        `yaml:"plugins"`
}

type kongConsumer struct {
	ID                 string           `yaml:"id"`
	Username           string           `yaml:"username"`
	CustomID           string           `yaml:"custom_id"`
	KeyauthCredentials []kongCredential `yaml:"keyauth_credentials"`
	Plugins            []kongPlugin     `yaml:"plugins"`
}

type kongCredential struct {
	Key      string  `yaml:"key"`
	Consumer kongRef `yaml:"consumer"`
}

type kongPlugin struct {
	Name          string    `yaml:"name"`
	InstanceName  string    `yaml:"instance_name"`
	Enabled       *bool     `yaml:"enabled"`
	Config        yaml.Node `yaml:"config"`
	Service       kongRef   `yaml:"service"`
	Route         kongRef   `yaml:"route"`
	Consumer      kongRef   `yaml:"consumer"`
	ConsumerGroup kongRef   `yaml:"consumer_group"`
	line          int
}

func (p *kongPlugin) UnmarshalYAML(n *yaml.Node) error {
	type plain kongPlugin
	if err := n.Decode((*plain)(p)); err != nil {
		return err
	}
	p.line = n.Line
	return nil
}

// kongRef is a reference to another entity: its name or id (DB-less
// Kong's form), or {name: ...} / {id: ...} (decK's).
type kongRef struct{ ID, Name string }

func (r *kongRef) UnmarshalYAML(n *yaml.Node) error {
	switch {
	case n.Kind == yaml.ScalarNode && n.Tag == "!!null":
		return nil
	case n.Kind == yaml.ScalarNode:
		r.Name = n.Value
		return nil
	case n.Kind == yaml.MappingNode:
		var m struct {
			ID       string `yaml:"id"`
			Name     string `yaml:"name"`
			Username string `yaml:"username"`
		}
		if err := n.Decode(&m); err != nil {
			return err
		}
		r.ID, r.Name = m.ID, m.Name
		if r.Name == "" {
			r.Name = m.Username
		}
		return nil
	}
	return fmt.Errorf("line %d: want a name, an id or {name: ...}", n.Line)
}

func (r kongRef) set() bool { return r.ID != "" || r.Name != "" }

func (r kongRef) String() string {
	if r.Name != "" {
		return r.Name
	}
	return r.ID
}

// kongDocuments reads the YAML (or JSON) stream's documents, empty ones
// left out.
func kongDocuments(doc []byte) ([]*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var out []*yaml.Node
	for i := 1; ; i++ {
		n := new(yaml.Node)
		err := dec.Decode(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("config: document %d: %s", i, yamlError(err))
		}
		if len(n.Content) == 1 && n.Content[0].Tag != "!!null" {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("config: empty; give kong.yaml (decK's or DB-less Kong's declarative configuration) or the KongPlugin objects")
	}
	return out, nil
}

// ---- The plugin's configuration ----

// kongPeriods are Kong's periods, shortest first: the order of the
// policies.
var kongPeriods = []string{"second", "minute", "hour", "day", "month", "year"}

// kongWindow: Kong counts the shorter periods in windows aligned to the
// UTC clock, as Sluice's fixed windows are; its month and year are
// calendar ones from the 1st and January 1st in UTC
// (kong/tools/timestamp.lua), Sluice's quota periods.
var kongWindow = map[string]int{"second": 1, "minute": 60, "hour": 3600, "day": 86400}

// kongLimit is one rate-limiting plugin's configuration, Kong's defaults
// filled in.
type kongLimit struct {
	limits  map[string]int // period: requests (Kong's number, rounded up)
	limitBy string
	header  string // header_name, lower-cased
	path    string
	policy  string
	hide    bool
	code    int
	message string
}

func (l *kongLimit) global() bool { return l.policy == "redis" || l.policy == "cluster" }

// kongRedisFields are Kong's fields that hold its Redis connection: in
// fleet mode the admin holds that connection (its -redis-* flags).
var kongRedisFields = map[string]bool{
	"redis": true, "redis_host": true, "redis_port": true, "redis_password": true, "redis_username": true,
	"redis_ssl": true, "redis_ssl_verify": true, "redis_server_name": true, "redis_timeout": true, "redis_database": true,
}

var kongLimitBy = []string{"consumer", "credential", "ip", "service", "header", "path"}

// headerToken is an HTTP field name (RFC 9110 token).
var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// readLimit reads a rate-limiting plugin's config (kong/plugins/
// rate-limiting/schema.lua): every field Kong knows, null being unset as
// in decK's dumps; an unknown field is an error.
func (k *kongConv) readLimit(path string, n *yaml.Node) (kongLimit, error) {
	lim := kongLimit{limits: map[string]int{}, limitBy: "consumer", policy: "local", code: 429, message: "API rate limit exceeded"}
	n = kongDeref(n)
	if n.Kind == 0 || n.Tag == "!!null" {
		return lim, fmt.Errorf("%s: missing; Kong needs at least one of second, minute, hour, day, month and year", path)
	}
	if n.Kind != yaml.MappingNode {
		return lim, fmt.Errorf("%s (line %d): want a mapping of the plugin's fields", path, n.Line)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, v := n.Content[i], kongDeref(n.Content[i+1])
		field := fmt.Sprintf("%s.%s (line %d)", path, key.Value, key.Line)
		if seen[key.Value] {
			return lim, fmt.Errorf("%s: set twice", field)
		}
		seen[key.Value] = true
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue
		}
		if err := k.limitField(&lim, field, key.Value, v); err != nil {
			return lim, err
		}
	}
	switch {
	case len(lim.limits) == 0:
		return lim, fmt.Errorf("%s: none of second, minute, hour, day, month and year is set; Kong refuses such a plugin", path)
	case lim.limitBy == "header" && lim.header == "":
		return lim, fmt.Errorf("%s.header_name: required with limit_by header", path)
	case lim.limitBy == "path" && lim.path == "":
		return lim, fmt.Errorf("%s.path: required with limit_by path", path)
	}
	return lim, nil
}

// limitField reads one field of a rate-limiting config.
func (k *kongConv) limitField(lim *kongLimit, field, name string, v *yaml.Node) error {
	var err error
	switch name {
	case "second", "minute", "hour", "day", "month", "year":
		var f float64
		if f, err = kongNumber(field, v); err != nil {
			return err
		}
		if f <= 0 || f > 1e12 {
			return fmt.Errorf("%s: %v; want more than 0 and at most 1e12", field, f)
		}
		// Kong admits while the count is below the limit: 2.5 admits 3.
		lim.limits[name] = int(math.Ceil(f))
		if f != math.Ceil(f) {
			k.note("%s: %v is %d whole requests, as Kong counts", field, f, lim.limits[name])
		}
	case "limit_by":
		if lim.limitBy, err = kongString(field, v); err == nil && !slices.Contains(kongLimitBy, lim.limitBy) {
			err = fmt.Errorf("%s: %q; want one of %s", field, lim.limitBy, strings.Join(kongLimitBy, ", "))
		}
	case "header_name":
		if lim.header, err = kongString(field, v); err == nil && !headerToken.MatchString(lim.header) {
			err = fmt.Errorf("%s: %q is not a header name", field, lim.header)
		}
		lim.header = strings.ToLower(lim.header)
	case "path":
		if lim.path, err = kongString(field, v); err == nil && !strings.HasPrefix(lim.path, "/") {
			err = fmt.Errorf("%s: %q; want a path starting with /", field, lim.path)
		}
	case "policy":
		if lim.policy, err = kongString(field, v); err == nil && lim.policy != "local" && lim.policy != "redis" && lim.policy != "cluster" {
			err = fmt.Errorf("%s: %q; want local, redis or cluster", field, lim.policy)
		}
	case "hide_client_headers":
		lim.hide, err = kongBool(field, v)
	case "error_code":
		var f float64
		if f, err = kongNumber(field, v); err == nil && (f != math.Trunc(f) || f < 400 || f > 599) {
			err = fmt.Errorf("%s: %v; Sluice's reject_status is a status from 400 to 599", field, f)
		}
		lim.code = int(f)
	case "error_message":
		lim.message, err = kongString(field, v)
	case "fault_tolerant":
		var on bool
		if on, err = kongBool(field, v); err == nil && !on {
			k.noteOnce("fault_tolerant: false is not converted: Sluice lets requests through when its storage fails, as Kong's default does")
		}
	case "sync_rate":
		_, err = kongNumber(field, v)
	default:
		if !kongRedisFields[name] {
			return fmt.Errorf("%s: not a field of Kong's rate-limiting plugin; remove it or correct its name", field)
		}
	}
	return err
}

func kongDeref(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func kongNumber(field string, v *yaml.Node) (float64, error) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!int" && v.Tag != "!!float") {
		return 0, fmt.Errorf("%s: want a number", field)
	}
	var f float64
	if err := v.Decode(&f); err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s: want a number", field)
	}
	return f, nil
}

func kongString(field string, v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
		return "", fmt.Errorf("%s: want a string", field)
	}
	return v.Value, nil
}

func kongBool(field string, v *yaml.Node) (bool, error) {
	var b bool
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&b) != nil {
		return false, fmt.Errorf("%s: want true or false", field)
	}
	return b, nil
}

// ---- The model ----

// kongConv holds one conversion: the entities read, the plugins to
// convert, the names used and the notes.
type kongConv struct {
	*converter
	opts        KongOptions
	legacyPaths bool // a 1.1 or 2.1 file: paths without ~ may be regular expressions
	services    []*kongSvc
	svcByRef    map[string]*kongSvc
	rtByRef     map[string]*kongRt
	consByRef   map[string]*kongCons
	limits      []*kongRL
	scopes      map[string]string // a scope's identity: the plugin holding it
	keyAuths    []kongKeyAuth
	skipped     []string // why plugins were left out, for an error when nothing converts
	items       int
	consumerKey string
	routes      []*kongRt // the top-level routes, in order
	consumers   []*kongCons
	out         []kongPolicy
	// The top-level settings, chosen among the plugins'.
	status   int
	body     string // error message of the most plugins
	showHdrs bool
}

type kongSvc struct {
	name   string
	routes []*kongRt
}

type kongRt struct {
	name, path string
	svc        *kongSvc
	conds      kongConds
	prio       uint64
	err        error  // the route cannot be written as a match
	lost       string // criteria not converted (snis, ...)
}

type kongCons struct {
	name string
	keys []string
}

// kongKeyAuth is a key-auth plugin: where consumers' keys are read.
type kongKeyAuth struct {
	line      int
	path      string
	keyNames  []string
	inQuery   bool
	anonymous string
	svc       *kongSvc // where it runs: nil and nil for every route
	rt        *kongRt
}

// kongRL is one rate-limiting plugin to convert.
type kongRL struct {
	path    string // where it is: services[0].plugins[1]
	label   string // its rules' names start with it
	lim     kongLimit
	svc     *kongSvc
	rt      *kongRt
	cons    *kongCons
	level   int
	targets []kongTarget
	note    string // Kubernetes: what the user must add
	// byAddress: limit_by consumer where Kong never knows the consumer,
	// so it counts per client address.
	byAddress bool
}

// kongTarget is one set of conditions a plugin's rules match.
type kongTarget struct {
	conds     kongConds
	prio      uint64
	label     string // a service of a global limit_by service plugin
	byAddress bool   // after those, the requests of no service
}

// Bounds on the work of one conversion.
const (
	kongMaxItems  = 200000 // routes, paths, hosts, keys, plugins
	kongMaxRoutes = 10000  // routes of one service
)

func (k *kongConv) count(path string, n int) error {
	if k.items += n; k.items > kongMaxItems {
		return fmt.Errorf("%s: more than %d routes, paths, hosts, keys and plugins (YAML aliases expanded); convert part of the file at a time", path, kongMaxItems)
	}
	return nil
}

// kongLevel is Kong's precedence of a plugin's scope, most specific first
// (kong/runloop/plugins_iterator.lua, lookup_cfg): consumer, route and
// service; consumer and route; consumer and service; route and service;
// consumer; route; service; global.
func kongLevel(cons, rt, svc bool) int {
	switch {
	case cons && rt && svc:
		return 1
	case cons && rt:
		return 2
	case cons && svc:
		return 3
	case rt && svc:
		return 4
	case cons:
		return 5
	case rt:
		return 6
	case svc:
		return 7
	}
	return 8
}

// ---- Reading kong.yaml ----

func (k *kongConv) readDeclarative(docs []*yaml.Node) error {
	if len(docs) > 1 {
		return fmt.Errorf("config: %d YAML documents; give one kong.yaml (merge split files with deck file merge)", len(docs))
	}
	if docs[0].Content[0].Kind != yaml.MappingNode {
		return fmt.Errorf("config (line %d): want Kong's declarative configuration, a mapping with _format_version, services, routes, consumers and plugins", docs[0].Content[0].Line)
	}
	var f kongFile
	if err := docs[0].Decode(&f); err != nil {
		return fmt.Errorf("config: %s", yamlError(err))
	}
	switch v := f.FormatVersion; {
	case v == "1.1" || v == "2.1":
		k.legacyPaths = true
	case v != "" && !strings.HasPrefix(v, "3."):
		return fmt.Errorf("config._format_version: %q; want 3.0 (or 1.1, 2.1)", v)
	}
	if err := k.readEntities(&f); err != nil {
		return err
	}
	return k.readPlugins(&f)
}

// readEntities indexes services, routes and consumers by name and id.
func (k *kongConv) readEntities(f *kongFile) error {
	for i := range f.Services {
		s := &f.Services[i]
		svc := &kongSvc{name: kongFirst(s.Name, s.ID, fmt.Sprintf("service%d", i+1))}
		k.services = append(k.services, svc)
		kongIndex(k.svcByRef, svc, s.Name, s.ID)
		for j := range s.Routes {
			if _, err := k.addRoute(fmt.Sprintf("services[%d].routes[%d]", i, j), &s.Routes[j], svc, fmt.Sprintf("%s-route%d", svc.name, j+1)); err != nil {
				return err
			}
		}
	}
	for i := range f.Routes {
		r := &f.Routes[i]
		path := fmt.Sprintf("routes[%d]", i)
		var svc *kongSvc
		if r.Service.set() {
			if svc = kongLookup(k.svcByRef, r.Service); svc == nil {
				return fmt.Errorf("%s.service: no service named or with id %q in the file", path, r.Service)
			}
		}
		rt, err := k.addRoute(path, r, svc, fmt.Sprintf("route%d", i+1))
		if err != nil {
			return err
		}
		k.routes = append(k.routes, rt)
	}
	for i := range f.Consumers {
		c := &f.Consumers[i]
		path := fmt.Sprintf("consumers[%d]", i)
		cons := &kongCons{name: kongFirst(c.Username, c.CustomID, c.ID, fmt.Sprintf("consumer%d", i+1))}
		kongIndex(k.consByRef, cons, c.Username, c.ID)
		k.consumers = append(k.consumers, cons)
		for j, cred := range c.KeyauthCredentials {
			k.addKey(fmt.Sprintf("%s.keyauth_credentials[%d]", path, j), cons, cred.Key)
		}
		if err := k.count(path, 1+len(c.KeyauthCredentials)); err != nil {
			return err
		}
	}
	for i, cred := range f.KeyauthCredentials {
		path := fmt.Sprintf("keyauth_credentials[%d]", i)
		cons := kongLookup(k.consByRef, cred.Consumer)
		if cons == nil {
			return fmt.Errorf("%s.consumer: no consumer named or with id %q in the file", path, cred.Consumer)
		}
		k.addKey(path, cons, cred.Key)
	}
	return nil
}

func (k *kongConv) addKey(path string, cons *kongCons, key string) {
	switch {
	case key == "":
		k.note("%s: no key in the file (Kong generated it); the consumer's plugins cannot match it", path)
	case strings.HasPrefix(key, "{vault://"):
		k.note("%s: the key is a vault reference; the consumer's plugins cannot match it", path)
	case !slices.Contains(cons.keys, key):
		cons.keys = append(cons.keys, key)
	}
}

func (k *kongConv) addRoute(path string, r *kongRoute, svc *kongSvc, fallback string) (*kongRt, error) {
	if err := k.count(path, 1+len(r.Paths)+len(r.Hosts)+len(r.Methods)+len(r.Headers)); err != nil {
		return nil, err
	}
	rt := &kongRt{name: kongFirst(r.Name, r.ID, fallback), path: path, svc: svc}
	rt.conds, rt.prio, rt.err = k.routeConds(path, r)
	rt.lost = kongLost(r)
	kongIndex(k.rtByRef, rt, r.Name, r.ID)
	if svc != nil {
		if len(svc.routes) >= kongMaxRoutes {
			return nil, fmt.Errorf("%s: service %s has more than %d routes; convert part of the file at a time", path, svc.name, kongMaxRoutes)
		}
		svc.routes = append(svc.routes, rt)
	}
	return rt, nil
}

// kongLost names a route's criteria the rules cannot match on.
func kongLost(r *kongRoute) string {
	var lost []string
	if len(r.SNIs) > 0 {
		lost = append(lost, "snis")
	}
	if len(r.Sources) > 0 {
		lost = append(lost, "sources")
	}
	if len(r.Destinations) > 0 {
		lost = append(lost, "destinations")
	}
	return strings.Join(lost, ", ")
}

func kongFirst(names ...string) string {
	for _, n := range names {
		if n != "" {
			return n
		}
	}
	return ""
}

// kongIndex records an entity under its name and id; the first of two
// with one name wins, as Kong refuses the second.
func kongIndex[T any](m map[string]*T, v *T, refs ...string) {
	for _, r := range refs {
		if _, dup := m[r]; r != "" && !dup {
			m[r] = v
		}
	}
}

func kongLookup[T any](m map[string]*T, r kongRef) *T {
	if v := m[r.Name]; r.Name != "" && v != nil {
		return v
	}
	if r.ID != "" {
		return m[r.ID]
	}
	return nil
}

// kongScope is where a plugin sits in the file.
type kongScope struct {
	svc  *kongSvc
	rt   *kongRt
	cons *kongCons
}

// readPlugins reads every plugin, nested or top-level, in the file's
// order of entities.
func (k *kongConv) readPlugins(f *kongFile) error {
	type at struct {
		path string
		p    *kongPlugin
		in   kongScope
	}
	var all []at
	add := func(path string, ps []kongPlugin, in kongScope) {
		for i := range ps {
			all = append(all, at{fmt.Sprintf("%s.plugins[%d]", path, i), &ps[i], in})
		}
	}
	for i := range f.Services {
		s := &f.Services[i]
		add(fmt.Sprintf("services[%d]", i), s.Plugins, kongScope{svc: k.services[i]})
		for j := range s.Routes {
			add(fmt.Sprintf("services[%d].routes[%d]", i, j), s.Routes[j].Plugins, kongScope{rt: k.services[i].routes[j]})
		}
	}
	for i := range f.Routes {
		add(fmt.Sprintf("routes[%d]", i), f.Routes[i].Plugins, kongScope{rt: k.routes[i]})
	}
	for i := range f.Consumers {
		add(fmt.Sprintf("consumers[%d]", i), f.Consumers[i].Plugins, kongScope{cons: k.consumers[i]})
	}
	add("", f.Plugins, kongScope{})
	for i, g := range f.ConsumerGroups {
		for j, p := range g.Plugins {
			if strings.Contains(p.Name, "rate") {
				k.note("consumer_groups[%d].plugins[%d]: %s of consumer group %s is not converted: write its rule by hand, matching the group's consumers", i, j, p.Name, g.Name)
			}
		}
	}
	if err := k.count("plugins", len(all)); err != nil {
		return err
	}
	for _, a := range all {
		if err := k.plugin(strings.TrimPrefix(a.path, "."), a.p, a.in); err != nil {
			return err
		}
	}
	return nil
}

// kongOtherLimiter: Kong's other rate limiting plugins, not converted.
func kongOtherLimiter(name string) bool {
	return name != "rate-limiting" && (strings.Contains(name, "rate-limiting") || strings.Contains(name, "ratelimiting"))
}

// plugin reads one plugin: a key-auth (where keys come from), a
// rate-limiting to convert, or another limiter to name in a note.
func (k *kongConv) plugin(path string, p *kongPlugin, in kongScope) error {
	switch {
	case p.Name == "key-auth" && (p.Enabled == nil || *p.Enabled):
		sc, err := k.resolve(path, p, in)
		if err != nil {
			return err
		}
		return k.keyAuth(path, p, sc)
	case kongOtherLimiter(p.Name):
		k.note("%s: %s is not converted (only rate-limiting is); write its rules by hand", path, p.Name)
		k.skipped = append(k.skipped, fmt.Sprintf("%s at %s is not converted", p.Name, path))
		return nil
	case p.Name != "rate-limiting":
		return nil
	case p.Enabled != nil && !*p.Enabled:
		k.note("%s: a disabled rate-limiting plugin (enabled: false); skipped", path)
		k.skipped = append(k.skipped, fmt.Sprintf("the plugin at %s is disabled", path))
		return nil
	case p.ConsumerGroup.set():
		k.note("%s: a rate-limiting plugin of consumer group %s is not converted: write its rule by hand, matching the group's consumers", path, p.ConsumerGroup)
		k.skipped = append(k.skipped, fmt.Sprintf("the plugin at %s is a consumer group's", path))
		return nil
	}
	sc, err := k.resolve(path, p, in)
	if err != nil {
		return err
	}
	lim, err := k.readLimit(path+".config", &p.Config)
	if err != nil {
		return err
	}
	rl := &kongRL{path: path, lim: lim, svc: sc.svc, rt: sc.rt, cons: sc.cons, level: kongLevel(sc.cons != nil, sc.rt != nil, sc.svc != nil)}
	rl.label = kongFirst(p.InstanceName, kongLabel(sc))
	if other, dup := k.scopes[kongScopeKey(sc)]; dup {
		return fmt.Errorf("%s: a second rate-limiting plugin for %s (also %s); Kong keeps one per scope", path, kongLabel(sc), other)
	}
	k.scopes[kongScopeKey(sc)] = path
	if rl.rt != nil && rl.svc != nil && rl.rt.svc != rl.svc {
		k.note("%s: route %s is not a route of service %s, so the plugin never applies; skipped", path, rl.rt.name, rl.svc.name)
		return nil
	}
	if rl.cons != nil && len(rl.cons.keys) == 0 {
		k.note("%s: consumer %s has no key-auth key in the file, so its plugin cannot be matched; skipped (add its keyauth_credentials, or write the rule by hand)", path, rl.cons.name)
		k.skipped = append(k.skipped, fmt.Sprintf("consumer %s of %s has no key", rl.cons.name, path))
		return nil
	}
	k.limits = append(k.limits, rl)
	return nil
}

// resolve combines where a plugin is nested with the entities it names.
func (k *kongConv) resolve(path string, p *kongPlugin, in kongScope) (kongScope, error) {
	sc := in
	if p.Service.set() {
		s := kongLookup(k.svcByRef, p.Service)
		if s == nil {
			return sc, fmt.Errorf("%s.service: no service named or with id %q in the file", path, p.Service)
		}
		if in.svc != nil && in.svc != s {
			return sc, fmt.Errorf("%s.service: %q, but the plugin is nested in service %s", path, p.Service, in.svc.name)
		}
		sc.svc = s
	}
	if p.Route.set() {
		r := kongLookup(k.rtByRef, p.Route)
		if r == nil {
			return sc, fmt.Errorf("%s.route: no route named or with id %q in the file", path, p.Route)
		}
		if in.rt != nil && in.rt != r {
			return sc, fmt.Errorf("%s.route: %q, but the plugin is nested in route %s", path, p.Route, in.rt.name)
		}
		sc.rt = r
	}
	if p.Consumer.set() {
		c := kongLookup(k.consByRef, p.Consumer)
		if c == nil {
			return sc, fmt.Errorf("%s.consumer: no consumer named or with id %q in the file", path, p.Consumer)
		}
		if in.cons != nil && in.cons != c {
			return sc, fmt.Errorf("%s.consumer: %q, but the plugin is nested in consumer %s", path, p.Consumer, in.cons.name)
		}
		sc.cons = c
	}
	return sc, nil
}

func kongLabel(sc kongScope) string {
	var parts []string
	if sc.cons != nil {
		parts = append(parts, sc.cons.name)
	}
	if sc.rt != nil {
		parts = append(parts, sc.rt.name)
	} else if sc.svc != nil {
		parts = append(parts, sc.svc.name)
	}
	if len(parts) == 0 {
		return "global"
	}
	return strings.Join(parts, "-")
}

func kongScopeKey(sc kongScope) string {
	return fmt.Sprintf("%p|%p|%p", sc.svc, sc.rt, sc.cons)
}

func (k *kongConv) keyAuth(path string, p *kongPlugin, sc kongScope) error {
	if sc.cons != nil {
		return fmt.Errorf("%s: key-auth of consumer %s; Kong refuses key-auth on a consumer", path, sc.cons.name)
	}
	var cfg struct {
		KeyNames   []string `yaml:"key_names"`
		KeyInQuery *bool    `yaml:"key_in_query"`
		Anonymous  string   `yaml:"anonymous"`
	}
	if n := kongDeref(&p.Config); n.Kind != 0 {
		if err := n.Decode(&cfg); err != nil {
			return fmt.Errorf("%s.config: %s", path, yamlError(err))
		}
	}
	if len(cfg.KeyNames) == 0 {
		cfg.KeyNames = []string{"apikey"}
	}
	k.keyAuths = append(k.keyAuths, kongKeyAuth{line: p.line, path: path, keyNames: cfg.KeyNames,
		inQuery: cfg.KeyInQuery == nil || *cfg.KeyInQuery, anonymous: cfg.Anonymous, svc: sc.svc, rt: sc.rt})
	return nil
}

// authEverywhere: Kong knows the consumer on every route, key-auth being
// global (or not in the file, which cannot tell).
func (k *kongConv) authEverywhere() bool {
	for _, ka := range k.keyAuths {
		if ka.svc == nil && ka.rt == nil {
			return true
		}
	}
	return len(k.keyAuths) == 0
}

// authenticated: key-auth runs on the route, so Kong knows its consumer.
func (k *kongConv) authenticated(rt *kongRt) bool {
	if k.authEverywhere() {
		return true
	}
	for _, ka := range k.keyAuths {
		if ka.rt == rt || (ka.rt == nil && ka.svc != nil && ka.svc == rt.svc) {
			return true
		}
	}
	return false
}

// chooseConsumerKey sets the key source consumers are known by, and says
// how, when a rule uses it.
func (k *kongConv) chooseConsumerKey() error {
	slices.SortStableFunc(k.keyAuths, func(a, b kongKeyAuth) int { return a.line - b.line })
	k.consumerKey = k.opts.ConsumerKey
	if k.consumerKey == "" {
		k.consumerKey = "header:apikey"
		if len(k.keyAuths) > 0 {
			k.consumerKey = "header:" + strings.ToLower(k.keyAuths[0].keyNames[0])
		}
	}
	probe := fmt.Sprintf(`{"rules":[{"name":"p","limit_keys":[%q],"algorithm":"fixed_window","algorithm_config":{"limit":1,"window_seconds":1}}]}`, k.consumerKey)
	if _, err := policy.Parse([]byte(probe)); err != nil {
		what := "consumer_key"
		if k.opts.ConsumerKey == "" {
			what = k.keyAuths[0].path + ".config.key_names[0]"
		}
		return fmt.Errorf("%s: %q is not a key source Sluice reads; set the consumer key (e.g. header:apikey)", what, k.consumerKey)
	}
	if !k.usesConsumers() {
		return nil
	}
	how := "the first key_names of key-auth in the file"
	switch {
	case k.opts.ConsumerKey != "":
		how = "as asked"
	case len(k.keyAuths) == 0:
		how = "key-auth's default, no key-auth plugin being in the file"
	}
	k.note("consumers are known by their key-auth key in %s (%s); Sluice does not authenticate, so put the check of keys before it and set the consumer key to where your Envoy finds them (e.g. a jwt_authn claim, metadata:envoy.filters.http.jwt_authn:jwt_payload.sub)", k.consumerKey, how)
	for _, ka := range k.keyAuths {
		if names := strings.Join(ka.keyNames, ", "); !strings.EqualFold("header:"+ka.keyNames[0], k.consumerKey) || len(ka.keyNames) > 1 {
			k.noteOnce(fmt.Sprintf("%s: key-auth reads the key from %s; the rules read %s only", ka.path, names, k.consumerKey))
		}
		if ka.inQuery && strings.HasPrefix(k.consumerKey, "header:") {
			k.noteOnce("key-auth also takes the key from the query string (key_in_query); the rules read the header only")
		}
		if ka.anonymous != "" {
			k.noteOnce(fmt.Sprintf("%s: requests without a key are Kong's anonymous consumer %s, counted together under limit_by consumer; Sluice counts them per client address", ka.path, ka.anonymous))
		}
	}
	return nil
}

func (k *kongConv) usesConsumers() bool {
	for _, rl := range k.limits {
		if rl.cons != nil || rl.lim.limitBy == "consumer" || rl.lim.limitBy == "credential" {
			return true
		}
	}
	return false
}

func (k *kongConv) nothingToConvert() error {
	why := ""
	if n := len(k.skipped); n > 5 {
		why = fmt.Sprintf(" (%s; and %d more)", strings.Join(k.skipped[:5], "; "), n-5)
	} else if n > 0 {
		why = " (" + strings.Join(k.skipped, "; ") + ")"
	}
	return fmt.Errorf("config: nothing to convert: no enabled rate-limiting plugin%s", why)
}

// ---- Route conditions ----

// kongOp is how one alternative of a condition compares.
type kongOp uint8

const (
	kongExact     kongOp = iota
	kongPrefix           // Kong's plain paths, hosts ending in *
	kongSuffix           // hosts starting with *
	kongRegex            // Kong's ~ paths: anchored at the start
	kongFold             // header values: compared lower-cased by Kong
	kongFoldRegex        // header values ~*: unanchored, lower-cased
)

type kongAlt struct {
	op kongOp
	v  string
}

// kongConds are conditions by key source: every source must hold, and
// for one source any of its alternatives.
type kongConds map[string][]kongAlt

// routeConds are the conditions a request must meet for Kong's
// traditional router to send it to route r (kong/router/transform.lua:
// paths are prefixes or, with ~, regular expressions anchored at the
// start; hosts exact or with a leading or trailing *; header values
// compared lower-cased, or ~* regular expressions), and Kong's priority of
// the route.
func (k *kongConv) routeConds(path string, r *kongRoute) (kongConds, uint64, error) {
	if r.Expression != "" {
		return nil, 0, fmt.Errorf("%s.expression: Kong's expressions router is not converted; write the rule's match by hand", path)
	}
	c := kongConds{}
	var paths []kongAlt
	whole, regexURL, maxLen := false, false, 0
	for i, p := range r.Paths {
		a, err := k.pathAlt(fmt.Sprintf("%s.paths[%d]", path, i), p)
		if err != nil {
			return nil, 0, err
		}
		switch {
		case a.op == kongRegex:
			regexURL = true
		case a.v == "/" || a.v == "":
			whole = true
		default:
			maxLen = max(maxLen, len(a.v))
		}
		paths = kongAddAlt(paths, a)
	}
	if len(paths) > 0 && !whole {
		c["path"] = paths
	}
	plainHosts := len(r.Hosts) > 0
	for i, h := range r.Hosts {
		h = strings.ToLower(h)
		a := kongAlt{kongExact, h}
		switch {
		case strings.HasPrefix(h, "*"):
			a = kongAlt{kongSuffix, h[1:]}
		case strings.HasSuffix(h, "*"):
			a = kongAlt{kongPrefix, h[:len(h)-1]}
		}
		if a.v == "" || strings.Contains(a.v, "*") {
			return nil, 0, fmt.Errorf("%s.hosts[%d]: %q; Kong takes a * only at the start or the end", path, i, h)
		}
		plainHosts = plainHosts && a.op == kongExact
		c["host"] = kongAddAlt(c["host"], a)
	}
	for _, m := range r.Methods {
		c["method"] = kongAddAlt(c["method"], kongAlt{kongExact, strings.ToUpper(m)})
	}
	for _, name := range slices.Sorted(maps.Keys(r.Headers)) {
		if !headerToken.MatchString(name) || strings.EqualFold(name, "host") {
			return nil, 0, fmt.Errorf("%s.headers: %q is not a header Kong routes on", path, name)
		}
		src := "header:" + strings.ToLower(name)
		for i, v := range r.Headers[name] {
			a := kongAlt{kongFold, v}
			if re, ok := strings.CutPrefix(v, "~*"); ok {
				if _, err := regexp.Compile(re); err != nil {
					return nil, 0, fmt.Errorf("%s.headers.%s[%d]: %q is not a regular expression Sluice reads (RE2): %v", path, name, i, v, err)
				}
				a = kongAlt{kongFoldRegex, re}
			}
			c[src] = kongAddAlt(c[src], a)
		}
	}
	return c, kongPriority(r, len(c["method"]) > 0, plainHosts, regexURL, maxLen), nil
}

// pathAlt reads one route path: ~ starts a regular expression; in a 1.1
// or 2.1 file a path with characters other than letters, digits and
// .-_~/% is one, as Kong 3 migrates them (migrate_path_280_300.lua).
func (k *kongConv) pathAlt(field, p string) (kongAlt, error) {
	re, isRegex := strings.CutPrefix(p, "~")
	if k.legacyPaths && !isRegex && !kongPlainPath.MatchString(p) {
		re, isRegex = p, true
		k.noteOnce("_format_version 1.1 or 2.1: paths with characters other than letters, digits and .-_~/% are read as regular expressions, as Kong 3 reads such a file")
	}
	if !isRegex {
		return kongAlt{kongPrefix, p}, nil
	}
	if _, err := regexp.Compile("^(?:" + re + ")"); err != nil {
		return kongAlt{}, fmt.Errorf("%s: %q is not a regular expression Sluice reads (RE2: no look-around, no back-references): %v; write the rule's match by hand", field, p, err)
	}
	return kongAlt{kongRegex, re}, nil
}

var kongPlainPath = regexp.MustCompile(`^[a-zA-Z0-9.\-_~/%]*$`)

// kongPriority approximates Kong's order of routes (transform.lua,
// get_priority): more kinds of criteria first, then plain hosts, then
// regular expressions, more headers, regex_priority, a longer prefix.
func kongPriority(r *kongRoute, methods, plainHosts, regexURL bool, maxLen int) uint64 {
	weight := 0
	for _, set := range []bool{methods, len(r.Hosts) > 0, len(r.Headers) > 0, len(r.Paths) > 0, len(r.SNIs) > 0, len(r.Sources) > 0, len(r.Destinations) > 0} {
		if set {
			weight++
		}
	}
	p := uint64(weight) << 61
	if plainHosts {
		p |= 1 << 60
	}
	p |= uint64(min(len(r.Headers), 255)) << 52
	if regexURL {
		p |= 1 << 51
		p |= uint64(min(max(r.RegexPriority, 0), 1<<32-1)) << 19
	}
	return p | uint64(min(maxLen, 0x7FFFF))
}

// kongAddAlt adds an alternative to a union, leaving out what a prefix
// already holds (/orders holds /orders/admin).
func kongAddAlt(alts []kongAlt, a kongAlt) []kongAlt {
	for _, b := range alts {
		if b == a || kongHolds(b, a) {
			return alts
		}
	}
	alts = slices.DeleteFunc(alts, func(b kongAlt) bool { return kongHolds(a, b) })
	return append(alts, a)
}

// kongHolds: every value alternative b admits, a admits.
func kongHolds(a, b kongAlt) bool {
	switch {
	case a.op == kongPrefix && (b.op == kongPrefix || b.op == kongExact):
		return strings.HasPrefix(b.v, a.v)
	case a.op == kongSuffix && (b.op == kongSuffix || b.op == kongExact):
		return strings.HasSuffix(b.v, a.v)
	}
	return false
}

func (c kongConds) clone() kongConds {
	out := make(kongConds, len(c))
	for s, alts := range c {
		out[s] = slices.Clone(alts)
	}
	return out
}

// signature writes the conditions but source skip's, as a map key.
func (c kongConds) signature(skip string) string {
	var b strings.Builder
	for _, s := range slices.Sorted(maps.Keys(c)) {
		if s == skip {
			continue
		}
		alts := slices.Clone(c[s])
		slices.SortFunc(alts, func(x, y kongAlt) int {
			if x.op != y.op {
				return int(x.op) - int(y.op)
			}
			return strings.Compare(x.v, y.v)
		})
		fmt.Fprintf(&b, "%q:", s)
		for _, a := range alts {
			fmt.Fprintf(&b, "%d%q,", a.op, a.v)
		}
		b.WriteByte(';')
	}
	return b.String()
}

// kongMerge writes the union of route condition sets with as few sets as
// it can: two sets that differ in one source only are one set whose
// alternatives for that source are both sets' (a set without the source
// matches any value of it).
func kongMerge(sets []kongTarget) []kongTarget {
	for changed := true; changed && len(sets) > 1; {
		changed = false
		var sources []string
		for _, t := range sets {
			for s := range t.conds {
				if !slices.Contains(sources, s) {
					sources = append(sources, s)
				}
			}
		}
		slices.Sort(sources)
		for _, s := range sources {
			n := len(sets)
			sets = kongMergeOn(sets, s)
			changed = changed || len(sets) < n
		}
		// Identical sets, with no source to differ in.
		n := len(sets)
		sets = kongMergeOn(sets, "")
		changed = changed || len(sets) < n
	}
	return sets
}

func kongMergeOn(sets []kongTarget, s string) []kongTarget {
	var out []kongTarget
	at := map[string]int{}
	for _, t := range sets {
		sig := t.conds.signature(s)
		i, seen := at[sig]
		if !seen {
			at[sig] = len(out)
			out = append(out, kongTarget{conds: t.conds.clone(), prio: t.prio})
			continue
		}
		m := &out[i]
		m.prio = max(m.prio, t.prio)
		mine, ok1 := m.conds[s]
		theirs, ok2 := t.conds[s]
		if !ok1 || !ok2 {
			delete(m.conds, s)
			continue
		}
		for _, a := range theirs {
			mine = kongAddAlt(mine, a)
		}
		m.conds[s] = mine
	}
	return out
}

// admits reports whether a path value meets the path alternatives.
func kongAdmits(alts []kongAlt, v string) bool {
	for _, a := range alts {
		switch a.op {
		case kongExact:
			if v == a.v {
				return true
			}
		case kongPrefix:
			if strings.HasPrefix(v, a.v) {
				return true
			}
		case kongRegex:
			if re, err := regexp.Compile("^(?:" + a.v + ")"); err == nil && re.MatchString(v) {
				return true
			}
		}
	}
	return false
}

// json writes the conditions as a rule's match.
func (c kongConds) json() (map[string]any, error) {
	if len(c) == 0 {
		return nil, nil
	}
	m := map[string]any{}
	for _, s := range slices.Sorted(maps.Keys(c)) {
		v, err := kongCondition(s, c[s])
		if err != nil {
			return nil, err
		}
		m[s] = v
	}
	return m, nil
}

// kongCondition writes one source's alternatives: a value, an in list,
// a prefix or suffix, else one regular expression.
func kongCondition(src string, alts []kongAlt) (any, error) {
	exact := true
	values := make([]string, len(alts))
	for i, a := range alts {
		values[i] = a.v
		caseless := a.op == kongFold && strings.ToLower(a.v) == strings.ToUpper(a.v)
		exact = exact && (a.op == kongExact || caseless)
	}
	switch {
	case exact && len(values) == 1:
		return values[0], nil
	case exact && len(values) > policy.MaxListItems:
		return nil, fmt.Errorf("%d values of %s, more than the %d a condition holds", len(values), src, policy.MaxListItems)
	case exact:
		return map[string]any{"in": values}, nil
	case len(alts) == 1 && alts[0].op == kongPrefix:
		return map[string]any{"prefix": alts[0].v}, nil
	case len(alts) == 1 && alts[0].op == kongSuffix:
		return map[string]any{"suffix": alts[0].v}, nil
	}
	parts := make([]string, len(alts))
	for i, a := range alts {
		q := regexp.QuoteMeta(a.v)
		switch a.op {
		case kongExact:
			parts[i] = q + "$"
		case kongPrefix:
			parts[i] = q
		case kongSuffix:
			parts[i] = ".*" + q + "$"
		case kongRegex:
			parts[i] = "(?:" + a.v + ")"
		case kongFold:
			parts[i] = "(?i:" + q + ")$"
		case kongFoldRegex:
			parts[i] = ".*(?i:" + a.v + ")"
		}
	}
	re := "^(?:" + strings.Join(parts, "|") + ")"
	if len(re) > policy.MaxRegexLen {
		return nil, fmt.Errorf("the condition on %s is a regular expression of %d bytes, more than the %d Sluice compiles", src, len(re), policy.MaxRegexLen)
	}
	return map[string]any{"regex": re}, nil
}

// ---- Building the policies ----

// targets are the condition sets of a plugin's rules: its route's, the
// union of its service's routes, or none (every request); a consumer's
// plugin also requires one of the consumer's keys.
func (k *kongConv) targets(rl *kongRL) ([]kongTarget, error) {
	var ts []kongTarget
	switch {
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

// kongRule is a rule with its own rejection body.
type kongRule struct {
	outRule
	RejectBody string `json:"reject_body,omitempty"`
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
	for _, period := range kongPeriods {
		p, err := k.periodPolicy(period)
		if err != nil {
			return err
		}
		if len(p.Rules) > 0 {
			p.Name = unique(k.pols, period)
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
		for _, lt := range k.levelTargets(level) {
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

// levelTargets are the targets of one level's plugins, the routes Kong
// tries first before the others.
func (k *kongConv) levelTargets(level int) []kongLevelTarget {
	var out []kongLevelTarget
	for _, rl := range k.limits {
		if rl.level == level {
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
	return ok && kongByConsumer(rl) && rl.lim.global() == g.lim.global() && rl.lim.message == g.lim.message
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
		return []kongRule{{outRule: outRule{Name: unique(k.rules, base+"-"+period), Action: policy.ActionUnlimited, Match: match}}}, nil
	}
	limit := func(suffix string, keys []string, match map[string]any) kongRule {
		r := kongRule{outRule: outRule{Name: unique(k.rules, base+suffix+"-"+period), Match: match, LimitKeys: keys}}
		if w, ok := kongWindow[period]; ok {
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
		return r
	}
	byAddress := func() kongRule { return limit("-address", []string{"ip:address"}, match) }
	switch {
	case t.byAddress:
		return []kongRule{byAddress()}, nil
	case rl.lim.limitBy == "ip" || rl.byAddress:
		return []kongRule{limit("", []string{"ip:address"}, match)}, nil
	case rl.lim.limitBy == "service":
		k.noteOnce("limit_by service: the counter is keyed by the request's host, so a service answering several hosts (or any host) counts each host apart")
		return []kongRule{limit("", []string{"host"}, match)}, nil
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

// ---- Top-level settings and output ----

// kongBody is the body Kong's kong.response.error sends for JSON clients.
func kongBody(message string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]string{"message": message})
	return strings.TrimSuffix(b.String(), "\n")
}

// chooseReply picks the top-level reject_status, reject_body and
// response_headers among the plugins': Sluice has one status and one
// header setting; a plugin of another message gets its own body.
func (k *kongConv) chooseReply() {
	codes, messages := map[int][]string{}, map[string]int{}
	var order []string
	hiding := []string{}
	for _, rl := range k.limits {
		codes[rl.lim.code] = append(codes[rl.lim.code], rl.path)
		if messages[rl.lim.message]++; messages[rl.lim.message] == 1 {
			order = append(order, rl.lim.message)
		}
		if rl.lim.hide {
			hiding = append(hiding, rl.path)
		}
	}
	k.status = 0
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		if k.status == 0 || len(codes[c]) > len(codes[k.status]) {
			k.status = c
		}
	}
	for _, c := range slices.Sorted(maps.Keys(codes)) {
		if c != k.status {
			k.note("error_code %d of %s: Sluice rejects with one status, %d, the code of the most plugins", c, strings.Join(codes[c], ", "), k.status)
		}
	}
	k.body = order[0]
	for _, m := range order {
		if messages[m] > messages[k.body] {
			k.body = m
		}
	}
	k.showHdrs = len(hiding) < len(k.limits)
	if k.showHdrs && len(hiding) > 0 {
		k.note("hide_client_headers of %s: Sluice sends its RateLimit fields on every response or none; they are sent, as the other plugins do", strings.Join(hiding, ", "))
	}
	if !k.showHdrs {
		k.note(`hide_client_headers: "response_headers": false leaves the RateLimit fields out of allowed responses; rejections still carry them and Retry-After`)
	}
	k.noteOnce("rejections are the JSON body Kong sends to JSON clients; Kong answers other Accept headers in HTML, XML or text")
	if k.showHdrs {
		k.noteOnce("Kong's X-RateLimit-Limit-<period> and X-RateLimit-Remaining-<period> fields are not sent; RateLimit-Limit, -Remaining and -Reset are (legacy_headers), with the draft-10 RateLimit and RateLimit-Policy")
	}
}

type kongOutConfig struct {
	RejectStatus    int          `json:"reject_status,omitempty"`
	RejectBody      string       `json:"reject_body"`
	ResponseHeaders *bool        `json:"response_headers,omitempty"`
	LegacyHeaders   bool         `json:"legacy_headers,omitempty"`
	Fleet           *outFleet    `json:"fleet,omitempty"`
	Policies        []kongPolicy `json:"policies"`
}

// result writes the policy and checks it with the filter's own parser.
func (k *kongConv) result() (Result, error) {
	if len(k.out) == 0 {
		return Result{}, &InputError{"config", fmt.Errorf("config: nothing to convert: no rate-limiting plugin applies to any request")}
	}
	out := kongOutConfig{RejectBody: kongBody(k.body), LegacyHeaders: k.showHdrs, Policies: k.out}
	if k.status != 429 {
		out.RejectStatus = k.status
	}
	if !k.showHdrs {
		out.ResponseHeaders = new(bool)
	}
	k.scopeNotes(&out)
	doc, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return Result{}, err
	}
	if _, err := policy.Parse(doc); err != nil {
		return Result{}, &InputError{"config", fmt.Errorf("the converted policy is refused: %w", err)}
	}
	return Result{Policy: append(doc, '\n'), Notes: k.notes}, nil
}

// scopeNotes adds the fleet block when a plugin counted in Redis or the
// database, and says what the rules' keys need.
func (k *kongConv) scopeNotes(out *kongOutConfig) {
	redis, ip := false, false
	for _, p := range out.Policies {
		for _, r := range p.Rules {
			out.Fleet = kongFirstFleet(out.Fleet, r.Scope, k.opts.FleetCluster)
			ip = ip || slices.Contains(r.LimitKeys, "ip:address")
		}
	}
	for _, rl := range k.limits {
		redis = redis || rl.lim.policy == "redis"
	}
	if out.Fleet != nil {
		k.noteOnce(fmt.Sprintf(`the plugins with policy redis or cluster are "scope": "global" rules: run the admin as the rate limit service (docs/fleet.md) and give Envoy the cluster %q`, k.opts.FleetCluster))
	}
	if redis {
		k.noteOnce("Kong's redis settings become the admin's: -redis-addrs, -redis-tls, -redis-tls-server-name, SLUICE_REDIS_PASSWORD (docs/fleet.md)")
	}
	if ip {
		k.noteOnce("ip:address is the peer's address; set the policy's xff_trusted_hops to the proxies in front of Envoy, as Kong's trusted_ips and real_ip_header did")
	}
}

func kongFirstFleet(f *outFleet, scope, cluster string) *outFleet {
	if f == nil && scope == "global" {
		return &outFleet{Cluster: cluster}
	}
	return f
}

// ---- Kong Ingress Controller objects ----

// kongKubeObject is a Kubernetes object of the stream; Lists are opened.
type kongKubeObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string            `yaml:"name"`
		Namespace string            `yaml:"namespace"`
		Labels    map[string]string `yaml:"labels"`
	} `yaml:"metadata"`
	Plugin       string           `yaml:"plugin"`
	InstanceName string           `yaml:"instance_name"`
	Config       yaml.Node        `yaml:"config"`
	ConfigFrom   yaml.Node        `yaml:"configFrom"`
	Disabled     bool             `yaml:"disabled"`
	Items        []kongKubeObject `yaml:"items"`
}

// kongIsKubernetes: a stream of Kubernetes objects rather than kong.yaml.
func kongIsKubernetes(docs []*yaml.Node) bool {
	for _, d := range docs {
		root := d.Content[0]
		if root.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(root.Content); i += 2 {
			if k := root.Content[i].Value; k == "apiVersion" || k == "kind" {
				return true
			}
		}
	}
	return false
}

func (k *kongConv) readKubernetes(docs []*yaml.Node) error {
	for i, d := range docs {
		var obj kongKubeObject
		if err := d.Decode(&obj); err != nil {
			return fmt.Errorf("config: document %d: %s", i+1, yamlError(err))
		}
		objs := append([]kongKubeObject{obj}, obj.Items...)
		if err := k.count(fmt.Sprintf("document %d", i+1), len(objs)); err != nil {
			return err
		}
		for j := range objs {
			if err := k.kubePlugin(fmt.Sprintf("document %d", i+1), &objs[j]); err != nil {
				return err
			}
		}
	}
	return nil
}

func (k *kongConv) kubePlugin(doc string, o *kongKubeObject) error {
	if o.Kind != "KongPlugin" && o.Kind != "KongClusterPlugin" {
		return nil
	}
	name := o.Metadata.Name
	if o.Metadata.Namespace != "" {
		name = o.Metadata.Namespace + "/" + name
	}
	path := fmt.Sprintf("%s (%s %s)", doc, o.Kind, name)
	switch {
	case o.Plugin == "key-auth":
		return k.keyAuth(path, &kongPlugin{Config: o.Config, line: o.Config.Line}, kongScope{})
	case kongOtherLimiter(o.Plugin):
		k.note("%s: %s is not converted (only rate-limiting is); write its rules by hand", path, o.Plugin)
		k.skipped = append(k.skipped, fmt.Sprintf("%s at %s is not converted", o.Plugin, path))
		return nil
	case o.Plugin != "rate-limiting":
		return nil
	case o.Disabled:
		k.note("%s: disabled; skipped", path)
		k.skipped = append(k.skipped, fmt.Sprintf("%s is disabled", path))
		return nil
	case o.ConfigFrom.Kind != 0 && o.ConfigFrom.Tag != "!!null":
		return fmt.Errorf("%s.configFrom: a configuration in a Secret is not read; give the plugin's config inline", path)
	}
	lim, err := k.readLimit(path+".config", &o.Config)
	if err != nil {
		return err
	}
	rl := &kongRL{path: path, lim: lim, level: 8, targets: []kongTarget{{conds: kongConds{}}},
		label: kongFirst(o.InstanceName, strings.ReplaceAll(name, "/", "-"))}
	if o.Kind == "KongClusterPlugin" && o.Metadata.Labels["global"] == "true" {
		rl.note = fmt.Sprintf("%s: a global plugin: its rules apply to every request, as Kong's", path)
	} else {
		rl.note = fmt.Sprintf("%s: its rules apply to every request; add to each the match of the routes of the Ingresses and Services whose konghq.com/plugins annotation names it", path)
	}
	k.limits = append(k.limits, rl)
	return nil
}

// buildKubernetes makes each plugin's policies, one per period.
func (k *kongConv) buildKubernetes() error {
	for _, rl := range k.limits {
		if rl.lim.limitBy == "service" {
			return fmt.Errorf("%s.config.limit_by: service needs the plugin's routes, which the object does not say; write the rule by hand", rl.path)
		}
		for _, period := range kongPeriods {
			if _, ok := rl.lim.limits[period]; !ok {
				continue
			}
			rules, err := k.targetRules(rl, rl.targets[0], period)
			if err != nil {
				return err
			}
			k.out = append(k.out, kongPolicy{Name: unique(k.pols, rl.label+"-"+period), Rules: rules})
		}
		k.note("%s", rl.note)
	}
	if len(k.limits) > 1 {
		k.noteOnce("each plugin's policies apply to every request; Kong applies one plugin per request, the most specific for its consumer, route and service")
	}
	return nil
}
