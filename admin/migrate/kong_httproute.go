package migrate

// Gateway API HTTPRoutes under the Kong Ingress Controller: the controller
// makes a Kong route of each group of an HTTPRoute rule's matches that
// share their method, headers and query parameters (named after the
// group's first match, httproute.<namespace>.<name>.<rule>.<match>), with
// the HTTPRoute's hostnames, and attaches the plugins its
// konghq.com/plugins annotation names, and those a rule's ExtensionRef
// filters name, to those routes. The conversion does the same, then
// converts as it converts kong.yaml.

import (
	"fmt"
	"sort"
	"strings"
)

// kubeHTTPRouteSpec is the part of an HTTPRoute's spec the conversion
// reads.
type kubeHTTPRouteSpec struct {
	Hostnames []string            `yaml:"hostnames"`
	Rules     []kubeHTTPRouteRule `yaml:"rules"`
}

type kubeHTTPRouteRule struct {
	Matches []kubeHTTPRouteMatch `yaml:"matches"`
	Filters []struct {
		Type         string `yaml:"type"`
		ExtensionRef *struct {
			Group string `yaml:"group"`
			Kind  string `yaml:"kind"`
			Name  string `yaml:"name"`
		} `yaml:"extensionRef"`
	} `yaml:"filters"`
	BackendRefs []struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
		Port      int    `yaml:"port"`
	} `yaml:"backendRefs"`
}

type kubeHTTPRouteMatch struct {
	Path *struct {
		Type  string  `yaml:"type"`
		Value *string `yaml:"value"`
	} `yaml:"path"`
	Headers []struct {
		Type  string `yaml:"type"`
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"headers"`
	QueryParams []struct {
		Name string `yaml:"name"`
	} `yaml:"queryParams"`
	Method string `yaml:"method"`
}

// httpRoutePaths are the Kong paths the controller makes of a match's
// path ("~" starts a regular expression): PathPrefix /a is the regular expression /a$ and the prefix /a/;
// Exact /a is /a$; RegularExpression is the expression. The Gateway API's
// defaults: PathPrefix, "/".
func httpRoutePaths(m kubeHTTPRouteMatch) []string {
	typ, value := "PathPrefix", "/"
	if m.Path != nil {
		if m.Path.Type != "" {
			typ = m.Path.Type
		}
		if m.Path.Value != nil {
			value = *m.Path.Value
		}
	}
	switch typ {
	case "Exact":
		return []string{"~" + value + "$"}
	case "RegularExpression":
		return []string{"~" + value}
	}
	prefix := value
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return []string{"~" + value + "$", prefix}
}

// httpRouteMatchKey groups matches the controller puts in one route.
func httpRouteMatchKey(m kubeHTTPRouteMatch) string {
	var hs []string
	seen := map[string]bool{}
	for _, h := range m.Headers {
		name := strings.ToLower(h.Name)
		if seen[name] {
			continue
		}
		seen[name] = true
		hs = append(hs, name+"="+h.Type+":"+h.Value)
	}
	sort.Strings(hs)
	var qs []string
	for _, q := range m.QueryParams {
		qs = append(qs, q.Name)
	}
	return m.Method + "|" + strings.Join(hs, ",") + "|" + strings.Join(qs, ",")
}

// httpRouteRoutes makes the routes of one HTTPRoute and attaches its
// plugins.
func (k *kongConv) httpRouteRoutes(kube *kongKube, o *kongKubeObject) error {
	ns, what := kubeNS(o), "HTTPRoute "+kubeName(o)
	spec := o.httpRoute
	plugins := k.annotated(kube, o, "HTTPRoute")
	for i, rule := range spec.Rules {
		rulePlugins := append([]*kongKubePlugin(nil), plugins...)
		for j, f := range rule.Filters {
			ref := f.ExtensionRef
			if f.Type != "ExtensionRef" || ref == nil || ref.Group != "configuration.konghq.com" || ref.Kind != "KongPlugin" {
				continue
			}
			p := kube.plugins[ns+"/"+ref.Name]
			if p == nil {
				k.note("%s: spec.rules[%d].filters[%d] names KongPlugin %s, which the input does not have", what, i, j, ref.Name)
				continue
			}
			p.used = true
			rulePlugins = append(rulePlugins, p)
		}
		var svc *kongSvc
		if len(rule.BackendRefs) > 0 {
			b := rule.BackendRefs[0]
			bns := ns
			if b.Namespace != "" {
				bns = b.Namespace
			}
			kb := &kubeBackend{Service: &kubeServiceRef{Name: b.Name}}
			if b.Port == 0 {
				k.note("%s: spec.rules[%d].backendRefs[0] names no port; the Kong service is named without one", what, i)
			}
			kb.Service.Port.Number = b.Port
			svc = k.kicService(bns, kb)
		}
		matches := rule.Matches
		if len(matches) == 0 { // the hostnames alone, or every request
			matches = []kubeHTTPRouteMatch{{}}
		}
		type group struct {
			first int
			r     kongRoute
		}
		var groups []*group
		byKey := map[string]*group{}
		for j, m := range matches {
			key := httpRouteMatchKey(m)
			g := byKey[key]
			if g == nil {
				g = &group{first: j, r: kongRoute{Name: fmt.Sprintf("httproute.%s.%s.%d.%d", ns, o.Metadata.Name, i, j), Hosts: spec.Hostnames}}
				if m.Method != "" {
					g.r.Methods = []string{m.Method}
				}
				for _, h := range m.Headers {
					name := strings.ToLower(h.Name)
					if g.r.Headers == nil {
						g.r.Headers = map[string][]string{}
					}
					if _, dup := g.r.Headers[name]; dup {
						continue
					}
					v := h.Value
					if h.Type == "RegularExpression" {
						v = "~*" + v // Kong reads it as a regular expression
					}
					g.r.Headers[name] = []string{v}
				}
				if len(m.QueryParams) > 0 {
					k.note("%s: spec.rules[%d].matches[%d] matches query parameters, which Kong's routes (and so the converted rules) do not: the rules apply whatever the query", what, i, j)
				}
				byKey[key] = g
				groups = append(groups, g)
			}
			if len(rule.Matches) > 0 { // no matches: the hostnames alone
				g.r.Paths = append(g.r.Paths, httpRoutePaths(m)...)
			}
		}
		for _, g := range groups {
			if err := k.addPluggedRoute(fmt.Sprintf("%s: spec.rules[%d].matches[%d]", what, i, g.first), &g.r, svc, rulePlugins); err != nil {
				return err
			}
		}
	}
	return nil
}
