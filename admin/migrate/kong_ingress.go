package migrate

// The converter of Kong's configurations (kong.go): Kong Ingress
// Controller objects with the Ingresses, Services and KongConsumers their
// konghq.com/plugins annotations attach the plugins to. The controller
// makes a Kong service of each Service port an Ingress sends to and a
// route of each Ingress path; the conversion does the same, then
// converts as it converts kong.yaml.

import (
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
)

// kongKubePlugin is a KongPlugin or KongClusterPlugin, by the name an
// annotation gives (namespace/name for a KongPlugin).
type kongKubePlugin struct {
	path   string // the object, for messages: document 2 (KongPlugin shop/limit)
	obj    *kongKubeObject
	global bool // a KongClusterPlugin labelled global: "true"
	used   bool
}

// kongKube is what a stream of Kubernetes objects holds.
type kongKube struct {
	plugins    map[string]*kongKubePlugin // "ns/name" of KongPlugins, "name" of KongClusterPlugins
	order      []*kongKubePlugin
	ingresses  []*kongKubeObject
	httpRoutes []*kongKubeObject          // Gateway API, taken as Kong's (Gateways are not read)
	services   map[string]*kongKubeObject // "ns/name"
	consumers  []*kongKubeObject
	secrets    map[string]*kongKubeObject // "ns/name"
}

// kongPluginsAnnotation attaches plugins to an object, by name, comma
// separated.
const kongPluginsAnnotation = "konghq.com/plugins"

// kongIngressClass is the Kong Ingress Controller's default class: an
// Ingress of another class is another controller's.
const kongIngressClass = "kong"

// kubeIngressClass is an Ingress's class: spec.ingressClassName, else the
// older kubernetes.io/ingress.class annotation ("" for none).
func kubeIngressClass(o *kongKubeObject) string {
	if c := o.ingress.IngressClassName; c != "" {
		return c
	}
	return o.Metadata.Annotations["kubernetes.io/ingress.class"]
}

// kicService is the Kong service the controller makes of a Service port.
func (k *kongConv) kicService(ns string, b *kubeBackend) *kongSvc {
	port := b.Service.Port.Name
	if b.Service.Port.Number != 0 {
		port = fmt.Sprint(b.Service.Port.Number)
	}
	name := ns + "." + b.Service.Name + "." + port
	if s := k.svcByRef[name]; s != nil {
		return s
	}
	s := &kongSvc{name: name, kube: ns + "/" + b.Service.Name}
	k.services = append(k.services, s)
	k.svcByRef[name] = s
	return s
}

// kicRegexPrefix starts an ImplementationSpecific path the controller
// reads as a regular expression, unless the Ingress's
// konghq.com/regex-prefix annotation names another.
const kicRegexPrefix = "/~"

// kicPaths are the Kong paths the controller makes of an Ingress path
// (its translator's PathsFromIngressPaths, then the regex prefix):
// Prefix /a is the prefix /a/ and the regular expression /a$; Exact /a
// is /a$; an ImplementationSpecific path is a Kong path as written, a
// regular expression after regexPrefix.
func kicPaths(path, pathType, regexPrefix string) []string {
	switch pathType {
	case "Prefix":
		base := strings.TrimSuffix(path, "/")
		if base == "" {
			return []string{"/"}
		}
		return []string{base + "/", "~" + base + "$"}
	case "Exact":
		if path == "" {
			path = "/"
		}
		return []string{"~" + path + "$"}
	}
	switch {
	case path == "":
		return []string{"/"}
	case regexPrefix != "" && strings.HasPrefix(path, regexPrefix):
		return []string{"~" + path[len(regexPrefix):]}
	}
	return []string{path}
}

// readIngressScoped makes the services and routes of the Ingresses and
// attaches each annotation's plugins where the controller does: an
// Ingress's to each of its routes, a Service's to its Kong services, a
// KongConsumer's to the consumer (with the key-auth keys of its
// credentials' Secrets).
func (k *kongConv) readIngressScoped(kube *kongKube) error {
	for _, p := range kube.order {
		if p.global {
			p.used = true
			if err := k.attach(p, p.path, kongScope{}); err != nil {
				return err
			}
		}
	}
	for _, ing := range kube.ingresses {
		if class := kubeIngressClass(ing); class != "" && class != kongIngressClass {
			k.note("Ingress %s: of class %s, not %s: the Kong Ingress Controller makes no routes of it; left out", kubeName(ing), class, kongIngressClass)
			continue
		}
		if err := k.ingressRoutes(kube, ing); err != nil {
			return err
		}
	}
	for _, hr := range kube.httpRoutes {
		if err := k.httpRouteRoutes(kube, hr); err != nil {
			return err
		}
	}
	for _, s := range k.services {
		svc := kube.services[s.kube]
		if svc == nil {
			continue
		}
		for _, p := range k.annotated(kube, svc, "Service") {
			if err := k.attach(p, fmt.Sprintf("%s on Kong service %s", p.path, s.name), kongScope{svc: s}); err != nil {
				return err
			}
		}
	}
	for _, c := range kube.consumers {
		if err := k.kubeConsumer(kube, c); err != nil {
			return err
		}
	}
	for _, p := range kube.order {
		if !p.used && kongLimiter(p.obj.Plugin) {
			k.note("%s: no Ingress, HTTPRoute, Service or KongConsumer of the input names it in konghq.com/plugins (or an HTTPRoute filter), so the controller attaches it nowhere; not converted", p.path)
			k.skipped = append(k.skipped, fmt.Sprintf("%s is attached nowhere", p.path))
		}
	}
	return nil
}

// ingressRoutes makes the routes of one Ingress and attaches its plugins.
func (k *kongConv) ingressRoutes(kube *kongKube, o *kongKubeObject) error {
	ns, what := kubeNS(o), "Ingress "+kubeName(o)
	regexPrefix := kicRegexPrefix
	if p, ok := o.Metadata.Annotations["konghq.com/regex-prefix"]; ok {
		regexPrefix = p
	}
	ing := o.ingress
	plugins := k.annotated(kube, o, "Ingress")
	methods := kongSplit(o.Metadata.Annotations["konghq.com/methods"])
	headers := map[string][]string{}
	for a, v := range o.Metadata.Annotations {
		if h, ok := strings.CutPrefix(a, "konghq.com/headers."); ok {
			headers[h] = kongSplit(v)
		}
	}
	add := func(path string, r kongRoute, b *kubeBackend) error {
		r.Methods, r.Headers = methods, headers
		var svc *kongSvc
		if b != nil && b.Service != nil {
			svc = k.kicService(ns, b)
		}
		return k.addPluggedRoute(path, &r, svc, plugins)
	}
	for i, rule := range ing.Rules {
		for j, p := range rule.HTTP.Paths {
			r := kongRoute{Name: fmt.Sprintf("%s.%s.%d%d", ns, o.Metadata.Name, i, j), Paths: kicPaths(p.Path, p.PathType, regexPrefix)}
			if rule.Host != "" {
				r.Hosts = []string{rule.Host}
			}
			if err := add(fmt.Sprintf("%s: spec.rules[%d].http.paths[%d]", what, i, j), r, &p.Backend); err != nil {
				return err
			}
		}
	}
	if ing.DefaultBackend != nil {
		r := kongRoute{Name: fmt.Sprintf("%s.%s.default", ns, o.Metadata.Name), Paths: []string{"/"}}
		return add(what+": spec.defaultBackend", r, ing.DefaultBackend)
	}
	return nil
}

// addPluggedRoute adds a route the controller makes, to svc (nil: to no
// service), and attaches plugins to it.
func (k *kongConv) addPluggedRoute(path string, r *kongRoute, svc *kongSvc, plugins []*kongKubePlugin) error {
	rt, err := k.addRoute(path, r, svc, r.Name)
	if err != nil {
		return err
	}
	if svc == nil {
		k.routes = append(k.routes, rt)
	}
	for _, p := range plugins {
		if err := k.attach(p, fmt.Sprintf("%s on route %s", p.path, rt.name), kongScope{rt: rt}); err != nil {
			return err
		}
	}
	return nil
}

// kubeConsumer makes a KongConsumer's consumer, its keys from its
// credentials' key-auth Secrets, and attaches its plugins.
func (k *kongConv) kubeConsumer(kube *kongKube, o *kongKubeObject) error {
	cons := &kongCons{name: kongFirst(o.Username, o.CustomID, o.Metadata.Name)}
	k.consumers = append(k.consumers, cons)
	kongIndex(k.consByRef, cons, o.Username)
	for i, cred := range o.Credentials {
		path := fmt.Sprintf("KongConsumer %s: credentials[%d]", kubeName(o), i)
		s := kube.secrets[kubeNS(o)+"/"+cred]
		if s == nil {
			k.note("%s: Secret %s is not in the input; its key is not matched", path, cred)
			continue
		}
		kind, key, err := s.credential()
		switch {
		case err != nil:
			return fmt.Errorf("%s: Secret %s: %v", path, cred, err)
		case kind == "key-auth":
			k.addKey(path, cons, key)
		}
	}
	for _, p := range k.annotated(kube, o, "KongConsumer") {
		if err := k.attach(p, fmt.Sprintf("%s on consumer %s", p.path, cons.name), kongScope{cons: cons}); err != nil {
			return err
		}
	}
	return nil
}

// annotated returns the plugins an object's konghq.com/plugins names: a
// KongPlugin of its namespace, else a KongClusterPlugin. A name the
// input lacks is noted.
func (k *kongConv) annotated(kube *kongKube, o *kongKubeObject, kind string) []*kongKubePlugin {
	var out []*kongKubePlugin
	for _, name := range kongSplit(o.Metadata.Annotations[kongPluginsAnnotation]) {
		p := kube.plugins[kubeNS(o)+"/"+name]
		if p == nil {
			p = kube.plugins[name]
		}
		if p == nil {
			k.note("%s %s: konghq.com/plugins names %s, which the input has no KongPlugin or KongClusterPlugin of", kind, kubeName(o), name)
			continue
		}
		p.used = true
		out = append(out, p)
	}
	return out
}

// attach reads plugin p where an annotation puts it, as kong.yaml's
// nested plugins are read.
func (k *kongConv) attach(p *kongKubePlugin, path string, sc kongScope) error {
	o := p.obj
	if o.Disabled {
		k.note("%s: disabled; skipped", path)
		return nil
	}
	return k.plugin(path, o.plugin(), sc)
}

// credential is a credential Secret's type (konghq.com/credential
// label, else its kongCredType) and key.
func (o *kongKubeObject) credential() (kind, key string, err error) {
	get := func(field string) (string, error) {
		if v, ok := o.StringData[field]; ok {
			return v, nil
		}
		v, ok := o.Data[field]
		if !ok {
			return "", nil
		}
		b, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return "", fmt.Errorf("data.%s is not base64: %v", field, err)
		}
		return string(b), nil
	}
	kind = o.Metadata.Labels["konghq.com/credential"]
	if kind == "" {
		if kind, err = get("kongCredType"); err != nil {
			return "", "", err
		}
	}
	key, err = get("key")
	return kind, key, err
}

// kubeNS is an object's namespace: "default", where kubectl apply puts
// an object that names none.
func kubeNS(o *kongKubeObject) string {
	if o.Metadata.Namespace == "" {
		return "default"
	}
	return o.Metadata.Namespace
}

func kubeName(o *kongKubeObject) string {
	if o.Metadata.Namespace == "" {
		return o.Metadata.Name
	}
	return o.Metadata.Namespace + "/" + o.Metadata.Name
}

// kongSplit splits an annotation's comma-separated list.
func kongSplit(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}
