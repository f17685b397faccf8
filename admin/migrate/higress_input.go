package migrate

// The converter of Higress's plugins (higress.go): its input, a stream of
// objects or one plugin's configuration.

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

func (h *higressConverter) convert(doc []byte) error {
	roots, err := h.documents(doc)
	if err != nil {
		return err
	}
	if len(roots) == 0 {
		return fmt.Errorf("config: empty; give WasmPlugins (kubectl get wasmplugin -A -o yaml) or one plugin's configuration")
	}
	if !isObjectStream(roots) {
		if len(roots) > 1 {
			return roots[1].errorf("a plugin configuration is one YAML document; give Kubernetes objects (with kind) to convert several")
		}
		h.bare = true
		return h.bareConfig(roots[0])
	}
	for _, r := range roots {
		if err := h.object(r); err != nil {
			return err
		}
	}
	if len(h.policies) == 0 {
		return fmt.Errorf("config: no WasmPlugin of %s with a configuration to convert (a plugin is told by its url's image name, else its metadata.name)", strings.Join(higressPlugins, ", "))
	}
	return nil
}

// documents parses the YAML stream, leaving out empty documents.
func (h *higressConverter) documents(doc []byte) ([]yval, error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var out []yval
	for i := 1; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("config: document %d: %s", i, yamlError(err))
		}
		if len(n.Content) == 0 {
			continue
		}
		r, err := h.resolve(fmt.Sprintf("document %d", i), n.Content[0])
		if err != nil {
			return nil, err
		}
		if !r.isNull() {
			out = append(out, r)
		}
	}
}

// isObjectStream tells Kubernetes objects (with a kind or apiVersion)
// from a plugin's configuration.
func isObjectStream(roots []yval) bool {
	for _, r := range roots {
		if r.n.Kind != yaml.MappingNode {
			continue
		}
		for i := 0; i+1 < len(r.n.Content); i += 2 {
			if k := r.n.Content[i].Value; k == "kind" || k == "apiVersion" {
				return true
			}
		}
	}
	return false
}

// object converts a WasmPlugin, opens a List and skips anything else.
func (h *higressConverter) object(v yval) error {
	kind, err := h.lookupText(v, "kind")
	if err != nil {
		return err
	}
	switch kind {
	case "List":
		items, ok, err := h.lookup(v, "items")
		if err != nil || !ok {
			return err
		}
		list, err := h.list(items)
		if err != nil {
			return err
		}
		for _, it := range list {
			if err := h.object(it); err != nil {
				return err
			}
		}
	case "WasmPlugin":
		return h.wasmPlugin(v)
	}
	return nil
}

// looksLikeLimiter tells the names of other plugins that limit rates,
// which the user should hear were not converted.
var looksLikeLimiter = regexp.MustCompile(`(?i)rate.?limit|quota|throttl`)

// pluginOf tells which plugin a WasmPlugin runs: the image name of its
// url (oci://.../plugins/cluster-key-rate-limit:1.0.0), else its
// metadata.name (cluster-key-rate-limit, or with a suffix:
// key-rate-limit-1.0.0, ai-token-ratelimit.internal).
func pluginOf(url, name string) (plugin, shown string) {
	image := url[strings.LastIndex(url, "/")+1:]
	if i := strings.IndexAny(image, ":@"); i >= 0 {
		image = image[:i]
	}
	image = strings.ReplaceAll(strings.TrimSuffix(image, ".wasm"), "_", "-")
	if slices.Contains(higressPlugins, image) {
		return image, image
	}
	best := ""
	for _, p := range higressPlugins {
		rest, ok := strings.CutPrefix(name, p)
		if ok && (rest == "" || !isNameLetter(rest[0])) && len(p) > len(best) {
			best = p
		}
	}
	if image == "" {
		image = name
	}
	return best, image
}

func isNameLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// wasmPlugin converts one WasmPlugin into one policy.
func (h *higressConverter) wasmPlugin(v yval) error {
	meta, _, err := h.lookup(v, "metadata")
	if err != nil {
		return err
	}
	name, err := h.lookupText(meta, "name")
	if err != nil {
		return err
	}
	ns, err := h.lookupText(meta, "namespace")
	if err != nil {
		return err
	}
	spec, ok, err := h.lookup(v, "spec")
	if err != nil || !ok {
		return err
	}
	url, err := h.lookupText(spec, "url")
	if err != nil {
		return err
	}
	plugin, image := pluginOf(url, name)
	name = cmp.Or(name, plugin)
	shown := name
	if ns != "" {
		shown = ns + "/" + name
	}
	if plugin == "" {
		if looksLikeLimiter.MatchString(image) || looksLikeLimiter.MatchString(name) {
			h.note("WasmPlugin %s (%s) is skipped: only %s convert", shown, image, strings.Join(higressPlugins, ", "))
		}
		return nil
	}
	spec.path = "WasmPlugin " + shown + ": spec"
	return h.scopedConfigs(name, plugin, spec)
}

// scoped is one configuration of a WasmPlugin and the hosts it applies to
// (host: a condition, nil for every host).
type scoped struct {
	cfg   *higressConfig
	host  any
	path  string
	label string // "matchrule-<i>", for the name of its unlimited rule
}

// scopedConfigs reads the configurations of a WasmPlugin's spec in the
// order Higress tries them and makes their policy.
func (h *higressConverter) scopedConfigs(name, plugin string, spec yval) error {
	fields, err := h.mapping(spec, nil)
	if err != nil {
		return err
	}
	if pc, ok := fields["pluginConfig"]; ok && !pc.isNull() {
		// Higress passes pluginConfig as it is, ignoring the rest.
		if _, ok := fields["matchRules"]; ok {
			h.note("%s.pluginConfig is set, so Higress ignores matchRules and defaultConfig; so does the conversion", spec.path)
		}
		cfg, err := h.config(plugin, pc)
		if err != nil {
			return err
		}
		return h.addPolicy(name, spec.path, []scoped{{cfg: cfg, path: pc.path}})
	}
	var configs []scoped
	everyHost := false
	if mr, ok := fields["matchRules"]; ok {
		if configs, everyHost, err = h.matchRules(plugin, mr); err != nil {
			return err
		}
	}
	if d, ok := fields["defaultConfig"]; ok && !d.isNull() && !everyHost {
		disabled := false
		if dd, ok := fields["defaultConfigDisable"]; ok && !dd.isNull() {
			if disabled, err = h.flag(dd); err != nil {
				return err
			}
		}
		if !disabled {
			cfg, err := h.config(plugin, d)
			if err != nil {
				return err
			}
			configs = append(configs, scoped{cfg: cfg, path: d.path})
		}
	}
	return h.addPolicy(name, spec.path, configs)
}

var matchRuleFields = []string{"ingress", "domain", "service", "config", "configDisable", "routeType"}

// matchRules reads the match rules Higress tries before the default; a
// rule whose scope cannot be read from the plugin is left out, with a
// note. everyHost: a rule matches every host, so nothing after it applies.
func (h *higressConverter) matchRules(plugin string, v yval) (out []scoped, everyHost bool, err error) {
	rules, err := h.list(v)
	if err != nil {
		return nil, false, err
	}
	for i, r := range rules {
		f, err := h.mapping(r, matchRuleFields)
		if err != nil {
			return nil, false, err
		}
		if cd, ok := f["configDisable"]; ok && !cd.isNull() {
			disabled, err := h.flag(cd)
			if err != nil {
				return nil, false, err
			}
			if disabled {
				continue // Higress drops the rule: its requests get the default
			}
		}
		lists := map[string][]string{}
		for _, k := range []string{"ingress", "domain", "service"} {
			if l, ok := f[k]; ok {
				if lists[k], err = h.texts(l); err != nil {
					return nil, false, err
				}
			}
		}
		if len(lists["ingress"])+len(lists["domain"])+len(lists["service"]) == 0 {
			return nil, false, r.errorf("a match rule needs an ingress, domain or service list (Higress refuses it too)")
		}
		if why := unreadableScope(plugin, lists); why != "" {
			h.note("%s (%s) is not converted: which requests it applies to cannot be read from the plugin, and without that condition its rules would limit every host; the configurations after it (later match rules, the defaultConfig) apply to those requests instead. Write its rules by hand, matching their host and path", r.path, why)
			continue
		}
		if len(lists["service"]) > 0 {
			h.note("%s: service %s is not read, as Higress does not for a rule with domains", r.path, strings.Join(lists["service"], ", "))
		}
		host, all, err := hostCondition(f["domain"], lists["domain"])
		if err != nil {
			return nil, false, err
		}
		c, ok := f["config"]
		if !ok {
			return nil, false, r.errorf("config: missing")
		}
		cfg, err := h.config(plugin, c)
		if err != nil {
			return nil, false, err
		}
		out = append(out, scoped{cfg: cfg, host: host, path: r.path, label: fmt.Sprintf("matchrule-%d", i)})
		if all {
			h.note("%s matches every host (domain \"*\"): the match rules and the defaultConfig after it never apply, in Higress as in the conversion", r.path)
			return out, true, nil
		}
	}
	return out, false, nil
}

// unreadableScope says why a match rule's scope cannot be converted: an
// Ingress's or a service's requests are not told by the plugin (and
// Higress matches a rule with an ingress list by its routes alone, and
// key-rate-limit a rule with a service list by the service alone).
func unreadableScope(plugin string, lists map[string][]string) string {
	switch {
	case len(lists["ingress"]) > 0:
		return "ingress " + strings.Join(lists["ingress"], ", ")
	case len(lists["service"]) > 0 && (len(lists["domain"]) == 0 || plugin == pluginKeyRateLimit):
		return "service " + strings.Join(lists["service"], ", ")
	}
	return ""
}

// hostCondition is the match on the host of a domain list: Higress
// compares the request's host, port left out, with each domain, a leading
// "*" making it a suffix and a trailing one a prefix (its rule matcher's
// documented wildcards). ok is false for "*", every host.
func hostCondition(v yval, domains []string) (cond any, all bool, err error) {
	var exact, suffix, prefix, alts []string
	for i, d := range domains {
		d = strings.ToLower(d)
		switch {
		case d == "":
			return nil, false, fmt.Errorf("%s[%d] (line %d): an empty domain", v.path, i, v.n.Line)
		case d == "*":
			return nil, true, nil
		case strings.HasPrefix(d, "*"):
			suffix = append(suffix, d[1:])
			alts = append(alts, ".*"+regexp.QuoteMeta(d[1:]))
		case strings.HasSuffix(d, "*"):
			prefix = append(prefix, d[:len(d)-1])
			alts = append(alts, regexp.QuoteMeta(d[:len(d)-1])+".*")
		case !slices.Contains(exact, d):
			exact = append(exact, d)
			alts = append(alts, regexp.QuoteMeta(d))
		}
	}
	switch {
	case len(suffix)+len(prefix) == 0:
		return map[string]any{"in": exact}, false, nil
	case len(exact) == 0 && len(prefix) == 0 && len(suffix) == 1:
		return map[string]any{"suffix": suffix[0]}, false, nil
	case len(exact) == 0 && len(suffix) == 0 && len(prefix) == 1:
		return map[string]any{"prefix": prefix[0]}, false, nil
	}
	re := "^(?:" + strings.Join(alts, "|") + ")$"
	if len(re) > policy.MaxRegexLen {
		return nil, false, fmt.Errorf("%s (line %d): the domains make a regular expression of %d bytes, more than %d; split the rule", v.path, v.n.Line, len(re), policy.MaxRegexLen)
	}
	return map[string]any{"regex": re}, false, nil
}

// bareConfig converts one plugin's configuration.
func (h *higressConverter) bareConfig(v yval) error {
	v.path = "config"
	plugin := h.opt.Plugin
	if plugin == "" {
		var err error
		if plugin, err = h.detectPlugin(v); err != nil {
			return err
		}
	}
	cfg, err := h.config(plugin, v)
	if err != nil {
		return err
	}
	name := cfg.ruleName
	if name == "" {
		name = plugin
	}
	return h.addPolicy(name, "config", []scoped{{cfg: cfg, path: "config"}})
}

// detectPlugin tells the plugin of a bare configuration by its fields.
func (h *higressConverter) detectPlugin(v yval) (string, error) {
	if v.n.Kind != yaml.MappingNode {
		return "", v.errorf("want a plugin configuration (an object) or Kubernetes objects")
	}
	if _, ok, err := h.lookup(v, "limit_keys"); err != nil || ok {
		return pluginKeyRateLimit, err
	}
	if _, ok, err := h.lookup(v, "show_limit_quota_header"); err != nil || ok {
		return pluginClusterRateLimit, err
	}
	var limits []yval
	if g, ok, err := h.lookup(v, "global_threshold"); err != nil {
		return "", err
	} else if ok {
		limits = append(limits, g)
	}
	if ri, ok, err := h.lookup(v, "rule_items"); err != nil {
		return "", err
	} else if ok && ri.n.Kind == yaml.SequenceNode {
		for _, it := range ri.n.Content {
			if lk, ok, err := h.lookup(yval{ri.path, it}, "limit_keys"); err != nil {
				return "", err
			} else if ok && lk.n.Kind == yaml.SequenceNode {
				for _, k := range lk.n.Content {
					limits = append(limits, yval{lk.path, k})
				}
			}
		}
	}
	for _, l := range limits {
		for i := 0; l.n.Kind == yaml.MappingNode && i+1 < len(l.n.Content); i += 2 {
			switch k := l.n.Content[i].Value; {
			case strings.HasPrefix(k, "query_per_"):
				return pluginClusterRateLimit, nil
			case strings.HasPrefix(k, "token_per_"):
				return pluginAITokenRateLimit, nil
			}
		}
	}
	return "", v.errorf("cannot tell which plugin this configuration is for (top-level limit_keys: key-rate-limit; query_per_* limits: cluster-key-rate-limit; token_per_* limits: ai-token-ratelimit); set the plugin option")
}
