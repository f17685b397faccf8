package migrate

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net/netip"
	"regexp"
	"regexp/syntax"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// HigressOptions are the choices a conversion of Higress's rate limiting
// plugins cannot read from their configuration.
type HigressOptions struct {
	// Plugin names the plugin of a bare configuration ("key-rate-limit",
	// "cluster-key-rate-limit" or "ai-token-ratelimit") when its fields do
	// not tell; a WasmPlugin's plugin comes from its url or name.
	Plugin string
	// Scope is the scope of cluster-key-rate-limit's rules: "global" (the
	// default: Higress counts them in Redis, across gateways) or "local"
	// (per Envoy process). key-rate-limit counts per gateway in Higress too,
	// and ai-token-ratelimit's rules charge from the response, which a
	// global rule cannot: both are always local.
	Scope string
	// FleetCluster is the fleet block's cluster of global rules (default
	// "sluice_rls", the cluster envoy.yaml and the chart define).
	FleetCluster string
	// DefaultCost is the tokens ai-token-ratelimit's rules charge for an
	// answer that reports no usage (default 100).
	DefaultCost int
	// Taken are rule and policy names the conversion must not use
	// (Options.Taken). With names taken the output is meant for AddTo, so it
	// is always written as named policies.
	Taken []string
}

// The plugins that convert, by the name of their image. Their fields,
// defaults (rejected_code 429, rejected_msg "Too many requests") and
// matching follow Higress's documentation (higress.cn, plugins
// key-rate-limit, cluster-key-rate-limit, ai-token-ratelimit) and their
// parsers in alibaba/higress (plugins/wasm-cpp/extensions/key_rate_limit,
// plugins/wasm-go/extensions/cluster-key-rate-limit and
// ai-token-ratelimit); a WasmPlugin's matchRules follow its controller and
// rule matcher: the first rule that matches the request wins, else the
// defaultConfig, and a rule with configDisable is dropped.
const (
	pluginKeyRateLimit     = "key-rate-limit"
	pluginClusterRateLimit = "cluster-key-rate-limit"
	pluginAITokenRateLimit = "ai-token-ratelimit"
)

var higressPlugins = []string{pluginKeyRateLimit, pluginClusterRateLimit, pluginAITokenRateLimit}

const (
	// higressRejectBody is the body key-rate-limit always answers with,
	// and the other two plugins' default rejected_msg.
	higressRejectBody = "Too many requests"
	// consumerHeader carries the consumer name Higress's authentication
	// plugins (key-auth, jwt-auth, ...) set; limit_by_consumer reads it.
	consumerHeader = "x-mse-consumer"
	// maxHigressValues bounds the YAML values one conversion reads,
	// aliases expanded.
	maxHigressValues = 100000
	defaultTokenCost = 100
)

// Higress converts the rate limiting plugins of Higress (key-rate-limit,
// cluster-key-rate-limit, ai-token-ratelimit) into a policy. doc is either
// a YAML stream of Kubernetes objects, whose WasmPlugins of those plugins
// convert (other kinds and plugins are skipped; Lists are opened), or one
// plugin's bare configuration. A WasmPlugin becomes one policy: its
// matchRules' configurations first, each matching its domains, then its
// defaultConfig, as Higress tries the match rules before the default. A
// configuration's rule items become rules in their order, each listed key
// a rule, so the first that applies decides as in Higress
// (docs/migrating.md, "Higress"). Errors name the field and its line.
func Higress(doc []byte, opt HigressOptions) (Result, error) {
	if err := checkHigressOptions(&opt); err != nil {
		return Result{}, err
	}
	if len(doc) > maxInput {
		return Result{}, &InputError{"config", fmt.Errorf("config: %d bytes, more than the %d a conversion reads", len(doc), maxInput)}
	}
	h := &higressConverter{converter: newConverter(opt.Taken), opt: opt}
	if err := h.convert(doc); err != nil {
		return Result{}, &InputError{"config", err}
	}
	res, err := h.result()
	if err != nil {
		return Result{}, &InputError{"config", err}
	}
	return res, nil
}

func checkHigressOptions(opt *HigressOptions) error {
	if opt.Plugin != "" && !slices.Contains(higressPlugins, opt.Plugin) {
		return &InputError{"plugin", fmt.Errorf("plugin %q: want %s", opt.Plugin, strings.Join(higressPlugins, ", "))}
	}
	switch opt.Scope {
	case "":
		opt.Scope = "global"
	case "global", "local":
	default:
		return &InputError{"scope", fmt.Errorf("scope %q: want global or local", opt.Scope)}
	}
	if opt.FleetCluster == "" {
		opt.FleetCluster = "sluice_rls"
	}
	if strings.IndexFunc(opt.FleetCluster, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
		return &InputError{"fleet_cluster", fmt.Errorf("fleet_cluster %q: want an Envoy cluster name in printable ASCII", opt.FleetCluster)}
	}
	switch {
	case opt.DefaultCost == 0:
		opt.DefaultCost = defaultTokenCost
	case opt.DefaultCost < 0 || opt.DefaultCost > 1e9:
		return &InputError{"default_cost", fmt.Errorf("default_cost %d: want a number of tokens from 1 to 1e9 (default %d)", opt.DefaultCost, defaultTokenCost)}
	}
	return nil
}

// higressConverter accumulates the policies of one conversion.
type higressConverter struct {
	*converter
	opt      HigressOptions
	values   int // YAML values read, aliases expanded
	bare     bool
	policies []higressPolicy
	configs  []*higressConfig // the converted configurations, in order
}

// ---- Reading YAML ----

// yval is a YAML value and where it is, for messages.
type yval struct {
	path string
	n    *yaml.Node
}

func (v yval) errorf(format string, args ...any) error {
	return fmt.Errorf("%s (line %d): %s", v.path, v.n.Line, fmt.Sprintf(format, args...))
}

func (v yval) at(key string) string { return v.path + "." + key }

func (v yval) isNull() bool { return v.n.Kind == yaml.ScalarNode && v.n.Tag == "!!null" }

// resolve follows aliases and counts the value read.
func (h *higressConverter) resolve(path string, n *yaml.Node) (yval, error) {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	if h.values++; h.values > maxHigressValues {
		return yval{}, fmt.Errorf("%s (line %d): more than %d values (YAML aliases expanded); convert fewer objects at a time", path, n.Line, maxHigressValues)
	}
	if n.Kind == yaml.AliasNode {
		return yval{}, fmt.Errorf("%s (line %d): an alias nested too deeply", path, n.Line)
	}
	return yval{path, n}, nil
}

// mapping reads an object's fields; allowed lists the fields it may have
// (nil: any, for the Kubernetes objects around a configuration). A
// misspelt field is refused: Higress would ignore it silently.
func (h *higressConverter) mapping(v yval, allowed []string) (map[string]yval, error) {
	if v.isNull() && allowed != nil {
		return map[string]yval{}, nil
	}
	if v.n.Kind != yaml.MappingNode {
		return nil, v.errorf("want an object of fields")
	}
	out := map[string]yval{}
	for i := 0; i+1 < len(v.n.Content); i += 2 {
		k, err := h.resolve(v.path, v.n.Content[i])
		if err != nil {
			return nil, err
		}
		name := k.n.Value
		switch {
		case k.n.Kind != yaml.ScalarNode:
			return nil, k.errorf("a field name must be a string")
		case name == "<<":
			return nil, k.errorf("YAML merge keys (<<) are not read; write the fields out")
		case allowed != nil && !slices.Contains(allowed, name):
			return nil, k.errorf("unknown field %q; allowed here: %s", name, strings.Join(allowed, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, k.errorf("field %q given twice", name)
		}
		val, err := h.resolve(v.at(name), v.n.Content[i+1])
		if err != nil {
			return nil, err
		}
		out[name] = val
	}
	return out, nil
}

// list reads a sequence (null: none).
func (h *higressConverter) list(v yval) ([]yval, error) {
	if v.isNull() {
		return nil, nil
	}
	if v.n.Kind != yaml.SequenceNode {
		return nil, v.errorf("want a list")
	}
	out := make([]yval, len(v.n.Content))
	for i, n := range v.n.Content {
		var err error
		if out[i], err = h.resolve(fmt.Sprintf("%s[%d]", v.path, i), n); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// text reads a scalar as written: an unquoted number is its digits, as a
// key of 102234 is in Higress's own examples.
func (h *higressConverter) text(v yval) (string, error) {
	if v.n.Kind != yaml.ScalarNode || v.isNull() {
		return "", v.errorf("want a string")
	}
	return v.n.Value, nil
}

func (h *higressConverter) texts(v yval) ([]string, error) {
	items, err := h.list(v)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(items))
	for i, it := range items {
		if out[i], err = h.text(it); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (h *higressConverter) whole(v yval) (int64, error) {
	var n int64
	if v.n.Kind != yaml.ScalarNode || v.n.Tag != "!!int" || v.n.Decode(&n) != nil {
		return 0, v.errorf("%q: want a whole number", v.n.Value)
	}
	return n, nil
}

func (h *higressConverter) flag(v yval) (bool, error) {
	var b bool
	if v.n.Kind != yaml.ScalarNode || v.n.Tag != "!!bool" || v.n.Decode(&b) != nil {
		return false, v.errorf("%q: want true or false", v.n.Value)
	}
	return b, nil
}

// lookup is a field of an object read leniently: ok is false when v is
// not an object or has no such field.
func (h *higressConverter) lookup(v yval, key string) (yval, bool, error) {
	if v.n == nil || v.n.Kind != yaml.MappingNode {
		return yval{}, false, nil
	}
	for i := 0; i+1 < len(v.n.Content); i += 2 {
		if v.n.Content[i].Kind == yaml.ScalarNode && v.n.Content[i].Value == key {
			val, err := h.resolve(v.at(key), v.n.Content[i+1])
			return val, err == nil && !val.isNull(), err
		}
	}
	return yval{}, false, nil
}

// lookupText is a string field read leniently ("" when absent or not a
// string).
func (h *higressConverter) lookupText(v yval, key string) (string, error) {
	f, ok, err := h.lookup(v, key)
	if err != nil || !ok || f.n.Kind != yaml.ScalarNode {
		return "", err
	}
	return f.n.Value, nil
}

// ---- The input: a stream of objects, or one configuration ----

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

// ---- Plugin configurations ----

// higressConfig is one plugin configuration, read and checked.
type higressConfig struct {
	plugin   string
	path     string
	ruleName string
	global   *higressLimit // global_threshold
	items    []higressItem
	status   int     // rejected_code (429 unless set)
	body     *string // rejected_msg; nil when not set (but key-rate-limit's fixed body)
	quota    *bool   // show_limit_quota_header, when set
}

// higressItem is one rule item: where its key is read and its keys.
type higressItem struct {
	source string // a Sluice key source
	short  string // the source in rule names: the header or parameter name
	keys   []higressKey
}

// higressKey is one listed key: a rule.
type higressKey struct {
	name  string // its part of the rule name
	cond  any    // its match condition on the item's source; nil for every value
	limit higressLimit
}

type higressLimit struct {
	count   int64
	seconds int
}

// higressWindows are the units of every plugin, in the order
// key-rate-limit reads them.
var higressWindows = []struct {
	suffix  string
	seconds int
}{{"second", 1}, {"minute", 60}, {"hour", 3600}, {"day", 86400}}

func (h *higressConverter) config(plugin string, v yval) (*higressConfig, error) {
	if _, ok, err := h.lookup(v, "_rules_"); err != nil || ok {
		if err == nil {
			err = v.errorf("_rules_ is the gateway's internal form of a WasmPlugin's matchRules: convert the WasmPlugin instead (kubectl get wasmplugin -A -o yaml)")
		}
		return nil, err
	}
	var cfg *higressConfig
	var err error
	if plugin == pluginKeyRateLimit {
		cfg, err = h.keyRateLimit(v)
	} else {
		cfg, err = h.ruleItemsConfig(plugin, v)
	}
	if err != nil {
		return nil, err
	}
	cfg.plugin, cfg.path = plugin, v.path
	h.configs = append(h.configs, cfg)
	return cfg, nil
}

// keyRateLimit reads key-rate-limit's configuration: the listed values of
// one header or query parameter, each with its limit. It always rejects
// with 429 and "Too many requests".
func (h *higressConverter) keyRateLimit(v yval) (*higressConfig, error) {
	f, err := h.mapping(v, []string{"limit_by_header", "limit_by_param", "limit_keys"})
	if err != nil {
		return nil, err
	}
	src, err := h.limitBy(v, f, map[string]string{"limit_by_header": "header:", "limit_by_param": "query:"})
	if err != nil {
		return nil, err
	}
	lk, ok := f["limit_keys"]
	if !ok {
		return nil, v.errorf("limit_keys: missing")
	}
	keys, err := h.list(lk)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, lk.errorf("empty; list the values to limit")
	}
	item := higressItem{source: src.source, short: src.short}
	seen := map[string]string{}
	for _, k := range keys {
		hk, err := h.listedKey(k, "query", true)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[hk.name]; dup {
			h.note("%s: key %q again (also %s); key-rate-limit keeps the first, and so does the conversion", k.path, hk.name, first)
			continue
		}
		seen[hk.name] = k.path
		hk.cond = hk.name
		item.keys = append(item.keys, hk)
	}
	body := higressRejectBody
	h.noteOnce("key-rate-limit refills a key's bucket at the end of each interval counted from the plugin's start; Sluice's fixed windows are aligned to the clock")
	return &higressConfig{items: []higressItem{item}, status: policy.DefaultRejectStatus, body: &body}, nil
}

// limitSource is the Sluice key source of a limit_by_* field and its
// name in rule names.
type limitSource struct {
	source, short string
}

// limitBy reads the one limit_by_* field of fields among kinds (field ->
// the Sluice source prefix), as key-rate-limit does.
func (h *higressConverter) limitBy(v yval, f map[string]yval, kinds map[string]string) (limitSource, error) {
	fields := slices.Sorted(maps.Keys(kinds))
	var set []string
	var out limitSource
	for _, field := range fields {
		fv, ok := f[field]
		if !ok {
			continue
		}
		name, err := h.text(fv)
		if err != nil {
			return out, err
		}
		if name == "" {
			continue // Higress reads an empty name as not set
		}
		k, ok := policy.ParseSource(kinds[field] + name)
		if !ok {
			return out, fv.errorf("%q is not a valid %s name", name, strings.TrimSuffix(kinds[field], ":"))
		}
		set = append(set, field)
		out = limitSource{source: k.String(), short: name}
	}
	if len(set) != 1 {
		return out, v.errorf("set exactly one of %s", strings.Join(fields, ", "))
	}
	return out, nil
}

// listedKey reads a limit_keys entry: its key and its limit. unit is
// "query" or "token"; firstWins reads key-rate-limit's precedence (the
// first unit set, from second to day) instead of refusing several.
func (h *higressConverter) listedKey(v yval, unit string, firstWins bool) (higressKey, error) {
	allowed := []string{"key"}
	for _, w := range higressWindows {
		allowed = append(allowed, unit+"_per_"+w.suffix)
	}
	f, err := h.mapping(v, allowed)
	if err != nil {
		return higressKey{}, err
	}
	kv, ok := f["key"]
	if !ok {
		return higressKey{}, v.errorf("key: missing")
	}
	key, err := h.text(kv)
	if err != nil {
		return higressKey{}, err
	}
	if key == "" {
		return higressKey{}, kv.errorf("empty; give the value to limit")
	}
	limit, err := h.limit(v, f, unit, firstWins)
	if err != nil {
		return higressKey{}, err
	}
	return higressKey{name: key, limit: limit}, nil
}

// limit reads the one <unit>_per_<window> of an object. cluster- and
// ai-token-ratelimit take any one of them, at random when several are
// set: several are refused. key-rate-limit reads a 0 as not set and
// takes the first, from second to day.
func (h *higressConverter) limit(v yval, f map[string]yval, unit string, firstWins bool) (higressLimit, error) {
	var out higressLimit
	var set []string
	for _, w := range higressWindows {
		field := unit + "_per_" + w.suffix
		fv, ok := f[field]
		if !ok {
			continue
		}
		n, err := h.whole(fv)
		if err != nil {
			return out, err
		}
		switch {
		case n == 0 && firstWins:
			continue
		case n <= 0:
			return out, fv.errorf("%d: want a positive number", n)
		case n > policy.MaxBurst:
			return out, fv.errorf("%d: more than Sluice's largest limit, 1e12", n)
		}
		set = append(set, field)
		if len(set) == 1 {
			out = higressLimit{count: n, seconds: w.seconds}
		}
	}
	fields := unit + "_per_second, _minute, _hour or _day"
	switch {
	case len(set) == 0:
		return out, v.errorf("set one of %s", fields)
	case len(set) > 1 && firstWins:
		h.note("%s: %s is read and %s left out, as key-rate-limit does", v.path, set[0], strings.Join(set[1:], ", "))
	case len(set) > 1:
		return out, v.errorf("%s are all set: the plugin reads one of them, at random; keep one", strings.Join(set, ", "))
	}
	return out, nil
}

// ruleItemsConfig reads cluster-key-rate-limit's and ai-token-ratelimit's
// configuration: a rule name, and either global_threshold or rule items.
func (h *higressConverter) ruleItemsConfig(plugin string, v yval) (*higressConfig, error) {
	unit := "query"
	allowed := []string{"rule_name", "global_threshold", "rule_items", "rejected_code", "rejected_msg", "redis"}
	if plugin == pluginAITokenRateLimit {
		unit = "token"
	} else {
		allowed = append(allowed, "show_limit_quota_header")
	}
	f, err := h.mapping(v, allowed)
	if err != nil {
		return nil, err
	}
	cfg := &higressConfig{status: policy.DefaultRejectStatus}
	rn, ok := f["rule_name"]
	if !ok {
		return nil, v.errorf("rule_name: missing (the plugin requires it)")
	}
	if cfg.ruleName, err = h.text(rn); err != nil {
		return nil, err
	}
	if err := h.rejection(f, cfg); err != nil {
		return nil, err
	}
	if r, ok := f["redis"]; ok {
		if _, err := h.mapping(r, []string{"service_name", "service_port", "username", "password", "timeout", "database"}); err != nil {
			return nil, err
		}
	}
	g, hasGlobal := f["global_threshold"]
	items, hasItems := f["rule_items"]
	switch {
	case hasGlobal == hasItems:
		return nil, v.errorf("set one of global_threshold and rule_items")
	case hasGlobal:
		gf, err := h.mapping(g, tokenFields(unit))
		if err != nil {
			return nil, err
		}
		l, err := h.limit(g, gf, unit, false)
		if err != nil {
			return nil, err
		}
		cfg.global = &l
		return cfg, nil
	}
	list, err := h.list(items)
	if err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, items.errorf("empty")
	}
	for _, it := range list {
		item, err := h.ruleItem(it, unit)
		if err != nil {
			return nil, err
		}
		cfg.items = append(cfg.items, item)
	}
	return cfg, nil
}

func tokenFields(unit string) []string {
	out := make([]string, len(higressWindows))
	for i, w := range higressWindows {
		out[i] = unit + "_per_" + w.suffix
	}
	return out
}

// rejection reads rejected_code, rejected_msg and show_limit_quota_header.
func (h *higressConverter) rejection(f map[string]yval, cfg *higressConfig) error {
	body := higressRejectBody // Higress's default, which clients may read
	cfg.body = &body
	if rc, ok := f["rejected_code"]; ok {
		n, err := h.whole(rc)
		if err != nil {
			return err
		}
		if n < 400 || n > 599 {
			return rc.errorf("%d: Sluice's reject_status is an HTTP status from 400 to 599", n)
		}
		cfg.status = int(n)
	}
	if rm, ok := f["rejected_msg"]; ok {
		msg, err := h.text(rm)
		if err != nil {
			return err
		}
		if len(msg) > 4096 {
			return rm.errorf("%d bytes; Sluice's reject_body is at most 4096", len(msg))
		}
		cfg.body = &msg
	}
	if sq, ok := f["show_limit_quota_header"]; ok {
		b, err := h.flag(sq)
		if err != nil {
			return err
		}
		cfg.quota = &b
	}
	return nil
}

var ruleItemFields = []string{"limit_by_header", "limit_by_param", "limit_by_consumer", "limit_by_cookie",
	"limit_by_per_header", "limit_by_per_param", "limit_by_per_consumer", "limit_by_per_cookie", "limit_by_per_ip", "limit_keys"}

// ruleItem reads one rule item: where its key comes from and its keys.
func (h *higressConverter) ruleItem(v yval, unit string) (higressItem, error) {
	f, err := h.mapping(v, ruleItemFields)
	if err != nil {
		return higressItem{}, err
	}
	kind, src, err := h.itemSource(v, f)
	if err != nil {
		return higressItem{}, err
	}
	lk, ok := f["limit_keys"]
	if !ok {
		return higressItem{}, v.errorf("limit_keys: missing")
	}
	keys, err := h.list(lk)
	if err != nil {
		return higressItem{}, err
	}
	if len(keys) == 0 {
		return higressItem{}, lk.errorf("empty")
	}
	item := higressItem{source: src.source, short: src.short}
	for _, k := range keys {
		hk, err := h.listedKey(k, unit, false)
		if err != nil {
			return higressItem{}, err
		}
		kf, _, err := h.lookup(k, "key")
		if err != nil {
			return higressItem{}, err
		}
		if err := keyCondition(kf, kind, &hk); err != nil {
			return higressItem{}, err
		}
		item.keys = append(item.keys, hk)
		if hk.cond == nil && kind != "limit_by_per_ip" && len(item.keys) < len(keys) {
			h.note("%s: the keys after \"*\" are never reached, in Higress as in the conversion; left out", lk.path)
			break
		}
	}
	return item, nil
}

// itemSource reads the one limit_by_* field of a rule item.
func (h *higressConverter) itemSource(v yval, f map[string]yval) (string, limitSource, error) {
	var set []string
	for _, k := range ruleItemFields[:len(ruleItemFields)-1] {
		if fv, ok := f[k]; ok && (fv.n.Value != "" || strings.HasSuffix(k, "consumer")) {
			set = append(set, k) // Higress reads an empty name as not set, but a consumer field by its presence
		}
	}
	if len(set) != 1 {
		return "", limitSource{}, v.errorf("set exactly one of limit_by_header, _param, _consumer, _cookie, limit_by_per_header, _param, _consumer, _cookie or _ip")
	}
	kind, fv := set[0], f[set[0]]
	if kind == "limit_by_consumer" || kind == "limit_by_per_consumer" {
		h.noteOnce(kind + ": Higress's consumer is the x-mse-consumer header its authentication plugins set; the rules read header:x-mse-consumer, so set that header from your authentication in front of Sluice and remove any a client sends (or key on the verified identity, such as a jwt_authn claim in the metadata)")
		return kind, limitSource{source: "header:" + consumerHeader, short: "consumer"}, nil
	}
	name, err := h.text(fv)
	if err != nil {
		return "", limitSource{}, err
	}
	if kind == "limit_by_per_ip" {
		src, err := h.ipSource(fv, name)
		return kind, src, err
	}
	prefix := "header:"
	switch {
	case strings.HasSuffix(kind, "param"):
		prefix = "query:"
	case strings.HasSuffix(kind, "cookie"):
		prefix = "cookie:"
	}
	k, ok := policy.ParseSource(prefix + name)
	if !ok {
		return "", limitSource{}, fv.errorf("%q is not a valid %s name", name, strings.TrimSuffix(prefix, ":"))
	}
	return kind, limitSource{source: k.String(), short: name}, nil
}

// ipSource reads limit_by_per_ip: from-remote-addr is the peer's
// address; from-header-x-forwarded-for the header's first address, which
// Sluice reads from the right instead (xff_trusted_hops); another header
// is keyed on as it is.
func (h *higressConverter) ipSource(v yval, from string) (limitSource, error) {
	header, fromHeader := strings.CutPrefix(from, "from-header-")
	switch {
	case from == "from-remote-addr":
		return limitSource{source: "ip:address", short: "ip"}, nil
	case !fromHeader || header == "":
		return limitSource{}, v.errorf("%q: want from-remote-addr or from-header-<name>", from)
	case strings.EqualFold(header, "x-forwarded-for"):
		h.noteOnce("limit_by_per_ip: from-header-x-forwarded-for takes the header's first address, which the client writes; the rules read ip:address, the peer's address, or with xff_trusted_hops the address your own proxies appended: set xff_trusted_hops to the number of proxies in front of Envoy (docs/configuration.md)")
		return limitSource{source: "ip:address", short: "ip"}, nil
	}
	k, ok := policy.ParseSource("header:" + header)
	if !ok {
		return limitSource{}, v.errorf("%q is not a valid header name", header)
	}
	h.noteOnce(fmt.Sprintf("limit_by_per_ip: %s: the rules key on the header as it is, which must hold one address (a list, such as X-Forwarded-For's, matches no block) and be set by your proxy, not the client", from))
	return limitSource{source: k.String(), short: k.Name}, nil
}

// keyCondition makes a listed key's match condition and name: a listed
// value is matched exactly; a per-value key is "*" (every value) or
// "regexp:<RE2>"; a per-address key an address or CIDR block.
func keyCondition(v yval, kind string, k *higressKey) error {
	switch {
	case kind == "limit_by_per_ip":
		block, err := addressBlock(k.name)
		if err != nil {
			return v.errorf("%v", err)
		}
		k.name, k.cond = block, map[string]any{"cidr": []string{block}}
	case !strings.HasPrefix(kind, "limit_by_per_"):
		k.cond = k.name
	case k.name == "*":
		k.name = ""
	case strings.HasPrefix(k.name, "regexp:"):
		re := strings.TrimPrefix(k.name, "regexp:")
		if _, err := regexp.Compile(re); err != nil {
			return v.errorf("%q: %v", re, err)
		}
		if len(re) > policy.MaxRegexLen {
			return v.errorf("a regular expression of %d bytes; Sluice takes at most %d", len(re), policy.MaxRegexLen)
		}
		re = withoutTrailingAny(re)
		k.name = re
		if re != "" {
			k.cond = map[string]any{"regex": re}
		}
	default:
		return v.errorf("%q: %s takes \"*\" (every value) or \"regexp:<expression>\"", k.name, kind)
	}
	return nil
}

// addressBlock reads an address or CIDR block as Higress's IP tree does.
func addressBlock(s string) (string, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked().String(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return a.String(), nil
	}
	return "", fmt.Errorf("%q: want an IP address or CIDR block", s)
}

// withoutTrailingAny drops a final ".*" from a regular expression that
// ends with it: a search for "^a.*" holds exactly when one for "^a" does
// (Higress and Sluice both search, neither anchors). Only a ".*" that is
// the last element of the top-level sequence is dropped.
func withoutTrailingAny(re string) string {
	cut, ok := strings.CutSuffix(re, ".*")
	if !ok {
		return re
	}
	whole, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return re
	}
	if whole.Op == syntax.OpStar && isAnyChar(whole.Sub[0]) && cut == "" {
		return ""
	}
	n := len(whole.Sub)
	if whole.Op != syntax.OpConcat || n < 2 || whole.Sub[n-1].Op != syntax.OpStar || !isAnyChar(whole.Sub[n-1].Sub[0]) {
		return re
	}
	rest := &syntax.Regexp{Op: syntax.OpConcat, Flags: whole.Flags, Sub: whole.Sub[:n-1]}
	if n == 2 {
		rest = whole.Sub[0]
	}
	short, err := syntax.Parse(cut, syntax.Perl)
	if err != nil || short.String() != rest.String() {
		return re
	}
	return cut
}

func isAnyChar(r *syntax.Regexp) bool {
	return r.Op == syntax.OpAnyCharNotNL || r.Op == syntax.OpAnyChar
}

// ---- Rules and policies ----

type higressOutput struct {
	RejectStatus    int             `json:"reject_status,omitempty"`
	RejectBody      *string         `json:"reject_body,omitempty"`
	ResponseHeaders *bool           `json:"response_headers,omitempty"`
	Fleet           *outFleet       `json:"fleet,omitempty"`
	Rules           []higressRule   `json:"rules,omitempty"`
	Policies        []higressPolicy `json:"policies,omitempty"`
}

type higressPolicy struct {
	Name  string        `json:"name"`
	Rules []higressRule `json:"rules"`
}

type higressRule struct {
	Name            string         `json:"name"`
	Scope           string         `json:"scope,omitempty"`
	Action          string         `json:"action,omitempty"`
	Match           map[string]any `json:"match,omitempty"`
	LimitKeys       []string       `json:"limit_keys,omitempty"`
	Algorithm       string         `json:"algorithm,omitempty"`
	AlgorithmConfig any            `json:"algorithm_config,omitempty"`
	RejectBody      *string        `json:"reject_body,omitempty"`

	cfg *higressConfig // the configuration it comes from
}

// tokenBucket is a token bucket charged from the response.
type tokenBucket struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           int64   `json:"burst"`
	CostSource      string  `json:"cost_source"`
	DefaultCost     int64   `json:"default_cost"`
}

type quotaConfig struct {
	Limit       int64  `json:"limit"`
	Period      string `json:"period"`
	CostSource  string `json:"cost_source"`
	DefaultCost int64  `json:"default_cost"`
}

type countWindow struct {
	Limit         int64 `json:"limit"`
	WindowSeconds int   `json:"window_seconds"`
}

// tokenCost is where ai-token-ratelimit's counts come from: the usage an
// OpenAI-style answer reports, charged when its body ends.
const tokenCost = "response_json:usage.total_tokens"

// addPolicy makes a WasmPlugin's (or a bare configuration's) policy: each
// configuration's rules in the order Higress tries them. A match rule's
// requests that none of its rules limits are kept from the configurations
// after it by an unlimited rule, as Higress applies one configuration
// only.
func (h *higressConverter) addPolicy(name, path string, configs []scoped) error {
	p := higressPolicy{Name: unique(h.pols, name)}
	for i, sc := range configs {
		p.Rules = append(p.Rules, h.configRules(sc)...)
		if sc.host != nil && i < len(configs)-1 && sc.cfg.global == nil {
			p.Rules = append(p.Rules, higressRule{Name: unique(h.rules, p.Name+"-"+sc.label+"-others"),
				Action: policy.ActionUnlimited, Match: map[string]any{"host": sc.host}})
		}
	}
	if len(p.Rules) == 0 {
		h.note("%s: nothing to convert (every configuration is disabled or left out)", path)
		return nil
	}
	h.policies = append(h.policies, p)
	return nil
}

// configRules are the rules of one configuration: global_threshold's one
// counter, or a rule per listed key, items in order. A configuration that
// makes one rule gives it its rule_name.
func (h *higressConverter) configRules(sc scoped) []higressRule {
	cfg := sc.cfg
	var out []higressRule
	var names []string
	if cfg.global != nil {
		// Higress keeps one counter for every request the configuration
		// applies to; host is the one key source every request has, and is
		// constant when the configuration applies to one domain.
		h.noteOnce("global_threshold is one counter for every request in Higress; the rule keys on host, so each host has its own counter: with several hosts, lower the limit or match one host per rule")
		out = append(out, h.limitRule(cfg, nil, "host", *cfg.global, sc.host))
		names = append(names, cmp.Or(cfg.ruleName, cfg.plugin))
	}
	for _, it := range cfg.items {
		for _, k := range it.keys {
			out = append(out, h.limitRule(cfg, k.cond, it.source, k.limit, sc.host))
			names = append(names, keyRuleName(cfg, it, k))
		}
	}
	if len(out) == 1 && cfg.ruleName != "" {
		names[0] = cfg.ruleName
	}
	for i := range out {
		out[i].Name = h.ruleNameFor(cfg, names[i])
	}
	if sc.host != nil {
		h.noteOnce("a host condition compares the request's host as sent, port included; Higress leaves the port out: list host:port too where clients send one")
	}
	return out
}

// ruleNameFor makes a rule's name unique, first by putting the
// configuration's rule_name before a name another rule has.
func (h *higressConverter) ruleNameFor(cfg *higressConfig, name string) string {
	clean := strings.Trim(nameUnsafe.ReplaceAllString(name, "_"), "_")
	if h.rules[clean] && cfg.ruleName != "" && name != cfg.ruleName {
		name = cfg.ruleName + "-" + name
	}
	return unique(h.rules, name)
}

// keyRuleName names a listed key's rule: key-rate-limit's by the value,
// the others' by the source and the value or expression.
func keyRuleName(cfg *higressConfig, it higressItem, k higressKey) string {
	clean := strings.Trim(nameUnsafe.ReplaceAllString(k.name, "_"), "_-.")
	switch {
	case cfg.plugin == pluginKeyRateLimit && clean != "":
		return clean
	case clean == "":
		return it.short
	}
	return it.short + "-" + clean
}

func (h *higressConverter) limitRule(cfg *higressConfig, cond any, source string, l higressLimit, host any) higressRule {
	r := higressRule{LimitKeys: []string{source}, cfg: cfg}
	match := map[string]any{}
	if cond != nil {
		match[source] = cond
	}
	if host != nil {
		match["host"] = host
	}
	if len(match) > 0 {
		r.Match = match
	}
	switch cfg.plugin {
	case pluginAITokenRateLimit:
		r.Algorithm, r.AlgorithmConfig = h.tokenLimit(l)
	default:
		r.Algorithm = policy.AlgorithmFixedWindow
		r.AlgorithmConfig = countWindow{Limit: l.count, WindowSeconds: l.seconds}
		if cfg.plugin == pluginClusterRateLimit && h.opt.Scope == "global" {
			r.Scope = "global"
		}
	}
	return r
}

// tokenLimit is ai-token-ratelimit's limit: a bucket of the count, refilled
// over the interval, or for a day a calendar quota; charged what the
// answer reports.
func (h *higressConverter) tokenLimit(l higressLimit) (string, any) {
	cost := int64(h.opt.DefaultCost)
	if cost > l.count {
		cost = l.count
		h.noteOnce(fmt.Sprintf("default_cost is lowered to a limit of %d tokens where it is above it (Sluice never charges more than the limit by default)", l.count))
	}
	if l.seconds == 86400 {
		return "quota", quotaConfig{Limit: l.count, Period: "day", CostSource: tokenCost, DefaultCost: cost}
	}
	return policy.AlgorithmTokenBucket, tokenBucket{TokensPerSecond: perSecond(l.count, l.seconds), Burst: l.count, CostSource: tokenCost, DefaultCost: cost}
}

// perSecond is a refill rate, rounded to three decimals (or five
// significant digits below one token a second).
func perSecond(count int64, seconds int) float64 {
	r := float64(count) / float64(seconds)
	if seconds == 1 {
		return r
	}
	if r >= 1 {
		return math.Round(r*1000) / 1000
	}
	v, _ := strconv.ParseFloat(strconv.FormatFloat(r, 'g', 5, 64), 64)
	return v
}

// ---- The document ----

func (h *higressConverter) result() (Result, error) {
	if len(h.policies) == 0 {
		return Result{}, fmt.Errorf("config: nothing to convert")
	}
	out := higressOutput{RejectStatus: h.rejectStatus(), ResponseHeaders: h.responseHeaders()}
	if out.RejectStatus == policy.DefaultRejectStatus {
		out.RejectStatus = 0
	}
	out.RejectBody = h.placeBodies()
	h.scopeNotes(&out)
	if len(h.opt.Taken) > 0 && (out.RejectStatus != 0 || out.ResponseHeaders != nil) {
		h.note("reject_status and response_headers hold for the whole configuration: set them in the policy this is added to, which keeps its own")
	}
	if h.bare && len(h.opt.Taken) == 0 {
		out.Rules = h.policies[0].Rules
	} else {
		out.Policies = h.policies
	}
	doc, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return Result{}, err
	}
	if _, err := policy.Parse(doc); err != nil {
		return Result{}, fmt.Errorf("the converted policy is refused: %w", err)
	}
	return Result{Policy: append(doc, '\n'), Notes: h.notes}, nil
}

// rejectStatus is the configurations' rejected_code; Sluice has one for
// the whole configuration, the first configuration's.
func (h *higressConverter) rejectStatus() int {
	status := h.configs[0].status
	for _, c := range h.configs[1:] {
		if c.status != status {
			h.noteOnce(fmt.Sprintf("the configurations reject with different statuses (%s: %d, %s: %d); Sluice has one reject_status for every rule: %d", h.configs[0].path, status, c.path, c.status, status))
		}
	}
	return status
}

// responseHeaders is show_limit_quota_header: false turns Sluice's
// RateLimit fields off; true (or not set) keeps them, in place of
// Higress's X-RateLimit-Limit and -Remaining.
func (h *higressConverter) responseHeaders() *bool {
	var on, off bool
	for _, c := range h.configs {
		if c.quota != nil {
			on, off = on || *c.quota, off || !*c.quota
		}
	}
	if on && off {
		h.noteOnce("show_limit_quota_header differs between the configurations; Sluice's response_headers holds for every rule: left on")
	}
	if off && !on {
		f := false
		return &f
	}
	return nil
}

// placeBodies sets rejected_msg as the top-level reject_body when every
// rule has the same, else on each rule. Output added to another policy
// (names taken) always carries it on its rules, as AddTo keeps policies
// only.
func (h *higressConverter) placeBodies() *string {
	var bodies []*string
	for _, p := range h.policies {
		for _, r := range p.Rules {
			if r.cfg != nil {
				bodies = append(bodies, r.cfg.body)
			}
		}
	}
	same := len(h.opt.Taken) == 0
	if len(bodies) == 0 {
		return nil
	}
	for _, b := range bodies[1:] {
		same = same && (b == nil) == (bodies[0] == nil) && (b == nil || *b == *bodies[0])
	}
	if same {
		return bodies[0]
	}
	for _, p := range h.policies {
		for i := range p.Rules {
			if c := p.Rules[i].cfg; c != nil {
				p.Rules[i].RejectBody = c.body
			}
		}
	}
	return nil
}

// scopeNotes sets the fleet block when a rule is global and says where
// each plugin's rules count.
func (h *higressConverter) scopeNotes(out *higressOutput) {
	for _, c := range h.configs {
		switch {
		case c.plugin == pluginClusterRateLimit && h.opt.Scope == "global":
			out.Fleet = &outFleet{Cluster: h.opt.FleetCluster}
			h.noteOnce(fmt.Sprintf(`cluster-key-rate-limit's rules are "scope": "global", counted across every Envoy as in Higress's Redis: run the admin as the rate limit service (docs/fleet.md), with that Redis as its -redis-addrs, and give Envoy the cluster %q`, h.opt.FleetCluster))
			h.noteOnce("cluster-key-rate-limit's windows start at a key's first request; Sluice's fixed windows are aligned to the clock")
		case c.plugin == pluginClusterRateLimit:
			h.noteOnce("cluster-key-rate-limit's rules are local: each Envoy process counts on its own, where Higress counted in Redis across gateways")
			h.noteOnce("cluster-key-rate-limit's windows start at a key's first request; Sluice's fixed windows are aligned to the clock")
		case c.plugin == pluginAITokenRateLimit:
			h.noteOnce("ai-token-ratelimit's rules are local: a rule charged from the response cannot be global, where Higress counted in Redis across gateways; with several gateways, give each its share of the budget")
			h.noteOnce(fmt.Sprintf("ai-token-ratelimit's rules charge the answer's usage.total_tokens (OpenAI's format; for Anthropic's write usage.input_tokens+usage.output_tokens, docs/llm.md); an answer reporting none costs default_cost (%d), where Higress charges nothing", h.opt.DefaultCost))
		}
	}
}
