package policy

import (
	"math"
	"slices"
	"strconv"
	"strings"
)

// Parse decodes and validates a configuration and returns it normalized
// (defaults filled in, header names lower-cased, matchers sorted).
//
// On failure it returns a nil *Config and an Errors value listing every
// problem found, each with the JSON path of the offending field, for example
//
//	policies[0].rules[1].algorithm_config.burst: 5 is below tokens_per_second 10; burst must be >= tokens_per_second
//
// Malformed JSON is reported as one error with its byte offset, line and
// column. Parse never panics, whatever the input.
func Parse(data []byte) (*Config, error) {
	root, jerr := decodeJSON(data)
	if jerr != nil {
		return nil, Errors{*jerr}
	}
	p := &parser{rulePaths: map[string]string{}, policyPaths: map[string]string{}}
	cfg := p.config(root)
	if len(p.errs) > 0 {
		return nil, p.errs
	}
	return cfg, nil
}

type parser struct {
	errs        Errors
	rulePaths   map[string]string // rule name -> path of its "name" field
	policyPaths map[string]string // policy name -> path of its "name" field
	globalPaths []string          // fleet.go: paths of "scope": "global"
}

func (p *parser) errorf(path string, parts ...string) {
	p.errs = append(p.errs, FieldError{Path: path, Message: strings.Join(parts, "")})
}

// Field names, per object.
var (
	configFields      = []string{"mode", "policies", "rules", "reject_status", "response_headers", "legacy_headers", "shadow_header", "xff_trusted_hops", "telemetry", "fleet", "reject_body", "reject_content_type", "reject_headers", "reject_grpc_status", "resets"}
	policyFields      = []string{"name", "rules"}
	ruleFields        = []string{"name", "limit_keys", "match", "algorithm", "algorithm_config", "mode", "max_keys", "telemetry_identity", "scope", "action", "deny_status", "reject_status", "overrides", "shadow_mark", "reject_body", "reject_content_type", "reject_headers", "limit_headers", "enforce_percent", "from", "until", "schedule"}
	telemetryFields   = []string{"cluster", "authority", "path", "interval_ms", "token", "token_env", "top_n", "timeout_ms"}
	tokenBucketFields = []string{"tokens_per_second", "rps", "burst", "cost_source", "fixed_cost", "default_cost", "max_delay_ms", "max_debt", "block_seconds"}
	algorithms        = []string{AlgorithmTokenBucket, AlgorithmFixedWindow, AlgorithmSlidingWindow, AlgorithmRollingWindow, AlgorithmQuota, AlgorithmConcurrency}
)

// MaxCost bounds fixed_cost and default_cost (and, in the filter, a cost read
// from a header or query parameter).
const MaxCost = 1e9

func (p *parser) config(root *jvalue) *Config {
	cfg := &Config{
		Mode:             ModeEnforce,
		RejectStatus:     DefaultRejectStatus,
		RejectGRPCStatus: DefaultRejectGRPCStatus,
		ResponseHeaders:  true,
		ShadowHeader:     DefaultShadowHeader,
	}
	if root.kind != jObject {
		p.errorf("", "the configuration must be a JSON object such as {\"rules\": [...]}, got ", root.kind.String())
		return nil
	}
	f := p.object("", root, configFields)
	if v := f["mode"]; v != nil {
		if m, ok := p.mode("mode", v); ok {
			cfg.Mode = m
		}
	}
	if v := f["reject_status"]; v != nil {
		if n, ok := p.integer("reject_status", v, 400, 599, "an HTTP status code from 400 to 599 (default 429)"); ok {
			cfg.RejectStatus = n
		}
	}
	cfg.Reply = p.reply("", f)                // reply.go
	if hv := f["reject_headers"]; hv != nil { // reject_headers.go
		if cfg.RejectHeaders = p.rejectHeaders("reject_headers", hv); len(cfg.RejectHeaders) == 0 {
			cfg.RejectHeaders = nil // none at the top level is the default
		}
	}
	if v := f["reject_grpc_status"]; v != nil { // grpc.go
		if c, ok := p.grpcStatus("reject_grpc_status", v); ok {
			cfg.RejectGRPCStatus = c
		}
	}
	if v := f["response_headers"]; v != nil {
		if v.kind != jBool {
			p.errorf("response_headers", "must be true or false, got ", v.kind.String())
		} else {
			cfg.ResponseHeaders = v.b
		}
	}
	if v := f["legacy_headers"]; v != nil {
		p.legacyHeaders(cfg, v)
	}
	if v := f["shadow_header"]; v != nil {
		if v.kind != jString {
			p.errorf("shadow_header", "must be a string naming a request header, got ", v.kind.String())
		} else if msg := checkHeaderName(v.s); msg != "" {
			p.errorf("shadow_header", msg)
		} else {
			cfg.ShadowHeader = strings.ToLower(v.s)
		}
	}
	if v := f["xff_trusted_hops"]; v != nil {
		if n, ok := p.integer("xff_trusted_hops", v, 0, MaxTrustedHops,
			"an integer from 0 to "+strconv.Itoa(MaxTrustedHops)+" (the number of proxies in front of Envoy that append to X-Forwarded-For; 0 ignores the header)"); ok {
			cfg.TrustedHops = n
		}
	}

	if v := f["telemetry"]; v != nil {
		cfg.Telemetry = p.telemetry("telemetry", v)
	}
	if v := f["fleet"]; v != nil { // fleet mode, fleet.go
		cfg.Fleet = p.fleet("fleet", v)
	}

	pol, rules := f["policies"], f["rules"]
	if pol == nil && rules == nil {
		p.errorf("", `no rules: set "rules" (a list of rules) or "policies" (a list of named policies, each with its own "rules")`)
	}
	if pol != nil {
		cfg.Policies = p.policies("policies", pol, cfg.Mode)
	}
	if rules != nil {
		if pol != nil {
			p.errorf("rules", `cannot be used together with "policies"; use "policies", or a top-level "rules" as shorthand for a single policy, not both`)
		}
		// Validated even when conflicting with "policies", to report every problem.
		cfg.Policies = []Policy{{Name: DefaultPolicyName, Rules: p.rules("rules", rules, DefaultPolicyName, cfg.Mode)}}
	}
	p.checkGlobalRules(f["fleet"] != nil) // fleet.go
	p.checkLimitHeaders(cfg)              // limit_headers.go
	if v := f["resets"]; v != nil {       // resets.go
		cfg.Resets = p.resets("resets", v)
		p.checkResets(cfg)
	}
	return cfg
}

func (p *parser) policies(path string, v *jvalue, mode Mode) []Policy {
	if v.kind != jArray {
		p.errorf(path, "must be an array of policies, got ", v.kind.String())
		return nil
	}
	if len(v.arr) == 0 {
		p.errorf(path, `is empty; add at least one policy such as {"name": "default", "rules": [...]}`)
		return nil
	}
	out := make([]Policy, 0, len(v.arr))
	for i, pv := range v.arr {
		if pp, ok := p.policy(index(path, i), pv, mode); ok {
			out = append(out, pp)
		}
	}
	return out
}

func (p *parser) policy(path string, v *jvalue, mode Mode) (Policy, bool) {
	if v.kind != jObject {
		p.errorf(path, `must be an object such as {"name": "default", "rules": [...]}, got `, v.kind.String())
		return Policy{}, false
	}
	f := p.object(path, v, policyFields)
	var pol Policy
	ok := true
	if name, good := p.name(join(path, "name"), f["name"], "policy"); good {
		pol.Name = name
		if prev, dup := p.policyPaths[name]; dup {
			p.errorf(join(path, "name"), "duplicate policy name ", strconv.Quote(name), " (also at ", prev, "); policy names must be unique")
			ok = false
		} else {
			p.policyPaths[name] = join(path, "name")
		}
	} else {
		ok = false
	}
	rv := f["rules"]
	if rv == nil {
		p.errorf(join(path, "rules"), "missing; a policy needs a non-empty list of rules")
		return pol, false
	}
	pol.Rules = p.rules(join(path, "rules"), rv, pol.Name, mode)
	return pol, ok
}

func (p *parser) rules(path string, v *jvalue, policy string, mode Mode) []Rule {
	if v.kind != jArray {
		p.errorf(path, "must be an array of rules, got ", v.kind.String())
		return nil
	}
	if len(v.arr) == 0 {
		p.errorf(path, "is empty; add at least one rule")
		return nil
	}
	out := make([]Rule, 0, len(v.arr))
	for i, rv := range v.arr {
		if r, ok := p.rule(index(path, i), rv, policy, mode); ok {
			out = append(out, r)
		}
	}
	return out
}

func (p *parser) rule(path string, v *jvalue, policy string, mode Mode) (Rule, bool) {
	if v.kind != jObject {
		p.errorf(path, `must be an object with "name", "limit_keys", "algorithm" and "algorithm_config", got `, v.kind.String())
		return Rule{}, false
	}
	before := len(p.errs)
	f := p.object(path, v, ruleFields)
	r := Rule{Policy: policy, Mode: mode, MaxKeys: DefaultMaxKeys}

	namePath := join(path, "name")
	if name, ok := p.name(namePath, f["name"], "rule"); ok {
		r.Name = name
		if prev, dup := p.rulePaths[name]; dup {
			p.errorf(namePath, "duplicate rule name ", strconv.Quote(name), " (also at ", prev,
				"); rule names must be unique across all policies because they key the bucket state")
		} else {
			p.rulePaths[name] = namePath
		}
	}

	r.Bounds = p.bounds(path, f, "rule")
	if sv := f["schedule"]; sv != nil { // schedule.go
		r.Schedule = p.schedule(join(path, "schedule"), sv)
	}
	if r.Action, r.DenyStatus = p.action(path, f); r.Action == "" { // actions.go
		return r, false // which fields apply depends on the action
	}
	if sv := f["reject_status"]; sv != nil {
		r.RejectStatus = p.ruleRejectStatus(path, sv, r.Action) // actions.go
	}
	if hv := f["limit_headers"]; hv != nil { // limit_headers.go
		if r.Action != ActionLimit {
			p.errorf(join(path, "limit_headers"), `applies only to limit rules, which have numbers to send; remove it`)
		} else {
			r.LimitHeaders = p.limitHeaders(join(path, "limit_headers"), hv)
		}
	}
	if RejectsNothing(r.Action) {
		for _, name := range []string{"reject_body", "reject_content_type", "reject_headers"} {
			if f[name] != nil {
				p.errorf(join(path, name), `does not apply to an "`, r.Action, `" rule, which rejects nothing; remove it`)
			}
		}
	} else {
		r.Reply = p.reply(path, f) // reply.go
		if hv := f["reject_headers"]; hv != nil {
			r.RejectHeaders = p.rejectHeaders(join(path, "reject_headers"), hv) // reject_headers.go
		}
	}
	if r.Action == ActionLimit || f["limit_keys"] != nil {
		r.Keys = p.limitKeys(join(path, "limit_keys"), f["limit_keys"])
	}
	if mv := f["match"]; mv != nil {
		r.Match = p.match(join(path, "match"), mv)
	}
	if mv := f["mode"]; mv != nil {
		if m, ok := p.mode(join(path, "mode"), mv); ok {
			r.Mode = m
		}
	}
	if mv := f["shadow_mark"]; mv != nil {
		if mv.kind != jBool {
			p.errorf(join(path, "shadow_mark"), "must be true (the default: a shadow refusal names the rule in shadow_header) or false (count only; the upstream request is left as sent), got ", mv.kind.String())
		} else {
			r.Unmarked = !mv.b
		}
	}
	if mv := f["max_keys"]; mv != nil {
		if n, ok := p.integer(join(path, "max_keys"), mv, 0, MaxMaxKeys,
			"an integer from 1 to "+strconv.Itoa(MaxMaxKeys)+" (the most identities whose buckets the rule keeps at once, four to a shared-data key; default "+
				strconv.Itoa(DefaultMaxKeys)+"), or 0 for one key per identity without bound"); ok {
			r.MaxKeys = n
		}
	}

	if tv := f["telemetry_identity"]; tv != nil {
		switch {
		case tv.kind == jString && tv.s == IdentityMasked:
		case tv.kind == jString && tv.s == IdentityClear:
			r.ClearIdentity = true
		default:
			got := tv.kind.String()
			if tv.kind == jString {
				got = quoteShort(tv.s)
			}
			p.errorf(join(path, "telemetry_identity"), `must be "masked" (the default: header: and jwt: key values are masked in telemetry) or "clear", got `, got)
		}
	}

	if r.Action != ActionLimit { // exempt, unlimited or deny (actions.go)
		p.actionRule(path, f, &r)
		return r, len(p.errs) == before
	}
	if sv := f["scope"]; sv != nil { // fleet.go
		r.Global = p.scope(join(path, "scope"), sv)
	}
	if ev := f["enforce_percent"]; ev != nil { // rollout.go
		p.rollout(path, ev, &r)
	}

	algPath := join(path, "algorithm")
	av, cv := f["algorithm"], f["algorithm_config"]
	cfgPath := join(path, "algorithm_config")
	switch {
	case av == nil:
		p.errorf(algPath, "missing; set it to one of: ", quoteList(algorithms))
	case av.kind != jString:
		p.errorf(algPath, "must be a string, one of: ", quoteList(algorithms), "; got ", av.kind.String())
	case av.s == AlgorithmTokenBucket:
		r.Algorithm = AlgorithmTokenBucket
		if cv == nil {
			p.errorf(cfgPath, `missing; token_bucket needs at least {"tokens_per_second": <rate>, "burst": <capacity>}`)
		} else {
			r.TokenBucket = p.tokenBucket(cfgPath, cv)
		}
	case isWindowAlgorithm(av.s):
		r.Algorithm = av.s
		if cv == nil {
			p.errorf(cfgPath, "missing; ", av.s, " needs at least ", windowExample(av.s))
		} else {
			r.Window = p.window(cfgPath, cv, av.s)
		}
	case av.s == AlgorithmQuota: // quota.go
		r.Algorithm = AlgorithmQuota
		if cv == nil {
			p.errorf(cfgPath, "missing; quota needs at least ", quotaExample)
		} else {
			r.Quota = p.quota(cfgPath, cv)
		}
	default:
		p.errorf(algPath, "unknown algorithm ", quoteShort(av.s), "; use one of: ", quoteList(algorithms))
	}
	p.checkScopeAlgorithm(path, &r) // fleet.go
	if r.TokenBucket != nil && r.TokenBucket.BlockSeconds > 0 && onlyAll(r.Keys) {
		p.errorf(join(cfgPath, "block_seconds"), `would block every request the rule applies to for that long: a rule keyed by "all" has one identity; key it by the client (such as "ip:address") to block the clients it refuses`)
	}

	if ov := f["overrides"]; ov != nil { // actions.go
		r.Overrides = p.overrides(join(path, "overrides"), ov, &r, cv)
	}
	return r, len(p.errs) == before
}

func (p *parser) limitKeys(path string, v *jvalue) []KeySource {
	if v == nil {
		p.errorf(path, `missing; list at least one key source, e.g. ["ip:address"] or ["header:x-api-key"]`)
		return nil
	}
	if v.kind != jArray {
		p.errorf(path, `must be an array of key sources such as ["ip:address"], got `, v.kind.String())
		return nil
	}
	if len(v.arr) == 0 {
		p.errorf(path, `is empty; list at least one key source, e.g. ["ip:address"] or ["header:x-api-key"]`)
		return nil
	}
	keys := make([]KeySource, 0, len(v.arr))
	seen := make(map[KeySource]int, len(v.arr))
	for i, kv := range v.arr {
		ipath := index(path, i)
		if kv.kind != jString {
			p.errorf(ipath, "must be a string such as \"ip:address\" or \"header:x-api-key\", got ", kv.kind.String())
			continue
		}
		k, msg := parseSource(kv.s)
		if msg != "" {
			p.errorf(ipath, msg)
			continue
		}
		if j, dup := seen[k]; dup {
			p.errorf(ipath, "duplicate key source ", quoteShort(k.String()), " (also at ", index(path, j), "); list each source once")
			continue
		}
		seen[k] = i
		keys = append(keys, k)
	}
	return keys
}

func (p *parser) tokenBucket(path string, v *jvalue) *TokenBucket {
	if v.kind != jObject {
		p.errorf(path, `must be an object such as {"tokens_per_second": 10, "burst": 20}, got `, v.kind.String())
		return nil
	}
	before := len(p.errs)
	f := p.object(path, v, tokenBucketFields)
	tb := &TokenBucket{FixedCost: 1, DefaultCost: 1}

	tps, rps := f["tokens_per_second"], f["rps"]
	rateName, rateText, rateOK := "", "", false
	switch {
	case tps != nil && rps != nil:
		p.errorf(join(path, "rps"), "set only one of tokens_per_second and rps (rps is an alias of tokens_per_second)")
		p.rate(join(path, "tokens_per_second"), tps)
		p.rate(join(path, "rps"), rps)
	case tps == nil && rps == nil:
		p.errorf(join(path, "tokens_per_second"), "missing; set the refill rate with tokens_per_second (or its alias rps), a number > 0")
	default:
		rateName = "tokens_per_second"
		rv := tps
		if rv == nil {
			rateName, rv = "rps", rps
		}
		tb.TokensPerSecond, rateText, rateOK = p.rate(join(path, rateName), rv)
	}

	bpath := join(path, "burst")
	burstOK := false
	if bv := f["burst"]; bv == nil {
		p.errorf(bpath, "missing; set the bucket capacity with burst, a number >= tokens_per_second")
	} else if x, text, ok := p.number(bpath, bv); ok {
		switch {
		case x <= 0:
			p.errorf(bpath, text, " is not positive; burst is the bucket capacity and must be >= tokens_per_second")
		case x > MaxBurst:
			p.errorf(bpath, text, " is too large; burst must be <= 1e12")
		case rateOK && x < tb.TokensPerSecond:
			p.errorf(bpath, text, " is below ", rateName, " ", rateText, "; burst must be >= ", rateName)
		default:
			tb.Burst, burstOK = x, true
		}
	}

	p.costSource(path, f, &tb.Cost, true) // quota.go
	p.costFields(path, f, &tb.FixedCost, &tb.DefaultCost, costCap{
		ok: burstOK, max: tb.Burst, name: "burst", unit: " tokens", holds: "the bucket holds"})
	tb.MaxDebt = p.maxDebt(path, f, tb.Cost, burstOK, tb.Burst, "bucket")
	if dv := f["max_delay_ms"]; dv != nil {
		if ms, ok := p.integer(join(path, "max_delay_ms"), dv, 0, MaxDelayMS, "an integer from 0 (no delay, the default) to "+
			strconv.Itoa(MaxDelayMS)+": the longest a request may be held waiting for its tokens, in milliseconds"); ok {
			tb.MaxDelayMS = ms
		}
	}
	if tb.MaxDelayMS > 0 && tb.Cost.FromResponse() {
		p.errorf(join(path, "max_delay_ms"), "delayed admission needs the cost before the request proceeds; it cannot be combined with a response cost_source")
	}
	if bv := f["block_seconds"]; bv != nil {
		if s, ok := p.integer(join(path, "block_seconds"), bv, 0, MaxBlockSeconds, "an integer from 0 (no block, the default) to "+
			strconv.Itoa(MaxBlockSeconds)+": how long an identity stays refused after the rule refuses it, in seconds"); ok {
			tb.BlockSeconds = s
		}
	}
	if tb.BlockSeconds > 0 && tb.MaxDelayMS > 0 {
		p.errorf(join(path, "block_seconds"), "blocks an identity the rule refuses, and with max_delay_ms the rule holds requests instead of refusing them; use one or the other")
	}
	if len(p.errs) != before {
		return nil
	}
	return tb
}

// rate reads a refill rate: a finite number > 0.
func (p *parser) rate(path string, v *jvalue) (float64, string, bool) {
	x, text, ok := p.number(path, v)
	if ok && x <= 0 {
		p.errorf(path, text, " is not positive; the refill rate must be > 0 tokens per second")
		ok = false
	}
	return x, text, ok
}

// object reports unknown and duplicate fields of an object and returns its
// known fields by name.
func (p *parser) object(path string, v *jvalue, allowed []string) map[string]*jvalue {
	f := make(map[string]*jvalue, len(v.obj))
	for _, m := range v.obj {
		fpath := join(path, m.key)
		if !slices.Contains(allowed, m.key) {
			msg := "unknown field " + quoteShort(m.key)
			if s := suggest(m.key, allowed); s != "" {
				msg += " (did you mean " + strconv.Quote(s) + "?)"
			}
			p.errorf(fpath, msg, "; allowed fields here: ", strings.Join(allowed, ", "))
			continue
		}
		if _, dup := f[m.key]; dup {
			p.errorf(fpath, "duplicate field ", quoteShort(m.key), "; each field may appear only once")
			continue
		}
		f[m.key] = m.val
	}
	return f
}

func (p *parser) mode(path string, v *jvalue) (Mode, bool) {
	if v.kind == jString && (v.s == string(ModeEnforce) || v.s == string(ModeShadow)) {
		return Mode(v.s), true
	}
	got := v.kind.String()
	if v.kind == jString {
		got = quoteShort(v.s)
	}
	p.errorf(path, `must be "enforce" or "shadow", got `, got)
	return "", false
}

// number reads a finite JSON number and returns it with its literal text.
func (p *parser) number(path string, v *jvalue) (float64, string, bool) {
	if v.kind != jNumber {
		got := v.kind.String()
		if v.kind == jString {
			got += " " + quoteShort(v.s) + " (write numbers without quotes)"
		}
		p.errorf(path, "must be a number, got ", got)
		return 0, "", false
	}
	x, err := strconv.ParseFloat(v.s, 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		p.errorf(path, shorten(v.s), " is not a finite number")
		return 0, "", false
	}
	return x, shorten(v.s), true
}

func (p *parser) integer(path string, v *jvalue, lo, hi int, want string) (int, bool) {
	if v.kind != jNumber {
		p.errorf(path, "must be ", want, "; got ", v.kind.String())
		return 0, false
	}
	x, err := strconv.ParseFloat(v.s, 64)
	switch {
	case err != nil || x != math.Trunc(x):
		p.errorf(path, shorten(v.s), " is not an integer; must be ", want)
		return 0, false
	case x < float64(lo) || x > float64(hi):
		p.errorf(path, shorten(v.s), " is out of range; must be ", want)
		return 0, false
	}
	return int(x), true
}

// name validates a policy or rule name: [A-Za-z0-9_.-]{1,64}.
func (p *parser) name(path string, v *jvalue, what string) (string, bool) {
	missing := "every policy needs a name (" + nameChars + ")"
	if what == "rule" {
		missing = "every rule needs a name (" + nameChars + ") because it keys the bucket state"
	}
	return p.nameLike(path, v, "a "+what+" name", missing)
}

// nameChars says what a name (or a reset's id) is made of.
const nameChars = "1 to 64 characters from A-Z a-z 0-9 _ . -"

// nameLike validates a string of a name's characters: noun names it in
// messages ("a rule name"), missing says why it is required.
func (p *parser) nameLike(path string, v *jvalue, noun, missing string) (string, bool) {
	switch {
	case v == nil:
		p.errorf(path, "missing; ", missing)
		return "", false
	case v.kind != jString:
		p.errorf(path, "must be a string (", nameChars, "), got ", v.kind.String())
		return "", false
	case v.s == "":
		p.errorf(path, "is empty; ", noun, " is ", nameChars)
		return "", false
	case len(v.s) > MaxNameLen:
		p.errorf(path, "is ", strconv.Itoa(len(v.s)), " characters long; ", noun, " is ", nameChars)
		return "", false
	}
	for i := 0; i < len(v.s); i++ {
		if !isNameChar(v.s[i]) {
			p.errorf(path, quoteShort(v.s), " contains ", quoteByte(v.s, i), "; ", noun, " is ", nameChars)
			return "", false
		}
	}
	return v.s, true
}

func isNameChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// ValidName reports whether s is a valid policy or rule name.
func ValidName(s string) bool {
	if s == "" || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isNameChar(s[i]) {
			return false
		}
	}
	return true
}
