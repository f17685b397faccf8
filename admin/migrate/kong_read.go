package migrate

// The converter of Kong's configurations (kong.go): reading kong.yaml.

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

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
	return !kongLimiter(name) && (strings.Contains(name, "rate-limiting") || strings.Contains(name, "ratelimiting"))
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
		k.note("%s: %s is not converted (only rate-limiting and rate-limiting-advanced are); write its rules by hand", path, p.Name)
		k.skipped = append(k.skipped, fmt.Sprintf("%s at %s is not converted", p.Name, path))
		return nil
	case !kongLimiter(p.Name):
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
	lim, err := k.readPluginLimit(p.Name, path+".config", &p.Config)
	if err != nil {
		return err
	}
	rl := &kongRL{path: path, lim: lim, svc: sc.svc, rt: sc.rt, cons: sc.cons, level: kongLevel(sc.cons != nil, sc.rt != nil, sc.svc != nil)}
	rl.label = kongFirst(p.InstanceName, kongLabel(sc))
	scope := p.Name + "|" + kongScopeKey(sc) // a scope may hold one of each
	if other, dup := k.scopes[scope]; dup {
		return fmt.Errorf("%s: a second %s plugin for %s (also %s); Kong keeps one per scope", path, p.Name, kongLabel(sc), other)
	}
	k.scopes[scope] = path
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
