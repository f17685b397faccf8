package migrate

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/sluice-rl/sluice/shared/policy"
)

// Options are the choices a conversion cannot read from its input.
type Options struct {
	// Scope is "global" (the default: envoyproxy/ratelimit's limits hold
	// across every Envoy sharing its Redis, and so do the rules, through
	// fleet mode) or "local" (per Envoy process, no service to run).
	Scope string
	// FleetCluster is the fleet block's cluster of a global conversion
	// (default "sluice_rls", the cluster envoy.yaml and the chart define).
	FleetCluster string
	// Taken are rule and policy names the conversion must not use: those
	// of the policy its output is added to (AddTo).
	Taken []string
}

// Result is a converted policy and what the user should know about it.
type Result struct {
	// Policy is the Sluice configuration, indented JSON that the filter's
	// parser accepts.
	Policy []byte
	// Notes say what behaves differently or was left out, one sentence
	// each.
	Notes []string
}

// windowSeconds are envoyproxy/ratelimit's units: its windows are aligned
// on the Unix epoch like Sluice's fixed windows, a month is 30 days and a
// year 365.
var windowSeconds = map[string]int{
	"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800,
	"month": 2592000, "year": 31536000,
}

// EnvoyRatelimit converts envoyproxy/ratelimit's configuration (config,
// its YAML) for the descriptors that the route's rate_limits (routeLimits,
// Envoy's YAML: a list of {actions: [...]}, or an object holding
// rate_limits) build. Each rate_limits entry becomes a policy; each path
// of the descriptor tree its actions can take, a rule, as the service
// looks a descriptor up: at each level the node with the entry's value,
// else the node with the key alone; only the last entry's node limits.
// Errors name the field (config.yaml's line, or rate_limits[i].actions[j]).
func EnvoyRatelimit(config, routeLimits []byte, opt Options) (Result, error) {
	var cfg serviceConfig
	if err := decodeStrict("config", config, &cfg); err != nil {
		return Result{}, &InputError{"config", err}
	}
	rls, err := parseRateLimits(routeLimits)
	if err != nil {
		return Result{}, &InputError{"rate_limits", err}
	}
	if opt.Scope == "" {
		opt.Scope = "global"
	}
	if opt.Scope != "global" && opt.Scope != "local" {
		return Result{}, &InputError{"scope", fmt.Errorf("scope %q: want global or local", opt.Scope)}
	}
	if opt.FleetCluster == "" {
		opt.FleetCluster = "sluice_rls"
	}
	c := newConverter(opt.Taken)
	c.opt = opt
	if err := c.checkTree("config.descriptors", cfg.Descriptors); err != nil {
		return Result{}, &InputError{"config", err}
	}
	if len(rls) == 0 {
		return Result{}, &InputError{"rate_limits", fmt.Errorf("rate_limits: empty; give the route's rate_limits, whose actions say what each descriptor key is")}
	}
	plans, err := planEntries(rls)
	if err != nil {
		return Result{}, &InputError{"rate_limits", err}
	}
	for i, rl := range rls {
		if plans[i].checks {
			continue // converted with the stream-done entry it checks
		}
		if err := c.convertActions(fmt.Sprintf("rate_limits[%d]", i), rl, cfg.Descriptors, plans[i].cost); err != nil {
			return Result{}, &InputError{"rate_limits", err}
		}
	}
	res, err := c.result(cfg.Domain)
	if err != nil {
		return Result{}, &InputError{"config", err} // nothing of the configuration converted, or its policy refused
	}
	return res, nil
}

// InputError is a conversion's error with the input it is about ("config",
// "rate_limits", "scope"); its message names the place within it.
type InputError struct {
	Input string
	Err   error
}

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// converter accumulates the policies of one conversion.
type converter struct {
	opt      Options
	policies []outPolicy
	rules    *nameSet // rule names used
	pols     *nameSet // policy names used
	// nodes and visits count the tree's nodes as checked and as walked:
	// YAML aliases can make a small file a huge tree.
	nodes, visits int
	notes         []string
}

// newConverter starts a conversion that uses none of the names taken.
func newConverter(taken []string) *converter {
	return &converter{rules: newNameSet(taken), pols: newNameSet(taken)}
}

// policyOf writes a conversion's output (a document of its own type) as
// indented JSON, checked by the filter's own parser, with the notes.
func (c *converter) policyOf(out any) (Result, error) {
	doc, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return Result{}, err
	}
	if _, err := policy.Parse(doc); err != nil {
		return Result{}, fmt.Errorf("the converted policy is refused: %w", err)
	}
	return Result{Policy: append(doc, '\n'), Notes: c.notes}, nil
}

// entry is what one action puts in the descriptor: a key, and either a
// fixed value (generic_key; header_value_match and
// query_parameter_value_match when conds hold) or the Sluice key source
// holding it.
type entry struct {
	key, fixed, source string
	conds              map[string]any // the match a value match puts on its rules
	skip               bool           // skip_if_absent: without the value, the descriptor is built without the entry
}

// step is the path's choice at one level of the tree.
type step struct {
	entry
	value   string   // the node's value; "" for the key's own node (any value)
	exclude []string // for the key's own node: the values with nodes of their own
	// prefix is a wildcard node's value without its "*": the values
	// starting with it, each its own counter unless shared
	// (share_threshold: one counter for them all).
	prefix string
	shared bool
}

// prefixCond is the match of the values a wildcard takes.
func prefixCond(prefix string) map[string]any { return map[string]any{"prefix": prefix} }

// Bounds on the work of one conversion.
const (
	maxNodes  = 100000  // descriptors in the tree, aliases expanded
	maxVisits = 1000000 // nodes walked, over every rate_limits entry
)

// checkTree checks the descriptor tree as the service does at load time,
// naming the field.
func (c *converter) checkTree(path string, ds []descriptor) error {
	seen := map[string]int{}
	for i, d := range ds {
		p := fmt.Sprintf("%s[%d]", path, i)
		if c.nodes++; c.nodes > maxNodes {
			return fmt.Errorf("%s: more than %d descriptors (YAML aliases expanded); split the configuration", p, maxNodes)
		}
		switch {
		case d.Key == "":
			return fmt.Errorf("%s.key: missing", p)
		case d.ShareThreshold && !strings.HasSuffix(d.Value, "*"):
			return fmt.Errorf("%s.share_threshold: only for a wildcard value (ending with *); the service refuses it here", p)
		case d.QuotaMode:
			return fmt.Errorf("%s.quota_mode: not converted; write the rule by hand", p)
		}
		k := d.Key + "\x00" + d.Value
		if j, dup := seen[k]; dup {
			return fmt.Errorf("%s: key %q value %q again (also %s[%d]); the service refuses duplicates", p, d.Key, d.Value, path, j)
		}
		seen[k] = i
		if rl := d.RateLimit; rl != nil {
			if err := checkRateLimit(p+".rate_limit", rl); err != nil {
				return err
			}
		}
		if err := c.checkTree(p+".descriptors", d.Descriptors); err != nil {
			return err
		}
	}
	return nil
}

func checkRateLimit(path string, rl *rateLimit) error {
	switch {
	case len(rl.Replaces) > 0:
		return fmt.Errorf("%s.replaces: not converted: in Sluice the first rule that applies in a policy decides; order the rules by hand", path)
	case rl.UnitMultiplier != nil && *rl.UnitMultiplier == 0:
		return fmt.Errorf("%s.unit_multiplier: 0 multiplies the window to nothing; leave it out for 1", path)
	case rl.Unlimited:
		return nil
	case rl.RequestsPerUnit == nil:
		return fmt.Errorf("%s.requests_per_unit: missing (the service reads it as 0, which refuses every request; write 0 if that is meant)", path)
	}
	if _, ok := windowSeconds[strings.ToLower(rl.Unit)]; !ok {
		return fmt.Errorf("%s.unit %q: want second, minute, hour, day, week, month or year", path, rl.Unit)
	}
	if w := windowOf(rl); w > policy.MaxWindowSeconds {
		return fmt.Errorf("%s.unit_multiplier: %d %ss is %d seconds; Sluice's windows are at most %d (366 days)", path, *rl.UnitMultiplier, strings.ToLower(rl.Unit), w, policy.MaxWindowSeconds)
	}
	return nil
}

// windowOf is the length of rl's windows: its unit times unit_multiplier
// (not in the upstream service: a proposal's field, which the forks that
// have it read as a window that many units long, aligned on the Unix epoch
// as Sluice's fixed windows are).
func windowOf(rl *rateLimit) int64 {
	w := int64(windowSeconds[strings.ToLower(rl.Unit)])
	if rl.UnitMultiplier != nil {
		w *= int64(*rl.UnitMultiplier)
	}
	return w
}

// convertActions makes the policy of one rate_limits entry; cost, when
// not "", is the cost source of a stream-done entry's hits (planEntries).
func (c *converter) convertActions(path string, rl routeRateLimit, tree []descriptor, cost string) error {
	switch {
	case len(rl.Actions) == 0:
		return fmt.Errorf("%s.actions: empty", path)
	case rl.Stage != nil && *rl.Stage != 0, rl.DisableKey != "", rl.Limit != nil:
		return fmt.Errorf("%s: only actions, hits_addend and apply_on_stream_done are converted (not stage, disable_key or limit)", path)
	}
	hits, reqCost := 1, "" // a stream-done entry's hits are its cost, read from the answer
	if cost == "" {
		var err error
		if hits, reqCost, err = hitsAddend(path, rl.HitsAddend); err != nil {
			return err
		}
	}
	entries := make([]entry, len(rl.Actions))
	sources := map[string]bool{}
	for j, a := range rl.Actions {
		e, err := c.entryOf(fmt.Sprintf("%s.actions[%d]", path, j), a)
		if err != nil {
			return err
		}
		if e.source != "" && sources[e.source] {
			return fmt.Errorf("%s.actions[%d]: reads %s a second time; not converted", path, j, e.source)
		}
		sources[e.source] = true
		entries[j] = e
	}
	variants, err := skipVariants(path, entries)
	if err != nil {
		return err
	}
	p := outPolicy{Name: c.pols.take(policyName(entries))}
	for _, v := range variants {
		w := walker{c: c, entries: v.entries, absent: v.absent, path: path, cost: cost}
		if err := w.walk(0, tree, nil, &p); err != nil {
			return err
		}
	}
	if len(p.Rules) == 0 {
		c.note("%s (%s): no descriptor of the configuration matches what its actions build, so it limits nothing; left out", path, policyName(entries))
		return nil
	}
	if reqCost != "" {
		if err := c.chargeFormat(path, reqCost, &p); err != nil {
			return err
		}
	} else if err := chargeHits(path, hits, &p); err != nil {
		return err
	}
	c.policies = append(c.policies, p)
	return nil
}

// hitsAddend reads a rate_limits entry's hits_addend: a fixed number of
// hits each request adds to its descriptor (1 when absent), or a format
// reading the number from the request, returned as a cost source
// (envoy_ratelimit_hits.go).
func hitsAddend(path string, h any) (int, string, error) {
	if h == nil {
		return 1, "", nil
	}
	m, ok := h.(map[string]any)
	if !ok {
		return 0, "", fmt.Errorf("%s.hits_addend: want {number: N} or {format: ...}", path)
	}
	if f, ok := m["format"]; ok && len(m) == 1 {
		s, ok := f.(string)
		if !ok {
			return 0, "", fmt.Errorf("%s.hits_addend.format: want a string", path)
		}
		src, err := hitsFormat(path+".hits_addend.format", s)
		return 1, src, err
	}
	for k := range m {
		if k != "number" {
			return 0, "", fmt.Errorf("%s.hits_addend.%s: want number or format, one of them", path, k)
		}
	}
	n, ok := fixedHits(h) // envoy_ratelimit_stream_done.go
	if ok && n == 0 {
		return 0, "", fmt.Errorf("%s.hits_addend.number: 0 counts nothing, so the entry only checks; it converts with the apply_on_stream_done entry of the same actions whose hits it checks, and there is none", path)
	}
	if !ok || n < 1 || n > 1e9 {
		return 0, "", fmt.Errorf("%s.hits_addend.number: %v; want a whole number from 1 to 1000000000", path, m["number"])
	}
	return n, "", nil
}

// chargeHits makes every window rule of p cost hits per request. A limit
// below it would refuse every request, as the service does; that is
// refused here, naming the field, rather than written as a rule that
// admits nothing.
func chargeHits(path string, hits int, p *outPolicy) error {
	if hits == 1 {
		return nil
	}
	for i := range p.Rules {
		r := &p.Rules[i]
		w, ok := r.AlgorithmConfig.(*windowConfig)
		if !ok {
			continue
		}
		if w.Limit < hits {
			return fmt.Errorf("%s.hits_addend.number: %d hits per request, more than rule %s's requests_per_unit %d: the service refuses every request; write a deny rule for that", path, hits, r.Name, w.Limit)
		}
		for _, o := range r.Overrides {
			if ow, ok := o.AlgorithmConfig.(windowConfig); ok && ow.Limit < hits {
				return fmt.Errorf("%s.hits_addend.number: %d hits per request, more than value %q's requests_per_unit %d: the service refuses every request of it; write that value's rule by hand", path, hits, o.Key, ow.Limit)
			}
		}
		w.FixedCost = hits
	}
	return nil
}

// maxSkips bounds the skip_if_absent actions of one rate_limits entry:
// each doubles the descriptors it can build.
const maxSkips = 4

// variant is a descriptor the actions build: the entries whose values
// are there, and the conditions saying the others' are not.
type variant struct {
	entries []entry
	absent  map[string]any
}

// skipVariants are the descriptors Envoy builds from entries: with each
// skip_if_absent entry, or without it when its value is missing (every
// entry missing builds none).
func skipVariants(path string, entries []entry) ([]variant, error) {
	var skips []int
	for i, e := range entries {
		if e.skip {
			skips = append(skips, i)
		}
	}
	if len(skips) > maxSkips {
		return nil, fmt.Errorf("%s: more than %d skip_if_absent actions, %d descriptors; write the rules by hand", path, maxSkips, 1<<len(skips))
	}
	var out []variant
	for mask := range 1 << len(skips) {
		v := variant{absent: map[string]any{}}
		gone := map[int]bool{}
		for b, i := range skips {
			if mask&(1<<b) != 0 {
				gone[i] = true
				v.absent[entries[i].source] = map[string]any{"present": false}
			}
		}
		for i, e := range entries {
			if !gone[i] {
				v.entries = append(v.entries, e)
			}
		}
		if len(v.entries) > 0 {
			out = append(out, v)
		}
	}
	return out, nil
}

// entryOf reads one action.
func (c *converter) entryOf(path string, a action) (entry, error) {
	switch {
	case a.RequestHeaders != nil:
		h := a.RequestHeaders
		if h.HeaderName == "" || h.DescriptorKey == "" {
			return entry{}, fmt.Errorf("%s.request_headers: header_name and descriptor_key are required", path)
		}
		switch name := strings.ToLower(h.HeaderName); {
		case name == ":method":
			return entry{key: h.DescriptorKey, source: "method"}, nil // always there
		case name == ":authority":
			return entry{key: h.DescriptorKey, source: "host", skip: h.SkipIfAbsent}, nil
		case strings.HasPrefix(name, ":"):
			return entry{}, fmt.Errorf("%s.request_headers.header_name %q: not converted (Sluice's path source has no query string; write the rule by hand)", path, h.HeaderName)
		default:
			return entry{key: h.DescriptorKey, source: "header:" + name, skip: h.SkipIfAbsent}, nil
		}
	case a.RemoteAddress != nil:
		c.noteOnce("remote_address is Sluice's ip:address; set the policy's xff_trusted_hops to the HTTP connection manager's xff_num_trusted_hops so both read the same address")
		return entry{key: "remote_address", source: "ip:address"}, nil
	case a.MaskedRemoteAddress != nil:
		return c.maskedAddress(path+".masked_remote_address", a.MaskedRemoteAddress)
	case a.GenericKey != nil:
		g := a.GenericKey
		key := g.DescriptorKey
		if key == "" {
			key = "generic_key"
		}
		if g.DescriptorValue == "" {
			return entry{}, fmt.Errorf("%s.generic_key.descriptor_value: required", path)
		}
		return entry{key: key, fixed: g.DescriptorValue}, nil
	case a.QueryParameters != nil:
		q := a.QueryParameters
		if q.QueryParameterName == "" || q.DescriptorKey == "" {
			return entry{}, fmt.Errorf("%s.query_parameters: query_parameter_name and descriptor_key are required", path)
		}
		return entry{key: q.DescriptorKey, source: "query:" + q.QueryParameterName, skip: q.SkipIfAbsent}, nil
	case a.HeaderValueMatch != nil:
		return valueMatchEntry(path+".header_value_match", a.HeaderValueMatch, "header_value_match")
	case a.QueryParameterValue != nil:
		return valueMatchEntry(path+".query_parameter_value_match", a.QueryParameterValue, "query_parameter_value_match")
	case a.Metadata != nil:
		return metadataEntry(path+".metadata", a.Metadata)
	case a.DynamicMetadata != nil:
		return metadataEntry(path+".dynamic_metadata", a.DynamicMetadata)
	case a.DestinationCluster != nil:
		// The cluster the route sends the request to: Sluice's cluster
		// source reads the same (xds.cluster_name).
		return entry{key: "destination_cluster", source: "cluster"}, nil
	}
	return entry{}, fmt.Errorf("%s: %s is not converted; Sluice reads headers, query parameters, the client address, the upstream cluster and dynamic metadata", path, actionKind(a))
}

// maskedAddress reads masked_remote_address as Envoy's local_ratelimit
// converter does (elMaskedAddress): the client's network, Sluice's
// ip:network with the same prefix lengths.
func (c *converter) maskedAddress(path string, v any) (entry, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return entry{}, fmt.Errorf("%s: %w", path, err)
	}
	act, err := elMaskedAddress(&n, path)
	if err != nil {
		return entry{}, err
	}
	if act.source != "ip:address" {
		c.noteOnce("masked_remote_address is Sluice's ip:network, the client address masked the same way; set the policy's xff_trusted_hops to the HTTP connection manager's xff_num_trusted_hops so both read the same address")
	}
	return entry{key: act.key, source: act.source}, nil
}

// networkConds turns the conditions of match on a network (a
// masked_remote_address's values, "203.0.113.0/24") into conditions on
// the address: Sluice keys on networks but matches addresses, by CIDR.
func networkConds(match map[string]any, path string) error {
	for _, src := range slices.Sorted(maps.Keys(match)) {
		if !strings.HasPrefix(src, "ip:network") {
			continue
		}
		c := match[src]
		delete(match, src)
		var addr any
		switch c := c.(type) {
		case string:
			addr = map[string]any{"cidr": []string{c}}
		case map[string]any:
			switch {
			case c["in"] != nil:
				addr = map[string]any{"cidr": c["in"]}
			case c["present"] != nil:
				addr = c
			case c["not"] != nil:
				if in, ok := c["not"].(map[string]any); ok && in["in"] != nil {
					addr = map[string]any{"not": map[string]any{"cidr": in["in"]}}
				}
			}
		}
		if addr == nil {
			return fmt.Errorf("%s: a masked_remote_address value by prefix (a wildcard) is not converted; write the rule by hand", path)
		}
		if err := elAddCond(match, "ip:address", addr, path); err != nil {
			return err
		}
	}
	return nil
}

// valueMatchEntry reads header_value_match or query_parameter_value_match
// as Envoy's local_ratelimit converter does (elValueMatch): a fixed value
// the descriptor gets only when the conditions hold, so the rules of its
// paths carry those conditions.
func valueMatchEntry(path string, v any, kind string) (entry, error) {
	var n yaml.Node
	if err := n.Encode(v); err != nil {
		return entry{}, fmt.Errorf("%s: %w", path, err)
	}
	act, err := elValueMatch(&n, path, kind)
	if err != nil {
		return entry{}, err
	}
	return entry{key: act.key, fixed: act.value, conds: act.conds}, nil
}

func metadataEntry(path string, m *metadataAction) (entry, error) {
	switch {
	case m.DescriptorKey == "" || m.MetadataKey.Key == "" || len(m.MetadataKey.Path) == 0:
		return entry{}, fmt.Errorf("%s: descriptor_key, metadata_key.key and metadata_key.path are required", path)
	case m.DefaultValue != "":
		return entry{}, fmt.Errorf("%s.default_value: not converted (a Sluice rule does not apply to a request without the value)", path)
	case m.Source != "" && m.Source != "DYNAMIC":
		return entry{}, fmt.Errorf("%s.source %q: only DYNAMIC (dynamic metadata) is converted", path, m.Source)
	}
	keys := make([]string, len(m.MetadataKey.Path))
	for i, seg := range m.MetadataKey.Path {
		keys[i] = seg.Key
		if strings.ContainsAny(seg.Key, ".:[]") {
			keys[i] = "[" + seg.Key + "]"
		}
	}
	return entry{key: m.DescriptorKey, source: "metadata:" + m.MetadataKey.Key + ":" + strings.Join(keys, "."), skip: m.SkipIfAbsent}, nil
}

func actionKind(a action) string {
	switch {
	case a.HeaderValueMatch != nil:
		return "header_value_match"
	case a.DestinationCluster != nil:
		return "destination_cluster"
	case a.SourceCluster != nil:
		return "source_cluster"
	case a.MaskedRemoteAddress != nil:
		return "masked_remote_address"
	case a.QueryParameterValue != nil:
		return "query_parameter_value_match"
	case a.Extension != nil:
		return "an extension"
	}
	return "an empty action"
}

// walker enumerates the paths one rate_limits entry can take.
type walker struct {
	c       *converter
	entries []entry
	absent  map[string]any // the conditions of the skipped entries (skipVariants)
	path    string
	cost    string // the rules' cost read from the answer ("": the request counts)
}

// walk visits level i of the tree (nodes: the children of the path so
// far) and adds a rule to p for each path ending in a limit.
func (w *walker) walk(i int, nodes []descriptor, path []step, p *outPolicy) error {
	e := w.entries[i]
	var own *descriptor // the key's own node (any value)
	var valued, wild []*descriptor
	for k := range nodes {
		switch d := &nodes[k]; {
		case d.Key != e.key:
		case d.Value == "":
			own = d
		case strings.HasSuffix(d.Value, "*"):
			wild = append(wild, d) // the service tries them in order, after the exact values
		default:
			valued = append(valued, d)
		}
	}
	last := i == len(w.entries)-1
	visit := func(d *descriptor, s step) error {
		if w.c.visits++; w.c.visits > maxVisits {
			return fmt.Errorf("%s: its actions walk more than %d descriptors over all rate_limits entries; convert fewer entries at a time", w.path, maxVisits)
		}
		next := append(slices.Clip(path), s)
		if !last {
			return w.walk(i+1, d.Descriptors, next, p)
		}
		return w.leaf(d, next, p)
	}
	if e.fixed != "" { // generic_key: the service picks one node
		for _, d := range valued {
			if d.Value == e.fixed {
				return visit(d, step{entry: e, value: d.Value})
			}
		}
		for _, d := range wild {
			if strings.HasPrefix(e.fixed, strings.TrimSuffix(d.Value, "*")) {
				return visit(d, step{entry: e, value: e.fixed})
			}
		}
		if own != nil {
			return visit(own, step{entry: e})
		}
		return nil
	}
	folded := map[*descriptor]bool{}
	if last && own != nil && len(wild) == 0 { // a wildcard between them would take a folded value first
		folded = w.foldable(own, valued, path)
	}
	var exclude []string
	for _, d := range valued {
		if folded[d] {
			continue
		}
		exclude = append(exclude, d.Value)
		if err := visit(d, step{entry: e, value: d.Value}); err != nil {
			return err
		}
	}
	if err := w.wildcards(wild, own != nil, exclude, e, path, p, visit); err != nil {
		return err
	}
	if own == nil {
		return nil
	}
	slices.Sort(exclude)
	if len(folded) == 0 {
		return visit(own, step{entry: e, exclude: exclude})
	}
	// The key's own node with the foldable values as its overrides.
	s := step{entry: e, exclude: exclude}
	if err := w.leaf(own, append(slices.Clip(path), s), p); err != nil {
		return err
	}
	r := &p.Rules[len(p.Rules)-1]
	for _, d := range valued {
		if folded[d] {
			r.Overrides = append(r.Overrides, outOverride{Key: escapeKey(d.Value), AlgorithmConfig: w.overrideLimit(d.RateLimit)})
		}
	}
	return nil
}

// overrideLimit is the algorithm_config of a value's override with limit
// rl: a window's limit, or for a rule charged from the answer
// (answerLimit) its token bucket's or its quota's.
func (w *walker) overrideLimit(rl *rateLimit) any {
	n := int(*rl.RequestsPerUnit)
	if secs := windowSeconds[strings.ToLower(rl.Unit)]; w.cost != "" && secs < answerQuotaFromSeconds {
		return bucketConfig{TokensPerSecond: perSecond(int64(n), secs), Burst: n}
	}
	return windowConfig{Limit: n}
}

// wildcards visits a level's wildcard nodes in order, after its exact
// values and before its own node, as the service tries them. A value the
// service decides by an exact node, or by an earlier wildcard, stops its
// policy before the next wildcard's rules (an "unlimited" rule): those
// rules must not take a request whose chosen node limits nothing.
func (w *walker) wildcards(wild []*descriptor, ownNext bool, exact []string, e entry, path []step, p *outPolicy, visit func(*descriptor, step) error) error {
	if len(wild) == 0 {
		return nil
	}
	stop := func(name string, cond any) error {
		match, err := w.pathConds(path)
		if err != nil {
			return err
		}
		if err := elAddCond(match, e.source, cond, w.path); err != nil {
			return err
		}
		base := pathName(path)
		if base != "" {
			base += "-"
		}
		if err := networkConds(match, w.path); err != nil {
			return err
		}
		p.Rules = append(p.Rules, outRule{Name: w.c.rules.take(base + name), Action: policy.ActionUnlimited, Match: match})
		return nil
	}
	if len(exact) > 0 {
		if err := stop(e.key+"-values", map[string]any{"in": slices.Sorted(slices.Values(exact))}); err != nil {
			return err
		}
	}
	for i, d := range wild {
		q := strings.TrimSuffix(d.Value, "*")
		if err := visit(d, step{entry: e, prefix: q, shared: d.ShareThreshold}); err != nil {
			return err
		}
		if i < len(wild)-1 || ownNext {
			if err := stop(e.key+"-"+q+"-prefix", prefixCond(q)); err != nil {
				return err
			}
		}
	}
	return nil
}

// pathConds are the conditions of the values a path chose (exact values
// and wildcard prefixes, and the skipped entries' absence), which a stop
// rule needs so as to take only the requests of that path.
func (w *walker) pathConds(path []step) (map[string]any, error) {
	match := map[string]any{}
	if err := addConds(match, w.absent, w.path); err != nil {
		return nil, err
	}
	for _, s := range path {
		if err := addConds(match, s.conds, w.path); err != nil {
			return nil, err
		}
		switch {
		case s.fixed != "":
		case s.value != "":
			match[s.source] = s.value
		case s.prefix != "":
			match[s.source] = prefixCond(s.prefix)
		}
	}
	return match, nil
}

// foldable picks the value nodes at the last level that can be overrides
// of the key's own node: its rule is then keyed by this level alone (the
// levels before fixed a value), and the value's limit differs only in its
// count (same unit, same shadow mode, a limit of at least one).
func (w *walker) foldable(own *descriptor, valued []*descriptor, path []step) map[*descriptor]bool {
	out := map[*descriptor]bool{}
	if !limits(own) {
		return out
	}
	for _, s := range path {
		if s.fixed == "" && s.value == "" {
			return out // an earlier level keys the rule too: an override names one value of this level only
		}
	}
	for _, d := range valued {
		if limits(d) && len(d.Descriptors) == 0 && d.ShadowMode == own.ShadowMode &&
			strings.EqualFold(d.RateLimit.Unit, own.RateLimit.Unit) && windowOf(d.RateLimit) == windowOf(own.RateLimit) && d.RateLimit.Name == "" {
			out[d] = true
		}
	}
	return out
}

// limits reports whether node d limits with a count of at least one.
func limits(d *descriptor) bool {
	rl := d.RateLimit
	return rl != nil && !rl.Unlimited && rl.RequestsPerUnit != nil && *rl.RequestsPerUnit >= 1
}

// leaf adds the rule of a path ending at node d, if d limits.
func (w *walker) leaf(d *descriptor, path []step, p *outPolicy) error {
	rl := d.RateLimit
	if rl == nil || rl.Unlimited {
		return nil // no limit for this path: the service answers OK
	}
	r := outRule{Name: w.c.ruleName(rl.Name, path)}
	if d.ShadowMode {
		r.Mode = "shadow"
	}
	var keys []string
	match := map[string]any{}
	lastValued := ""
	if err := addConds(match, w.absent, w.path); err != nil {
		return err
	}
	for _, s := range path {
		if err := addConds(match, s.conds, w.path); err != nil {
			return err
		}
		switch {
		case s.fixed != "":
		case s.value != "":
			match[s.source], lastValued = s.value, s.source
		case s.prefix != "":
			match[s.source] = prefixCond(s.prefix)
			if !s.shared {
				keys = append(keys, s.source) // each value its own counter
			}
		default:
			keys = append(keys, s.source)
			if len(s.exclude) > 0 {
				match[s.source] = map[string]any{"not": map[string]any{"in": s.exclude}}
			}
		}
	}
	if *rl.RequestsPerUnit == 0 {
		if w.cost != "" {
			return fmt.Errorf("%s: rule %s: requests_per_unit 0 on descriptors charged when the stream is done is not converted; write a deny rule by hand", w.path, r.Name)
		}
		return w.denyRule(r, path, match, p)
	}
	switch {
	case len(keys) > 0:
	case lastValued != "":
		keys = []string{lastValued} // one value: one bucket
	default:
		keys = []string{"all"} // generic_key only: the service keeps one bucket for all requests
	}
	r.LimitKeys = keys
	if err := networkConds(match, w.path); err != nil {
		return err
	}
	if len(match) > 0 {
		r.Match = match
	}
	if w.cost != "" {
		if err := w.c.answerLimit(w.path, &r, rl, w.cost); err != nil {
			return err
		}
	} else {
		r.Algorithm = policy.AlgorithmFixedWindow
		r.AlgorithmConfig = &windowConfig{Limit: int(*rl.RequestsPerUnit), WindowSeconds: int(windowOf(rl))}
	}
	if w.c.opt.Scope == "global" {
		r.Scope = "global"
	}
	p.Rules = append(p.Rules, r)
	return nil
}

// denyRule: requests_per_unit 0 refuses every request of the path. A
// deny rule cannot both require a key's value and leave out the values
// with nodes of their own, so those values are stopped before it by
// unlimited rules (their own rules come earlier in the policy and win).
func (w *walker) denyRule(r outRule, path []step, match map[string]any, p *outPolicy) error {
	valued := map[string]any{} // the conditions of the path's values so far
	if err := addConds(valued, w.absent, w.path); err != nil {
		return err
	}
	for _, s := range path {
		if err := addConds(valued, s.conds, w.path); err != nil {
			return err
		}
		if s.fixed != "" {
			continue
		}
		if s.value != "" {
			valued[s.source] = s.value
			continue
		}
		if s.prefix != "" {
			valued[s.source] = prefixCond(s.prefix)
			continue
		}
		if len(s.exclude) > 0 {
			stop := maps.Clone(valued)
			stop[s.source] = map[string]any{"in": s.exclude}
			if err := networkConds(stop, w.path); err != nil {
				return err
			}
			p.Rules = append(p.Rules, outRule{Name: w.c.rules.take(r.Name + "-" + s.key + "-values"), Action: policy.ActionUnlimited, Match: stop})
		}
		match[s.source] = map[string]any{"present": true} // the service sees the descriptor only when the value is there
	}
	if len(match) == 0 {
		return fmt.Errorf("%s: requests_per_unit 0 with generic_key actions only would refuse every request; write a deny rule by hand", w.path)
	}
	if err := networkConds(match, w.path); err != nil {
		return err
	}
	r.Action, r.DenyStatus, r.Match = "deny", 429, match
	p.Rules = append(p.Rules, r)
	return nil
}

// addConds adds a value match's conditions to a rule's match.
func addConds(match, conds map[string]any, path string) error {
	for _, src := range slices.Sorted(maps.Keys(conds)) {
		if err := elAddCond(match, src, conds[src], path); err != nil {
			return err
		}
	}
	return nil
}

// ---- Names and output ----

var nameUnsafe = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

func policyName(entries []entry) string {
	parts := make([]string, len(entries))
	for i, e := range entries {
		parts[i] = e.key
	}
	return strings.Join(parts, "-")
}

// ruleName is the rate limit's name when it has a valid one, else the
// path's keys and values.
func (c *converter) ruleName(name string, path []step) string {
	if name == "" {
		name = pathName(path)
	}
	return c.rules.take(name)
}

// pathName names a path by its keys and the values it chose.
func pathName(path []step) string {
	parts := make([]string, 0, 2*len(path))
	for _, s := range path {
		parts = append(parts, s.key)
		if v := cmp.Or(s.value, s.fixed); v != "" { // a fixed value picks the node of that value
			parts = append(parts, v)
		} else if v := strings.TrimRight(s.prefix, "-_."); v != "" { // a wildcard: its prefix
			parts = append(parts, v)
		}
	}
	return strings.Join(parts, "-")
}

// nameSet is the names a conversion has used (rule names, or policy
// names), so that each new one is unique.
type nameSet struct {
	used map[string]bool
	next map[string]int // per base name, the first suffix that may be free
}

func newNameSet(taken []string) *nameSet {
	ns := &nameSet{used: map[string]bool{}, next: map[string]int{}}
	for _, n := range taken {
		ns.used[n] = true
	}
	return ns
}

// has tells whether name is used.
func (ns *nameSet) has(name string) bool { return ns.used[name] }

// take returns name as a valid rule or policy name (letters, digits,
// _.-, at most policy.MaxNameLen bytes), with a suffix -2, -3, ... when it
// is used, and marks it used. The next suffix of each base is remembered:
// converters repeat names (a route's in many policies), and counting from
// 2 each time would make a conversion quadratic in them.
func (ns *nameSet) take(name string) string {
	base := strings.Trim(nameUnsafe.ReplaceAllString(name, "_"), "_")
	if base == "" {
		base = "rule"
	}
	if len(base) > policy.MaxNameLen-6 {
		base = base[:policy.MaxNameLen-6]
	}
	for n := max(ns.next[base], 1); ; n++ {
		cand := base
		if n > 1 {
			cand = base + "-" + strconv.Itoa(n)
		}
		if !ns.used[cand] {
			ns.used[cand], ns.next[base] = true, n+1
			return cand
		}
	}
}

// escapeKey writes a value as an override key: a backslash before a
// backslash, vertical bar or #.
func escapeKey(v string) string {
	var b strings.Builder
	for _, r := range v {
		if r == '\\' || r == '|' || r == '#' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (c *converter) note(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

func (c *converter) noteOnce(s string) {
	if !slices.Contains(c.notes, s) {
		c.notes = append(c.notes, s)
	}
}

type outConfig struct {
	Fleet         *outFleet         `json:"fleet,omitempty"`
	RejectHeaders map[string]string `json:"reject_headers,omitempty"`
	Policies      []outPolicy       `json:"policies"`
}

// envoyRateLimited is the field Envoy's ratelimit filter adds to the
// responses it refuses (unless disable_x_envoy_ratelimited_header): an
// Envoy that finds it on an upstream's answer does not retry the request,
// unless its retry policy says envoy-ratelimited.
const envoyRateLimited = "x-envoy-ratelimited"

type outFleet struct {
	Cluster string `json:"cluster"`
}

type outPolicy struct {
	Name  string    `json:"name"`
	Rules []outRule `json:"rules"`
}

type outRule struct {
	Name            string            `json:"name"`
	Mode            string            `json:"mode,omitempty"`
	EnforcePercent  *float64          `json:"enforce_percent,omitempty"`
	Scope           string            `json:"scope,omitempty"`
	Action          string            `json:"action,omitempty"`
	DenyStatus      int               `json:"deny_status,omitempty"`
	Match           map[string]any    `json:"match,omitempty"`
	LimitKeys       []string          `json:"limit_keys,omitempty"`
	Algorithm       string            `json:"algorithm,omitempty"`
	AlgorithmConfig any               `json:"algorithm_config,omitempty"` // *windowConfig, *bucketConfig, or a converter's own
	Overrides       []outOverride     `json:"overrides,omitempty"`
	RejectStatus    int               `json:"reject_status,omitempty"`
	RejectBody      *string           `json:"reject_body,omitempty"`
	RejectHeaders   map[string]string `json:"reject_headers,omitempty"`
}

// bucketConfig is a token bucket's algorithm_config.
type bucketConfig struct {
	TokensPerSecond float64 `json:"tokens_per_second"`
	Burst           int     `json:"burst"`
}

type windowConfig struct {
	Limit         int    `json:"limit"`
	WindowSeconds int    `json:"window_seconds,omitempty"`
	FixedCost     int    `json:"fixed_cost,omitempty"`  // envoyproxy/ratelimit's hits_addend number
	CostSource    string `json:"cost_source,omitempty"` // or its format (envoy_ratelimit_hits.go)
}

type outOverride struct {
	Key             string `json:"key"`
	AlgorithmConfig any    `json:"algorithm_config"` // windowConfig, or a converter's own
}

// result writes the policy and checks it with the filter's own parser.
func (c *converter) result(domain string) (Result, error) {
	if len(c.policies) == 0 {
		return Result{}, fmt.Errorf("nothing to convert: no rate_limits entry builds a descriptor the configuration limits")
	}
	out := outConfig{Policies: c.policies, RejectHeaders: map[string]string{envoyRateLimited: "true"}}
	c.noteOnce(`refusals carry x-envoy-ratelimited: true (reject_headers), as Envoy's ratelimit filter adds it, so that an Envoy calling this one does not retry them; remove it if the filter had disable_x_envoy_ratelimited_header`)
	global := c.opt.Scope == "global"
	if global {
		out.Fleet = &outFleet{Cluster: c.opt.FleetCluster}
		c.noteOnce(fmt.Sprintf(`the rules are "scope": "global": run the admin as the rate limit service (docs/fleet.md) and give Envoy the cluster %q`, c.opt.FleetCluster))
	} else {
		c.noteOnce("the rules are local: each Envoy process holds its own limits, where the service held one across every Envoy")
	}
	c.noteOnce("a request one policy rejects takes nothing from the others, as the service does with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
	if domain != "" {
		c.noteOnce(fmt.Sprintf("domain %q: a Sluice policy belongs to the filter that loads it, so the domain is not needed", domain))
	}
	return c.policyOf(out)
}
