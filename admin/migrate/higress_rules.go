package migrate

// The converter of Higress's plugins (higress.go): rules and policies.

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

type higressOutput struct {
	RejectStatus    int             `json:"reject_status,omitempty"`
	RejectBody      *string         `json:"reject_body,omitempty"`
	ResponseHeaders *bool           `json:"response_headers,omitempty"`
	LegacyHeaders   string          `json:"legacy_headers,omitempty"`
	Fleet           *outFleet       `json:"fleet,omitempty"`
	Rules           []higressRule   `json:"rules,omitempty"`
	Policies        []higressPolicy `json:"policies,omitempty"`
}

type higressPolicy struct {
	Name  string        `json:"name"`
	Rules []higressRule `json:"rules"`
}

// higressRule is a rule and the configuration it comes from.
type higressRule struct {
	outRule
	cfg *higressConfig
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
	p := higressPolicy{Name: h.pols.take(name)}
	for i, sc := range configs {
		p.Rules = append(p.Rules, h.configRules(sc)...)
		if sc.host != nil && i < len(configs)-1 && sc.cfg.global == nil {
			p.Rules = append(p.Rules, higressRule{outRule: outRule{Name: h.rules.take(p.Name + "-" + sc.label + "-others"),
				Action: policy.ActionUnlimited, Match: map[string]any{"host": sc.host}}})
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
		// applies to: the "all" key.
		out = append(out, h.limitRule(cfg, nil, "all", *cfg.global, sc.host))
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
	if h.rules.has(clean) && cfg.ruleName != "" && name != cfg.ruleName {
		name = cfg.ruleName + "-" + name
	}
	return h.rules.take(name)
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
	r := higressRule{outRule: outRule{LimitKeys: []string{source}}, cfg: cfg}
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
		if h.opt.Scope == "global" {
			r.Scope = "global"
		}
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
