package migrate

import (
	"fmt"
	"slices"
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
	// Scope is the scope of cluster-key-rate-limit's and
	// ai-token-ratelimit's rules: "global" (the default: Higress counts
	// them in Redis, across gateways) or "local" (per Envoy process).
	// key-rate-limit counts per gateway in Higress too: always local.
	Scope string
	// FleetCluster is the fleet block's cluster of global rules (default
	// "sluice_rls", the cluster envoy.yaml and the chart define).
	FleetCluster string
	// DefaultCost is the tokens ai-token-ratelimit's rules charge for an
	// answer that reports no usage (default 100).
	DefaultCost int
	// Taken are rule and policy names the conversion must not use
	// (Options.Taken). With names taken the output is meant for AddTo, so it
	// is written as named policies even for one plugin's configuration.
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

func (h *higressConverter) result() (Result, error) {
	if len(h.policies) == 0 {
		return Result{}, fmt.Errorf("config: nothing to convert")
	}
	out := higressOutput{RejectStatus: h.rejectStatus(), ResponseHeaders: h.responseHeaders(), LegacyHeaders: h.legacyHeaders()}
	if out.RejectStatus == policy.DefaultRejectStatus {
		out.RejectStatus = 0
	}
	out.RejectBody = h.placeBodies()
	h.scopeNotes(&out)
	if h.bare && len(h.opt.Taken) == 0 {
		out.Rules = h.policies[0].Rules
	} else {
		out.Policies = h.policies
	}
	return h.policyOf(out)
}

// rejectStatus is the first configuration's rejected_code, the top-level
// reject_status; the limit rules of a configuration with another code
// reject with their own.
func (h *higressConverter) rejectStatus() int {
	status := h.configs[0].status
	for _, p := range h.policies {
		for i := range p.Rules {
			if r := &p.Rules[i]; r.cfg != nil && r.cfg.status != status && r.Action == "" {
				r.RejectStatus = r.cfg.status
			}
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

// legacyHeaders is "x-ratelimit" when a configuration shows its quota
// (show_limit_quota_header: true): clients that read Higress's
// X-RateLimit-Limit and -Remaining find them, with X-RateLimit-Reset.
func (h *higressConverter) legacyHeaders() string {
	for _, c := range h.configs {
		if c.quota != nil && *c.quota {
			return "x-ratelimit"
		}
	}
	return ""
}

// placeBodies sets rejected_msg as the top-level reject_body when every
// rule has the same, else on each rule.
func (h *higressConverter) placeBodies() *string {
	var bodies []*string
	for _, p := range h.policies {
		for _, r := range p.Rules {
			if r.cfg != nil {
				bodies = append(bodies, r.cfg.body)
			}
		}
	}
	same := true
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
		case c.plugin == pluginAITokenRateLimit && h.opt.Scope == "global":
			out.Fleet = &outFleet{Cluster: h.opt.FleetCluster}
			h.noteOnce(fmt.Sprintf(`ai-token-ratelimit's rules are "scope": "global", counted across every Envoy as in Higress's Redis: run the admin as the rate limit service (docs/fleet.md) and give Envoy the cluster %q`, h.opt.FleetCluster))
			h.aiTokenCostNote()
		case c.plugin == pluginAITokenRateLimit:
			h.noteOnce("ai-token-ratelimit's rules are local: each Envoy process counts on its own, where Higress counted in Redis across gateways; with several gateways, give each its share of the budget")
			h.aiTokenCostNote()
		}
	}
}

func (h *higressConverter) aiTokenCostNote() {
	h.noteOnce(fmt.Sprintf("ai-token-ratelimit's rules charge the answer's usage.total_tokens (OpenAI's format; for Anthropic's write usage.input_tokens+usage.output_tokens, docs/llm.md); an answer reporting none costs default_cost (%d), where Higress charges nothing", h.opt.DefaultCost))
}
