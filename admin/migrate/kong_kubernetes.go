package migrate

// The converter of Kong's configurations (kong.go): kong Ingress Controller
// objects.

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// kongKubeObject is a Kubernetes object of the stream; Lists are opened.
type kongKubeObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Labels      map[string]string `yaml:"labels"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	// KongPlugin, KongClusterPlugin
	Plugin       string    `yaml:"plugin"`
	InstanceName string    `yaml:"instance_name"`
	Config       yaml.Node `yaml:"config"`
	ConfigFrom   yaml.Node `yaml:"configFrom"`
	Disabled     bool      `yaml:"disabled"`
	// Ingress, HTTPRoute (decoded into ingress, httpRoute)
	Spec      yaml.Node `yaml:"spec"`
	ingress   kubeIngressSpec
	httpRoute kubeHTTPRouteSpec
	// KongConsumer
	Username    string   `yaml:"username"`
	CustomID    string   `yaml:"custom_id"`
	Credentials []string `yaml:"credentials"`
	// Secret
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	Items      []kongKubeObject  `yaml:"items"`
}

// kubeIngressSpec is the part of an Ingress's spec the conversions read:
// the hosts and paths, and the backends the Kong Ingress Controller makes
// services of.
type kubeIngressSpec struct {
	IngressClassName string       `yaml:"ingressClassName"`
	DefaultBackend   *kubeBackend `yaml:"defaultBackend"`
	Rules            []struct {
		Host string `yaml:"host"`
		HTTP struct {
			Paths []struct {
				Path     string      `yaml:"path"`
				PathType string      `yaml:"pathType"`
				Backend  kubeBackend `yaml:"backend"`
			} `yaml:"paths"`
		} `yaml:"http"`
	} `yaml:"rules"`
}

type kubeBackend struct {
	Service *kubeServiceRef `yaml:"service"`
}

// kubeServiceRef is a Service port a route sends to.
type kubeServiceRef struct {
	Name string `yaml:"name"`
	Port struct {
		Number int    `yaml:"number"`
		Name   string `yaml:"name"`
	} `yaml:"port"`
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
	kube := &kongKube{plugins: map[string]*kongKubePlugin{}, services: map[string]*kongKubeObject{}, secrets: map[string]*kongKubeObject{}}
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
			if err := kube.add(fmt.Sprintf("document %d", i+1), &objs[j]); err != nil {
				return err
			}
		}
	}
	if len(kube.ingresses) == 0 && len(kube.httpRoutes) == 0 { // the plugins alone: each applies to every request
		for _, p := range kube.order {
			if err := k.kubePlugin(p.path, p.obj); err != nil {
				return err
			}
		}
		return nil
	}
	k.scoped = true
	for _, p := range kube.order {
		if err := k.checkKubePlugin(p.path, p.obj); err != nil {
			return err
		}
	}
	return k.readIngressScoped(kube)
}

// add records one object of the stream.
func (kube *kongKube) add(doc string, o *kongKubeObject) error {
	ref := kubeNS(o) + "/" + o.Metadata.Name
	switch o.Kind {
	case "KongPlugin", "KongClusterPlugin":
		if o.Kind == "KongClusterPlugin" {
			ref = o.Metadata.Name
		}
		p := &kongKubePlugin{path: fmt.Sprintf("%s (%s %s)", doc, o.Kind, kubeName(o)), obj: o,
			global: o.Kind == "KongClusterPlugin" && o.Metadata.Labels["global"] == "true"}
		kube.plugins[ref] = p
		kube.order = append(kube.order, p)
	case "Ingress":
		if err := o.Spec.Decode(&o.ingress); err != nil {
			return fmt.Errorf("config: %s (Ingress %s).spec: %s", doc, kubeName(o), yamlError(err))
		}
		kube.ingresses = append(kube.ingresses, o)
	case "HTTPRoute":
		if err := o.Spec.Decode(&o.httpRoute); err != nil {
			return fmt.Errorf("config: %s (HTTPRoute %s).spec: %s", doc, kubeName(o), yamlError(err))
		}
		kube.httpRoutes = append(kube.httpRoutes, o)
	case "Service":
		kube.services[ref] = o
	case "KongConsumer":
		kube.consumers = append(kube.consumers, o)
	case "Secret":
		kube.secrets[ref] = o
	}
	return nil
}

// checkKubePlugin checks a plugin the annotations may attach, so that its
// errors name the object.
func (k *kongConv) checkKubePlugin(path string, o *kongKubeObject) error {
	if !kongLimiter(o.Plugin) || o.Disabled {
		return nil
	}
	_, err := k.kubeLimit(path, o)
	return err
}

// kubeLimit reads a rate-limiting plugin object's limits.
func (k *kongConv) kubeLimit(path string, o *kongKubeObject) (kongLimit, error) {
	if o.ConfigFrom.Kind != 0 && o.ConfigFrom.Tag != "!!null" {
		return kongLimit{}, fmt.Errorf("%s.configFrom: a configuration in a Secret is not read; give the plugin's config inline", path)
	}
	return k.readPluginLimit(o.Plugin, path+".config", &o.Config)
}

// plugin is the object as kong.yaml would hold the plugin.
func (o *kongKubeObject) plugin() *kongPlugin {
	return &kongPlugin{Name: o.Plugin, InstanceName: o.InstanceName, Config: o.Config, line: o.Config.Line}
}

// kubePlugin reads a plugin of a stream without Ingresses: it applies to
// every request.
func (k *kongConv) kubePlugin(path string, o *kongKubeObject) error {
	switch {
	case !kongLimiter(o.Plugin): // key-auth, or another limiter to note, as in kong.yaml
		return k.plugin(path, o.plugin(), kongScope{})
	case o.Disabled:
		k.note("%s: disabled; skipped", path)
		k.skipped = append(k.skipped, fmt.Sprintf("%s is disabled", path))
		return nil
	}
	lim, err := k.kubeLimit(path, o)
	if err != nil {
		return err
	}
	name := kubeName(o)
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
		if rl.lim.limitBy == "service" || rl.lim.limitBy == "route" {
			return fmt.Errorf("%s.config: counting by %s needs the plugin's routes, which the object does not say; write the rule by hand", rl.path, rl.lim.limitBy)
		}
		for _, period := range k.periods() {
			if _, ok := rl.lim.limits[period]; !ok {
				continue
			}
			rules, err := k.targetRules(rl, rl.targets[0], period)
			if err != nil {
				return err
			}
			k.out = append(k.out, kongPolicy{Name: k.pols.take(rl.label + "-" + period), Rules: rules})
		}
		k.note("%s", rl.note)
	}
	if len(k.limits) > 1 {
		k.noteOnce("each plugin's policies apply to every request; Kong applies one plugin per request, the most specific for its consumer, route and service")
	}
	return nil
}
