package migrate

// The converter of Higress's plugins (higress.go): plugin configurations.

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"

	"github.com/sluice-rl/sluice/shared/policy"
)

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
